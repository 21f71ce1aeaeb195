//! `sandboxd experiments prepare`: compiles `run_experiment`'s guest into the configured cache
//! now (once per wasmtime version, engine configuration and guest), so no agent's first run
//! waits for it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Load the compiled guest, compiling it first when the cache has none.
    Prepare,
}

/// Compiling takes seconds in a release build, about a minute in a debug one.
const PREPARE_WAIT: Duration = Duration::from_secs(1800);

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let Sub::Prepare = args.command;
    let config = match settings.experiments_config() {
        Ok(Some(config)) => config,
        Ok(None) => {
            eprintln!("experiments are turned off (experiments.enabled = false)");
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(crate::exit::EXIT_INPUT);
        }
    };
    let started = Instant::now();
    let prepared = match sandboxd_experiments::Runtime::start(config.files.clone(), config.policy) {
        Ok(runtime) => runtime.wait_ready(PREPARE_WAIT).await,
        Err(err) => Err(err),
    };
    match prepared {
        Ok(()) => {
            println!(
                "experiment guest ready in {:.1} s ({} compiled into {})",
                started.elapsed().as_secs_f64(),
                config.files.component.display(),
                config.files.cache_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
