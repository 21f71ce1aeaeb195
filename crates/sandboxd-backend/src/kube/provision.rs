//! Provisioning one Pod, in the step names every backend uses: the image (one some node holds),
//! `clear_stale` (a leftover same-named instance) → `create` (the owner object first, then the
//! Secret, NetworkPolicy, Service and Pod it owns, with fresh accounts) → `start` (wait for the
//! Pod to run and learn its address) → `bring_up` (the flow every backend shares) → `activate`.
//! When any step after the owner object fails, every object of the instance is removed before
//! the error is returned, so nothing is left behind.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;
use rand::Rng;
use sandboxd_domain::clock::{age_of, now_ms};
use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::space::memory_cap_mb;
use sandboxd_domain::{AgentSlug, Credentials, EngineRef};
use tokio::time::Instant;

use super::spec::{self, Admitted, PodInput};
use super::{KubeBackend, client, state};
use crate::backend::Backend;
use crate::error::BackendError;
use crate::handle::InstanceRequest;
use crate::startup::{Account, Startup, bring_up};
use crate::wire::Reach;

/// How often a starting Pod is looked at.
const POLL: Duration = Duration::from_millis(100);

/// The objects of one instance, created; the Pod not yet running.
struct Created {
    name: String,
    pod_uid: String,
    created_at_ms: i64,
    admin: Credentials,
    agent: Credentials,
}

impl KubeBackend {
    pub(super) fn admitted<'a>(&'a self, owner: &'a AgentSlug) -> Admitted<'a> {
        Admitted {
            agent_label: &self.config.agent_label,
            agent_namespace_label: &self.config.agent_namespace_label,
            owner,
            daemon_pod_labels: &self.config.daemon_pod_labels,
            daemon_cidrs: &self.config.daemon_cidrs,
        }
    }

    /// Where agents reach the instance: its Service's name, or the Pod's address.
    pub(super) fn handed_host(&self, name: &str, pod_ip: &str) -> String {
        if self.config.service {
            format!("{name}.{}.svc", self.config.namespace)
        } else {
            pod_ip.to_owned()
        }
    }

