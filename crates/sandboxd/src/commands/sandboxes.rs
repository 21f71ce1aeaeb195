//! `sandboxd sandboxes ls|rm`: live sandboxes as the running daemon sees them (what the backends
//! list, joined with what the broker tracks), and teardown by owner. Unlike `sandboxd ls` and
//! `sandboxd teardown`, which ask the backends directly, these go through the daemon, so the
//! teardown is audited and the broker forgets the sandbox.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::Value;

use crate::client::{AdminClient, Remote, age_of, list, text};
use crate::commands::projects::encode;
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
    /// List sandboxes by owner.
    Ls,
    /// Tear down every instance of one owner (an agent slug).
    Rm { owner: String },
}

fn instances(sandbox: &Value) -> String {
    sandbox["instances"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    format!(
                        "{} {}:{}",
                        text(i, "name"),
                        text(i, "host"),
                        text(i, "port")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Ls => match client.get("/v1/sandboxes", &[]).await {
            Ok(sandboxes) => output::print_list(
                &sandboxes,
                args.remote.json,
                "no sandboxes",
                &[
                    "owner",
                    "engines",
                    "backend",
                    "age",
                    "last used",
                    "status",
                    "instances",
                ],
                |s| {
                    vec![
                        text(s, "owner"),
                        list(s, "engines"),
                        list(s, "backends"),
                        age_of(s, "created_at_ms"),
                        match age_of(s, "last_used_at_ms") {
                            never if never.is_empty() => "-".to_owned(),
                            ago => format!("{ago} ago"),
                        },
                        text(s, "status"),
                        instances(s),
                    ]
                },
            ),
            Err(err) => return err.fail(),
        },
        Command::Rm { owner } => {
            let path = format!("/v1/sandboxes/{}", encode(&owner));
            match client.call(Method::DELETE, &path, &[], None::<&()>).await {
                Ok(out) if args.remote.json => println!("{}", output::json(&out)),
                Ok(out) => match out["removed"].as_u64() {
                    Some(0) => println!("nothing to tear down for {owner}"),
                    Some(n) => println!("tore down {n} instance(s) of {owner}"),
                    None => println!("tore down {owner}'s sandbox"),
                },
                Err(err) => return err.fail(),
            }
        }
    }
    ExitCode::SUCCESS
}
