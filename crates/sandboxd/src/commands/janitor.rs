//! `sandboxd janitor run`: one janitor pass in the running daemon now.

use std::process::ExitCode;

use reqwest::Method;

use crate::client::{AdminClient, Remote, text};
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
    /// Reap instances whose owner is gone (younger than the grace window are kept).
    Run,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    let Command::Run = args.command;
    let report = match client
        .call(Method::POST, "/v1/janitor/run", &[], None::<&()>)
        .await
    {
        Ok(report) => report,
        Err(err) => return err.fail(),
    };
    if args.remote.json {
        println!("{}", output::json(&report));
        return ExitCode::SUCCESS;
    }
    let reaped = report["reaped"].as_array().cloned().unwrap_or_default();
    println!(
        "examined {}, reaped {}, kept {} (younger than the grace window)",
        text(&report, "examined"),
        reaped.len(),
        text(&report, "kept_young")
    );
    for entry in &reaped {
        println!(
            "  reaped {} ({})",
            text(entry, "instance"),
            text(entry, "reason")
        );
    }
    ExitCode::SUCCESS
}
