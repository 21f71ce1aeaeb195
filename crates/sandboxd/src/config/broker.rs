//! `[broker]`: sandboxes' lifetimes, the janitor, MCP sessions, warm pools' tuning, per-agent
//! caps and replicas' leases. `broker_config` makes the broker's `BrokerConfig` of it.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use sandboxd_backend::duration_serde;
use sandboxd_broker::{BrokerConfig, PoolTuning, ReplicationConfig};
use sandboxd_domain::roles::RoleBook;
use serde::{Deserialize, Serialize};

use super::{ConfigError, Settings};

/// The broker: lifetimes, the janitor, roles.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerSettings {
    /// Sandboxes younger than this are never reaped.
    #[serde(rename = "grace_secs", with = "duration_serde::secs")]
    pub grace: Duration,
    /// Reap sandboxes older than this whatever their owner does (unset: no limit).
    #[serde(rename = "max_lifetime_secs", with = "duration_serde::opt_secs")]
    pub max_lifetime: Option<Duration>,
    /// Reap sandboxes their owner has not asked for in this long (unset: never).
    #[serde(rename = "idle_ttl_secs", with = "duration_serde::opt_secs")]
    pub idle_ttl: Option<Duration>,
    /// The janitor's tick (0 is taken as 1 s).
    #[serde(rename = "janitor_interval_secs", with = "duration_serde::secs")]
    pub janitor_interval: Duration,
    /// An MCP session unused for this long is refused (the client starts a new one) and swept.
    #[serde(rename = "mcp_session_ttl_secs", with = "duration_serde::nonzero_secs")]
    pub mcp_session_ttl: Duration,
    /// MCP sessions one agent holds at once; opening one more closes its least recently used.
    pub mcp_sessions_per_agent: NonZeroUsize,
    /// A call in a 2025-11-25 MCP session whose answer is ready this soon gets it as JSON, not
    /// as an event stream; a slower one keeps the stream, resumable across a restart. 0: always
    /// a stream.
    #[serde(rename = "mcp_session_json_budget_ms", with = "duration_serde::millis")]
    pub mcp_session_json_budget: Duration,
    /// A TOML role file (`[roles.<name>] verbs = [...]`); default: the built-in roles.
    pub roles_file: Option<PathBuf>,
    /// A warm pool whose member failed to start waits this long before the next attempt,
    /// doubling with every further failure…
    #[serde(
        rename = "pool_backoff_base_ms",
        with = "duration_serde::nonzero_millis"
    )]
    pub pool_backoff_base: Duration,
    /// …up to this long.
    #[serde(rename = "pool_backoff_max_secs", with = "duration_serde::secs")]
    pub pool_backoff_max: Duration,
    /// How often idle pool members are asked whether they still answer.
    #[serde(
        rename = "pool_check_interval_secs",
        with = "duration_serde::nonzero_secs"
    )]
    pub pool_check_interval: Duration,
    /// Members each pool starts at once (default: the host's cores, at least 2).
    pub pool_parallel_starts: NonZeroUsize,
    /// How long a feature probe is trusted before what runs the engine (the image's id, the
    /// host's programs and packages) is compared again; a change means a new probe.
    #[serde(rename = "feature_probe_recheck_secs", with = "duration_serde::secs")]
    pub feature_probe_recheck: Duration,
    /// Replicas on a PostgreSQL store: how long an agent's lease outlives a crashed holder
    /// (another replica takes over after it). Unused on SQLite. 0 is taken as 1 s.
    #[serde(rename = "lease_ttl_secs", with = "duration_serde::secs")]
    pub lease_ttl: Duration,
    /// `sandbox_sql`, `run_experiment` and `reset_sandbox` calls one agent may have under way
    /// at once; past it a call is refused (`limit_exceeded`, retryable).
    pub max_heavy_calls_per_agent: NonZeroUsize,
    /// The most data space a project may give one engine (`projects set … --size`), in MiB.
    pub max_sandbox_size_mb: u64,
}

impl Default for BrokerSettings {
    fn default() -> Self {
        let base = BrokerConfig::default();
        Self {
            grace: base.grace,
            max_lifetime: base.max_lifetime,
            idle_ttl: base.idle_ttl,
            janitor_interval: base.janitor_interval,
            mcp_session_ttl: base.mcp_session_ttl,
            mcp_sessions_per_agent: NonZeroUsize::new(
                sandboxd_mcp::McpConfig::DEFAULT_SESSIONS_PER_AGENT,
            )
            .expect("the gateway's default holds sessions"),
            mcp_session_json_budget: sandboxd_mcp::McpConfig::DEFAULT_SESSION_JSON_BUDGET,
            roles_file: None,
            pool_backoff_base: base.pool_tuning.backoff_base,
            pool_backoff_max: base.pool_tuning.backoff_max,
            pool_check_interval: base.pool_tuning.check_interval,
            pool_parallel_starts: NonZeroUsize::new(base.pool_tuning.parallel_starts)
                .expect("pools start members"),
            feature_probe_recheck: base.feature_probe_recheck,
            lease_ttl: ReplicationConfig::default().lease_ttl,
            max_heavy_calls_per_agent: NonZeroUsize::new(base.max_heavy_calls_per_agent)
                .expect("the broker's default admits heavy calls"),
            max_sandbox_size_mb: base.max_sandbox_size_mb,
        }
    }
}

/// The janitor's tick and a lease's lifetime are at least this long, whatever the file says.
const AT_LEAST_A_SECOND: Duration = Duration::from_secs(1);

impl Settings {
    /// The broker's configuration: `[broker]`, the warm pools and `run_experiment`'s limits,
    /// with the role book and the master switch's override the daemon read, and leases when
    /// the store is shared by replicas (`replicated`).
    pub fn broker_config(
        &self,
        roles: RoleBook,
        enabled_override: Option<bool>,
        replicated: bool,
    ) -> Result<BrokerConfig, ConfigError> {
        let broker = &self.broker;
        Ok(BrokerConfig {
            env_prefix: self.env_prefix.clone(),
            roles,
            grace: broker.grace,
            max_lifetime: broker.max_lifetime,
            idle_ttl: broker.idle_ttl,
            janitor_interval: broker.janitor_interval.max(AT_LEAST_A_SECOND),
            mcp_session_ttl: broker.mcp_session_ttl,
            enabled_override,
            pools: self.pool_configs()?,
            pool_tuning: self.pool_tuning(),
            feature_probe_recheck: broker.feature_probe_recheck,
            experiments: self.experiments_config()?,
            max_heavy_calls_per_agent: broker.max_heavy_calls_per_agent.get(),
            max_sandbox_size_mb: broker.max_sandbox_size_mb,
            replication: replicated.then(|| ReplicationConfig {
                lease_ttl: broker.lease_ttl.max(AT_LEAST_A_SECOND),
            }),
        })
    }

    pub fn pool_tuning(&self) -> PoolTuning {
        PoolTuning {
            backoff_base: self.broker.pool_backoff_base,
            backoff_max: self.broker.pool_backoff_max,
            check_interval: self.broker.pool_check_interval,
            parallel_starts: self.broker.pool_parallel_starts.get(),
        }
    }
}
