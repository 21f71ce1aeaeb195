//! Taking a member for a request and handing it out: the only way a member leaves its pool.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_backend::IdleMember;
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::{AgentSlug, EngineRef, Feature, Instance, SourceName};
use tokio::sync::Notify;

use super::{Pool, PoolKey, Pools};
use crate::metrics::Metrics;

/// How long a take waits for a member out for its health check before it counts a miss: the
/// check is one round trip (milliseconds); a cold start is far longer.
const CHECKED_MEMBER_WAIT: Duration = Duration::from_millis(100);

impl Pools {
    /// An idle member for `engine` (a clone of `clone`'s source, made from that very
    /// snapshot, when `clone` is given) whose features are all `wanted`, taken out of its pool
    /// (a refill starts); when every idle member is out for its health check, the first one
    /// back (waiting up to [`CHECKED_MEMBER_WAIT`]). None when no pool serves it or it is
    /// empty (a miss: the pool grows towards `max_total`).
    #[tracing::instrument(name = "take", skip_all, fields(%engine))]
    pub async fn take(
        &self,
        engine: EngineRef,
        wanted: &BTreeSet<Feature>,
        clone: Option<&Arc<Snapshot>>,
        metrics: &Metrics,
    ) -> Option<Taken> {
        let key = PoolKey {
            engine,
            clone_of: match clone {
                Some(snapshot) => Some(SourceName::parse(&snapshot.source).ok()?),
                None => None,
            },
        };
        let pool = self.pool_of(&key)?;
        if let Some(snapshot) = clone
            && pool
                .snapshot()
                .is_some_and(|current| current.privacy != snapshot.privacy)
        {
            // Members made under another privacy mode are not what was asked for (and one
            // with values must never serve a clone without them).
            return None;
        }
        if let (Some(snapshot), Some(source)) = (clone, &key.clone_of) {
            // The request read the store's latest: members of an older one are not clones of
            // what the project asks for now.
            self.offer_snapshot(source, Some(snapshot.clone()));
        }
        let config = pool.config();
        if !config.features.is_subset(wanted) {
            return None;
        }
        let deadline = tokio::time::Instant::now() + CHECKED_MEMBER_WAIT;
        let member = loop {
            // Registered before the look, so a member returned right after it is not missed.
            let checked = pool.checked.notified();
            tokio::pin!(checked);
            checked.as_mut().enable();
            {
                let mut state = pool.state();
                if let Some(member) = state.idle.pop_front() {
                    state.demand += 1;
                    state.handed_out += 1;
                    state.handing += 1;
                    break Some(member);
                }
                if state.checking == 0 || tokio::time::Instant::now() >= deadline {
                    state.demand += 1;
                    state.misses += 1;
                    state.target = (state.target + 1).min(config.max_total);
                    break None;
                }
            }
            let _ = tokio::time::timeout_at(deadline, checked).await;
        };
        metrics.pool_request(&key, self.metrics_backend, member.is_some());
        self.refresh_gauges(&*pool, metrics);
        match member {
            Some(member) => Some(Taken {
                pool: pool.clone(),
                wake: self.wake.clone(),
                name: member.instance.name.clone(),
                member: Some(member),
            }),
            None => {
                // A miss: the pool grows now; a hand-out refills when it is over.
                self.wake.notify_one();
                None
            }
        }
    }

    /// Hands `taken` to `owner` on the pool's backend. A failure quarantines the member (the
    /// backend already removed it).
    #[tracing::instrument(name = "hand_out", skip_all, fields(agent = %owner, instance = %taken.name))]
    pub async fn hand_out(
        &self,
        mut taken: Taken,
        owner: &AgentSlug,
        metrics: &Metrics,
    ) -> Result<Instance, sandboxd_backend::BackendError> {
        let member = taken
            .member
            .take()
            .expect("a taken member is handed out once");
        let name = member.instance.name.clone();
        let outcome = self.backend.hand_out(member, owner).await;
        // The agent's now (or gone): no longer a pool's.
        self.unregister(&name).await;
        if outcome.is_err() {
            taken.pool.state().quarantined += 1;
            metrics.pool_member_failed(
                &taken.pool.config().key(),
                self.metrics_backend,
                "hand_out",
            );
        }
        outcome
    }
}

/// A member taken out of its pool for one hand-out; its name stays the pool's (so the janitor
/// leaves it alone) until the hand-out is over.
#[derive(Debug)]
pub(crate) struct Taken {
    pool: Arc<Pool>,
    wake: Arc<Notify>,
    name: String,
    member: Option<IdleMember>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        {
            let mut state = self.pool.state();
            state.held.remove(&self.name);
            state.handing -= 1;
        }
        // The hand-out is over: now the pool refills.
        self.wake.notify_one();
    }
}
