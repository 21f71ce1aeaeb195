//! `sandboxd projects set|ls`: projects and their sandbox opt-in (services, features, clones,
//! data space sizes), through the running daemon's admin API (which validates engines, features
//! and sizes against the registry, the allowlists and the operator's ceiling).

use std::collections::BTreeMap;
use std::process::ExitCode;

use sandboxd_admin::wire::{ProjectOut, PutProject};
use sandboxd_domain::clock::format_age_since;
use sandboxd_domain::clone::CloneChoice;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
use crate::exit::EXIT_INPUT;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create or update a project's sandbox opt-in (replaces what is stored).
    Set {
        slug: String,
        /// Engines the project's agents may request, comma-separated (e.g. postgres,redis).
        /// Leave out to opt the project out.
        #[arg(long)]
        services: Option<String>,
        /// Standing features, one ENGINE=FEATURE[,FEATURE…] per flag (e.g. postgres=vector).
        #[arg(long = "features", value_name = "ENGINE=FEATURES")]
        features: Vec<String>,
        /// Hand ENGINE out as a clone of a registered source (`sandboxd sources add`), e.g.
        /// postgres=shop, under the source's privacy mode; postgres=shop:no-values gives this
        /// project's clones no sample values from a source that keeps them. Leave out to keep
        /// the project's clones as they are.
        #[arg(
            long = "clone",
            value_name = "ENGINE=SOURCE[:PRIVACY]",
            conflicts_with = "no_clones"
        )]
        clones: Vec<String>,
        /// Hand every engine out as an ordinary (empty) instance again.
        #[arg(long)]
        no_clones: bool,
        /// The data space of engines that keep their data on disk, ENGINE=SIZE[,ENGINE=SIZE…]
        /// (e.g. postgres=2G,mariadb=1G; whole M or G, at least 256M, at most the daemon's
        /// `broker.max_sandbox_size_mb`). The memory cap grows with it. Leave out to keep the
        /// project's sizes as they are.
        #[arg(
            long = "size",
            value_name = "ENGINE=SIZE",
            conflicts_with = "default_sizes"
        )]
        sizes: Vec<String>,
        /// Give every engine its backend's default data space again.
        #[arg(long)]
        default_sizes: bool,
    },
    /// List projects and their opt-in.
    Ls,
}

/// `postgres=vector,pg_trgm` items → `{"postgres": ["vector", "pg_trgm"]}` (the daemon validates
/// the names).
fn feature_map(items: &[String]) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in items {
        let (engine, features) = item.split_once('=').ok_or_else(|| {
            format!(
                "--features takes ENGINE=FEATURE[,FEATURE…] (e.g. postgres=vector), got {item:?}"
            )
        })?;
        map.entry(engine.trim().to_owned()).or_default().extend(
            features
                .split(',')
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .map(str::to_owned),
        );
    }
    Ok(map)
}

/// `postgres=2G,mariadb=1G` items → `{"postgres": "2G", "mariadb": "1G"}` (the daemon validates
/// the engines and the sizes).
pub(super) fn size_map(items: &[String]) -> Result<BTreeMap<String, String>, String> {
    items
        .iter()
        .flat_map(|item| item.split(','))
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (engine, size) = part.split_once('=').ok_or_else(|| {
                format!("--size takes ENGINE=SIZE[,ENGINE=SIZE…] (e.g. postgres=2G), got {part:?}")
            })?;
            Ok((engine.trim().to_owned(), size.trim().to_owned()))
        })
        .collect()
}

/// `postgres=shop`, `postgres=shop:no-values` items → `{"postgres": "shop:no-values"}`; a
/// privacy mode that does not exist is refused here, naming the ones that do (the daemon
/// validates the engine and the source).
fn clone_map(items: &[String]) -> Result<BTreeMap<String, String>, String> {
    items
        .iter()
        .map(|item| {
            let (engine, choice) = item.split_once('=').ok_or_else(|| {
                format!(
                    "--clone takes ENGINE=SOURCE[:PRIVACY] (e.g. postgres=shop or \
                     postgres=shop:no-values), got {item:?}"
                )
            })?;
            let choice =
                CloneChoice::parse(choice).map_err(|e| format!("--clone {item:?}: {e}"))?;
            Ok((engine.trim().to_owned(), choice.to_string()))
        })
        .collect()
}

