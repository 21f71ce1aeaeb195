//! `sandboxd janitor run`: one janitor pass in the running daemon now.

use std::process::ExitCode;

use sandboxd_admin::wire::JanitorOut;

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
    /// Reap instances whose owner is gone (younger than the grace window are kept).
    Run,
}

fn show(report: &JanitorOut) {
    println!(
        "examined {}, reaped {}, kept {} (younger than the grace window)",
        report.examined,
        report.reaped.len(),
        report.kept_young
    );
    for entry in &report.reaped {
        println!("  reaped {} ({})", entry.instance, entry.reason);
    }
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    let Command::Run = args.command;
    match client.run_janitor().await {
        Ok(reply) => reply.print(args.remote.json, show),
        Err(err) => return err.fail(),
    }
    ExitCode::SUCCESS
}
