//! Making a sandbox: each engine from its warm pool when one matches, else cold (a clone from
//! its source's snapshot), all or nothing; and completing a live sandbox in place.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use sandboxd_backend::clone::{Fidelity, provision_clone};
use sandboxd_backend::{BackendError, InstanceHandle, InstanceRequest, all_or_nothing};
use sandboxd_domain::Actor;
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::{AgentSlug, DataSize, EngineRef, FeatureRequest, Instance, ProjectSizes};

use super::{Clones, SandboxFailure, clone_of, pooled_clone_of};
use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::pools::Taken;

/// Whether a provision first removes what a crash left of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leftovers {
    /// Nothing is stored for the agent: instances of it that a backend lists are leftovers.
    Clear,
    /// The agent has a live sandbox (completed in place): its instances are not leftovers.
    Keep,
}

/// One instance of a provision, and where it came from.
struct Made {
    instance: Instance,
    took: std::time::Duration,
    pooled: bool,
}

impl Broker {
    /// Provisions engines for `agent` on the primary backend, all or nothing: each from its
    /// warm pool when one matches (a pool member has its backend's default size), else cold. With `Leftovers::Clear` (nothing is stored for
    /// the agent) what a crash left of the agent goes first — unless every engine comes from a
    /// pool: a member keeps its own name (or takes the agent's by a rename that fails on a
    /// leftover, which then falls back to a cold provision), and the janitor reaps such orphans
    /// on its next tick, so a warm hand-out does not wait for a listing of every backend.
    #[tracing::instrument(name = "provision", skip_all, fields(agent = %agent, engines = ?engines))]
    pub(super) async fn provision(
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
                // A clone comes only from a pool of clones of its source's very snapshot, as
                // stored: one a project's privacy mode stripped is made cold.
                let stripped = clone_of(clones, *engine).is_some()
                    && pooled_clone_of(clones, *engine).is_none();
                let taken = if self.pool_fits(sizes, *engine) && !stripped {
                    self.inner
                        .pools
                        .take(
                            *engine,
                            &wanted,
                            pooled_clone_of(clones, *engine),
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
        let attempts = taken.into_iter().map(|(engine, wanted, taken)| {
            let snapshot = clone_of(clones, engine).map(Arc::as_ref);
            let size = Self::wanted_size(sizes, engine);
            self.provision_one(agent, engine, wanted, taken, snapshot, size)
        });
        let outcome =
            all_or_nothing(backend.as_ref(), attempts, |made: &Made| &made.instance).await;
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
    pub(super) async fn complete_in_place(
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
}
