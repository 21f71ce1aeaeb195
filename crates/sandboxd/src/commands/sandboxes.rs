//! `sandboxd sandboxes ls|rm`: live sandboxes as the running daemon sees them (what the backends
//! list, joined with what the broker tracks), and teardown by owner. Unlike `sandboxd ls` and
//! `sandboxd teardown`, which ask the backends directly, these go through the daemon, so the
//! teardown is audited and the broker forgets the sandbox.

use std::process::ExitCode;

use sandboxd_admin::wire::{SandboxOut, SandboxesQuery};
use sandboxd_domain::clock::format_age_since;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
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
    /// List this daemon's sandboxes by owner (within 100 columns; `--wide` for every column).
    Ls {
        /// Also list foreign sandboxes (another daemon's, or `sandboxd provision`'s), which
        /// this daemon never touches.
        #[arg(long)]
        all: bool,
        /// Every column: also who made each sandbox, when it was last used, and each
        /// instance's name, address and image.
        #[arg(long)]
        wide: bool,
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

const WIDE: &[&str] = &[
    "owner",
    "made by",
    "engines",
    "backend",
    "age",
    "last used",
    "status",
    "instances",
];

/// The most columns the default listing takes, terminal or not.
const NARROW_WIDTH: u16 = 100;

fn made_by(sandbox: &SandboxOut) -> String {
    if sandbox.foreign {
        format!("{} (foreign)", sandbox.maker)
    } else {
        sandbox.maker.clone()
    }
}

fn last_used(sandbox: &SandboxOut) -> String {
    match sandbox.last_used_at_ms {
        Some(at) => format!("{} ago", format_age_since(at)),
        None => "-".to_owned(),
    }
}

fn wide_row(s: &SandboxOut) -> Vec<String> {
    vec![
        s.owner.clone(),
        made_by(s),
        s.engines.join(", "),
        s.backends.join(", "),
        format_age_since(s.created_at_ms),
        last_used(s),
        s.status.clone(),
        instances(s),
    ]
}

/// Owner, engines, backend, age, last use and status (a foreign sandbox marked), wrapped
/// within [`NARROW_WIDTH`] columns or the terminal's when narrower.
fn narrow_table(list: &[SandboxOut]) -> String {
    let rows = list
        .iter()
        .map(|s| {
            vec![
                if s.foreign {
                    format!("{} (foreign)", s.owner)
                } else {
                    s.owner.clone()
                },
                s.engines.join(", "),
                s.backends.join(", "),
                format_age_since(s.created_at_ms),
                last_used(s),
                s.status.clone(),
            ]
        })
        .collect();
    output::table_within(
        &["owner", "engines", "backend", "age", "last used", "status"],
        rows,
        NARROW_WIDTH,
    )
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Ls { all, wide } => {
            match client.sandboxes(&SandboxesQuery { all: Some(all) }).await {
                Ok(sandboxes) => sandboxes.print(args.remote.json, |list| {
                    if list.is_empty() {
                        println!("no sandboxes");
                    } else if wide {
                        println!(
                            "{}",
                            output::table(WIDE, list.iter().map(wide_row).collect())
                        );
                    } else {
                        println!("{}", narrow_table(list));
                    }
                }),
                Err(err) => return err.fail(),
            }
        }
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
