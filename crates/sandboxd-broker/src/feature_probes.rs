//! Which allowlisted features each backend really provides (`Backend::probe_features`), probed
//! once per engine, major version and provider (the image, the host's packages), cached, and
//! probed again when the provider changes. Agents are offered only what the primary backend
//! provides, and a project whose engine is a clone what the image of its source's major version
//! provides (the one the clone runs); a project's standing feature that no backend here
//! provides is refused when it is set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandboxd_backend::{Backend, FeatureProbe};
use sandboxd_domain::instance::BackendKind;
use sandboxd_domain::{AgentSlug, EngineRef, Feature, Project, engines};
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

/// Which probe: a backend's engine at a major version (None: the backend's own).
type SlotKey = (BackendKind, EngineRef, Option<u32>);

/// The cache, one slot per (backend, engine, major version), and the probes under way (a stop
/// waits for them: each has an instance to remove).
#[derive(Debug)]
pub(crate) struct FeatureProbes {
    slots: Mutex<HashMap<SlotKey, Arc<Slot>>>,
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

    fn slots(&self) -> MutexGuard<'_, HashMap<SlotKey, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, key: SlotKey) -> Arc<Slot> {
        self.slots().entry(key).or_default().clone()
    }

    /// Drops `stale` so the next caller probes again (unless another caller already did).
    fn forget(&self, key: SlotKey, stale: &Arc<Slot>) {
        let mut slots = self.slots();
        if slots
            .get(&key)
            .is_some_and(|current| Arc::ptr_eq(current, stale))
        {
            slots.remove(&key);
        }
    }

    /// What is known now of `engine` at `major` (None: the backend's own), without probing.
    pub(crate) fn cached(
        &self,
        kind: BackendKind,
        engine: EngineRef,
        major: Option<u32>,
    ) -> Option<Probed> {
        self.slots()
            .get(&(kind, engine, major))
            .and_then(|slot| slot.outcome.get().cloned())
    }
}

