//! `sandboxd provision`: one set of instances for one owner, printed as evidence entries.

use std::process::ExitCode;

use sandboxd_backend::InstanceRequest;
use sandboxd_domain::{
    AgentSlug, BackendKind, DaemonId, FeatureRequest, ProjectSizes, ServiceEvidence, engines,
};
use serde::Serialize;

use crate::backends;
use crate::config::Settings;
use crate::exit::EXIT_INPUT;
use crate::output;

use super::BackendArg;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Who owns the instances (an agent slug).
    #[arg(long)]
    pub owner: String,
    /// Comma-separated engines, e.g. `postgres,redis`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub engines: Vec<String>,
    /// Features per engine, e.g. `postgres=vector,pg_trgm`; repeat for several engines.
    #[arg(long)]
    pub features: Vec<String>,
    /// The data space of engines that keep their data on disk, ENGINE=SIZE[,ENGINE=SIZE…]
    /// (e.g. postgres=2G; whole M or G, at least 256M); an engine not named gets the backend's
    /// default. The memory cap grows with it.
    #[arg(long = "size", value_name = "ENGINE=SIZE")]
    pub sizes: Vec<String>,
    #[command(flatten)]
    pub backend: BackendArg,
    /// Print JSON (the stable shape documented in README.md).
    #[arg(long)]
    pub json: bool,
}

/// The `--json` output: stable, other tools parse it.
#[derive(Debug, Serialize)]
pub struct Provisioned {
    pub owner: AgentSlug,
    pub backend: BackendKind,
    pub services: Vec<ServiceEvidence>,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let parsed = (|| {
        let owner = AgentSlug::parse(&args.owner)?;
        let engines = engines::parse_list(&args.engines.join(","))?;
        let features = FeatureRequest::parse_cli(args.features.iter().map(String::as_str))?;
        if let Some(stray) = features.engines().find(|e| !engines.contains(e)) {
            return Err(sandboxd_domain::InputError::Malformed {
                what: "features",
                detail: format!("features were given for {stray}, which is not in --engines"),
            });
        }
        let sizes = super::projects::size_map(&args.sizes).map_err(|detail| {
            sandboxd_domain::InputError::Malformed {
                what: "size",
                detail,
            }
        })?;
        let sizes = ProjectSizes::parse_map(&sizes)?;
        if let Some((stray, _)) = sizes.iter().find(|(e, _)| !engines.contains(e)) {
            return Err(sandboxd_domain::InputError::Malformed {
                what: "size",
                detail: format!("a size was given for {stray}, which is not in --engines"),
            });
        }
        Ok((owner, engines, features, sizes))
    })();
    let (owner, engines, features, sizes) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let (progress, bar) = output::progress();
    let backend = match backends::choose(
        settings,
        args.backend.choice(settings),
        &engines,
        progress.clone(),
    )
    .await
    {
        Ok(backend) => backend,
        Err(err) => return super::fail(&err),
    };
    let requests: Vec<InstanceRequest> = engines
        .iter()
        .map(|engine| InstanceRequest {
            major: None,
            engine: *engine,
            owner: owner.clone(),
            maker: DaemonId::cli(),
            features: features.for_engine(*engine),
            size: sizes.get(*engine),
        })
        .collect();
    let outcome = super::provision_shown(backend.as_ref(), &requests, &progress, bar).await;
    let instances = match outcome {
        Ok(instances) => instances,
        Err(err) => return super::fail(&err),
    };
    let provisioned = Provisioned {
        owner,
        backend: backend.kind(),
        services: instances
            .iter()
            .map(|i| i.evidence(&settings.env_prefix))
            .collect(),
    };
    if args.json {
        println!("{}", output::json(&provisioned));
    } else {
        print_human(&provisioned);
    }
    ExitCode::SUCCESS
}

fn print_human(provisioned: &Provisioned) {
    for service in &provisioned.services {
        println!(
            "{} for {} on {} ({}:{}, database {}, user {}{})",
            service.service,
            provisioned.owner,
            provisioned.backend,
            service.host,
            service.port,
            service.database,
            service.user,
            if service.features.is_empty() {
                String::new()
            } else {
                format!(", features {}", service.features.join(","))
            }
        );
        for (name, value) in service.env() {
            println!("  export {name}='{value}'");
        }
    }
    println!(
        "tear down with: sandboxd teardown --owner {}",
        provisioned.owner
    );
}
