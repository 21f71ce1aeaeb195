//! The Kubernetes backend: each instance is a Pod on the cluster the operator already runs,
//! created through the Kubernetes API (kube-rs), for fleets beyond one host. Parts:
//! - [`config`]: `KubeConfig`, every default documented.
//! - `client`: the connection (a kubeconfig, or the cluster sandboxd runs in), error mapping.
//! - `spec`: an engine's recipe turned into the instance's objects — owner ConfigMap, Secret,
//!   Pod, NetworkPolicy, Service (pure, unit-tested); `labels`: the labels that find them again.
//! - `provision`, `list`, `teardown`: the lifecycle verbs, in the step names every backend uses;
//!   `state`: what a Pod's status says; `doctor`: the API, the permissions, the images.
//!
//! **Invariants:** a Pod never runs as root, never escalates privileges, holds no capability
//! but the recipe's, no host namespace, no service-account token, no writable root filesystem
//! and no volume but memory-backed `emptyDir`s and its own Secret; no password of any kind is
//! in a Pod's spec, env or labels (the superuser's is a file from the instance's Secret, the
//! handed-out account is created over the wire after start); every object of an instance is
//! owned by its ConfigMap, so the cluster removes what a crash left once that goes; only
//! objects carrying `<prefix>/sandbox=1` and this maker's id are ever changed or removed.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use sandboxd_domain::instance::{BackendKind, Instance};
use sandboxd_domain::{AgentSlug, DataSize, EngineRef};

use crate::backend::Backend;
use crate::doctor::DoctorCheck;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest, ListedInstance};
use crate::idle::IdleMember;
use crate::startup::Account;

mod client;
pub mod config;
mod doctor;
pub(crate) mod labels;
mod list;
mod provision;
mod spec;
mod state;
mod teardown;
mod tools;

pub use config::KubeConfig;

use labels::Labels;

pub struct KubeBackend {
    config: KubeConfig,
    labels: Labels,
    client: client::Client,
}

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KubeBackend {
    /// Validates the settings. Connects on first use; `ping` tells whether the API answers.
    pub fn new(config: KubeConfig) -> Result<Self, BackendError> {
        config.validate()?;
        Ok(Self {
            labels: Labels::new(&config.label_prefix),
            client: client::Client::new(config.clone()),
            config,
        })
    }

    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    async fn api<K>(&self) -> Result<Api<K>, BackendError>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Ok(Api::namespaced(
            self.client.get().await?.clone(),
            &self.config.namespace,
        ))
    }

    /// `Kubernetes v1.20.2`, for doctor and logs.
    pub async fn server_version(&self) -> Result<String, BackendError> {
        let client = self.client.get().await?;
        let info = client
            .apiserver_version()
            .await
            .map_err(|err| client::error("asking the version of", "the API server", err))?;
        Ok(format!("Kubernetes {}", info.git_version))
    }

    /// The images some node of the cluster holds (its `status.images`); None when the nodes
    /// cannot be listed (sandboxd may not be allowed to).
    async fn cached_images(&self) -> Option<Vec<String>> {
        let client = self.client.get().await.ok()?;
        let nodes: Api<Node> = Api::all(client.clone());
        let listed = nodes.list(&ListParams::default()).await.ok()?;
        Some(
            listed
                .items
                .into_iter()
                .filter_map(|node| node.status?.images)
                .flatten()
                .flat_map(|image| image.names.unwrap_or_default())
                .collect(),
        )
    }

    /// The image that runs `engine` (at `major`, when one is asked): the first candidate some
    /// node holds, else — unless images are never pulled — the first candidate.
    async fn resolve_image(
        &self,
        engine: EngineRef,
        major: Option<u32>,
    ) -> Result<String, BackendError> {
        let candidates = match major {
            Some(major) => self.config.images_for_major(engine, major),
            None => self.config.images(engine),
        };
        let cached = self.cached_images().await;
        if let Some(cached) = &cached
            && let Some(image) = candidates
                .iter()
                .find(|c| cached.iter().any(|name| names_image(name, c)))
        {
            return Ok(image.clone());
        }
        match candidates.first() {
            Some(first) if self.config.image_pull_policy != "Never" || cached.is_none() => {
                Ok(first.clone())
            }
            _ => Err(BackendError::ImageMissing {
                engine: engine.name,
                image: candidates.join(" or "),
                hint: "no node of the cluster has it and image_pull_policy is Never: load it \
                       onto the nodes, or allow pulls"
                    .to_owned(),
            }),
        }
    }
}

/// Whether a node's image name (`docker.io/library/postgres:17`, `repo@sha256:…`) is `image`.
fn names_image(name: &str, image: &str) -> bool {
    let normalize = |n: &str| {
        let n = n.strip_prefix("docker.io/").unwrap_or(n);
        let n = n.strip_prefix("library/").unwrap_or(n);
        let last = n.rsplit('/').next().unwrap_or(n);
        if last.contains(':') || n.contains('@') {
            n.to_owned()
        } else {
            format!("{n}:latest")
        }
    };
    normalize(name) == normalize(image)
}