/// The major version in a server version as snapshots record it (`PostgreSQL 18.1` → 18).
pub(crate) fn major_of(server_version: &str) -> Option<u32> {
    let number = server_version.split_whitespace().nth(1)?;
    let digits: String = number.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What runs `engine` at `major` on `backend` (None: what it runs by default).
async fn provider_of(
    backend: &Arc<dyn Backend>,
    engine: EngineRef,
    major: Option<u32>,
) -> Result<String, sandboxd_backend::BackendError> {
    match major {
        None => backend.provider(engine).await,
        Some(major) => backend.provider_of_major(engine, major).await,
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
        self.features_at(backend, engine, None).await
    }

    /// [`Self::features_on`] for `engine` at major version `major` (None: the backend's own).
    pub(crate) async fn features_at(
        &self,
        backend: &Arc<dyn Backend>,
        engine: EngineRef,
        major: Option<u32>,
    ) -> Probed {
        let probes = &self.inner.feature_probes;
        let key = (backend.kind(), engine, major);
        for _ in 0..2 {
            let slot = probes.slot(key);
            let outcome = slot
                .outcome
                .get_or_init(|| self.probe_detached(backend.clone(), engine, major))
                .await
                .clone();
            if self
                .still_true(&slot, &outcome, backend, engine, major)
                .await
            {
                return outcome;
            }
            probes.forget(key, &slot);
            if major.is_none() {
                // What runs the engine changed (or its probe failed): whether it runs is asked
                // again too.
                self.inner.engine_support.forget(key.0, engine);
            }
        }
        probes
            .cached(key.0, engine, major)
            .unwrap_or_else(|| Probed::Failed {
                why: "the provider changes while it is probed".into(),
                at: Instant::now(),
            })
    }

    /// The names of [`Self::offered`], or the whole allowlist while the probe does not answer.
    pub async fn offered_names(&self, engine: EngineRef, patience: Duration) -> Vec<&'static str> {
        self.offered_names_at(engine, None, patience).await
    }

    /// [`Self::offered_names`] for an agent of `project`: of the major version its clone of
    /// `engine` runs, when it is one.
    pub async fn offered_names_in(
        &self,
        project: &Project,
        engine: EngineRef,
        patience: Duration,
    ) -> Vec<&'static str> {
        let major = self.clone_major(project, engine).await;
        self.offered_names_at(engine, major, patience).await
    }

    async fn offered_names_at(
        &self,
        engine: EngineRef,
        major: Option<u32>,
        patience: Duration,
    ) -> Vec<&'static str> {
        match self.offered_at(engine, major, patience).await {
            Some(probe) => probe.names(),
            None => engine.features.iter().map(|f| f.name).collect(),
        }
    }

    /// The major version `project`'s clone of `engine` runs: its source's latest snapshot's.
    /// None when it is not a clone, or its source has no snapshot yet (what the backend runs by
    /// default is offered then).
    pub(crate) async fn clone_major(&self, project: &Project, engine: EngineRef) -> Option<u32> {
        let (_, choice) = project.sandbox_clones.iter().find(|(e, _)| *e == engine)?;
        let source = self.store().get_source(&choice.source).await.ok()??;
        major_of(&source.snapshot?.server_version)
    }

    /// [`Self::offered`] for `project`: where its `engine` is a clone, what the image of the
    /// major version the clone runs provides (the panel's card shows it).
    pub async fn offered_in(
        &self,
        project: &Project,
        engine: EngineRef,
        patience: Duration,
    ) -> Option<Arc<FeatureProbe>> {
        let major = self.clone_major(project, engine).await;
        self.offered_at(engine, major, patience).await
    }

    /// What the primary backend provides of `engine`'s allowlist: what agents may ask for here.
    /// Waits up to `patience` for a probe under way or started now; None while that does not
    /// answer (callers then offer the allowlist and leave the rest to activation).
    pub async fn offered(
        &self,
        engine: EngineRef,
        patience: Duration,
    ) -> Option<Arc<FeatureProbe>> {
        self.offered_at(engine, None, patience).await
    }

    /// [`Self::offered`] of `engine` at major version `major` (a clone's; None: the backend's
    /// own).
    pub async fn offered_at(
        &self,
        engine: EngineRef,
        major: Option<u32>,
        patience: Duration,
    ) -> Option<Arc<FeatureProbe>> {
        if engine.features.is_empty() {
            return None;
        }
        let primary = self.inner.backends.primary().clone();
        match tokio::time::timeout(patience, self.features_at(&primary, engine, major)).await {
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
    async fn probe_detached(
        &self,
        backend: Arc<dyn Backend>,
        engine: EngineRef,
        major: Option<u32>,
    ) -> Probed {
        let broker = self.clone();
        let task = self
            .inner
            .feature_probes
            .running
            .spawn(async move { broker.probe(&backend, engine, major).await });
        task.await.unwrap_or_else(|err| Probed::Failed {
            why: format!("the probe task failed: {err}"),
            at: Instant::now(),
        })
    }

    async fn probe(
        &self,
        backend: &Arc<dyn Backend>,
        engine: EngineRef,
        major: Option<u32>,
    ) -> Probed {
        let started = Instant::now();
        let failed = |why: String| Probed::Failed {
            why,
            at: Instant::now(),
        };
        let provider = match provider_of(backend, engine, major).await {
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
        let probed = match major {
            None => {
                backend
                    .probe_features(engine, &slot, &self.inner.daemon)
                    .await
            }
            Some(_) => {
                backend
                    .probe_features_at(engine, major, &slot, &self.inner.daemon)
                    .await
            }
        };
        drop(turn);
        self.inner.locks.forget(&slot);
        self.inner
            .metrics
            .feature_probe(engine, backend.kind(), probed.is_ok());
        match probed {
            Ok(probe) => {
                tracing::info!(
                    engine = engine.name,
                    major = ?major,
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
        major: Option<u32>,
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
                let now = provider_of(backend, engine, major).await;
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

    /// Why `feature` cannot be a standing feature of `project`: where its engine is a clone,
    /// the image of the clone's major version must provide it; else [`Self::unavailable_here`].
    pub(crate) async fn unavailable_for(
        &self,
        project: Option<&Project>,
        feature: Feature,
    ) -> Option<String> {
        let engine = feature.engine();
        let clone_major = match project {
            Some(project) => self.clone_major(project, engine).await,
            None => None,
        };
        let Some(major) = clone_major else {
            return self.unavailable_here(feature).await;
        };
        let primary = self.inner.backends.primary().clone();
        let probed = self.features_at(&primary, engine, Some(major)).await;
        let probe = probed.known()?;
        let reason = lacking(probe, feature)?;
        Some(format!(
            "feature {feature} of {} is not in the image this project's clones run (PostgreSQL \
             {major}, the major version of its source's snapshot: {}): {reason}; available \
             there: {}",
            engine.name,
            probe.source,
            sandboxd_domain::error::allowed_list(probe.names())
        ))
    }

    /// Why `feature` cannot be a standing feature here, or None when the primary backend
    /// provides it (or nothing is known: a probe that could not run refuses nothing).
    pub(crate) async fn unavailable_here(&self, feature: Feature) -> Option<String> {
        let engine = feature.engine();
        let primary = self.inner.backends.primary().clone();
        let here = self.features_on(&primary, engine).await;
        let probe = here.known()?;
        let reason = lacking(probe, feature)?;
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

/// Why `probe` lacks `feature`, or None when it provides it.
fn lacking(probe: &FeatureProbe, feature: Feature) -> Option<String> {
    if probe.provides(feature) {
        return None;
    }
    Some(
        probe
            .missing
            .get(feature.name())
            .cloned()
            .unwrap_or_else(|| "not found".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::major_of;

    #[test]
    fn a_snapshot_s_server_version_gives_its_major() {
        assert_eq!(major_of("PostgreSQL 18.1"), Some(18));
        assert_eq!(major_of("PostgreSQL 9.6.24"), Some(9));
        assert_eq!(major_of("PostgreSQL 19beta1"), Some(19));
        assert_eq!(major_of("PostgreSQL"), None);
        assert_eq!(major_of(""), None);
    }
}
