//! Teardown: every object of the instance, each only when its labels say this maker made it.
//! The Pod gets one second to stop (its data is throwaway) and teardown waits until the kubelet
//! has stopped it, so a torn-down server answers nobody; the rest goes with it, and anything a
//! crash leaves between the calls is owned by the ConfigMap, so the cluster's garbage collector
//! removes it once that is gone. Idempotent: an object already gone is fine.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use kube::{Api, Resource, ResourceExt};
use sandboxd_domain::DaemonId;
use serde::de::DeserializeOwned;

use super::{KubeBackend, client};
use crate::error::BackendError;

/// How long teardown waits for the kubelet to stop a Pod.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl KubeBackend {
    /// Removes every object named `name` that `maker` made.
    pub(super) async fn remove(&self, name: &str, maker: &DaemonId) -> Result<(), BackendError> {
        let (pod, secret, policy, service, owner) = tokio::join!(
            self.stop_pod(name, maker),
            self.delete_if_ours::<Secret>(name, maker, None),
            self.delete_if_ours::<NetworkPolicy>(name, maker, None),
            self.delete_if_ours::<Service>(name, maker, None),
            self.delete_if_ours::<ConfigMap>(name, maker, None),
        );
        pod.and(secret.map(drop))
            .and(policy.map(drop))
            .and(service.map(drop))
            .and(owner.map(drop))
    }

    /// Deletes the Pod with one second to stop (not 0, which drops the object at once while
    /// its server still runs), waits until the kubelet reports its server stopped, then drops
    /// the object (a kubelet may take a minute to confirm a deletion it has long carried out).
    async fn stop_pod(&self, name: &str, maker: &DaemonId) -> Result<(), BackendError> {
        let Some(uid) = self.delete_if_ours::<Pod>(name, maker, Some(1)).await? else {
            return Ok(());
        };
        let pods: Api<Pod> = self.api().await?;
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let found = pods
                .get_opt(name)
                .await
                .map_err(|err| client::error("reading", name, err))?;
            let Some(pod) = found.filter(|pod| pod.uid().as_deref() == Some(uid.as_str())) else {
                return Ok(());
            };
            let stopped = !super::state::runs_anything(&pod);
            let late = tokio::time::Instant::now() >= deadline;
            if stopped || late {
                if late {
                    tracing::warn!(
                        pod = name,
                        "the Pod did not stop in time; dropping it anyway"
                    );
                }
                let force = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                return match pods.delete(name, &force).await {
                    Ok(_) => Ok(()),
                    Err(err) if client::is_not_found(&err) || client::is_conflict(&err) => Ok(()),
                    Err(err) => Err(client::error("removing", name, err)),
                };
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Deletes the object named `name` of kind `K` when `maker` made it; returns the uid of
    /// what it deleted.
    async fn delete_if_ours<K>(
        &self,
        name: &str,
        maker: &DaemonId,
        grace_seconds: Option<u32>,
    ) -> Result<Option<String>, BackendError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
        <K as Resource>::DynamicType: Default,
    {
        let api: Api<K> = self.api().await?;
        let found = api
            .get_opt(name)
            .await
            .map_err(|err| client::error("reading", name, err))?;
        let Some(found) = found else {
            return Ok(None);
        };
        let ours = self
            .labels
            .parse(Some(found.labels()))
            .is_some_and(|parsed| parsed.maker == *maker);
        if !ours {
            return Ok(None);
        }
        let params = DeleteParams {
            grace_period_seconds: grace_seconds,
            propagation_policy: Some(PropagationPolicy::Background),
            // Only the object just read: never a same-named one made since.
            preconditions: Some(Preconditions {
                uid: found.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(found.uid()),
            Err(err) if client::is_not_found(&err) || client::is_conflict(&err) => Ok(None),
            Err(err) => Err(client::error("removing", name, err)),
        }
    }
}
