//! Listing: every Pod carrying the sandbox label in the namespace, read from its labels and
//! status, never from memory.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use sandboxd_domain::instance::BackendKind;

use super::{KubeBackend, client, state};
use crate::error::BackendError;
use crate::handle::{InstanceHandle, ListedInstance};

impl KubeBackend {
    pub(super) async fn list_instances(&self) -> Result<Vec<ListedInstance>, BackendError> {
        let pods: Api<Pod> = self.api().await?;
        let listed = pods
            .list(&ListParams::default().labels(&self.labels.selector()))
            .await
            .map_err(|err| client::error("listing", "pods", err))?;
        let mut instances = Vec::new();
        for pod in listed.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let Some(parsed) = self.labels.parse(pod.metadata.labels.as_ref()) else {
                tracing::warn!(pod = %name, "a labeled Pod with unreadable labels");
                continue;
            };
            let host = self.handed_host(&name, &state::pod_ip(&pod).unwrap_or_default());
            instances.push(ListedInstance {
                handle: InstanceHandle {
                    engine: parsed.engine,
                    owner: parsed.owner,
                    maker: parsed.maker,
                    backend: BackendKind::Kubernetes,
                    backend_id: pod.metadata.uid.clone().unwrap_or_default(),
                    name,
                },
                host,
                port: parsed.port,
                created_at_ms: parsed.created_at_ms,
                live: state::is_live(&pod),
                status: state::status(&pod),
                image: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone()),
            });
        }
        instances.sort_by(|a, b| a.handle.name.cmp(&b.handle.name));
        Ok(instances)
    }
}
