//! One pool's members and counters, how it backs off, and the snapshot a pool of clones makes
//! its members from.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandboxd_backend::IdleMember;
use sandboxd_domain::clone::Snapshot;
use tokio::sync::Notify;

use super::PoolConfig;

/// How pools refill, check and back off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTuning {
    /// The wait after the first failed start; it doubles with every further failure.
    pub backoff_base: Duration,
    /// The longest wait between attempts of a failing pool.
    pub backoff_max: Duration,
    /// How often idle members are asked whether they still answer.
    pub check_interval: Duration,
    /// Members started at once per pool: by default the host's cores (at least 2), since a
    /// start is mostly the engine's own initialization, on the host's CPUs.
    pub parallel_starts: usize,
}

impl Default for PoolTuning {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            check_interval: Duration::from_secs(10),
            parallel_starts: std::thread::available_parallelism()
                .map_or(2, std::num::NonZeroUsize::get)
                .max(2),
        }
    }
}

impl PoolTuning {
    pub(super) fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

#[derive(Debug, Default)]
pub(super) struct PoolState {
    pub(super) idle: VecDeque<IdleMember>,
    pub(super) starting: usize,
    /// Members taken and being handed out: the refill waits for them, so a member's start
    /// never competes with the hand-out an agent is waiting for.
    pub(super) handing: usize,
    /// Members out of `idle` for their health check's round trip: a take waits for one
    /// (`take::CHECKED_MEMBER_WAIT`) rather than missing it.
    pub(super) checking: usize,
    /// Member names this pool holds or is starting or handing out: never the janitor's.
    pub(super) held: HashSet<String>,
    pub(super) target: usize,
    pub(super) failures: u32,
    pub(super) backoff_until: Option<Instant>,
    pub(super) last_error: Option<String>,
    pub(super) handed_out: u64,
    pub(super) misses: u64,
    pub(super) quarantined: u64,
    /// Hand-outs and misses since the last shrink check.
    pub(super) demand: u64,
    /// Takes waiting for a member that is starting, one per start at most.
    pub(super) queued: usize,
    /// How long a member takes to start and be made ready, smoothed over the last starts
    /// (None before the first): how long a take waits for one rather than going cold.
    pub(super) start_time: Option<Duration>,
}

impl PoolState {
    /// Counts a member's start that took `took` into [`start_time`](Self::start_time): an
    /// exponential moving average weighing the newest start by a quarter.
    pub(super) fn started_in(&mut self, took: Duration) {
        self.start_time = Some(match self.start_time {
            None => took,
            Some(typical) => (typical * 3 + took) / 4,
        });
    }

    /// Takes the newest idle members beyond the first `keep` out of the pool, to be removed.
    pub(super) fn release_beyond(&mut self, keep: usize) -> Vec<IdleMember> {
        let surplus: Vec<IdleMember> = self.idle.drain(keep.min(self.idle.len())..).collect();
        for member in &surplus {
            self.held.remove(&member.instance.name);
        }
        surplus
    }
}

#[derive(Debug)]
pub(super) struct Pool {
    pub(super) config: Mutex<PoolConfig>,
    pub(super) state: Mutex<PoolState>,
    /// Wakes takes waiting for a member out for its health check (it is back, or gone) or
    /// for one starting (it is ready, or failed).
    pub(super) checked: Notify,
    /// A pool of clones: the snapshot its members are made from (None: none yet). A std
    /// mutex: held only to read or swap the `Arc`, never across an await.
    pub(super) snapshot: Mutex<Option<Arc<Snapshot>>>,
}

/// Two snapshots are one when they are of one source, taken at one time.
fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
    a.source == b.source && a.taken_at_ms == b.taken_at_ms
}

impl Pool {
    /// An empty pool for `config`, aiming at `min_idle` members.
    pub(super) fn new(config: &PoolConfig) -> Self {
        Self {
            state: Mutex::new(PoolState {
                target: config.min_idle,
                ..PoolState::default()
            }),
            config: Mutex::new(config.clone()),
            checked: Notify::new(),
            snapshot: Mutex::new(None),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `snapshot` the one members are made from; when it replaces another (or none
    /// replaces one), returns the idle members made from the old one, to be removed.
    pub(super) fn offer(&self, snapshot: Option<Arc<Snapshot>>) -> Option<Vec<IdleMember>> {
        let mut current = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let unchanged = match (current.as_deref(), snapshot.as_deref()) {
            // A request that read the store before a newer snapshot was stored offers the
            // older one: the newer stays.
            (Some(a), Some(b)) => same_snapshot(a, b) || b.taken_at_ms < a.taken_at_ms,
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return None;
        }
        let had_one = current.is_some();
        *current = snapshot;
        drop(current);
        had_one.then(|| self.state().release_beyond(0))
    }

    /// Whether `member` was made from the snapshot members are made from now.
    pub(super) fn current(&self, member: &IdleMember) -> bool {
        match (self.snapshot().as_deref(), &member.instance.clone) {
            (None, None) => true,
            (Some(snapshot), Some(origin)) => {
                origin.source == snapshot.source
                    && origin.snapshot_taken_at_ms == snapshot.taken_at_ms
            }
            _ => false,
        }
    }

    pub(super) fn config(&self) -> PoolConfig {
        self.config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_ceiling() {
        let tuning = PoolTuning {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            ..PoolTuning::default()
        };
        let waits: Vec<u128> = (1..=6).map(|n| tuning.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(tuning.backoff(u32::MAX), Duration::from_secs(1));
    }
}
