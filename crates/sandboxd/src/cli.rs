//! The command line. Each subcommand lives in its own module under `commands`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;
use crate::config::Settings;
use crate::exit::EXIT_INPUT;

#[derive(Debug, Parser)]
#[command(
    name = "sandboxd",
    version,
    about = "Throwaway, isolated databases for AI agents, on demand."
)]
pub struct Cli {
    /// TOML configuration file (defaults are built in; `SANDBOXD_*` env overrides both).
    #[arg(long, global = true, env = "SANDBOXD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log more: `-v` info and a line per finished operation, `-vv` debug, `-vvv` trace (our
    /// crates only; dependencies stay at warn unless `SANDBOXD_LOG` names them). Logs go to
    /// stderr, credentials redacted.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: MCP for agents at /mcp, the admin API at /v1, the panel at /, /metrics.
    Serve(commands::serve::Args),
    /// Serve one agent's verbs over stdio (relays to the running daemon).
    Mcp(commands::mcp::Args),
    /// Provision a set of engines for an owner and print the credentials (one evidence entry per
    /// service).
    Provision(commands::provision::Args),
    /// List the instances every backend knows about.
    Ls(commands::ls::Args),
    /// Tear down every instance of an owner.
    Teardown(commands::teardown::Args),
    /// Check backends, binaries and images, and say what to install.
    Doctor(commands::doctor::Args),
    /// Provision postgres, redis and mariadb for a demo owner, query each, tear down.
    Demo(commands::demo::Args),
    /// Projects and their sandbox opt-in (through the running daemon).
    Projects(commands::projects::Args),
    /// Production Postgres servers that clones are made from (through the running daemon).
    Sources(commands::sources::Args),
    /// Spawn, list and remove agents (through the running daemon).
    Agents(commands::agents::Args),
    /// Add and list tasks (through the running daemon).
    Tasks(commands::tasks::Args),
    /// Live sandboxes and their teardown (through the running daemon).
    Sandboxes(commands::sandboxes::Args),
    /// Warm pools and their sizes (through the running daemon).
    Pools(commands::pools::Args),
    /// Show or store the master switch (through the running daemon).
    Settings(commands::settings::Args),
    /// Restart the running daemon in place and wait for it: it drains, re-executes itself
    /// (same pid), keeps live sandboxes and applies the stored switch.
    Restart(commands::restart::Args),
    /// Run the orphan janitor now (through the running daemon).
    Janitor(commands::janitor::Args),
    /// run_experiment's runtime: compile its guest ahead of the first run.
    Experiments(commands::experiments::Args),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init(cli.verbose, matches!(cli.command, Command::Serve(_)));
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli.command, settings))
}

async fn run(command: Command, settings: Settings) -> ExitCode {
    match command {
        Command::Serve(args) => commands::serve::run(args, &settings).await,
        Command::Mcp(args) => commands::mcp::run(args, &settings).await,
        Command::Provision(args) => commands::provision::run(args, &settings).await,
        Command::Ls(args) => commands::ls::run(args, &settings).await,
        Command::Teardown(args) => commands::teardown::run(args, &settings).await,
        Command::Doctor(args) => commands::doctor::run(args, &settings).await,
        Command::Demo(args) => commands::demo::run(args, &settings).await,
        Command::Projects(args) => commands::projects::run(args, &settings).await,
        Command::Sources(args) => commands::sources::run(args, &settings).await,
        Command::Agents(args) => commands::agents::run(args, &settings).await,
        Command::Tasks(args) => commands::tasks::run(args, &settings).await,
        Command::Sandboxes(args) => commands::sandboxes::run(args, &settings).await,
        Command::Pools(args) => commands::pools::run(args, &settings).await,
        Command::Settings(args) => commands::settings::run(args, &settings).await,
        Command::Restart(args) => commands::restart::run(args, &settings).await,
        Command::Janitor(args) => commands::janitor::run(args, &settings).await,
        Command::Experiments(args) => commands::experiments::run(args, &settings).await,
    }
}
