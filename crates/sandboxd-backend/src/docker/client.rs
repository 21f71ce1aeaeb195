//! The connection to the Engine API: made on first use and negotiated down to the engine's API
//! version (Docker 20.10 speaks 1.41; bollard's default is newer), which engine answers (Docker
//! or Podman, whose compatible API differs in how tenants are kept apart), and the mapping of
//! bollard's errors onto `BackendError`.

use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, Docker};
use tokio::sync::OnceCell;

use crate::error::BackendError;

/// Every request gives up after this long; a stop waits at most `stop_timeout` on top.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Which engine answers the API. Podman's compatible API differs from Docker's in two ways that
/// matter here; everything else is the same code path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    Docker,
    Podman,
}

/// How tenants' containers are kept from reaching each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isolation {
    /// Every container of a daemon joins its one network, on which the bridge driver drops
    /// traffic between containers (`enable_icc=false`).
    DaemonNetwork,
    /// Each container gets a network of its own: the engine's bridge networks have no such
    /// switch (netavark lets the containers of one network talk) but drop traffic between
    /// networks.
    NetworkPerInstance,
}

impl Flavor {
    /// Podman names its server component `Podman Engine` in `/version`; Docker `Engine`.
    fn of(version: &bollard::models::SystemVersion) -> Self {
        let podman = version
            .components
            .iter()
            .flatten()
            .any(|c| c.name.starts_with("Podman"));
        if podman { Self::Podman } else { Self::Docker }
    }

    pub fn isolation(self) -> Isolation {
        match self {
            Self::Docker => Isolation::DaemonNetwork,
            Self::Podman => Isolation::NetworkPerInstance,
        }
    }

    /// Writable paths the engine mounts by itself on a read-only root unless the container has
    /// its own mount there: Podman adds `/run` and `/var/tmp` as tmpfs without a size.
    pub fn implicit_tmpfs(self) -> &'static [&'static str] {
        match self {
            Self::Docker => &[],
            Self::Podman => &["/run", "/var/tmp"],
        }
    }
}

impl Isolation {
    /// For doctor: how tenants are kept apart on this engine.
    pub fn describe(self) -> &'static str {
        match self {
            Self::DaemonNetwork => {
                "all containers on the daemon's network, inter-container traffic off"
            }
            Self::NetworkPerInstance => {
                "each container on a network of its own (the engine drops traffic between \
                 networks; its bridge networks cannot turn inter-container traffic off)"
            }
        }
    }
}

#[derive(Debug)]
struct Connected {
    docker: Docker,
    flavor: Flavor,
}

#[derive(Debug)]
pub(super) struct Client {
    socket: String,
    /// A `OnceCell` rather than a connection made in `new`: an engine that is down when the
    /// daemon starts is retried on the next call instead of disabling the backend for good.
    connected: OnceCell<Connected>,
}

impl Client {
    pub fn new(socket: &str) -> Self {
        Self {
            socket: socket.to_owned(),
            connected: OnceCell::new(),
        }
    }

    /// The negotiated client, connecting on first use.
    pub async fn get(&self) -> Result<&Docker, BackendError> {
        Ok(&self.connect().await?.docker)
    }

    /// Which engine answers (asked once, with the connection).
    pub async fn flavor(&self) -> Result<Flavor, BackendError> {
        Ok(self.connect().await?.flavor)
    }

    async fn connect(&self) -> Result<&Connected, BackendError> {
        self.connected
            .get_or_try_init(|| async {
                let unavailable = |err: BollardError| unavailable(&self.socket, &err);
                let docker = Docker::connect_with_unix(
                    &self.socket,
                    REQUEST_TIMEOUT.as_secs(),
                    API_DEFAULT_VERSION,
                )
                .map_err(unavailable)?;
                let docker = docker.negotiate_version().await.map_err(unavailable)?;
                let version = docker.version().await.map_err(unavailable)?;
                Ok(Connected {
                    flavor: Flavor::of(&version),
                    docker,
                })
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

/// Podman reports a container whose process has ended but whose clean-up has not run yet as
/// `stopped`, a state the Engine API does not have: the answer does not parse. It lasts
/// moments (until conmon's clean-up), so such a read is asked again.
pub(super) fn is_podman_stopping(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::JsonDataError { .. } | BollardError::JsonSerdeError { .. }
    ) && err.to_string().contains("unknown variant `stopped`")
}

/// How often, and how far apart, a read that met [`is_podman_stopping`] is asked again.
pub(super) const STOPPING_RETRIES: u32 = 50;
pub(super) const STOPPING_PAUSE: Duration = Duration::from_millis(100);

/// Runs `read` again while its answer has a container in Podman's `stopped` state (see
/// [`is_podman_stopping`]), up to five seconds.
pub(super) async fn read_settled<T, F, Fut>(mut read: F) -> Result<T, BollardError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BollardError>>,
{
    let mut attempt = 0;
    loop {
        match read().await {
            Err(err) if is_podman_stopping(&err) && attempt < STOPPING_RETRIES => {
                attempt += 1;
                tokio::time::sleep(STOPPING_PAUSE).await;
            }
            other => return other,
        }
    }
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
