//! Sandboxes: the whole opted-in set of instances of one agent. Provisioned whole on the first
//! request, answered from the (persisted) cache afterwards once every member is re-verified
//! live, evicted and re-provisioned with new credentials when a member died, released when the
//! agent's engagement ends.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use sandboxd_backend::clone::{Fidelity, provision_clone};
use sandboxd_backend::{BackendError, InstanceHandle, InstanceRequest};
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::RequestSandboxArgs;
use sandboxd_domain::{Actor, Agent};
use sandboxd_domain::{AgentSlug, DataSize, EngineRef, FeatureRequest, Instance, ProjectSizes};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::envelopes::internal;
use crate::guards::Granted;
use crate::pools::Taken;

/// Whether a provision first removes what a crash left of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftovers {
    /// Nothing is stored for the agent: instances of it that a backend lists are leftovers.
    Clear,
    /// The agent has a live sandbox (completed in place): its instances are not leftovers.
    Keep,
}

/// The snapshot each cloned engine of a sandbox is made from.
pub(crate) type Clones = [(EngineRef, Arc<Snapshot>)];

fn clone_of(clones: &Clones, engine: EngineRef) -> Option<&Arc<Snapshot>> {
    clones.iter().find(|(e, _)| *e == engine).map(|(_, s)| s)
}

/// Whether a cached member is what the project asks for now: a clone of the same source when
/// it must be one, an ordinary instance when not.
fn clone_matches(instance: &Instance, clones: &Clones) -> bool {
    match (clone_of(clones, instance.engine), &instance.clone) {
        (None, None) => true,
        (Some(snapshot), Some(origin)) => origin.source == snapshot.source,
        _ => false,
    }
}

/// One instance of a provision, and where it came from.
struct Made {
    instance: Instance,
    took: std::time::Duration,
    pooled: bool,
}

/// How `ensure_sandbox` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cache {
    Hit,
    Miss,
}

/// Why `ensure_sandbox` failed.
#[derive(Debug)]
pub(crate) enum SandboxFailure {
    Backend(BackendError),
    Store(sandboxd_store::StoreError),
    /// The agent's turn could not be had (another replica held it too long, or the store
    /// failed); nothing was done.
    Turn(crate::BrokerError),
    /// Completing a live sandbox in place (an engine the project added, a feature asked for
    /// now) failed; what it had added was removed and the sandbox, its data and its
    /// credentials were kept as they were.
    Kept(Box<SandboxFailure>),
}

impl std::fmt::Display for SandboxFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Backend(err) => write!(f, "{err}"),
            Self::Store(err) => write!(f, "{err}"),
            Self::Turn(err) => write!(f, "{err}"),
            Self::Kept(err) => write!(f, "{err}"),
        }
    }
}

impl From<SandboxFailure> for crate::BrokerError {
    fn from(failure: SandboxFailure) -> Self {
        match failure {
            SandboxFailure::Backend(err) => Self::Backend(err),
            SandboxFailure::Store(err) => Self::Store(err),
            SandboxFailure::Turn(err) => err,
            SandboxFailure::Kept(inner) => Self::from(*inner),
        }
    }
}

impl SandboxFailure {
    fn feature_unavailable(&self) -> bool {
        match self {
            Self::Backend(err) => matches!(err, BackendError::FeatureUnavailable { .. }),
            Self::Store(_) | Self::Turn(_) => false,
            Self::Kept(inner) => inner.feature_unavailable(),
        }
    }

    /// The agent's answer: what failed, what became of its sandbox, and how to go on.
    fn envelope(&self) -> ErrorEnvelope {
        let retryable = !self.feature_unavailable();
        let (message, outcome) = match self {
            Self::Kept(_) => (
                format!("your sandbox could not be completed in place: {self}"),
                "your sandbox, its data and its credentials were kept as they were",
            ),
            _ => (
                format!("the sandbox could not be provisioned: {self}"),
                "nothing was left behind",
            ),
        };
        let remediate = if retryable {
            format!("retry request_sandbox in a little while; {outcome}")
        } else {
            format!(
                "if you asked for the unavailable feature, call request_sandbox again without \
                 it; if it is one of your project's standing features, an operator must provide \
                 it or remove it from the project; {outcome}"
            )
        };
        ErrorEnvelope::new(ErrorCode::InvalidState, message, remediate).retryable(retryable)
    }
}

