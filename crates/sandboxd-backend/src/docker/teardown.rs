//! Teardown: stop (short timeout) → kill when stop fails → remove (force, with its volumes) →
//! remove the container's own network, when it has one (Podman).
//! Idempotent and fine when the container is already gone: every "no such container" answer is
//! success. Only containers carrying the sandbox label are ever touched.

use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{
    KillContainerOptions, RemoveContainerOptions, StopContainerOptions,
};
use tokio::time::{Instant, sleep};

use super::labels::Labels;
use super::{client, network, state};
use crate::error::BackendError;

/// How long to wait for a removal another caller started.
const REMOVAL_WAIT: Duration = Duration::from_secs(10);

/// Which container to remove.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    pub name: &'a str,
    /// When set, only a container whose id starts with it is removed: a handle of a container
    /// that was since replaced under the same name must not remove its successor.
    pub id: Option<&'a str>,
}

pub(super) async fn remove(
    docker: &Docker,
    labels: &Labels,
    target: Target<'_>,
    stop_timeout: Duration,
) -> Result<(), BackendError> {
    let name = target.name;
    let Some(found) = state::inspect(docker, name).await? else {
        return Ok(());
    };
    if let Some(id) = target.id.filter(|id| !id.is_empty())
        && !found.id.as_deref().unwrap_or_default().starts_with(id)
    {
        return Ok(());
    }
    remove_found(docker, labels, name, &found, stop_timeout).await
}

/// [`remove`] for a container the caller has just inspected.
pub(super) async fn remove_found(
    docker: &Docker,
    labels: &Labels,
    name: &str,
    found: &ContainerInspectResponse,
    stop_timeout: Duration,
) -> Result<(), BackendError> {
    if !labels.is_ours(found.config.as_ref().and_then(|c| c.labels.as_ref())) {
        return Err(BackendError::Docker {
            operation: "removing",
            name: name.to_owned(),
            detail: format!(
                "it does not carry the {} label, so sandboxd did not create it; leaving it alone",
                labels.marker()
            ),
        });
    }
    // From here on, address the container by id: the name may be reused any moment.
    let id = found.id.as_deref().unwrap_or_default();
    if state::is_running(found) {
        stop_or_kill(docker, id, name, stop_timeout).await?;
    }
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..RemoveContainerOptions::default()
    };
    let removed = match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(err) if client::is_not_found(&err) => Ok(()),
        // "removal already in progress": someone else is removing it; wait until it is gone.
        Err(err) if client::status(&err) == Some(409) => wait_gone(docker, id, name).await,
        Err(err) => Err(client::error("removing", name, err)),
    };
    if removed.is_ok()
        && let Some(own) =
            labels.instance_network_of(found.config.as_ref().and_then(|c| c.labels.as_ref()))
    {
        network::remove_instance_network(docker, &own).await;
    }
    removed
}

async fn stop_or_kill(
    docker: &Docker,
    id: &str,
    name: &str,
    stop_timeout: Duration,
) -> Result<(), BackendError> {
    let options = StopContainerOptions {
        t: Some(i32::try_from(stop_timeout.as_secs()).unwrap_or(i32::MAX)),
        ..StopContainerOptions::default()
    };
    let stopped = docker.stop_container(id, Some(options)).await;
    match stopped {
        // 304: already stopped; 404: already gone.
        Ok(()) => Ok(()),
        Err(err) if matches!(client::status(&err), Some(304 | 404)) => Ok(()),
        Err(err) => {
            tracing::debug!(container = name, error = %err, "stop failed; killing");
            match docker
                .kill_container(id, None::<KillContainerOptions>)
                .await
            {
                Ok(()) => Ok(()),
                // 404: gone; 409: not running any more.
                Err(err) if matches!(client::status(&err), Some(404 | 409)) => Ok(()),
                // The forced removal below kills it anyway; report only if that fails too.
                Err(err) => {
                    tracing::debug!(container = name, error = %err, "kill failed");
                    Ok(())
                }
            }
        }
    }
}

async fn wait_gone(docker: &Docker, id: &str, name: &str) -> Result<(), BackendError> {
    let started = Instant::now();
    while started.elapsed() < REMOVAL_WAIT {
        if state::inspect(docker, id).await?.is_none() {
            return Ok(());
        }
        sleep(Duration::from_millis(100)).await;
    }
    Err(BackendError::Docker {
        operation: "removing",
        name: name.to_owned(),
        detail: format!(
            "another removal was in progress and had not finished after {}s",
            REMOVAL_WAIT.as_secs()
        ),
    })
}
