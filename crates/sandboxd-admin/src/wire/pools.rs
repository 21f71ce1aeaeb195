//! `/v1/pools`: warm pools, their sizes, and new ones.

use sandboxd_broker::{PoolConfig, PoolView};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One warm pool: its sizes and what it holds now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PoolOut {
    /// The pool's name: its engine (`postgres`), or `<engine>@<source>` for a pool of clones.
    pub pool: String,
    pub engine: String,
    /// For a pool of clones: the source its members are clones of.
    pub clone_of: Option<String>,
    /// For a pool of clones: when the snapshot its members are made from was taken (Unix
    /// milliseconds); null while the source has none and the pool waits for one.
    pub snapshot_taken_at_ms: Option<i64>,
    /// The backend its members run on (the provisioning backend).
    pub backend: String,
    /// Features every member has active.
    pub features: Vec<String>,
    pub min_idle: usize,
    pub max_total: usize,
    /// What the pool aims to hold idle now: `min_idle`, more after requests found it empty.
    pub target: usize,
    pub idle: usize,
    pub starting: usize,
    /// Members handed out to agents since the daemon started.
    pub handed_out: u64,
    /// Requests that found the pool empty (served by a cold provision).
    pub misses: u64,
    /// Members that stopped answering while idle or failed their hand-out.
    pub quarantined: u64,
    /// Failed starts in a row; 0 when the last start worked.
    pub failures: u32,
    /// Milliseconds the pool still waits before its next start, while it backs off.
    pub backing_off_ms: Option<u64>,
    /// Why the last start failed (no credentials).
    pub last_error: Option<String>,
}

impl From<PoolView> for PoolOut {
    fn from(view: PoolView) -> Self {
        Self {
            pool: view.key.to_string(),
            engine: view.engine.name.to_owned(),
            clone_of: view.key.clone_of.as_ref().map(ToString::to_string),
            snapshot_taken_at_ms: view.snapshot_taken_at_ms,
            backend: view.backend.to_owned(),
            features: view.features,
            min_idle: view.min_idle,
            max_total: view.max_total,
            target: view.target,
            idle: view.idle,
            starting: view.starting,
            handed_out: view.handed_out,
            misses: view.misses,
            quarantined: view.quarantined,
            failures: view.failures,
            backing_off_ms: view
                .backing_off_for
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            last_error: view.last_error,
        }
    }
}

/// Sizes for a warm pool, which is created when there is none of that name yet (no features):
/// stored, applied at once, kept across restarts (where they win over the config file's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPool {
    /// Idle members kept ready (at most `max_total`).
    pub min_idle: usize,
    /// Most members held at once, idle or starting (at least 1). Left out: the pool's ceiling
    /// raised to `min_idle` when that is more; for a new pool 4, or `min_idle` when more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total: Option<usize>,
}

impl PutPool {
    /// `(min_idle, max_total)` for the pool as it is now (None: a new pool).
    pub fn sizes(&self, current: Option<&PoolView>) -> (usize, usize) {
        PoolConfig::sizes(current, self.min_idle, self.max_total)
    }
}
