//! The Docker backend (production): each instance is a hardened sibling container created through
//! the Docker Engine API (bollard, over a unix socket; Podman's compatible socket works through the
//! same code). Parts:
//! - [`config`]: `DockerConfig`, every default documented.
//! - `client`: the lazily negotiated connection, which engine answers (Docker or Podman), and
//!   error mapping.
//! - `labels`: the labels that find instances again after any restart.
//! - `spec`: an engine's recipe turned into the hardened create body (pure, unit-tested).
//! - `images`: image presence; sandboxd never pulls.
//! - `network`: the daemon's own bridge network with inter-container traffic off (its subnet
//!   from sandboxd's pool), or on Podman a network per container, or the operator's configured
//!   network, checked before anything joins it.
//! - `tools`: what sandboxd runs for itself: `pg_dump` of a clone source in a throwaway
//!   container, and a clone's relation files padded inside its own.
//! - `provision`, `list`, `teardown`: the lifecycle verbs, in the step names both backends use;
//!   `state`: what an inspect says about a container.
//!
//! **Invariants:** a container never gets a bind mount, a volume, the docker socket, privileged
//! mode, a writable root filesystem or a port on anything but 127.0.0.1; no password of any kind
//! appears in a container's config, command line or labels (the handed-out account is created
//! over the wire after start, the superuser's password reaches the entrypoint on stdin); no
//! container reaches another on the daemon's network (inter-container traffic is off on it),
//! nor, on Podman, any other container's network (each has its own);
//! only containers carrying `<ns>.sandbox=1` and networks carrying `<ns>.sandbox-network=1` and
//! this daemon's id are ever removed.

use async_trait::async_trait;
use bollard::query_parameters::RenameContainerOptions;
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::{AgentSlug, DaemonId, DataSize, EngineRef, engines};

use crate::backend::{Backend, Sweep};
use crate::doctor::DoctorCheck;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest, ListedInstance};
use crate::idle::IdleMember;
use crate::startup::Account;

mod client;
pub mod config;
mod images;
pub(crate) mod labels;
mod list;
mod network;
mod provision;
mod spec;
mod state;
mod teardown;
mod tools;

pub use config::DockerConfig;

use labels::Labels;
use teardown::Target;

pub struct DockerBackend {
    config: DockerConfig,
    labels: Labels,
    client: client::Client,
    subnets: network::SubnetPool,
    /// The subnets of instances' own networks (Podman), from the same pool.
    instance_subnets: network::SubnetPool,
    /// Serializes creating and removing the daemon network in this process: instances are
    /// provisioned in parallel, and the engine accepts two networks of one name.
    networks: tokio::sync::Mutex<()>,
}

impl DockerBackend {
    /// Whether the uids containers run as are free of host accounts (this host's
    /// `/etc/passwd`: a daemon in a container sees its own).
    fn uid_check(&self) -> DoctorCheck {
        let subject = "docker container uids";
        let Some(uids) = self.config.uids() else {
            return DoctorCheck::ok(
                subject,
                "containers run as their images' users (docker.uid_base = 0): a host account \
                 with the same uid (999 is common) can signal their processes",
            );
        };
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let clashes: Vec<&str> = passwd
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let uid: u32 = fields.nth(1)?.parse().ok()?;
                uids.contains(&uid).then_some(name)
            })
            .collect();
        let range = format!("{}..{}", uids.start, uids.end);
        if clashes.is_empty() {
            DoctorCheck::ok(
                subject,
                format!("each container runs as its own uid from {range}, no host account's"),
            )
        } else {
            DoctorCheck::missing(
                subject,
                format!("host accounts in {range}: {}", clashes.join(", ")),
                "set docker.uid_base to a range no host account uses",
            )
        }
    }
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DockerBackend {
    /// Validates the settings. Connects on first use, so an engine that is down now is retried
    /// later; `ping` tells whether it answers.
    pub fn new(config: DockerConfig) -> Result<Self, BackendError> {
        config.validate()?;
        let subnets = network::SubnetPool::parse(&config.subnet_pool, config.subnet_prefix)
            .map_err(|detail| BackendError::Unavailable {
                backend: "docker",
                detail,
            })?;
        let instance_subnets =
            network::SubnetPool::parse(&config.subnet_pool, config.instance_subnet_prefix)
                .map_err(|detail| BackendError::Unavailable {
                    backend: "docker",
                    detail,
                })?;
        Ok(Self {
            labels: Labels::new(&config.label_namespace),
            client: client::Client::new(config.socket_path()),
            subnets,
            instance_subnets,
            networks: tokio::sync::Mutex::new(()),
            config,
        })
    }

    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// `Docker Engine 20.10.24 (API 1.41)`, for doctor and logs.
    pub async fn engine_version(&self) -> Result<String, BackendError> {
        let docker = self.client.get().await?;
        let version = docker
            .version()
            .await
            .map_err(|err| client::error("asking the version of", "the engine", err))?;
        // Docker names its server component `Engine` (and its platform `Docker Engine - …`),
        // Podman `Podman Engine` (its platform is the OS, `linux/amd64/debian-12`).
        let component = version
            .components
            .as_ref()
            .and_then(|c| c.first())
            .map(|c| c.name.clone());
        let product = match component.as_deref() {
            Some(name) if name.starts_with("Podman") => name.to_owned(),
            _ => version
                .platform
                .map(|p| p.name)
                .filter(|n| !n.is_empty())
                .or_else(|| {
                    component.map(|c| {
                        if c == "Engine" {
                            "Docker Engine".to_owned()
                        } else {
                            c
                        }
                    })
                })
                .unwrap_or_else(|| "container engine".to_owned()),
        };
        Ok(format!(
            "{product} {} (API {})",
            version.version.unwrap_or_default(),
            version.api_version.unwrap_or_default()
        ))
    }

    fn target(handle: &InstanceHandle) -> (String, Option<&str>) {
        // The name is recomputed from the validated engine and owner: a handle read back from
        // a store can never point teardown at a container of another name.
        (
            instance_name(handle.engine, &handle.owner, &handle.maker),
            Some(handle.backend_id.as_str()).filter(|id| !id.is_empty()),
        )
    }
}

