//! Provisioning one container, in the step names the process backend uses too: check the image
//! (and the configured network), `clear_stale` (a leftover same-named container) → `create` (the
//! hardened spec, fresh accounts) → `start` (and learn where it answers) → `bring_up` (the flow
//! every backend shares: superuser login, setup steps, the handed-out account's own round trip)
//! → `activate` (features). When any step after `create` fails, the container is removed
//! before the error is returned, so nothing is left behind (the daemon network stays for the
//! next provision; the janitor's sweep removes it once unused). The superuser's password, when
//! the image needs one, is written to the container's stdin as it starts
//! (`<VAR>_FILE=/dev/stdin`): it is in no config or file.

use std::collections::BTreeSet;

use bollard::Docker;
use bollard::query_parameters::{AttachContainerOptions, CreateContainerOptions};
use rand::Rng;
use sandboxd_domain::clock::{age_of, now_ms};
use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::space::memory_cap_mb;
use sandboxd_domain::{Credentials, EngineRef};
use secrecy::{ExposeSecret, SecretString};
use tokio::io::AsyncWriteExt;

use super::client::Isolation;
use super::images::ImageFacts;
use super::spec::{self, Attach, Limits, PUBLISH_IP, Spec};
use super::teardown::{self, Target};
use super::{DockerBackend, client, images, network, state};
use crate::backend::Backend;
use crate::error::BackendError;
use crate::handle::InstanceRequest;
use crate::startup::{Account, Startup, bring_up};
use crate::wire::Reach;

/// A container just created, not yet started, and the accounts its server will know.
#[derive(Debug)]
struct Created {
    name: String,
    id: String,
    created_at_ms: i64,
    admin: Credentials,
    agent: Credentials,
    /// What the entrypoint reads from stdin (`<VAR>_FILE=/dev/stdin`), written once at start.
    secret: Option<SecretString>,
}

