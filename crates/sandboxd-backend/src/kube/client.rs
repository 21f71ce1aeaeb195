//! The connection to the cluster, made on first use (a cluster that is down now is tried again
//! later), the namespace objects are made in (created before the first provision when it is
//! missing and the credentials allow), and how errors become `BackendError`s.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;

use super::config::KubeConfig;
use crate::error::BackendError;

pub(super) struct Client {
    config: KubeConfig,
    /// Set once the first connection succeeds; a failure leaves it empty for the next call.
    client: OnceCell<kube::Client>,
    /// Set once the namespace is known to exist (or sandboxd may not read namespaces).
    namespace_ready: OnceCell<()>,
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
            namespace_ready: OnceCell::new(),
        }
    }

    pub async fn get(&self) -> Result<&kube::Client, BackendError> {
        self.client.get_or_try_init(|| self.connect()).await
    }

    /// The connection, once the namespace objects are made in exists: a missing one is created
    /// here (a fresh cluster has no `sandboxd` namespace), or — when sandboxd may not create
    /// namespaces — the error names it and the command that makes it.
    pub async fn for_provisioning(&self) -> Result<&kube::Client, BackendError> {
        let client = self.get().await?;
        self.namespace_ready
            .get_or_try_init(|| ensure_namespace(client, &self.config.namespace))
            .await?;
        Ok(client)
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

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), BackendError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(name).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        // sandboxd may be granted its namespace alone, not reading namespaces: creating the
        // instance's objects there says whether it exists.
        Err(kube::Error::Api(status)) if status.is_forbidden() => return Ok(()),
        Err(err) => return Err(error("reading", &format!("namespace {name}"), err)),
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {
            tracing::info!(
                namespace = name,
                "created the namespace sandboxd makes its objects in"
            );
            Ok(())
        }
        // Another replica made it meanwhile.
        Err(err) if is_conflict(&err) => Ok(()),
        Err(kube::Error::Api(status)) => Err(namespace_missing(name, &status.message)),
        Err(err) => Err(error("creating", &format!("namespace {name}"), err)),
    }
}

/// The namespace is missing and sandboxd could not create it (`why`: the API server's reason).
fn namespace_missing(name: &str, why: &str) -> BackendError {
    BackendError::Kubernetes {
        operation: "creating",
        name: format!("namespace {name}"),
        detail: format!(
            "namespace {name} does not exist and sandboxd could not create it ({why}): create \
             it with `kubectl create namespace {name}`, or set [kubernetes] namespace to one \
             that exists"
        ),
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
        // The namespace went away after sandboxd made (or found) it.
        kube::Error::Api(status)
            if status.is_not_found() && status.message.starts_with("namespaces ") =>
        {
            let namespace = status.message.split('"').nth(1).unwrap_or_default();
            namespace_missing(namespace, &status.message)
        }
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

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    #[test]
    fn a_missing_namespace_is_named_with_the_command_that_makes_it() {
        let status =
            Status::failure("namespaces \"sandboxd\" not found", "NotFound").with_code(404);
        let err = error("creating", "pod x", kube::Error::Api(Box::new(status))).to_string();
        assert!(err.contains("namespace sandboxd does not exist"), "{err}");
        assert!(err.contains("kubectl create namespace sandboxd"), "{err}");

        let forbidden = namespace_missing("sbx", "namespaces is forbidden").to_string();
        assert!(
            forbidden.contains("kubectl create namespace sbx"),
            "{forbidden}"
        );
        assert!(forbidden.contains("forbidden"), "{forbidden}");
    }
}