#[async_trait]
impl Backend for KubeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Kubernetes
    }

    /// The engines' data tmpfs (`DataSize::CONTAINER_DEFAULT`).
    fn default_size(&self) -> DataSize {
        DataSize::CONTAINER_DEFAULT
    }

    async fn ping(&self) -> Result<(), BackendError> {
        self.server_version().await.map(drop)
    }

    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError> {
        self.resolve_image(engine, None).await.map(drop)
    }

    async fn image_of(&self, engine: EngineRef) -> Result<Option<String>, BackendError> {
        self.resolve_image(engine, None).await.map(Some)
    }

    async fn provider(&self, engine: EngineRef) -> Result<String, BackendError> {
        let image = self.resolve_image(engine, None).await?;
        Ok(format!(
            "{image} on kubernetes namespace {}",
            self.config.namespace
        ))
    }

    async fn provider_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<String, BackendError> {
        let image = self.resolve_image(engine, Some(major)).await?;
        Ok(format!(
            "{image} on kubernetes namespace {}",
            self.config.namespace
        ))
    }

    async fn image_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<Option<String>, BackendError> {
        self.resolve_image(engine, Some(major)).await.map(Some)
    }

    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError> {
        self.provision_one(request, Account::Now).await
    }

    async fn provision_idle(&self, request: &InstanceRequest) -> Result<IdleMember, BackendError> {
        let instance = self.provision_one(request, Account::AtHandOut).await?;
        IdleMember::hold(self, instance).await
    }

    /// Labels can change on Kubernetes: the owner label of every object of the instance is
    /// rewritten, and its NetworkPolicy now admits the new owner's Pods. The name stays.
    async fn record_owner(
        &self,
        instance: &Instance,
        owner: &AgentSlug,
    ) -> Result<String, BackendError> {
        let labels = serde_json::json!({
            "metadata": { "labels": { self.labels.owner_key(): owner.to_string() } }
        });
        let params = PatchParams::default();
        let pods: Api<Pod> = self.api().await?;
        let owners: Api<ConfigMap> = self.api().await?;
        let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = self.api().await?;
        let name = instance.name.as_str();
        let patch_error = |err| client::error("recording the owner of", name, err);
        pods.patch(name, &params, &Patch::Merge(&labels))
            .await
            .map_err(patch_error)?;
        owners
            .patch(name, &params, &Patch::Merge(&labels))
            .await
            .map_err(patch_error)?;
        let peers = spec::admitted_peers(&self.admitted(owner));
        let policy = serde_json::json!({
            "metadata": { "labels": { self.labels.owner_key(): owner.to_string() } },
            "spec": { "ingress": [{
                "from": peers,
                "ports": [{ "port": instance.engine.port, "protocol": "TCP" }],
            }] }
        });
        policies
            .patch(name, &params, &Patch::Merge(&policy))
            .await
            .map_err(patch_error)?;
        Ok(instance.name.clone())
    }

    /// sandboxd dials the Pod's address: a Service's name handed to agents may resolve only
    /// inside the cluster.
    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError> {
        if !self.config.service {
            return Ok((instance.host.clone(), instance.port));
        }
        let pods: Api<Pod> = self.api().await?;
        let pod = pods
            .get_opt(&instance.name)
            .await
            .map_err(|err| client::error("reading", &instance.name, err))?;
        match pod.as_ref().and_then(state::pod_ip) {
            Some(ip) => Ok((ip, instance.engine.port)),
            None => Err(BackendError::Kubernetes {
                operation: "reaching",
                name: instance.name.clone(),
                detail: "the Pod has no address".to_owned(),
            }),
        }
    }

    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError> {
        let pods: Api<Pod> = self.api().await?;
        let pod = pods
            .get_opt(&handle.name)
            .await
            .map_err(|err| client::error("reading", &handle.name, err))?;
        Ok(pod.is_some_and(|pod| {
            let ours = self
                .labels
                .parse(pod.metadata.labels.as_ref())
                .is_some_and(|p| p.maker == handle.maker && p.owner == handle.owner);
            let same = handle.backend_id.is_empty()
                || pod.metadata.uid.as_deref() == Some(handle.backend_id.as_str());
            ours && same && state::is_live(&pod)
        }))
    }

    #[tracing::instrument(
        name = "teardown",
        skip_all,
        fields(instance = %handle.name, engine = handle.engine.name, agent = %handle.owner, backend = "kubernetes")
    )]
    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        self.remove(&handle.name, &handle.maker).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError> {
        self.list_instances().await
    }

    async fn doctor(&self) -> Vec<DoctorCheck> {
        self.checks().await
    }

    fn feature_location(&self, engine: EngineRef) -> String {
        format!("image {}", self.config.images(engine).join(" or "))
    }

    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        self.extend_in_pod(instance, files).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_image_names_match_the_configured_ones() {
        assert!(names_image("docker.io/library/postgres:17", "postgres:17"));
        assert!(names_image(
            "sandboxd-local/postgres:17",
            "sandboxd-local/postgres:17"
        ));
        assert!(names_image(
            "docker.io/sandboxd-local/redis:8",
            "sandboxd-local/redis:8"
        ));
        assert!(names_image("mariadb", "mariadb:latest"));
        assert!(!names_image(
            "sandboxd-local/postgres:18",
            "sandboxd-local/postgres:17"
        ));
        assert!(!names_image("postgres:17", "sandboxd-local/postgres:17"));
    }
}
