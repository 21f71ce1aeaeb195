//! What an operator sees of the pools, and sizing or adding one.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sandboxd_domain::EngineRef;

use super::{Pool, PoolConfig, PoolKey, Pools};
use crate::metrics::Metrics;

/// A pool as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolView {
    pub key: PoolKey,
    pub engine: EngineRef,
    pub backend: &'static str,
    /// For a pool of clones: when the snapshot its members are made from was taken; None
    /// while the source has none (the pool waits for one).
    pub snapshot_taken_at_ms: Option<i64>,
    pub features: Vec<String>,
    pub min_idle: usize,
    pub max_total: usize,
    /// What the pool aims to hold idle now (`min_idle`, more after requests found it empty).
    pub target: usize,
    pub idle: usize,
    pub starting: usize,
    pub handed_out: u64,
    pub misses: u64,
    /// Members that stopped answering while idle, or failed their hand-out.
    pub quarantined: u64,
    /// Failed starts in a row (0 when the last one worked).
    pub failures: u32,
    /// Set while the pool waits after failures: how long it still waits.
    pub backing_off_for: Option<Duration>,
    /// The last start failure, as the backend said it (no credentials).
    pub last_error: Option<String>,
}

impl Pools {
    /// The pools' state for the operator.
    pub fn views(&self) -> Vec<PoolView> {
        let now = Instant::now();
        self.pools
            .iter()
            .map(|pool| {
                let config = pool.config();
                let snapshot_taken_at_ms = pool.snapshot().map(|s| s.taken_at_ms);
                let state = pool.state();
                PoolView {
                    key: config.key(),
                    engine: config.engine,
                    backend: self.metrics_backend,
                    snapshot_taken_at_ms,
                    features: config
                        .features
                        .iter()
                        .map(|f| f.name().to_owned())
                        .collect(),
                    min_idle: config.min_idle,
                    max_total: config.max_total,
                    target: state.target,
                    idle: state.idle.len(),
                    starting: state.starting,
                    handed_out: state.handed_out,
                    misses: state.misses,
                    quarantined: state.quarantined,
                    failures: state.failures,
                    backing_off_for: state
                        .backoff_until
                        .filter(|until| *until > now)
                        .map(|until| until - now),
                    last_error: state.last_error.clone(),
                }
            })
            .collect()
    }

    /// New sizes for the pool of `key`, or a new pool of it with them (no features): the
    /// refill loop adds or removes members to match. True when the pool was created; the
    /// refusal names the rule the sizes break.
    pub fn set(&self, key: &PoolKey, min_idle: usize, max_total: usize) -> Result<bool, String> {
        let mut config = match self.pool_of(key) {
            Some(pool) => pool.config(),
            None => PoolConfig {
                engine: key.engine,
                clone_of: key.clone_of.clone(),
                features: BTreeSet::new(),
                min_idle,
                max_total,
            },
        };
        config.min_idle = min_idle;
        config.max_total = max_total;
        config.validate()?;
        let (pool, created) = self.pools.add(&config);
        *pool.config.lock().unwrap_or_else(|p| p.into_inner()) = config;
        {
            let mut state = pool.state();
            // The operator's sizes rule from now on; demand grows the target again.
            state.target = min_idle;
            // An operator's change is a reason to try again now.
            state.backoff_until = None;
        }
        self.wake.notify_one();
        Ok(created)
    }

    pub(super) fn refresh_gauges(&self, pool: impl Borrow<Pool>, metrics: &Metrics) {
        let pool = pool.borrow();
        let key = pool.config().key();
        let state = pool.state();
        let backing_off = state.backoff_until.is_some_and(|u| u > Instant::now());
        metrics.pool_state(&key, self.metrics_backend, state.idle.len(), backing_off);
    }
}
