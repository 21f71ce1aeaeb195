//! `sandboxd teardown [--owner SLUG] [--maker ID]`: removes every instance of an owner (or of
//! every owner) that one maker made, on every backend: `sandboxd provision`'s by default. A running daemon's instances
//! are its own (its `sandboxd sandboxes rm` removes them, audited); `--maker <daemon id>` is for
//! the leftovers of a daemon that is gone for good, store and all. What the maker's instances
//! shared (its Docker network) is removed once none of them is left.

use std::process::ExitCode;

use sandboxd_backend::{ListedInstance, Sweep};
use sandboxd_domain::{AgentSlug, DaemonId};

use crate::backends;
use crate::config::Settings;
use crate::exit::EXIT_INPUT;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Whose instances; leave out for every owner's.
    #[arg(long)]
    pub owner: Option<String>,
    /// Whose instances: `cli` (made by `sandboxd provision`), or a daemon's id (`made by` in
    /// `sandboxd ls`).
    #[arg(long, default_value = "cli")]
    pub maker: String,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let parsed = args
        .owner
        .as_deref()
        .map(AgentSlug::parse)
        .transpose()
        .and_then(|owner| Ok((owner, DaemonId::parse(&args.maker)?)));
    let (owner, maker) = match parsed {
        Ok(parsed) => parsed,
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
        let wanted = |i: &ListedInstance| owner.as_ref().is_none_or(|o| &i.handle.owner == o);
        for instance in listed.into_iter().filter(wanted) {
            if instance.handle.maker != maker {
                if owner.is_none() {
                    continue;
                }
                let owner = &instance.handle.owner;
                println!(
                    "left {}: made by {}, not by {maker} (a running daemon's: `sandboxd \
                     sandboxes rm {owner}`; else --maker {})",
                    instance.handle.name, instance.handle.maker, instance.handle.maker
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
        // What the maker's instances shared (its Docker network) goes once none is left.
        match backend.sweep(&maker, Sweep::Now).await {
            Ok(0) => {}
            Ok(swept) => println!(
                "removed {swept} unused {} resource(s) of {maker}",
                backend.kind()
            ),
            Err(err) => eprintln!("warning: sweeping the {} backend: {err}", backend.kind()),
        }
    }
    if removed == 0 && !failed {
        match &owner {
            Some(owner) => println!("nothing to remove for {owner} made by {maker}"),
            None => println!("nothing to remove made by {maker}"),
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