    #[tracing::instrument(
        name = "provision_instance",
        skip_all,
        fields(engine = request.engine.name, agent = %request.owner, backend = "kubernetes")
    )]
    pub(super) async fn provision_one(
        &self,
        request: &InstanceRequest,
        account: Account,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        self.client.for_provisioning().await?;
        let image = self.resolve_image(engine, request.major).await?;
        let name = instance_name(engine, &request.owner, &request.maker);
        self.clear_stale(&name).await?;
        let created = match self.create(request, &name, &image).await {
            Ok(created) => created,
            Err(err) => {
                self.remove_quietly(&name, request).await;
                return Err(err);
            }
        };
        let outcome = self.provision_steps(request, &created, account).await;
        if outcome.is_err() {
            self.remove_quietly(&name, request).await;
        }
        outcome
    }

    async fn remove_quietly(&self, name: &str, request: &InstanceRequest) {
        if let Err(err) = self.remove(name, &request.maker).await {
            tracing::warn!(pod = %name, error = %err, "removing a failed instance");
        }
    }

    /// `start` → `bring_up` → `activate`; the caller removes the objects after a failure.
    async fn provision_steps(
        &self,
        request: &InstanceRequest,
        created: &Created,
        account: Account,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let pod_ip = self.start(&created.name).await?;
        let admin = AdminAccess::Password(created.admin.clone());
        self.bring_up(engine, created, &pod_ip, &admin, account)
            .await?;
        let mut instance = Instance {
            engine,
            owner: request.owner.clone(),
            maker: request.maker.clone(),
            backend: BackendKind::Kubernetes,
            backend_id: created.pod_uid.clone(),
            name: created.name.clone(),
            host: self.handed_host(&created.name, &pod_ip),
            port: engine.port,
            database: engine.agent_database.to_owned(),
            agent: created.agent.clone(),
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

    /// The owner object, then everything it owns: the Secret, the NetworkPolicy, the Service
    /// (when agents get names) and the Pod.
    async fn create(
        &self,
        request: &InstanceRequest,
        name: &str,
        image: &str,
    ) -> Result<Created, BackendError> {
        let engine = request.engine;
        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let size = request.size.unwrap_or(self.default_size());
        let recipe = engine.container(&admin, &agent, size);
        let created_at_ms = now_ms();
        let labels =
            self.labels
                .for_instance(name, engine, &request.owner, &request.maker, created_at_ms);
        let run_as = rand::rng().random_range(self.config.uids());
        let post = PostParams::default();
        let creating = |kind: &'static str| {
            move |err: kube::Error| {
                if client::is_conflict(&err) {
                    BackendError::YoungConflict {
                        name: name.to_owned(),
                        grace: self.config.grace,
                    }
                } else {
                    client::error(kind, name, err)
                }
            }
        };
        let owners: Api<ConfigMap> = self.api().await?;
        let owner = owners
            .create(&post, &spec::owner_object(name, &labels))
            .await
            .map_err(creating("creating the owner object of"))?;
        let owner_uid = owner.metadata.uid.unwrap_or_default();
        let owner = spec::owner_reference(name, &owner_uid);
        if let Some(secret) = &recipe.secret {
            let secrets: Api<Secret> = self.api().await?;
            secrets
                .create(&post, &spec::secret(name, &labels, &owner, &secret.value))
                .await
                .map_err(creating("creating the Secret of"))?;
        }
        let policies: Api<NetworkPolicy> = self.api().await?;
        policies
            .create(
                &post,
                &spec::network_policy(
                    name,
                    &labels,
                    self.labels.instance(name),
                    &owner,
                    engine.port,
                    &self.admitted(&request.owner),
                ),
            )
            .await
            .map_err(creating("creating the NetworkPolicy of"))?;
        if self.config.service {
            let services: Api<Service> = self.api().await?;
            services
                .create(
                    &post,
                    &spec::service(
                        name,
                        &labels,
                        self.labels.instance(name),
                        &owner,
                        engine.port,
                    ),
                )
                .await
                .map_err(creating("creating the Service of"))?;
        }
        let pods: Api<Pod> = self.api().await?;
        let pod = pods
            .create(
                &post,
                &spec::pod(&PodInput {
                    name,
                    image,
                    recipe: &recipe,
                    port: engine.port,
                    labels: &labels,
                    owner: &owner,
                    run_as,
                    memory_mb: memory_cap_mb(self.config.memory_mb, self.default_size(), size),
                    cpus: self.config.cpus,
                    cpu_request: self.config.cpu_request,
                    pull_policy: &self.config.image_pull_policy,
                }),
            )
            .await
            .map_err(creating("creating the Pod"))?;
        Ok(Created {
            name: name.to_owned(),
            pod_uid: pod.metadata.uid.unwrap_or_default(),
            created_at_ms,
            admin,
            agent,
        })
    }

    /// Waits until the Pod runs its server and has an address; fails at once when it cannot
    /// start (an image never pulled, a config error, the server exited), or past
    /// `start_timeout` (not scheduled, say).
    async fn start(&self, name: &str) -> Result<String, BackendError> {
        let pods: Api<Pod> = self.api().await?;
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let pod = pods
                .get_opt(name)
                .await
                .map_err(|err| client::error("reading", name, err))?;
            let Some(pod) = pod else {
                return Err(BackendError::ExitedEarly {
                    name: name.to_owned(),
                    detail: "the Pod was deleted while it started".to_owned(),
                });
            };
            if let Some(why) = state::failed(&pod) {
                return Err(BackendError::ExitedEarly {
                    name: name.to_owned(),
                    detail: why,
                });
            }
            if state::is_live(&pod)
                && let Some(ip) = state::pod_ip(&pod)
            {
                return Ok(ip);
            }
            if Instant::now() >= deadline {
                return Err(BackendError::ReadinessTimeout {
                    name: name.to_owned(),
                    deadline: self.config.start_timeout,
                    last_error: format!(
                        "the Pod is still {}{}",
                        state::phase(&pod),
                        state::why_waiting(&pod)
                            .map(|why| format!(": {why}"))
                            .unwrap_or_else(|| " (not scheduled or not started)".to_owned())
                    ),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The shared startup flow, asking after every failed attempt whether the Pod still runs
    /// its server, so a dead one is reported at once.
    async fn bring_up(
        &self,
        engine: EngineRef,
        created: &Created,
        pod_ip: &str,
        admin: &AdminAccess,
        account: Account,
    ) -> Result<(), BackendError> {
        let name = created.name.as_str();
        let startup = Startup {
            engine,
            name,
            reach: Reach {
                host: pod_ip,
                port: engine.port,
            },
            admin,
            agent: &created.agent,
            database: engine.agent_database,
            bootstrap: vec![],
            account,
            deadline: self.config.deadline(engine),
        };
        let pods: Api<Pod> = self.api().await?;
        let still_running = || {
            let pods = pods.clone();
            async move {
                let pod = pods
                    .get_opt(name)
                    .await
                    .map_err(|err| client::error("reading", name, err))?;
                match pod.as_ref().and_then(state::failed) {
                    Some(why) => Err(BackendError::ExitedEarly {
                        name: name.to_owned(),
                        detail: why,
                    }),
                    None if pod.is_none() => Err(BackendError::ExitedEarly {
                        name: name.to_owned(),
                        detail: "the Pod was deleted while it started".to_owned(),
                    }),
                    None => Ok(()),
                }
            }
        };
        bring_up(startup, still_running).await.map(drop)
    }

    /// Removes a leftover same-named instance (a teardown a crash missed), unless its Pod is
    /// younger than the grace window and has not ended: then another provision may own it.
    async fn clear_stale(&self, name: &str) -> Result<(), BackendError> {
        let owners: Api<ConfigMap> = self.api().await?;
        let pods: Api<Pod> = self.api().await?;
        let (owner, pod) = tokio::join!(owners.get_opt(name), pods.get_opt(name));
        let owner = owner.map_err(|err| client::error("reading", name, err))?;
        let pod = pod.map_err(|err| client::error("reading", name, err))?;
        if owner.is_none() && pod.is_none() {
            return Ok(());
        }
        let labels = owner
            .as_ref()
            .and_then(|o| o.metadata.labels.as_ref())
            .or(pod.as_ref().and_then(|p| p.metadata.labels.as_ref()));
        let Some(parsed) = self.labels.parse(labels) else {
            return Err(BackendError::Kubernetes {
                operation: "creating",
                name: name.to_owned(),
                detail: format!(
                    "an object with this name exists without the {} label, so sandboxd did not \
                     create it; remove or rename it",
                    self.labels.selector()
                ),
            });
        };
        let ended = pod.as_ref().is_none_or(|p| state::failed(p).is_some());
        if age_of(parsed.created_at_ms) < self.config.grace && !ended {
            return Err(BackendError::YoungConflict {
                name: name.to_owned(),
                grace: self.config.grace,
            });
        }
        tracing::info!(pod = name, "clearing a stale instance");
        self.remove(name, &parsed.maker).await?;
        // The name is free once the objects are gone from the API.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (owner, pod) = tokio::join!(owners.get_opt(name), pods.get_opt(name));
            if matches!((owner, pod), (Ok(None), Ok(None))) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BackendError::Kubernetes {
                    operation: "clearing",
                    name: name.to_owned(),
                    detail: "the stale objects were still there after 30 s".to_owned(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
