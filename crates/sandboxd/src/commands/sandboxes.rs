//! `sandboxd sandboxes ls|rm`: live sandboxes as the running daemon sees them (what the backends
//! list, joined with what the broker tracks), and teardown by owner. Unlike `sandboxd ls` and
//! `sandboxd teardown`, which ask the backends directly, these go through the daemon, so the
//! teardown is audited and the broker forgets the sandbox.

use std::process::ExitCode;

use sandboxd_admin::wire::{SandboxOut, SandboxesQuery};
use sandboxd_domain::clock::format_age_since;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List this daemon's sandboxes by owner.
    Ls {
        /// Also list foreign sandboxes (another daemon's, or `sandboxd provision`'s), which
        /// this daemon never touches.
        #[arg(long)]
        all: bool,
    },
    /// Tear down every instance of one owner (an agent slug).
    Rm { owner: String },
}

fn instances(sandbox: &SandboxOut) -> String {
    sandbox
        .instances
        .iter()
        .map(|i| match &i.image {
            Some(image) => format!("{} {}:{} ({image})", i.name, i.host, i.port),
            None => format!("{} {}:{}", i.name, i.host, i.port),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Ls { all } => match client.sandboxes(&SandboxesQuery { all: Some(all) }).await {
            Ok(sandboxes) => sandboxes.print_list(
                args.remote.json,
                "no sandboxes",
                &[
                    "owner",
                    "made by",
                    "engines",
                    "backend",
                    "age",
                    "last used",
                    "status",
                    "instances",
                ],
                |s| {
                    vec![
                        s.owner.clone(),
                        if s.foreign {
                            format!("{} (foreign)", s.maker)
                        } else {
                            s.maker.clone()
                        },
                        s.engines.join(", "),
                        s.backends.join(", "),
                        format_age_since(s.created_at_ms),
                        match s.last_used_at_ms {
                            Some(at) => format!("{} ago", format_age_since(at)),
                            None => "-".to_owned(),
                        },
                        s.status.clone(),
                        instances(s),
                    ]
                },
            ),
            Err(err) => return err.fail(),
        },
        Command::Rm { owner } => match client.teardown_sandbox(&owner).await {
            Ok(reply) => reply.print(args.remote.json, |out| match out.removed {
                0 => println!("nothing to tear down for {owner}"),
                n => println!("tore down {n} instance(s) of {owner}"),
            }),
            Err(err) => return err.fail(),
        },
    }
    ExitCode::SUCCESS
}
