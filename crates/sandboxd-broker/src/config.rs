//! The broker's settings. The binary builds them from its settings tree.

use std::time::Duration;

use sandboxd_domain::EnvPrefix;
use sandboxd_domain::roles::RoleBook;

/// The settings key of the master switch.
pub const SANDBOX_DB_ENABLED: &str = "sandbox_db_enabled";
/// The environment variable that overrides the stored master switch (§2) while it is set. The
/// binary reads it at start; the broker only names it when it says what rules the switch.
pub const ENABLED_OVERRIDE_ENV: &str = "ROBOCO_SANDBOX_DB_ENABLED";

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub env_prefix: EnvPrefix,
    pub roles: RoleBook,
    /// Sandboxes provisioned within this window are never reaped: a sandbox can exist before
    /// its agent does.
    pub grace: Duration,
    /// Reap sandboxes older than this whatever their owner does (None: no limit).
    pub max_lifetime: Option<Duration>,
    /// Reap sandboxes their owner has not asked for in this long (None: never).
    pub idle_ttl: Option<Duration>,
    pub janitor_interval: Duration,
    /// An MCP session unused for this long is refused like an unknown one (the client starts a
    /// new session) and swept from the store.
    pub mcp_session_ttl: Duration,
    /// [`ENABLED_OVERRIDE_ENV`], read by the binary at start: overrides the stored switch.
    pub enabled_override: Option<bool>,
    /// Warm pools on the primary backend, one per engine at most.
    pub pools: Vec<crate::pools::PoolConfig>,
    pub pool_tuning: crate::pools::PoolTuning,
    /// How long a feature probe is trusted before what runs the engine (image id, host
    /// packages) is compared again; a change means a new probe.
    pub feature_probe_recheck: Duration,
    /// `run_experiment`'s guest and limits; None turns experiments off.
    pub experiments: Option<crate::ExperimentsConfig>,
    /// Replicas share the store (PostgreSQL): leases instead of in-memory locks alone; None
    /// for a single daemon.
    pub replication: Option<crate::ReplicationConfig>,
    /// `sandbox_sql`, `run_experiment` and `reset_sandbox` calls one agent may have under way
    /// at once; past it a call is refused (`limit_exceeded`, retryable), not queued.
    pub max_heavy_calls_per_agent: usize,
    /// The operator's ceiling on a project's data space per engine (`projects set … --size`):
    /// a size above it is refused, naming it. Every MiB of it may cost that much memory per
    /// instance (the memory cap grows with the data space).
    pub max_sandbox_size_mb: u64,
}

impl BrokerConfig {
    /// A day: an agent's working session, with room for pauses; a client whose session expired
    /// simply initializes a new one.
    pub const DEFAULT_MCP_SESSION_TTL: Duration = Duration::from_secs(24 * 3600);
    /// Room for a test suite's few concurrent statements beside an experiment, not for a flood.
    pub const DEFAULT_MAX_HEAVY_CALLS_PER_AGENT: usize = 4;
    /// Room for a full Django suite on MariaDB (its runner clones the test database), and
    /// bounded: a 2 GB data space may cost that much memory beside the server's own.
    pub const DEFAULT_MAX_SANDBOX_SIZE_MB: u64 = 2048;
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            env_prefix: EnvPrefix::default(),
            roles: RoleBook::default(),
            grace: Duration::from_secs(180),
            max_lifetime: None,
            idle_ttl: None,
            janitor_interval: Duration::from_secs(30),
            mcp_session_ttl: Self::DEFAULT_MCP_SESSION_TTL,
            enabled_override: None,
            pools: Vec::new(),
            pool_tuning: crate::pools::PoolTuning::default(),
            feature_probe_recheck: Duration::from_secs(60),
            experiments: None,
            replication: None,
            max_heavy_calls_per_agent: Self::DEFAULT_MAX_HEAVY_CALLS_PER_AGENT,
            max_sandbox_size_mb: Self::DEFAULT_MAX_SANDBOX_SIZE_MB,
        }
    }
}

/// Parses the environment override's value: `1/true/yes/on` and `0/false/no/off`.
pub fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The master switch as stored; off when it was never set or does not parse.
pub(crate) async fn stored_switch(
    store: &sandboxd_store::Store,
) -> Result<bool, sandboxd_store::StoreError> {
    Ok(store
        .get_setting(SANDBOX_DB_ENABLED)
        .await?
        .and_then(|v| parse_switch(&v))
        .unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_values() {
        assert_eq!(parse_switch("TRUE"), Some(true));
        assert_eq!(parse_switch(" off "), Some(false));
        assert_eq!(parse_switch("maybe"), None);
    }
}
