//! `sandboxd ls [--wide]`: every instance the backends know about, from labels and metadata,
//! within 100 columns unless `--wide`.

use std::process::ExitCode;

use sandboxd_backend::ListedInstance;
use sandboxd_domain::clock::format_age_since;

use crate::backends;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the instances as JSON.
    #[arg(long)]
    pub json: bool,
    /// Every column (also the maker and the image), not fitted to 100 columns.
    #[arg(long)]
    pub wide: bool,
}

/// The most columns the default listing takes, terminal or not.
const NARROW_WIDTH: u16 = 100;

pub async fn list_all(settings: &Settings) -> Vec<ListedInstance> {
    let (progress, _) = output::progress();
    let mut all = Vec::new();
    for backend in backends::all(settings, progress).await {
        match backend.list().await {
            Ok(listed) => all.extend(listed),
            Err(err) => eprintln!("warning: listing the {} backend: {err}", backend.kind()),
        }
    }
    all
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let listed = list_all(settings).await;
    if args.json {
        println!("{}", output::json(&listed));
        return ExitCode::SUCCESS;
    }
    if listed.is_empty() {
        println!("no instances");
        return ExitCode::SUCCESS;
    }
    if !args.wide {
        let rows = listed
            .iter()
            .map(|i| {
                vec![
                    i.handle.name.clone(),
                    i.handle.owner.to_string(),
                    i.handle.backend.to_string(),
                    format!("{}:{}", i.host, i.port),
                    format_age_since(i.created_at_ms),
                    i.status.clone(),
                ]
            })
            .collect();
        let header = ["name", "owner", "backend", "address", "age", "status"];
        println!("{}", output::table_within(&header, rows, NARROW_WIDTH));
        return ExitCode::SUCCESS;
    }
    let rows = listed
        .iter()
        .map(|i| {
            vec![
                i.handle.name.clone(),
                i.handle.engine.to_string(),
                i.handle.owner.to_string(),
                i.handle.maker.to_string(),
                match &i.image {
                    Some(image) => format!("{} ({image})", i.handle.backend),
                    None => i.handle.backend.to_string(),
                },
                format!("{}:{}", i.host, i.port),
                format_age_since(i.created_at_ms),
                i.status.clone(),
            ]
        })
        .collect();
    println!(
        "{}",
        output::table(
            &[
                "name", "engine", "owner", "made by", "backend", "address", "age", "status"
            ],
            rows
        )
    );
    ExitCode::SUCCESS
}