impl Broker {
    /// `request_sandbox`: the guard chain, then the sandbox, answered filtered to what was
    /// asked.
    pub(crate) async fn request_sandbox(
        &self,
        agent: &Agent,
        args: RequestSandboxArgs,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        let granted = self
            .check_guards(agent, &args)
            .await
            .inspect_err(|refusal| {
                self.inner.metrics.failed(refusal.error);
            })?;
        let clones = self
            .clone_snapshots(&granted)
            .await
            .inspect_err(|refusal| {
                self.inner.metrics.failed(refusal.error);
            })?;
        let (instances, cache) = self
            .ensure_sandbox(
                &agent.slug,
                &granted.services,
                &granted.features,
                &clones,
                &granted.sizes,
            )
            .await
            .map_err(|failure| {
                self.inner.metrics.failed(ErrorCode::InvalidState);
                tracing::warn!(agent = %agent.slug, error = %failure, "provisioning failed");
                failure.envelope()
            })?;
        self.inner.metrics.cache(cache == Cache::Hit);
        let prefix = &self.inner.config.env_prefix;
        let evidence: Vec<serde_json::Value> = instances
            .iter()
            .filter(|i| granted.asked.contains(&i.engine))
            .map(|i| {
                serde_json::to_value(i.evidence(prefix))
                    .expect("evidence is plain strings and numbers")
            })
            .collect();
        let served: Vec<&str> = granted.asked.iter().map(|e| e.name).collect();
        let mut briefing = format!(
            "Sandbox for task {}: {}. Export each service's env (or use its url) in your test \
             run; these credentials are yours alone and stay the same on every request_sandbox \
             call until the sandbox is released.",
            granted.task.id,
            served.join(", ")
        );
        for instance in instances
            .iter()
            .filter(|i| granted.asked.contains(&i.engine))
        {
            if let Some(origin) = &instance.clone {
                briefing.push(' ');
                briefing.push_str(&origin.briefing(instance.engine.name));
            }
        }
        let ok = OkEnvelope::new(
            Some(granted.task.id.clone()),
            self.after_the_sandbox(agent),
            briefing,
        )
        .with_evidence(serde_json::Value::Array(evidence));
        let detail = format!(
            "{} {}",
            if cache == Cache::Hit {
                "cache hit"
            } else {
                "provisioned"
            },
            served.join(",")
        );
        Ok((ok, detail))
    }

