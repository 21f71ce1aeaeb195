//! The connection to the cluster, made on first use (a cluster that is down now is tried again
//! later), and how its errors become `BackendError`s.

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;

use super::config::KubeConfig;
use crate::error::BackendError;

pub(super) struct Client {
    config: KubeConfig,
    /// Set once the first connection succeeds; a failure leaves it empty for the next call.
    client: OnceCell<kube::Client>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("connected", &self.client.initialized())
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(config: KubeConfig) -> Self {
        Self {
            config,
            client: OnceCell::new(),
        }
    }

    pub async fn get(&self) -> Result<&kube::Client, BackendError> {
        self.client.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<kube::Client, BackendError> {
        let options = KubeConfigOptions {
            context: self.config.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &self.config.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|err| unavailable(&err))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|err| unavailable(&err))?
            }
            None if self.config.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|err| unavailable(&err))?,
            None => kube::Config::infer()
                .await
                .map_err(|err| unavailable(&err))?,
        };
        kube::Client::try_from(config).map_err(|err| unavailable(&err))
    }
}

fn unavailable(err: &dyn std::fmt::Display) -> BackendError {
    BackendError::Unavailable {
        backend: "kubernetes",
        detail: err.to_string(),
    }
}

/// The API server's answer (or the failure to get one) while doing `operation` on `name`.
pub(super) fn error(operation: &'static str, name: &str, err: kube::Error) -> BackendError {
    match err {
        kube::Error::Api(status) => BackendError::Kubernetes {
            operation,
            name: name.to_owned(),
            detail: format!("{} ({} {})", status.message, status.code, status.reason),
        },
        other => BackendError::Unavailable {
            backend: "kubernetes",
            detail: format!("{operation} {name}: {other}"),
        },
    }
}

pub(super) fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_not_found())
}

pub(super) fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_already_exists() || status.is_conflict())
}
