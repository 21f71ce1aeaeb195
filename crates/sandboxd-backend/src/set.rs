//! Provisioning a whole set of engines for one owner: all in parallel, all or nothing.

use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_domain::instance::Instance;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest};

/// Provisions every request in parallel. If any fails, the ones that succeeded are torn down
/// and the first error is returned, so a failed set leaves nothing behind.
pub async fn provision_set(
    backend: &dyn Backend,
    requests: &[InstanceRequest],
) -> Result<Vec<Instance>, BackendError> {
    let timed = provision_set_timed(backend, requests).await?;
    Ok(timed.into_iter().map(|(instance, _)| instance).collect())
}

/// [`provision_set`], with how long each instance took to become ready.
pub async fn provision_set_timed(
    backend: &dyn Backend,
    requests: &[InstanceRequest],
) -> Result<Vec<(Instance, Duration)>, BackendError> {
    let attempts = requests.iter().map(|r| async move {
        let started = Instant::now();
        let outcome = backend.provision(r).await;
        outcome.map(|instance| (instance, started.elapsed()))
    });
    all_or_nothing(backend, attempts, |(instance, _)| instance).await
}

/// Runs every attempt at once, each making one instance (however it does: cold, from a warm
/// pool, as a clone); if any fails, the instances the others made are torn down and the first
/// error is returned, so a failed set leaves nothing behind.
pub async fn all_or_nothing<T, F>(
    backend: &dyn Backend,
    attempts: impl IntoIterator<Item = F>,
    instance_of: impl Fn(&T) -> &Instance,
) -> Result<Vec<T>, BackendError>
where
    F: Future<Output = Result<T, BackendError>>,
{
    let outcomes = join_all(attempts).await;
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
    match first_error {
        None => Ok(made),
        Some(err) => {
            teardown_all(
                backend,
                made.iter().map(|one| InstanceHandle::of(instance_of(one))),
            )
            .await;
            Err(err)
        }
    }
}

/// Tears instances down in parallel, best effort: failures are logged, never returned.
pub async fn teardown_all(
    backend: &dyn Backend,
    handles: impl IntoIterator<Item = InstanceHandle>,
) {
    let handles: Vec<InstanceHandle> = handles.into_iter().collect();
    let outcomes = join_all(handles.iter().map(|h| backend.teardown(h))).await;
    for (handle, outcome) in handles.iter().zip(outcomes) {
        if let Err(err) = outcome {
            tracing::warn!(instance = %handle.name, error = %err, "teardown failed");
        }
    }
}
