//! Which engines this sandboxd's backends run (`Backend::supports`: the engine's image present,
//! its server programs installed), asked afresh each time: a lookup, not a probe. As with
//! features (`feature_probes`), agents are offered only what the primary backend runs,
//! `projects set` refuses to add an engine it does not run, and `request_sandbox` refuses, for
//! good, one that stopped running (`engine_unavailable`) rather than failing its provision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use sandboxd_backend::{Backend, BackendError};
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::{EngineRef, engines};

use crate::Broker;
use crate::error::BrokerError;

/// How long a backend may take to say whether it runs an engine; past it nothing is refused.
const PATIENCE: Duration = Duration::from_secs(5);

/// Whether `backend` runs `engine`: why not (with what provides it) when it cannot. A backend
/// that does not answer refuses nothing here: an unreachable backend is the retryable guard's.
async fn lacks(backend: &Arc<dyn Backend>, engine: EngineRef) -> Option<String> {
    match tokio::time::timeout(PATIENCE, backend.supports(engine)).await {
        Ok(Ok(())) => None,
        Ok(Err(
            err @ (BackendError::ImageMissing { .. }
            | BackendError::NotInstalled { .. }
            | BackendError::Unsupported { .. }),
        )) => Some(err.to_string()),
        Ok(Err(err)) => {
            tracing::debug!(engine = engine.name, backend = %backend.kind(), error = %err, "could not ask whether the backend runs the engine");
            None
        }
        Err(_) => None,
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
                .map(|engine| async move { (*engine, lacks(primary, *engine).await) }),
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