impl DockerBackend {
    #[tracing::instrument(
        name = "provision_instance",
        skip_all,
        fields(engine = request.engine.name, agent = %request.owner, backend = "docker")
    )]
    pub(super) async fn provision_one(
        &self,
        request: &InstanceRequest,
        account: Account,
    ) -> Result<Instance, BackendError> {
        let docker = self.client.get().await?;
        let engine = request.engine;
        let candidates = match request.major {
            Some(major) => self.config.images_for_major(engine, major),
            None => self.config.images(engine),
        };
        let (image, facts) = images::resolve(docker, engine, &candidates).await?;
        if let Some(network) = &self.config.network {
            network::ensure_exists(docker, network).await?;
        }
        let name = instance_name(engine, &request.owner, &request.maker);
        self.clear_stale(docker, &name).await?;
        let created = self.create(docker, request, &name, &image, &facts).await?;
        let (name, id) = (created.name.clone(), created.id.clone());
        let outcome = self
            .provision_steps(docker, request, created, account)
            .await;
        if outcome.is_err() {
            let target = Target {
                name: &name,
                id: Some(&id),
            };
            if let Err(err) =
                teardown::remove(docker, &self.labels, target, self.config.stop_timeout).await
            {
                tracing::warn!(container = %name, error = %err, "removing a failed container");
            }
        }
        outcome
    }

    /// `start` → `bring_up` → `activate`; the caller removes the container after a failure.
    async fn provision_steps(
        &self,
        docker: &Docker,
        request: &InstanceRequest,
        created: Created,
        account: Account,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let Reachability {
            handed: (host, port),
            dial,
        } = self.start(docker, engine, &created).await?;
        let admin = AdminAccess::Password(created.admin.clone());
        self.bring_up(docker, engine, &created, &dial, &admin, account)
            .await?;
        let mut instance = Instance {
            engine,
            owner: request.owner.clone(),
            maker: request.maker.clone(),
            backend: BackendKind::Docker,
            backend_id: created.id,
            name: created.name,
            host,
            port,
            database: engine.agent_database.to_owned(),
            agent: created.agent,
            admin,
            features: BTreeSet::new(),
            created_at_ms: created.created_at_ms,
            clone: None,
            size: engine
                .data_on_disk
                .then(|| request.size.unwrap_or(self.default_size())),
        };
        self.activate(&mut instance, &request.features).await?;
        Ok(instance)
    }

    /// Creates the container from the engine's recipe with fresh accounts, hardened (`spec`),
    /// labeled so any later process finds it, on the daemon's network (created when missing).
    async fn create(
        &self,
        docker: &Docker,
        request: &InstanceRequest,
        name: &str,
        image: &str,
        facts: &ImageFacts,
    ) -> Result<Created, BackendError> {
        let engine = request.engine;
        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let size = request.size.unwrap_or(self.default_size());
        let recipe = engine.container(&admin, &agent, size);
        let created_at_ms = now_ms();
        let named = self.config.network.as_deref();
        // A uid of its own (by chance shared with 1 in `uid_count` others), owned by no host
        // account: nothing on the host can signal its processes or read its files.
        let run_as = self
            .config
            .uids()
            .map(|uids| rand::rng().random_range(uids));
        let flavor = self.client.flavor().await?;
        // A daemon network removed between our ensure and the create (by a sweep that found
        // no container of ours) is created again once.
        let mut attempts = 0;
        let id = loop {
            attempts += 1;
            let (network, own_network) = match (named, flavor.isolation()) {
                (Some(network), _) => (network.to_owned(), None),
                (None, Isolation::DaemonNetwork) => (
                    network::ensure_daemon_network(
                        docker,
                        &self.labels,
                        &self.subnets,
                        &self.networks,
                        &request.maker,
                    )
                    .await?,
                    None,
                ),
                (None, Isolation::NetworkPerInstance) => {
                    let own = network::create_instance_network(
                        docker,
                        &self.labels,
                        &self.instance_subnets,
                        &self.networks,
                        &request.maker,
                    )
                    .await?;
                    (own.clone(), Some(own))
                }
            };
            let attach = match named {
                Some(_) => Attach::Named(&network),
                None => Attach::Private(&network),
            };
            let body = spec::create_body(&Spec {
                image,
                recipe: &recipe,
                port: engine.port,
                labels: self.labels.for_instance(
                    engine,
                    &request.owner,
                    &request.maker,
                    created_at_ms,
                    named,
                    own_network.as_deref(),
                ),
                limits: Limits {
                    memory_mb: memory_cap_mb(self.config.memory_mb, self.default_size(), size),
                    cpus: self.config.cpus,
                    pids_limit: self.config.pids_limit,
                    nofile: self.config.nofile_limit,
                    nproc: self.config.nproc_limit,
                },
                network: attach,
                image_volumes: &facts.volumes,
                run_as,
                flavor,
            });
            let options = CreateContainerOptions {
                name: Some(name.to_owned()),
                ..CreateContainerOptions::default()
            };
            let created = docker.create_container(Some(options), body).await;
            if created.is_err()
                && let Some(own) = &own_network
            {
                network::remove_instance_network(docker, own).await;
            }
            match created {
                Ok(response) => break response.id,
                Err(err) if client::is_not_found(&err) && named.is_none() && attempts < 2 => {
                    tracing::debug!(container = name, "the daemon network went away; again");
                }
                Err(err) => return Err(client::error("creating", name, err)),
            }
        };
        Ok(Created {
            name: name.to_owned(),
            id,
            created_at_ms,
            admin,
            agent,
            secret: recipe.secret.map(|s| s.value),
        })
    }

    /// Starts the created container and learns where it answers.
    async fn start(
        &self,
        docker: &Docker,
        engine: EngineRef,
        created: &Created,
    ) -> Result<Reachability, BackendError> {
        // Attach before starting, so the entrypoint's first read of stdin gets the secret.
        let stdin = match &created.secret {
            Some(_) => Some(
                docker
                    .attach_container(
                        &created.id,
                        Some(AttachContainerOptions {
                            stdin: true,
                            stream: true,
                            ..AttachContainerOptions::default()
                        }),
                    )
                    .await
                    .map_err(|err| client::error("attaching to", &created.name, err))?,
            ),
            None => None,
        };
        docker
            .start_container(&created.id, None)
            .await
            .map_err(|err| with_rlimit_fix(client::error("starting", &created.name, err)))?;
        if let (Some(mut attached), Some(secret)) = (stdin, &created.secret) {
            let written = async {
                attached
                    .input
                    .write_all(secret.expose_secret().as_bytes())
                    .await?;
                attached.input.flush().await?;
                attached.input.shutdown().await
            }
            .await;
            // Dropping the attachment ends it; `stdin_once` then closes the container's stdin,
            // so the entrypoint reads end of file after the secret.
            drop(attached);
            written.map_err(|err| BackendError::Docker {
                operation: "handing the superuser's password to",
                name: created.name.clone(),
                detail: format!("writing to its stdin failed: {err}"),
            })?;
        }
        self.reach_of(docker, engine, &created.name, &created.id)
            .await
    }

    /// The shared startup flow, asking after every failed attempt whether the container still
    /// runs so a dead one is reported with its log at once.
    async fn bring_up(
        &self,
        docker: &Docker,
        engine: EngineRef,
        created: &Created,
        dial: &(String, u16),
        admin: &AdminAccess,
        account: Account,
    ) -> Result<(), BackendError> {
        let (name, id) = (created.name.as_str(), created.id.as_str());
        // Blanked out of any log lines quoted in errors, in case a server echoes one.
        let secrets = [&created.admin.password, &created.agent.password];
        let startup = Startup {
            engine,
            name,
            reach: Reach {
                host: &dial.0,
                port: dial.1,
            },
            admin,
            agent: &created.agent,
            database: engine.agent_database,
            bootstrap: vec![],
            account,
            deadline: self.config.deadline(engine),
        };
        let still_running = || async {
            let found = state::inspect(docker, id).await?;
            match &found {
                Some(found) if state::is_running(found) => Ok(()),
                _ => Err(BackendError::ExitedEarly {
                    name: name.to_owned(),
                    detail: state::exit_detail(docker, id, found.as_ref(), &secrets).await,
                }),
            }
        };
        bring_up(startup, still_running).await.map(drop)
    }

    /// Where the server answers: the published loopback port, or, on the configured network,
    /// the container's name for agents and its address there for sandboxd.
    async fn reach_of(
        &self,
        docker: &Docker,
        engine: EngineRef,
        name: &str,
        id: &str,
    ) -> Result<Reachability, BackendError> {
        let found = state::inspect(docker, id).await?;
        let reachable = match &self.config.network {
            Some(network) => found
                .as_ref()
                .and_then(|f| state::address_on(f, network))
                .map(|address| Reachability {
                    handed: (name.to_owned(), engine.port),
                    dial: (address, engine.port),
                }),
            None => found
                .as_ref()
                .and_then(|f| f.network_settings.as_ref())
                .and_then(|n| n.ports.as_ref())
                .and_then(|ports| ports.get(&spec::port_key(engine.port)))
                .and_then(|bindings| bindings.as_ref())
                .and_then(|bindings| {
                    bindings
                        .iter()
                        .filter(|b| b.host_ip.as_deref() == Some(PUBLISH_IP))
                        .find_map(|b| b.host_port.as_deref()?.parse::<u16>().ok())
                })
                .map(|port| {
                    let published = (PUBLISH_IP.to_owned(), port);
                    Reachability {
                        handed: published.clone(),
                        dial: published,
                    }
                }),
        };
        if let Some(reachable) = reachable {
            return Ok(reachable);
        }
        let detail = match (found.as_ref(), &self.config.network) {
            (Some(found), _) if !state::is_running(found) => {
                state::exit_detail(docker, id, Some(found), &[]).await
            }
            (_, Some(network)) => format!("the container has no address on network {network:?}"),
            (_, None) => format!(
                "the engine published no port for {} on {PUBLISH_IP}",
                spec::port_key(engine.port)
            ),
        };
        Err(BackendError::ExitedEarly {
            name: name.to_owned(),
            detail,
        })
    }

    /// Removes a leftover same-named container (a teardown a crash missed), unless it is
    /// younger than the grace window and has not ended: then another provision may own it.
    async fn clear_stale(&self, docker: &Docker, name: &str) -> Result<(), BackendError> {
        let Some(found) = state::inspect(docker, name).await? else {
            return Ok(());
        };
        let labels = found.config.as_ref().and_then(|c| c.labels.as_ref());
        if !self.labels.is_ours(labels) {
            return Err(BackendError::Docker {
                operation: "creating",
                name: name.to_owned(),
                detail: format!(
                    "a container with this name exists without the {} label, so sandboxd did \
                     not create it; remove or rename it",
                    self.labels.marker()
                ),
            });
        }
        // A missing `created` label counts as old.
        let created = self
            .labels
            .parse(labels)
            .map(|p| p.created_at_ms)
            .unwrap_or(0);
        if age_of(created) < self.config.grace && !state::has_ended(&found) {
            return Err(BackendError::YoungConflict {
                name: name.to_owned(),
                grace: self.config.grace,
            });
        }
        tracing::info!(container = name, "clearing a stale container");
        teardown::remove_found(docker, &self.labels, name, &found, self.config.stop_timeout).await
    }
}

/// Where agents reach an instance (`handed`, in its evidence) and where sandboxd dials it.
struct Reachability {
    handed: (String, u16),
    dial: (String, u16),
}

/// runc's words when the engine cannot give the container its rlimits (the engine's own hard
/// limit is lower than what it asked for), with the setting that fixes it.
fn with_rlimit_fix(err: BackendError) -> BackendError {
    match err {
        BackendError::Docker {
            operation,
            name,
            detail,
        } if detail.contains("setting rlimit") => BackendError::Docker {
            operation,
            name,
            detail: format!(
                "{detail}; the engine may not raise open-file or process limits this high: \
                 lower [docker] nofile_limit / nproc_limit below the engine's hard limits \
                 (`ulimit -Hn`, `ulimit -Hu` of its service)"
            ),
        },
        other => other,
    }
}
