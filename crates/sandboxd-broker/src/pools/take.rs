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

/// How many members one hand-out tries before the request goes cold.
const HAND_OUT_ATTEMPTS: usize = 3;

impl Pools {
    /// An idle member for `engine` (a clone of `clone`'s source, made from that very
    /// snapshot, when `clone` is given) whose features are all `wanted`, taken out of its pool
    /// (a refill starts); when every idle member is out for its health check, the first one
    /// back (waiting up to [`CHECKED_MEMBER_WAIT`]); when none is idle but one is starting that
    /// no other request waits for, that one, waiting up to the pool's typical start time (a
    /// queue, not a cold start that would take as long). None when no pool serves it or
    /// nothing is on its way (a miss: the pool grows towards `max_total`).
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
        let began = tokio::time::Instant::now();
        let checked_deadline = began + CHECKED_MEMBER_WAIT;
        let mut queued = false;
        let member = loop {
            // Registered before the look, so a member returned or started right after it is
            // not missed.
            let back = pool.checked.notified();
            tokio::pin!(back);
            back.as_mut().enable();
            let now = tokio::time::Instant::now();
            let wait_until = {
                let mut state = pool.state();
                state.queued -= usize::from(queued);
                queued = false;
                if let Some(member) = state.idle.pop_front() {
                    state.demand += 1;
                    state.handed_out += 1;
                    state.handing += 1;
                    break Some(member);
                }
                // A member on its way beats a cold start: one out for its health check (a
                // round trip), or one starting that no other take waits for (it began before
                // a cold start would, so it is ready sooner).
                let for_check =
                    (state.checking > 0 && now < checked_deadline).then_some(checked_deadline);
                let for_start = state
                    .start_time
                    .filter(|_| state.starting > state.queued)
                    .map(|typical| began + typical)
                    .filter(|deadline| now < *deadline);
                match for_check.max(for_start) {
                    Some(deadline) => {
                        if for_start.is_some() {
                            state.queued += 1;
                            queued = true;
                        }
                        deadline
                    }
                    None => {
                        state.demand += 1;
                        state.misses += 1;
                        // The pool grows to what this interval asked of it, within its
                        // ceiling: a burst sizes it in one step, not one miss at a time.
                        let asked = usize::try_from(state.demand).unwrap_or(usize::MAX);
                        state.target = (state.target + 1).max(asked).min(config.max_total);
                        break None;
                    }
                }
            };
            // Woken or timed out, the next look decides (a place in the queue is given back
            // first thing under the lock).
            let _ = tokio::time::timeout_at(wait_until, back).await;
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

    /// Hands `taken` to `owner` on the pool's backend. A member that fails its hand-out (the
    /// backend already removed it) is quarantined, and the pool's next idle member is tried in
    /// its place, up to [`HAND_OUT_ATTEMPTS`] in all: one broken member does not cost the agent
    /// a cold start.
    #[tracing::instrument(name = "hand_out", skip_all, fields(agent = %owner, instance = %taken.name))]
    pub async fn hand_out(
        &self,
        mut taken: Taken,
        owner: &AgentSlug,
        metrics: &Metrics,
    ) -> Result<Instance, sandboxd_backend::BackendError> {
        let mut attempts = 1;
        loop {
            let member = taken
                .member
                .take()
                .expect("a taken member is handed out once");
            let name = member.instance.name.clone();
            let outcome = self.backend.hand_out(member, owner).await;
            // The agent's now (or gone): no longer a pool's.
            self.unregister(&name).await;
            let err = match outcome {
                Ok(instance) => return Ok(instance),
                Err(err) => err,
            };
            {
                let mut state = taken.pool.state();
                state.quarantined += 1;
                state.handed_out -= 1;
            }
            metrics.pool_member_failed(
                &taken.pool.config().key(),
                self.metrics_backend,
                "hand_out",
            );
            tracing::warn!(instance = %name, error = %err, "a pool member failed its hand-out: quarantined");
            match (attempts < HAND_OUT_ATTEMPTS)
                .then(|| self.take_next(&taken.pool))
                .flatten()
            {
                Some(next) => {
                    attempts += 1;
                    taken = next;
                }
                None => return Err(err),
            }
        }
    }

    /// The pool's next idle member for a hand-out already under way (no new demand, no wait).
    fn take_next(&self, pool: &Arc<Pool>) -> Option<Taken> {
        let member = {
            let mut state = pool.state();
            let member = state.idle.pop_front()?;
            state.handed_out += 1;
            state.handing += 1;
            member
        };
        Some(Taken {
            pool: pool.clone(),
            wake: self.wake.clone(),
            name: member.instance.name.clone(),
            member: Some(member),
        })
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
