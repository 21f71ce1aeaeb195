//! Which allowlisted features each backend really provides (`Backend::probe_features`), probed
//! once per engine and provider (the image, the host's packages), cached, and probed again when
//! the provider changes. Agents are offered only what the primary backend provides; a project's
//! standing feature that no backend here provides is refused when it is set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandboxd_backend::{Backend, FeatureProbe};
use sandboxd_domain::instance::BackendKind;
use sandboxd_domain::{AgentSlug, EngineRef, Feature, engines};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Broker;

/// A probe that failed (the engine's image missing, the backend unreachable) is tried again
/// after this long; until then callers fall back to the allowlist.
const RETRY_FAILED: Duration = Duration::from_secs(30);

/// What one probe found.
#[derive(Debug, Clone)]
pub(crate) enum Probed {
    Known {
        /// The provider's identity when it was probed.
        provider: String,
        probe: Arc<FeatureProbe>,
        /// When the provider was asked for that identity.
        at: Instant,
    },
    Failed {
        why: String,
        at: Instant,
    },
}

impl Probed {
    pub fn known(&self) -> Option<&FeatureProbe> {
        match self {
            Self::Known { probe, .. } => Some(probe),
            Self::Failed { .. } => None,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    outcome: OnceCell<Probed>,
    /// When the provider's identity was last compared with the probed one.
    compared: Mutex<Option<Instant>>,
}

/// The cache, one slot per (backend, engine), and the probes under way (a stop waits for them:
/// each has an instance to remove).
#[derive(Debug)]
pub(crate) struct FeatureProbes {
    slots: Mutex<HashMap<(BackendKind, EngineRef), Arc<Slot>>>,
    /// How long a probe is trusted before its provider's identity is compared again.
    recheck: Duration,
    running: TaskTracker,
}

impl FeatureProbes {
    pub fn new(recheck: Duration) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            recheck,
            running: TaskTracker::new(),
        }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<(BackendKind, EngineRef), Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, kind: BackendKind, engine: EngineRef) -> Arc<Slot> {
        self.slots().entry((kind, engine)).or_default().clone()
    }

    /// Drops `stale` so the next caller probes again (unless another caller already did).
    fn forget(&self, kind: BackendKind, engine: EngineRef, stale: &Arc<Slot>) {
        let mut slots = self.slots();
        if slots
            .get(&(kind, engine))
            .is_some_and(|current| Arc::ptr_eq(current, stale))
        {
            slots.remove(&(kind, engine));
        }
    }

    /// What is known now, without probing.
    pub(crate) fn cached(&self, kind: BackendKind, engine: EngineRef) -> Option<Probed> {
        self.slots()
            .get(&(kind, engine))
            .and_then(|slot| slot.outcome.get().cloned())
    }
}

impl Broker {
    /// What `backend` provides of `engine`'s allowlist: cached, probed when unknown, when its
    /// provider changed, or when a failed probe is old enough to try again.
    pub(crate) async fn features_on(
        &self,
        backend: &Arc<dyn Backend>,
        engine: EngineRef,
    ) -> Probed {
        let probes = &self.inner.feature_probes;
        let kind = backend.kind();
        for _ in 0..2 {
            let slot = probes.slot(kind, engine);
            let outcome = slot
                .outcome
                .get_or_init(|| self.probe_detached(backend.clone(), engine))
                .await
                .clone();
            if self.still_true(&slot, &outcome, backend, engine).await {
                return outcome;
            }
            probes.forget(kind, engine, &slot);
        }
        probes
            .cached(kind, engine)
            .unwrap_or_else(|| Probed::Failed {
                why: "the provider changes while it is probed".into(),
                at: Instant::now(),
            })
    }