    /// `request_sandbox`'s `next`: the verb that ends the caller's work, of its own role.
    fn after_the_sandbox(&self, agent: &Agent) -> &'static str {
        let allows = |verb| {
            self.manifest(&agent.role)
                .is_some_and(|role| role.allows(verb))
        };
        if allows(Verb::IAmDone) {
            "run your tests against the sandbox; call i_am_done when your work is finished"
        } else if allows(Verb::PassReview) {
            "run your tests against the sandbox; then call pass_review or fail_review"
        } else {
            "run your tests against the sandbox; call release_sandbox when you no longer need it"
        }
    }

    /// The latest snapshot of each source the granted services are clones of; a source without
    /// one refuses the request (retryable: a snapshot may be under way).
    async fn clone_snapshots(
        &self,
        granted: &Granted,
    ) -> Result<Vec<(EngineRef, Arc<Snapshot>)>, ErrorEnvelope> {
        let mut clones = Vec::new();
        for (engine, source) in &granted.clones {
            if !granted.services.contains(engine) {
                continue;
            }
            let snapshot = self
                .store()
                .latest_snapshot(source)
                .await
                .map_err(|e| internal("reading the clone's snapshot", &e))?;
            let Some(snapshot) = snapshot else {
                return Err(ErrorEnvelope::new(
                    ErrorCode::ProvisionerUnavailable,
                    format!("{engine} is a clone of source {source}, which has no snapshot yet"),
                    format!(
                        "retry later; an operator takes one with `sandboxd sources snapshot \
                         {source}`"
                    ),
                ));
            };
            clones.push((*engine, Arc::new(snapshot)));
        }
        Ok(clones)
    }

    /// The agent's whole sandbox, ready: from the cache when every member is live (and is a
    /// clone exactly where the project asks for one, of the size it asks for), else freshly
    /// provisioned. Serialized per agent.
    pub(crate) async fn ensure_sandbox(
        &self,
        agent: &AgentSlug,
        services: &[EngineRef],
        features: &FeatureRequest,
        clones: &Clones,
        sizes: &ProjectSizes,
    ) -> Result<(Vec<Instance>, Cache), SandboxFailure> {
        let _turn = self.turn(agent).await.map_err(SandboxFailure::Turn)?;
        let store = self.store();
        let mut cached = store
            .instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        let unchanged = cached
            .iter()
            .all(|i| clone_matches(i, clones) && self.size_matches(i, sizes));
        if !cached.is_empty() {
            if unchanged && self.all_live(&cached).await {
                let added = self
                    .complete_in_place(agent, &mut cached, services, features, clones, sizes)
                    .await
                    .map_err(|failure| SandboxFailure::Kept(Box::new(failure)))?;
                if let Some(added) = added {
                    if let Err(err) = store.put_instances(agent, &cached).await {
                        // What is stored still describes the sandbox as it was: take away
                        // what was added, so no instance is left that nothing tracks.
                        self.teardown_instances(&added).await;
                        tracing::warn!(%agent, error = %err, "recording a completed sandbox failed; kept it as it was");
                        return Err(SandboxFailure::Kept(Box::new(SandboxFailure::Store(err))));
                    }
                    self.refresh_live_gauge().await;
                } else if let Err(err) = store.touch_instances_of(agent).await {
                    // Only the idle clock is stale: the sandbox itself is fine to hand out.
                    tracing::warn!(%agent, error = %err, "recording the sandbox's use failed");
                }
                return Ok((cached, Cache::Hit));
            }
            if unchanged {
                tracing::info!(%agent, "a sandbox member died: evicting the whole sandbox");
            } else {
                tracing::info!(%agent, "the project's clones or sizes changed: replacing the whole sandbox");
            }
            self.teardown_instances(&cached).await;
            store
                .delete_instances_of(agent)
                .await
                .map_err(SandboxFailure::Store)?;
        }
        let instances = self
            .provision(agent, services, features, clones, sizes, Leftovers::Clear)
            .await?;
        if let Err(err) = store.put_instances(agent, &instances).await {
            self.teardown_instances(&instances).await;
            return Err(SandboxFailure::Store(err));
        }
        self.refresh_live_gauge().await;
        Ok((instances, Cache::Miss))
    }

    /// Provisions engines for `agent` on the primary backend, all or nothing: each from its
    /// warm pool when one matches (a pool member has its backend's default size), else cold. With `Leftovers::Clear` (nothing is stored for
    /// the agent) what a crash left of the agent goes first — unless every engine comes from a
    /// pool: a member keeps its own name (or takes the agent's by a rename that fails on a
    /// leftover, which then falls back to a cold provision), and the janitor reaps such orphans
    /// on its next tick, so a warm hand-out does not wait for a listing of every backend.
    #[tracing::instrument(name = "provision", skip_all, fields(agent = %agent, engines = ?engines))]
    async fn provision(
        &self,
        agent: &AgentSlug,
        engines: &[EngineRef],
        features: &FeatureRequest,
        clones: &Clones,
        sizes: &ProjectSizes,
        leftovers: Leftovers,
    ) -> Result<Vec<Instance>, SandboxFailure> {
        let backend = self.inner.backends.primary();
        let started = Instant::now();
        let taken: Vec<(EngineRef, BTreeSet<sandboxd_domain::Feature>, Option<Taken>)> =
            join_all(engines.iter().map(|engine| async move {
                let wanted = features.for_engine(*engine);
                // A clone comes only from a pool of clones of its source's very snapshot.
                let taken = if self.pool_fits(sizes, *engine) {
                    self.inner
                        .pools
                        .take(
                            *engine,
                            &wanted,
                            clone_of(clones, *engine),
                            &self.inner.metrics,
                        )
                        .await
                } else {
                    None
                };
                (*engine, wanted, taken)
            }))
            .await;
        if leftovers == Leftovers::Clear && taken.iter().any(|(_, _, t)| t.is_none()) {
            self.clear_orphans_of(agent).await;
        }
        let outcomes = join_all(taken.into_iter().map(|(engine, wanted, taken)| {
            let snapshot = clone_of(clones, engine).map(Arc::as_ref);
            let size = Self::wanted_size(sizes, engine);
            self.provision_one(agent, engine, wanted, taken, snapshot, size)
        }))
        .await;
        let mut made = Vec::with_capacity(outcomes.len());
        let mut first_error = None;
        for outcome in outcomes {
            match outcome {
                Ok(one) => made.push(one),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        let outcome = match first_error {
            None => Ok(made),
            Some(err) => {
                let instances: Vec<Instance> = made.into_iter().map(|m| m.instance).collect();
                self.teardown_instances(&instances).await;
                Err(err)
            }
        };
        let pooled = outcome
            .as_ref()
            .map(|made| made.iter().filter(|m| m.pooled).count())
            .unwrap_or(0);
        self.audit(AuditRecord {
            actor: Actor::Daemon,
            action: AuditAction::Provision,
            subject: agent.as_str(),
            project: None,
            outcome: Outcome::of(&outcome, ErrorCode::InvalidState),
            started,
            detail: format!(
                "{} on {}{}{}",
                engines.iter().map(|e| e.name).collect::<Vec<_>>().join(","),
                backend.kind(),
                if pooled > 0 {
                    format!(" ({pooled} from the warm pool)")
                } else {
                    String::new()
                },
                match &outcome {
                    Ok(_) => String::new(),
                    Err(err) => format!(": {err}"),
                }
            ),
        })
        .await;
        let made = outcome.map_err(SandboxFailure::Backend)?;
        for one in &made {
            if !one.pooled {
                self.inner
                    .metrics
                    .provisioned(one.instance.engine, one.instance.backend, one.took);
            }
        }
        Ok(made.into_iter().map(|m| m.instance).collect())
    }

    /// One engine's instance for `agent`: a warm-pool member handed out (its missing features
    /// activated after), or, when no pool matches, it is empty or the hand-out failed, a cold
    /// provision. On failure nothing of it is left.
    async fn provision_one(
        &self,
        agent: &AgentSlug,
        engine: EngineRef,
        features: BTreeSet<sandboxd_domain::Feature>,
        taken: Option<Taken>,
        snapshot: Option<&Snapshot>,
        size: Option<DataSize>,
    ) -> Result<Made, BackendError> {
        let backend = self.inner.backends.primary();
        let metrics = &self.inner.metrics;
        let began = Instant::now();
        if let Some(taken) = taken {
            match self.inner.pools.hand_out(taken, agent, metrics).await {
                Ok(mut instance) => {
                    if let Some(snapshot) = snapshot {
                        metrics.cloned(&snapshot.source);
                    }
                    if let Err(err) = backend.activate(&mut instance, &features).await {
                        self.teardown_instances(std::slice::from_ref(&instance))
                            .await;
                        return Err(err);
                    }
                    return Ok(Made {
                        instance,
                        took: began.elapsed(),
                        pooled: true,
                    });
                }
                Err(err) => {
                    tracing::warn!(%agent, engine = engine.name, error = %err, "a pool member failed its hand-out; provisioning cold");
                }
            }
        }
        let request = InstanceRequest {
            major: None,
            engine,
            owner: agent.clone(),
            maker: self.inner.daemon.clone(),
            features,
            size,
        };
        let instance = match snapshot {
            Some(snapshot) => {
                let (instance, report) =
                    provision_clone(backend.as_ref(), &request, snapshot, Fidelity::FULL).await?;
                tracing::info!(%agent, source = %snapshot.source, restored = report.statistics_restored,
                    padded_files = report.padded_files, took_ms = report.took.as_millis() as u64,
                    "made a clone");
                metrics.cloned(&snapshot.source);
                instance
            }
            None => backend.provision(&request).await?,
        };
        Ok(Made {
            instance,
            took: began.elapsed(),
            pooled: false,
        })
    }

    /// Brings a live cached sandbox up to what is asked now: engines the project added since,
    /// features not yet active. None when nothing had to change; else the members it added,
    /// which the caller removes again if it cannot record the result. All or nothing: when a
    /// step fails, the members it added are torn down before the error is returned.
    async fn complete_in_place(
        &self,
        agent: &AgentSlug,
        cached: &mut Vec<Instance>,
        services: &[EngineRef],
        features: &FeatureRequest,
        clones: &Clones,
        sizes: &ProjectSizes,
    ) -> Result<Option<Vec<Instance>>, SandboxFailure> {
        let present: BTreeSet<EngineRef> = cached.iter().map(|i| i.engine).collect();
        let missing: Vec<EngineRef> = services
            .iter()
            .copied()
            .filter(|e| !present.contains(e))
            .collect();
        let added = if missing.is_empty() {
            Vec::new()
        } else {
            self.provision(agent, &missing, features, clones, sizes, Leftovers::Keep)
                .await?
        };
        let mut activated = false;
        for instance in cached.iter_mut() {
            let wanted = features.for_engine(instance.engine);
            if wanted.is_subset(&instance.features) {
                continue;
            }
            if let Err(err) = self.activate_in_place(instance, &wanted).await {
                self.teardown_instances(&added).await;
                return Err(err);
            }
            activated = true;
        }
        if added.is_empty() && !activated {
            return Ok(None);
        }
        cached.extend(added.iter().cloned());
        Ok(Some(added))
    }

    async fn activate_in_place(
        &self,
        instance: &mut Instance,
        wanted: &BTreeSet<sandboxd_domain::Feature>,
    ) -> Result<(), SandboxFailure> {
        let backend = self
            .inner
            .backends
            .for_kind(instance.backend)
            .ok_or_else(|| {
                SandboxFailure::Backend(BackendError::Unavailable {
                    backend: instance.backend.as_str(),
                    detail: "not configured on this sandboxd".into(),
                })
            })?;
        backend
            .activate(instance, wanted)
            .await
            .map_err(SandboxFailure::Backend)
    }

    /// Tears down `agent`'s instances that this daemon made but its store does not know: a
    /// provision a crash cut short. Called with the agent's lock held and nothing stored for
    /// it, so none of them can be in use or in the making.
    async fn clear_orphans_of(&self, agent: &AgentSlug) {
        let orphans: Vec<InstanceHandle> = self
            .inner
            .backends
            .list_all()
            .await
            .into_iter()
            .map(|listed| listed.handle)
            .filter(|h| &h.owner == agent && h.maker == self.inner.daemon)
            .collect();
        if !orphans.is_empty() {
            tracing::info!(%agent, count = orphans.len(), "clearing instances a crash left behind");
            self.teardown_handles(&orphans).await;
        }
    }

    /// Every member answers `is_live` on its own backend. A backend that is gone or errs
    /// counts as dead: a sandbox is trusted only when proven live.
    pub(crate) async fn all_live(&self, instances: &[Instance]) -> bool {
        let checks = instances.iter().map(|instance| async move {
            match self.inner.backends.for_kind(instance.backend) {
                Some(backend) => backend
                    .is_live(&InstanceHandle::of(instance))
                    .await
                    .unwrap_or(false),
                None => false,
            }
        });
        join_all(checks).await.into_iter().all(|live| live)
    }

    /// Tears instances down on their own backends, best effort.
    pub(crate) async fn teardown_instances(&self, instances: &[Instance]) {
        let handles: Vec<InstanceHandle> = instances.iter().map(InstanceHandle::of).collect();
        self.teardown_handles(&handles).await;
    }

    pub(crate) async fn teardown_handles(&self, handles: &[InstanceHandle]) {
        let work = handles.iter().map(|handle| async move {
            let Some(backend) = self.inner.backends.for_kind(handle.backend) else {
                tracing::warn!(instance = %handle.name, "no backend of its kind to tear it down");
                return;
            };
            if let Err(err) = backend.teardown(handle).await {
                tracing::warn!(instance = %handle.name, error = %err, "teardown failed");
            }
        });
        join_all(work).await;
    }

    /// Releases an agent's sandbox: its cached members and any stray instance a backend lists
    /// under its name. Returns how many instances went.
    #[tracing::instrument(name = "release", skip_all, fields(agent = %agent))]
    pub(crate) async fn release(&self, agent: &AgentSlug) -> Result<usize, SandboxFailure> {
        let _turn = self.turn(agent).await.map_err(SandboxFailure::Turn)?;
        let cached = self
            .store()
            .instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        let mut handles: Vec<InstanceHandle> = cached.iter().map(InstanceHandle::of).collect();
        for instance in self.inner.backends.list_all().await {
            if &instance.handle.owner == agent
                && instance.handle.maker == self.inner.daemon
                && !handles.iter().any(|h| h.name == instance.handle.name)
            {
                handles.push(instance.handle);
            }
        }
        self.teardown_handles(&handles).await;
        self.store()
            .delete_instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        self.refresh_live_gauge().await;
        Ok(handles.len())
    }

    /// The release hook of lifecycle verbs and agent removal: best effort, audited, never
    /// failing its caller.
    pub(crate) async fn release_best_effort(&self, agent: &Agent, because: &str) {
        let started = Instant::now();
        let outcome = self.release(&agent.slug).await;
        let (result, detail) = match &outcome {
            Ok(0) => (Outcome::Ok, format!("nothing to release ({because})")),
            Ok(n) => (Outcome::Ok, format!("{n} instance(s) released ({because})")),
            Err(err) => {
                tracing::warn!(agent = %agent.slug, error = %err, "release failed");
                (
                    Outcome::Failed(ErrorCode::Internal),
                    format!("release failed ({because})"),
                )
            }
        };
        if !matches!(outcome, Ok(0)) {
            self.audit(AuditRecord {
                actor: Actor::Agent(agent.slug.clone()),
                action: AuditAction::Release,
                subject: agent.slug.as_str(),
                project: Some(&agent.project),
                outcome: result,
                started,
                detail,
            })
            .await;
        }
    }

    /// At start: sandboxes of a previous run whose members are all live keep their credentials
    /// (adopted); any other is torn down and forgotten, to be re-provisioned on the next request.
    pub(crate) async fn reconcile(&self) {
        let started = Instant::now();
        let instances = match self.store().all_instances().await {
            Ok(instances) => instances,
            Err(err) => {
                tracing::error!(error = %err, "reading stored sandboxes failed");
                return;
            }
        };
        let owners: BTreeSet<AgentSlug> = instances.iter().map(|i| i.owner.clone()).collect();
        let (mut adopted, mut dropped) = (0, 0);
        for owner in owners {
            let members: Vec<Instance> = instances
                .iter()
                .filter(|i| i.owner == owner)
                .cloned()
                .collect();
            if self.all_live(&members).await {
                adopted += members.len();
                continue;
            }
            dropped += members.len();
            self.teardown_instances(&members).await;
            if let Err(err) = self.store().delete_instances_of(&owner).await {
                tracing::error!(%owner, error = %err, "forgetting a dead sandbox failed");
            }
        }
        self.refresh_live_gauge().await;
        tracing::info!(adopted, dropped, "reconciled stored sandboxes");
        self.audit(AuditRecord {
            actor: Actor::Daemon,
            action: AuditAction::Reconcile,
            subject: "sandboxes",
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("{adopted} instance(s) adopted, {dropped} dropped"),
        })
        .await;
    }

    pub(crate) async fn refresh_live_gauge(&self) {
        if let Ok(count) = self.store().count_instances().await {
            self.inner.metrics.live_sandboxes.set(count);
        }
    }
}