#[async_trait]
impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// The engines' data tmpfs (`DataSize::CONTAINER_DEFAULT`).
    fn default_size(&self) -> DataSize {
        DataSize::CONTAINER_DEFAULT
    }

    async fn ping(&self) -> Result<(), BackendError> {
        let docker = self.client.get().await?;
        docker
            .ping()
            .await
            .map(drop)
            .map_err(|err| client::unavailable(&self.config.socket, &err))
    }

    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError> {
        self.image_of(engine).await.map(drop)
    }

    async fn image_of(&self, engine: EngineRef) -> Result<Option<String>, BackendError> {
        let docker = self.client.get().await?;
        let (image, _) = images::resolve(docker, engine, &self.config.images(engine)).await?;
        Ok(Some(image))
    }

    async fn offered_version(&self, engine: EngineRef) -> Option<String> {
        let docker = self.client.get().await.ok()?;
        let (_, facts) = images::resolve(docker, engine, &self.config.images(engine))
            .await
            .ok()?;
        facts.version
    }

    async fn provider(&self, engine: EngineRef) -> Result<String, BackendError> {
        let docker = self.client.get().await?;
        let (image, facts) = images::resolve(docker, engine, &self.config.images(engine)).await?;
        Ok(format!("{image}@{}", facts.id))
    }

    async fn provider_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<String, BackendError> {
        let docker = self.client.get().await?;
        let candidates = self.config.images_for_major(engine, major);
        let (image, facts) = images::resolve(docker, engine, &candidates).await?;
        Ok(format!("{image}@{}", facts.id))
    }

    async fn image_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<Option<String>, BackendError> {
        let docker = self.client.get().await?;
        let candidates = self.config.images_for_major(engine, major);
        let (image, _) = images::resolve(docker, engine, &candidates).await?;
        Ok(Some(image))
    }

    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError> {
        self.provision_one(request, Account::Now).await
    }

    async fn dump_schema(
        &self,
        engine: EngineRef,
        major: u32,
        dsn: &secrecy::SecretString,
    ) -> Result<String, BackendError> {
        self.run_schema_dump(engine, major, dsn).await
    }

    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        self.extend_in_container(instance, files).await
    }

    async fn provision_idle(&self, request: &InstanceRequest) -> Result<IdleMember, BackendError> {
        let instance = self.provision_one(request, Account::AtHandOut).await?;
        IdleMember::hold(self, instance).await
    }

    /// Labels cannot change on a container: its name can, and `list` reads a handed-out pool
    /// member's owner from it.
    async fn record_owner(
        &self,
        instance: &Instance,
        owner: &AgentSlug,
    ) -> Result<String, BackendError> {
        let docker = self.client.get().await?;
        let name = instance_name(instance.engine, owner, &instance.maker);
        docker
            .rename_container(
                &instance.backend_id,
                RenameContainerOptions { name: name.clone() },
            )
            .await
            .map_err(|err| client::error("renaming", &instance.name, err))?;
        Ok(name)
    }

    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError> {
        let Some(network) = &self.config.network else {
            return Ok((instance.host.clone(), instance.port));
        };
        let docker = self.client.get().await?;
        let found = state::inspect(docker, &instance.backend_id).await?;
        match found.as_ref().and_then(|f| state::address_on(f, network)) {
            Some(address) => Ok((address, instance.engine.port)),
            None => Err(BackendError::Docker {
                operation: "reaching",
                name: instance.name.clone(),
                detail: format!("the container has no address on network {network:?}"),
            }),
        }
    }

    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError> {
        let docker = self.client.get().await?;
        let (name, id) = Self::target(handle);
        Ok(match state::inspect(docker, &name).await? {
            None => false,
            Some(found) => {
                let same =
                    id.is_none_or(|id| found.id.as_deref().is_some_and(|f| f.starts_with(id)));
                same && self
                    .labels
                    .is_ours(found.config.as_ref().and_then(|c| c.labels.as_ref()))
                    && state::is_live(&found)
            }
        })
    }

    #[tracing::instrument(
        name = "teardown",
        skip_all,
        fields(instance = %handle.name, engine = handle.engine.name, agent = %handle.owner, backend = "docker")
    )]
    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        let docker = self.client.get().await?;
        let (name, id) = Self::target(handle);
        teardown::remove(
            docker,
            &self.labels,
            Target { name: &name, id },
            self.config.stop_timeout,
        )
        .await?;
        Ok(())
    }

    async fn sweep(&self, maker: &DaemonId, when: Sweep) -> Result<usize, BackendError> {
        if self.config.network.is_some() {
            return Ok(0);
        }
        let docker = self.client.get().await?;
        let settle = match when {
            Sweep::Settled => self.config.network_settle,
            Sweep::Now => std::time::Duration::ZERO,
        };
        let removed = match self.client.flavor().await?.isolation() {
            client::Isolation::DaemonNetwork => usize::from(
                network::sweep(docker, &self.labels, &self.networks, maker, settle).await?,
            ),
            client::Isolation::NetworkPerInstance => {
                network::sweep_instance_networks(docker, &self.labels, maker, settle).await?
            }
        };
        Ok(removed)
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError> {
        self.list_instances().await
    }

    async fn doctor(&self) -> Vec<DoctorCheck> {
        let subject = "docker backend";
        let version = match self.engine_version().await {
            Ok(version) => version,
            Err(err) => {
                return vec![DoctorCheck::missing(
                    subject,
                    err.to_string(),
                    format!(
                        "start the Docker (or Podman) service, or point [docker] socket at its \
                         API socket (now {})",
                        self.config.socket
                    ),
                )];
            }
        };
        let mut checks = vec![DoctorCheck::ok(
            subject,
            format!("{version} at {}", self.config.socket),
        )];
        if self.config.network.is_none()
            && let Ok(flavor) = self.client.flavor().await
        {
            checks.push(DoctorCheck::ok(
                "docker tenant isolation",
                flavor.isolation().describe(),
            ));
        }
        checks.push(self.uid_check());
        if let Some(network) = &self.config.network {
            let subject = format!("docker network {network}");
            let present = match self.client.get().await {
                Ok(docker) => network::ensure_exists(docker, network).await,
                Err(err) => Err(err),
            };
            checks.push(match present {
                Ok(()) => {
                    DoctorCheck::ok(subject, "present: instances join it, nothing is published")
                }
                Err(err) => DoctorCheck::missing(subject, err.to_string(), network::fix(network)),
            });
        }
        for engine in engines::all() {
            let candidates = self.config.images(engine);
            let subject = format!("{} (docker)", engine.name);
            checks.push(match self.image_of(engine).await {
                Ok(image) => {
                    let image = image.unwrap_or_default();
                    let skipped: Vec<&str> = candidates
                        .iter()
                        .take_while(|c| **c != image)
                        .map(String::as_str)
                        .collect();
                    let detail = if skipped.is_empty() {
                        format!("runs image {image}")
                    } else {
                        format!("runs image {image} ({} not present)", skipped.join(", "))
                    };
                    DoctorCheck::ok(subject, detail)
                }
                Err(BackendError::ImageMissing { image, hint, .. }) => {
                    DoctorCheck::missing(subject, format!("no image: {image} missing"), hint)
                }
                Err(err) => DoctorCheck::missing(subject, err.to_string(), "see the message"),
            });
        }
        checks
    }

    fn feature_location(&self, engine: EngineRef) -> String {
        format!("image {}", self.config.images(engine).join(" or "))
    }
}
