//! The command line. Each subcommand lives in its own module under `commands`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;
use crate::config::{BackendChoice, Settings};

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
    /// Log more (repeat for more detail). Logs go to stderr.
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
    /// Spawn, list and remove agents (through the running daemon).
    Agents(commands::agents::Args),
    /// Add and list tasks (through the running daemon).
    Tasks(commands::tasks::Args),
    /// Live sandboxes and their teardown (through the running daemon).
    Sandboxes(commands::sandboxes::Args),
    /// Show or store the master switch (through the running daemon).
    Settings(commands::settings::Args),
    /// Run the orphan janitor now (through the running daemon).
    Janitor(commands::janitor::Args),
}

/// Exit codes: 0 success, 1 failure, 2 the caller's input was refused.
pub const EXIT_INPUT: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose, matches!(cli.command, Command::Serve(_)));
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
        Command::Agents(args) => commands::agents::run(args, &settings).await,
        Command::Tasks(args) => commands::tasks::run(args, &settings).await,
        Command::Sandboxes(args) => commands::sandboxes::run(args, &settings).await,
        Command::Settings(args) => commands::settings::run(args, &settings).await,
        Command::Janitor(args) => commands::janitor::run(args, &settings).await,
    }
}

/// Logs go to stderr. The daemon logs its own crates at `info` by default; one-shot commands
/// only warnings (their progress has its own display). Dependencies stay at `warn` unless asked:
/// a driver at `debug` may print statements. From `-v` on, every verb, provision, teardown and
/// janitor pass also logs one line when its span closes, with how long it took.
fn init_tracing(verbose: u8, daemon: bool) {
    const OURS: &str = "sandboxd=info,sandboxd_broker=info,sandboxd_backend=info,sandboxd_mcp=info,sandboxd_admin=info";
    let default = match (verbose, daemon) {
        (0, false) => "warn".to_owned(),
        (0, true) | (1, _) => format!("warn,{OURS}"),
        _ => "debug".to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SANDBOXD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let span_events = if verbose > 0 {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(span_events)
        .with_writer(std::io::stderr)
        .init();
}

/// The `--backend` flag shared by several commands.
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArg {
    /// Which backend to use (default: the configured one, `auto` unless set).
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
}

impl BackendArg {
    pub fn choice(&self, settings: &Settings) -> BackendChoice {
        self.backend.unwrap_or(settings.backend)
    }
}
