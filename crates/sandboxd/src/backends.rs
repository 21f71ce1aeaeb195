//! Builds the backend the settings ask for. `auto` picks Docker when the engine answers and every
//! image the request needs is present, else processes; Kubernetes only when asked for.

use std::sync::Arc;

use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::kube::KubeBackend;
use sandboxd_backend::process::{ProcessBackend, Progress};
use sandboxd_backend::{Backend, BackendError};
use sandboxd_domain::EngineRef;

use crate::config::{BackendChoice, Settings};

/// Every backend that can be built on this machine, for commands that look across them
/// (`ls`, `teardown`, `doctor`). Docker is included only when its engine answers, Kubernetes
/// only when wanted (`backend = "kubernetes"` or `kubernetes.enabled`) and its API answers.
pub async fn all(settings: &Settings, progress: Progress) -> Vec<Arc<dyn Backend>> {
    let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
    if let Ok(process) = process(settings, progress) {
        backends.push(Arc::new(process));
    }
    if let Ok(docker) = docker(settings) {
        match docker.ping().await {
            Ok(()) => backends.push(Arc::new(docker)),
            Err(err) => tracing::debug!(error = %err, "docker backend left out"),
        }
    }
    if settings.kubernetes_wanted() {
        match kubernetes(settings) {
            Ok(kube) => match kube.ping().await {
                Ok(()) => backends.push(Arc::new(kube)),
                Err(err) => tracing::warn!(error = %err, "kubernetes backend left out"),
            },
            Err(err) => tracing::warn!(error = %err, "kubernetes backend left out"),
        }
    }
    backends
}

/// The Kubernetes backend from the `[kubernetes]` settings. It connects on first use.
pub fn kubernetes(settings: &Settings) -> Result<KubeBackend, BackendError> {
    KubeBackend::new(settings.kube_config())
}

pub fn process(settings: &Settings, progress: Progress) -> Result<ProcessBackend, BackendError> {
    Ok(ProcessBackend::new(settings.process_config())?.with_progress(progress))
}

/// The Docker backend from the `[docker]` settings and the per-engine images and deadlines.
/// It connects on first use.
pub fn docker(settings: &Settings) -> Result<DockerBackend, BackendError> {
    DockerBackend::new(settings.docker_config())
}

/// The backend for provisioning `engines`.
pub async fn choose(
    settings: &Settings,
    choice: BackendChoice,
    engines: &[EngineRef],
    progress: Progress,
) -> Result<Arc<dyn Backend>, BackendError> {
    match choice {
        BackendChoice::Process => Ok(Arc::new(process(settings, progress)?)),
        BackendChoice::Docker => {
            let docker = docker(settings)?;
            docker.ping().await?;
            Ok(Arc::new(docker))
        }
        BackendChoice::Kubernetes => {
            let kube = kubernetes(settings)?;
            kube.ping().await?;
            Ok(Arc::new(kube))
        }
        BackendChoice::Auto => match usable_docker(settings, engines).await {
            Ok(docker) => Ok(Arc::new(docker)),
            Err(why) => {
                tracing::debug!(reason = %why, "auto: using the process backend");
                Ok(Arc::new(process(settings, progress)?))
            }
        },
    }
}

/// Docker, when its engine answers and has the image of every engine in `engines`.
async fn usable_docker(
    settings: &Settings,
    engines: &[EngineRef],
) -> Result<DockerBackend, BackendError> {
    let docker = docker(settings)?;
    docker.ping().await?;
    for engine in engines {
        docker.supports(*engine).await?;
    }
    Ok(docker)
}
