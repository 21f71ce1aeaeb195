//! The connection to the Engine API: made on first use and negotiated down to the engine's API
//! version (Docker 20.10 speaks 1.41; bollard's default is newer), and the mapping of bollard's
//! errors onto `BackendError`.

use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, Docker};
use tokio::sync::OnceCell;

use crate::error::BackendError;

/// Every request gives up after this long; a stop waits at most `stop_timeout` on top.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(super) struct Client {
    socket: String,
    /// A `OnceCell` rather than a connection made in `new`: an engine that is down when the
    /// daemon starts is retried on the next call instead of disabling the backend for good.
    docker: OnceCell<Docker>,
}

impl Client {
    pub fn new(socket: &str) -> Self {
        Self {
            socket: socket.to_owned(),
            docker: OnceCell::new(),
        }
    }

    /// The negotiated client, connecting on first use.
    pub async fn get(&self) -> Result<&Docker, BackendError> {
        self.docker
            .get_or_try_init(|| async {
                let unavailable = |err: BollardError| unavailable(&self.socket, &err);
                let docker = Docker::connect_with_unix(
                    &self.socket,
                    REQUEST_TIMEOUT.as_secs(),
                    API_DEFAULT_VERSION,
                )
                .map_err(unavailable)?;
                docker.negotiate_version().await.map_err(unavailable)
            })
            .await
    }
}

/// The engine at `socket` gave no answer at all.
pub(super) fn unavailable(socket: &str, err: &BollardError) -> BackendError {
    BackendError::Unavailable {
        backend: "docker",
        detail: format!("the engine at {socket} does not answer: {err}"),
    }
}

/// The HTTP status of an error the engine answered with.
pub(super) fn status(err: &BollardError) -> Option<u16> {
    match err {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

pub(super) fn is_not_found(err: &BollardError) -> bool {
    status(err) == Some(404)
}

/// An engine answer becomes `Docker { operation, name }`; no answer at all becomes
/// `Unavailable`, which callers may retry.
pub(super) fn error(operation: &'static str, name: &str, err: BollardError) -> BackendError {
    match err {
        BollardError::DockerResponseServerError { message, .. } => BackendError::Docker {
            operation,
            name: name.to_owned(),
            detail: message,
        },
        BollardError::JsonDataError { .. } | BollardError::JsonSerdeError { .. } => {
            BackendError::Docker {
                operation,
                name: name.to_owned(),
                detail: format!("unexpected answer from the engine: {err}"),
            }
        }
        other => BackendError::Unavailable {
            backend: "docker",
            detail: format!("{operation} {name}: {other}"),
        },
    }
}
