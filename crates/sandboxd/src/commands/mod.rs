//! One module per CLI command.

pub mod agents;
pub mod demo;
pub mod doctor;
pub mod experiments;
pub mod janitor;
pub mod ls;
pub mod mcp;
pub mod pools;
pub mod projects;
pub mod provision;
pub mod restart;
pub mod sandboxes;
pub mod serve;
pub mod settings;
pub mod sources;
pub mod tasks;
pub mod teardown;

use std::process::ExitCode;

use indicatif::ProgressBar;
use sandboxd_backend::process::Progress;
use sandboxd_backend::{Backend, BackendError, InstanceRequest, provision_set};
use sandboxd_domain::instance::Instance;

use crate::config::{BackendChoice, Settings};
use crate::exit::EXIT_INPUT;

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

/// Prints an error and picks the exit code: 2 for refused input, 1 for anything else.
pub fn fail(err: &BackendError) -> ExitCode {
    eprintln!("error: {err}");
    match err {
        BackendError::Input(_) => ExitCode::from(EXIT_INPUT),
        _ => ExitCode::FAILURE,
    }
}

/// Provisions one set (`provision`, `demo`), saying so on the progress display, which it then
/// clears.
async fn provision_shown(
    backend: &dyn Backend,
    requests: &[InstanceRequest],
    progress: &Progress,
    bar: Option<ProgressBar>,
) -> Result<Vec<Instance>, BackendError> {
    progress(&format!(
        "provisioning {} on the {} backend…",
        requests
            .iter()
            .map(|r| r.engine.name)
            .collect::<Vec<_>>()
            .join(", "),
        backend.kind()
    ));
    let provisioned = provision_set(backend, requests).await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    provisioned
}
