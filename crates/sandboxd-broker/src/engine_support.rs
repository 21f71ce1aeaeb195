//! Which engines this sandboxd's backends run (`Backend::supports`: the engine's image present,
//! its server programs installed): a lookup, not a probe. A yes is kept for the feature-probe
//! recheck interval (a warm `request_sandbox` then asks the backend nothing here), and dropped
//! sooner when the feature probes see the engine's provider change; a no is never kept, so an
//! engine that comes back is offered at once. As with features (`feature_probes`), agents are
//! offered only what the primary backend runs, `projects set` refuses to add an engine it does
//! not run, and `request_sandbox` refuses, for good, one that stopped running
//! (`engine_unavailable`) rather than failing its provision.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_backend::{Backend, BackendError};
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::{BackendKind, EngineRef, engines};

use crate::Broker;
use crate::error::BrokerError;

/// How long a backend may take to say whether it runs an engine; past it nothing is refused.
const PATIENCE: Duration = Duration::from_secs(5);

/// When each backend last said it runs an engine.
#[derive(Debug)]
pub(crate) struct EngineSupport {
    /// A std mutex: held only to read or write an entry, never across an await.
    answered: Mutex<HashMap<(BackendKind, EngineRef), Instant>>,
    /// How long a yes is trusted: the feature probes' provider recheck interval, since a
    /// changed provider is what would turn it into a no.
    keep: Duration,
}

impl EngineSupport {
    pub fn new(keep: Duration) -> Self {
        Self {
            answered: Mutex::new(HashMap::new()),
            keep,
        }
    }

    fn answered(&self) -> MutexGuard<'_, HashMap<(BackendKind, EngineRef), Instant>> {
        self.answered.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known_yes(&self, key: (BackendKind, EngineRef)) -> bool {
        self.answered()
            .get(&key)
            .is_some_and(|at| at.elapsed() < self.keep)
    }

    /// Makes the next caller ask `kind` again whether it runs `engine`: what provides it
    /// changed.
    pub(crate) fn forget(&self, kind: BackendKind, engine: EngineRef) {
        self.answered().remove(&(kind, engine));
    }
}

/// What a backend said when asked whether it runs an engine.
enum Said {
    Runs,
    /// It cannot: why, with what provides the engine.
    Lacks(String),
    /// It did not say (unreachable, slow, another error).
    Nothing,
}

async fn ask(backend: &Arc<dyn Backend>, engine: EngineRef) -> Said {
    match tokio::time::timeout(PATIENCE, backend.supports(engine)).await {
        Ok(Ok(())) => Said::Runs,
        Ok(Err(
            err @ (BackendError::ImageMissing { .. }
            | BackendError::NotInstalled { .. }
            | BackendError::Unsupported { .. }),
        )) => Said::Lacks(err.to_string()),
        Ok(Err(err)) => {
            tracing::debug!(engine = engine.name, backend = %backend.kind(), error = %err, "could not ask whether the backend runs the engine");
            Said::Nothing
        }
        Err(_) => Said::Nothing,
    }
}

impl Broker {
    /// Whether `backend` runs `engine`: why not (with what provides it) when it cannot. A
    /// backend that does not answer refuses nothing here: an unreachable backend is the
    /// retryable guard's.
    async fn lacks(&self, backend: &Arc<dyn Backend>, engine: EngineRef) -> Option<String> {
        let support = &self.inner.engine_support;
        let key = (backend.kind(), engine);
        if support.known_yes(key) {
            return None;
        }
        // Taken before asking: the yes is trusted from when it may have been true, not after.
        let asked = Instant::now();
        match ask(backend, engine).await {
            Said::Runs => {
                support.answered().insert(key, asked);
                None
            }
            Said::Lacks(why) => Some(why),
            Said::Nothing => None,
        }
    }
}

impl Broker {
    /// Of `engines`, those the primary backend cannot run, each with why and what provides it
    /// (words for the operator).
    pub(crate) async fn unrunnable(&self, engines: &[EngineRef]) -> BTreeMap<EngineRef, String> {
        let primary = self.inner.backends.primary();
        let kind = primary.kind();
        join_all(
            engines
                .iter()
                .map(|engine| async move { (*engine, self.lacks(primary, *engine).await) }),
        )
        .await
        .into_iter()
        .filter_map(|(engine, why)| {
            why.map(|why| {
                (
                    engine,
                    format!("the {kind} backend cannot run {}: {why}", engine.name),
                )
            })
        })
        .collect()
    }

    /// Of `engines`, those the primary backend runs (or could not say it does not), in order.
    pub(crate) async fn runnable(&self, engines: &[EngineRef]) -> Vec<EngineRef> {
        let lacking = self.unrunnable(engines).await;
        engines
            .iter()
            .copied()
            .filter(|engine| !lacking.contains_key(engine))
            .collect()
    }

    /// Refuses `adding` when the primary backend cannot run one of them: why, which other
    /// backend here runs it, and which engines run here.
    pub(crate) async fn check_runnable(&self, adding: &[EngineRef]) -> Result<(), BrokerError> {
        let lacking = self.unrunnable(adding).await;
        let Some((engine, why)) = lacking.into_iter().next() else {
            return Ok(());
        };
        let primary = self.inner.backends.primary().kind();
        let mut elsewhere = Vec::new();
        for other in self.inner.backends.all().filter(|b| b.kind() != primary) {
            if let Ok(Ok(())) = tokio::time::timeout(PATIENCE, other.supports(engine)).await {
                elsewhere.push(other.kind());
            }
        }
        let where_else = match elsewhere.first() {
            None => "no other backend here runs it".to_owned(),
            Some(kind) => format!(
                "it runs on the {} backend (set `backend = \"{kind}\"` in sandboxd's \
                 configuration)",
                elsewhere
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(" and the ")
            ),
        };
        let all: Vec<EngineRef> = engines::all().collect();
        let here = self.runnable(&all).await;
        Err(BrokerError::EngineUnavailable(format!(
            "{why}; {where_else}; runnable here: {}",
            allowed_list(here.iter().map(|e| e.name))
        )))
    }
}
