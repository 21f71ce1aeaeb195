//! Provisioning one container: check the image, clear a stale same-named container, create with
//! the hardened spec, start, learn where it answers, bring it up (superuser login → handed-out
//! account → its own round trip) and activate features. On any failure after the create, the
//! container is removed before the error is returned, so nothing is left behind.

use std::collections::BTreeSet;

use bollard::Docker;
use bollard::query_parameters::CreateContainerOptions;
use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::{Credentials, EngineRef};

use super::spec::{self, Limits, PUBLISH_IP, Spec};
use super::teardown::{self, Target};
use super::{DockerBackend, client, images, network, state};
use crate::backend::{Backend, InstanceRequest};
use crate::clock::{age, now_ms};
use crate::error::BackendError;
use crate::startup::{Startup, bring_up};
use crate::wire::Reach;

/// A container just created, not yet started.
#[derive(Debug, Clone, Copy)]
struct Created<'a> {
    name: &'a str,
    id: &'a str,
    created_at_ms: i64,
}

impl DockerBackend {
    pub(super) async fn provision_one(
        &self,
        request: &InstanceRequest,
    ) -> Result<Instance, BackendError> {
        let docker = self.client.get().await?;
        let engine = request.engine;
        let image = self.config.image(engine);
        let facts = images::inspect(docker, engine, &image).await?;
        if let Some(network) = &self.config.network {
            network::ensure_exists(docker, network).await?;
        }
        let name = instance_name(engine, &request.owner);
        self.clear_stale(docker, &name).await?;

        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let recipe = engine.container(&admin, &agent);
        let created_at_ms = now_ms();
        let network = self.config.network.as_deref();
        let body = spec::create_body(&Spec {
            image: &image,
            recipe: &recipe,
            port: engine.port,
            labels: self
                .labels
                .for_instance(engine, &request.owner, created_at_ms, network),
            limits: Limits {
                memory_mb: self.config.memory_mb,
                cpus: self.config.cpus,
                pids_limit: self.config.pids_limit,
            },
            network,
            image_volumes: &facts.volumes,
        });
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..CreateContainerOptions::default()
        };
        let id = docker
            .create_container(Some(options), body)
            .await
            .map_err(|err| client::error("creating", &name, err))?
            .id;

        let started = self
            .start(
                docker,
                request,
                Created {
                    name: &name,
                    id: &id,
                    created_at_ms,
                },
                [admin, agent],
            )
            .await;
        if started.is_err() {
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
        started
    }

    /// Starts the created container and brings it up. `accounts` is `[superuser, agent]`.
    async fn start(
        &self,
        docker: &Docker,
        request: &InstanceRequest,
        created: Created<'_>,
        accounts: [Credentials; 2],
    ) -> Result<Instance, BackendError> {
        let Created {
            name,
            id,
            created_at_ms,
        } = created;
        let [admin, agent] = accounts;
        let engine = request.engine;
        docker
            .start_container(id, None)
            .await
            .map_err(|err| client::error("starting", name, err))?;
        let Reachability {
            handed: (host, port),
            dial,
        } = self.reach_of(docker, engine, name, id).await?;

        // Blanked out of any log lines quoted in errors, in case a server echoes one.
        let secrets = [admin.password.clone(), agent.password.clone()];
        let admin_access = AdminAccess::Password(admin);
        let startup = Startup {
            engine,
            name,
            reach: Reach {
                host: &dial.0,
                port: dial.1,
            },
            admin: &admin_access,
            agent: &agent,
            database: engine.agent_database,
            bootstrap: vec![],
            deadline: self.config.deadline(engine),
        };
        let still_running = || async {
            let found = state::inspect(docker, id).await?;
            match &found {
                Some(found) if state::is_running(found) => Ok(()),
                _ => Err(BackendError::ExitedEarly {
                    name: name.to_owned(),
                    detail: state::exit_detail(
                        docker,
                        id,
                        found.as_ref(),
                        &[&secrets[0], &secrets[1]],
                    )
                    .await,
                }),
            }
        };
        bring_up(startup, still_running).await?;

        let mut instance = Instance {
            engine,
            owner: request.owner.clone(),
            backend: BackendKind::Docker,
            backend_id: id.to_owned(),
            name: name.to_owned(),
            host,
            port,
            database: engine.agent_database.to_owned(),
            agent,
            admin: admin_access,
            features: BTreeSet::new(),
            created_at_ms,
        };
        self.activate(&mut instance, &request.features).await?;
        Ok(instance)
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
        if age(created) < self.config.grace && !state::has_ended(&found) {
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