fn extensions(project: &ProjectOut) -> String {
    project
        .sandbox_extensions
        .iter()
        .flatten()
        .map(|(engine, features)| format!("{engine}: {}", features.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

fn row(project: &ProjectOut) -> Vec<String> {
    let services = project
        .sandbox_services
        .as_deref()
        .unwrap_or_default()
        .join(", ");
    vec![
        project.slug.clone(),
        if services.is_empty() {
            "not opted in".into()
        } else {
            services
        },
        extensions(project),
        project
            .sandbox_clones
            .iter()
            .map(|(engine, choice)| match choice.split_once(':') {
                Some((source, privacy)) => format!("{engine} of {source} ({privacy})"),
                None => format!("{engine} of {choice}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        project
            .sandbox_sizes
            .iter()
            .map(|(engine, size)| format!("{engine}={size}"))
            .collect::<Vec<_>>()
            .join(", "),
        format_age_since(project.updated_at_ms),
    ]
}

const HEADER: [&str; 6] = [
    "project", "services", "features", "clones", "sizes", "updated",
];

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Set {
            slug,
            services,
            features,
            clones,
            no_clones,
            sizes,
            default_sizes,
        } => {
            let parsed = (feature_map(&features), clone_map(&clones), size_map(&sizes));
            let (features, clones, sizes) = match parsed {
                (Ok(features), Ok(clones), Ok(sizes)) => (features, clones, sizes),
                (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => {
                    eprintln!("error: {message}");
                    return ExitCode::from(EXIT_INPUT);
                }
            };
            let services: Option<Vec<String>> = services.map(|csv| {
                csv.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            });
            let body = PutProject {
                sandbox_services: services,
                sandbox_extensions: (!features.is_empty()).then_some(features),
                sandbox_clones: (no_clones || !clones.is_empty()).then_some(clones),
                sandbox_sizes: (default_sizes || !sizes.is_empty()).then_some(sizes),
            };
            match client.put_project(&slug, &body).await {
                Ok(reply) => reply.print(args.remote.json, |project| {
                    println!("{}", output::table(&HEADER, vec![row(project)]))
                }),
                Err(err) => return err.fail(),
            }
        }
        Command::Ls => match client.projects().await {
            Ok(projects) => projects.print_list(args.remote.json, "no projects", &HEADER, row),
            Err(err) => return err.fail(),
        },
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_flags_become_a_map() {
        let map = feature_map(&["pg=vector, citext".into(), "r=search".into()]).expect("valid");
        assert_eq!(map["pg"], ["vector", "citext"]);
        assert_eq!(map["r"], ["search"]);
        assert!(feature_map(&["vector".into()]).is_err());
    }

    #[test]
    fn clone_flags_become_a_map() {
        let map = clone_map(&["postgres = shop".into()]).expect("valid");
        assert_eq!(map["postgres"], "shop");
        let map = clone_map(&["postgres=shop : no-values".into()]).expect("valid");
        assert_eq!(map["postgres"], "shop:no-values");
        assert!(clone_map(&["shop".into()]).is_err());
        let unknown = clone_map(&["postgres=shop:hidden".into()]).expect_err("unknown mode");
        assert!(
            unknown.contains("allowed: keep-values, no-values"),
            "{unknown}"
        );
    }

    #[test]
    fn size_flags_become_a_map() {
        let map =
            size_map(&["postgres=2G, mariadb = 1G".into(), "mongo=512M".into()]).expect("valid");
        assert_eq!(map["postgres"], "2G");
        assert_eq!(map["mariadb"], "1G");
        assert_eq!(map["mongo"], "512M");
        assert!(size_map(&["2G".into()]).is_err());
    }
}
