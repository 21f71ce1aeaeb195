//! `sandboxd teardown --owner SLUG`: removes every instance of an owner that `sandboxd provision`
//! made, on every backend. A daemon's instances are its own: they are named and left alone (the
//! daemon's `sandboxd sandboxes rm` removes them, audited).

use std::process::ExitCode;

use sandboxd_domain::{AgentSlug, DaemonId};

use crate::backends;
use crate::cli::EXIT_INPUT;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long)]
    pub owner: String,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let owner = match AgentSlug::parse(&args.owner) {
        Ok(owner) => owner,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let (progress, _) = output::progress();
    let mut removed = 0;
    let mut failed = false;
    for backend in backends::all(settings, progress).await {
        let listed = match backend.list().await {
            Ok(listed) => listed,
            Err(err) => {
                eprintln!("warning: listing the {} backend: {err}", backend.kind());
                continue;
            }
        };
        for instance in listed.into_iter().filter(|i| i.handle.owner == owner) {
            if instance.handle.maker != DaemonId::cli() {
                println!(
                    "left {}: made by {}, not by sandboxd provision (use that daemon's \
                     `sandboxd sandboxes rm {owner}`)",
                    instance.handle.name, instance.handle.maker
                );
                continue;
            }
            match backend.teardown(&instance.handle).await {
                Ok(()) => {
                    removed += 1;
                    println!("removed {}", instance.handle.name);
                }
                Err(err) => {
                    failed = true;
                    eprintln!("error: {err}");
                }
            }
        }
    }
    if removed == 0 && !failed {
        println!("nothing to remove for {owner}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