    /// The names of [`Self::offered`], or the whole allowlist while the probe does not answer.
    pub async fn offered_names(&self, engine: EngineRef, patience: Duration) -> Vec<&'static str> {
        match self.offered(engine, patience).await {
            Some(probe) => probe.names(),
            None => engine.features.iter().map(|f| f.name).collect(),
        }
    }

    /// What the primary backend provides of `engine`'s allowlist: what agents may ask for here.
    /// Waits up to `patience` for a probe under way or started now; None while that does not
    /// answer (callers then offer the allowlist and leave the rest to activation).
    pub async fn offered(
        &self,
        engine: EngineRef,
        patience: Duration,
    ) -> Option<Arc<FeatureProbe>> {
        if engine.features.is_empty() {
            return None;
        }
        let primary = self.inner.backends.primary().clone();
        match tokio::time::timeout(patience, self.features_on(&primary, engine)).await {
            Ok(Probed::Known { probe, .. }) => Some(probe),
            Ok(Probed::Failed { why, .. }) => {
                tracing::debug!(engine = engine.name, reason = %why, "features not probed; offering the allowlist");
                None
            }
            Err(_) => None,
        }
    }

    /// Probes `engine`'s features on `backend` in a task of its own: a caller that stops waiting
    /// does not cut a probe short and leave its instance behind.
    async fn probe_detached(&self, backend: Arc<dyn Backend>, engine: EngineRef) -> Probed {
        let broker = self.clone();
        let task = self
            .inner
            .feature_probes
            .running
            .spawn(async move { broker.probe(&backend, engine).await });
        task.await.unwrap_or_else(|err| Probed::Failed {
            why: format!("the probe task failed: {err}"),
            at: Instant::now(),
        })
    }

    async fn probe(&self, backend: &Arc<dyn Backend>, engine: EngineRef) -> Probed {
        let started = Instant::now();
        let failed = |why: String| Probed::Failed {
            why,
            at: Instant::now(),
        };
        let provider = match backend.provider(engine).await {
            Ok(provider) => provider,
            Err(err) => return failed(err.to_string()),
        };
        // The janitor (on any replica) leaves a pool-slot instance alone while its slot's turn
        // is held.
        let slot = AgentSlug::pool_slot();
        let turn = match self.turn(&slot).await {
            Ok(turn) => turn,
            Err(err) => return failed(err.to_string()),
        };
        let probed = backend
            .probe_features(engine, &slot, &self.inner.daemon)
            .await;
        drop(turn);
        self.inner.locks.forget(&slot);
        self.inner
            .metrics
            .feature_probe(engine, backend.kind(), probed.is_ok());
        match probed {
            Ok(probe) => {
                tracing::info!(
                    engine = engine.name,
                    backend = %backend.kind(),
                    source = %probe.source,
                    available = %probe.names().join(","),
                    missing = %probe.missing.keys().copied().collect::<Vec<_>>().join(","),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "features probed"
                );
                Probed::Known {
                    provider,
                    probe: Arc::new(probe),
                    at: started,
                }
            }
            Err(err) => {
                tracing::warn!(engine = engine.name, backend = %backend.kind(), error = %err, "probing features failed");
                failed(err.to_string())
            }
        }
    }

    /// True while `outcome` still describes what `backend` runs.
    async fn still_true(
        &self,
        slot: &Slot,
        outcome: &Probed,
        backend: &Arc<dyn Backend>,
        engine: EngineRef,
    ) -> bool {
        match outcome {
            Probed::Failed { at, .. } => at.elapsed() < RETRY_FAILED,
            Probed::Known { provider, at, .. } => {
                let recheck = self.inner.feature_probes.recheck;
                {
                    // The probe itself asked the provider first: no second look right after it.
                    let compared = slot.compared.lock().unwrap_or_else(|p| p.into_inner());
                    if compared.unwrap_or(*at).elapsed() < recheck {
                        return true;
                    }
                }
                let now = backend.provider(engine).await;
                *slot.compared.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                // A provider that cannot be asked right now keeps the last probe.
                now.map_or(true, |now| &now == provider)
            }
        }
    }

    /// Probes the primary backend's engines once at start, so the first agent to list its tools
    /// does not wait for it. Stops between probes when `shutdown` is cancelled.
    pub fn spawn_feature_probes(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let broker = self.clone();
        tokio::spawn(async move {
            let primary = broker.inner.backends.primary().clone();
            for engine in engines::with_features() {
                if primary.supports(engine).await.is_err() {
                    continue;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = broker.features_on(&primary, engine) => {}
                }
            }
        })
    }

    /// Waits for probes under way: each removes its instance when it ends.
    pub(crate) async fn wait_for_probes(&self) {
        let running = &self.inner.feature_probes.running;
        running.close();
        running.wait().await;
    }

    /// Why `feature` cannot be a standing feature here, or None when the primary backend
    /// provides it (or nothing is known: a probe that could not run refuses nothing).
    pub(crate) async fn unavailable_here(&self, feature: Feature) -> Option<String> {
        let engine = feature.engine();
        let primary = self.inner.backends.primary().clone();
        let here = self.features_on(&primary, engine).await;
        let probe = here.known()?;
        if probe.provides(feature) {
            return None;
        }
        let reason = probe
            .missing
            .get(feature.name())
            .cloned()
            .unwrap_or_else(|| "not found".into());
        let mut elsewhere: Vec<(BackendKind, String)> = Vec::new();
        for other in self
            .inner
            .backends
            .all()
            .filter(|b| b.kind() != primary.kind())
        {
            if other.supports(engine).await.is_err() {
                continue;
            }
            if let Some(probe) = self.features_on(other, engine).await.known()
                && probe.provides(feature)
            {
                elsewhere.push((other.kind(), probe.source.clone()));
            }
        }
        let available = sandboxd_domain::error::allowed_list(probe.names());
        let where_else = match elsewhere.first() {
            None => "no other backend here provides it".to_owned(),
            Some((kind, _)) => format!(
                "it exists on {} (set `backend = \"{kind}\"` in sandboxd's configuration)",
                elsewhere
                    .iter()
                    .map(|(kind, source)| format!("the {kind} backend ({source})"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        };
        Some(format!(
            "feature {feature} of {} is not available on this sandboxd's {} backend ({}): \
             {reason}; {where_else}; available here for {}: {available}",
            engine.name,
            primary.kind(),
            probe.source,
            engine.name
        ))
    }
}
