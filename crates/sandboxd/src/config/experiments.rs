//! `[experiments]`: `run_experiment`'s guest, where its compiled form is kept, and the limits
//! agents get, validated into the broker's `ExperimentsConfig` (each refusal names the key and
//! the range allowed).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, Settings};

/// `run_experiment`: the guest, where its compiled form is kept, and the limits agents get.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentSettings {
    /// Off: `run_experiment` is refused and no runtime is built.
    pub enabled: bool,
    /// The guest component `scripts/build-guest.sh` builds.
    pub guest: PathBuf,
    /// Where the compiled guest is kept (compiled once per wasmtime version, engine
    /// configuration and guest); default `<state_dir>/experiments`.
    pub cache_dir: Option<PathBuf>,
    /// Wall time a run gets unless it asks otherwise, and the most it may ask for.
    pub wall_ms: u64,
    pub max_wall_ms: u64,
    /// Guest memory a run gets unless it asks otherwise, and the most it may ask for.
    pub memory_mb: u64,
    pub max_memory_mb: u64,
    /// The most `sql()` calls a run may ask for.
    pub max_sql_calls: u64,
    /// Experiments running at once, all agents together…
    pub max_concurrent: usize,
    /// …and of one agent.
    pub max_concurrent_per_agent: usize,
    /// The most the memory limits of the experiments running may add up to: a run that does
    /// not fit waits `admission_wait_ms`, then is refused.
    pub memory_budget_mb: u64,
    pub admission_wait_ms: u64,
    /// Threads that run guests, apart from the daemon's own (0: one fewer than the host's
    /// CPUs, at least one).
    pub threads: usize,
}

impl Default for ExperimentSettings {
    fn default() -> Self {
        let policy = sandboxd_experiments::Policy::default();
        let capacity = sandboxd_experiments::Capacity::default();
        Self {
            enabled: true,
            guest: PathBuf::from("/var/cache/sandboxd-guest/current/experiment.wasm"),
            cache_dir: None,
            wall_ms: policy.wall_ms.default,
            max_wall_ms: policy.wall_ms.max,
            memory_mb: policy.memory_bytes.default / MIB,
            max_memory_mb: policy.memory_bytes.max / MIB,
            max_sql_calls: policy.sql_calls.max,
            max_concurrent: capacity.max_runs,
            max_concurrent_per_agent: sandboxd_broker::ExperimentsConfig::DEFAULT_MAX_PER_AGENT,
            memory_budget_mb: capacity.memory_budget_bytes / MIB,
            admission_wait_ms: u64::try_from(capacity.wait.as_millis()).unwrap_or(u64::MAX),
            threads: 0,
        }
    }
}

const MIB: u64 = 1024 * 1024;

impl Settings {
    /// `run_experiment`'s configuration (None when turned off), its limits validated.
    pub fn experiments_config(
        &self,
    ) -> Result<Option<sandboxd_broker::ExperimentsConfig>, ConfigError> {
        let settings = &self.experiments;
        if !settings.enabled {
            return Ok(None);
        }
        let mut policy = sandboxd_experiments::Policy::default();
        let within = |name: &str, value: u64, max: u64, floor: u64| {
            if value < floor || value > max {
                return Err(ConfigError::Invalid(format!(
                    "experiments.{name} is {value}; allowed: {floor} to {max}"
                )));
            }
            Ok(value)
        };
        policy.wall_ms.max = within(
            "max_wall_ms",
            settings.max_wall_ms,
            600_000,
            policy.wall_ms.min,
        )?;
        policy.wall_ms.default = within(
            "wall_ms",
            settings.wall_ms,
            policy.wall_ms.max,
            policy.wall_ms.min,
        )?;
        let memory_floor = policy.memory_bytes.min / MIB;
        policy.memory_bytes.max = within(
            "max_memory_mb",
            settings.max_memory_mb,
            16 * 1024,
            memory_floor,
        )? * MIB;
        policy.memory_bytes.default = within(
            "memory_mb",
            settings.memory_mb,
            policy.memory_bytes.max / MIB,
            memory_floor,
        )? * MIB;
        policy.sql_calls.max = within("max_sql_calls", settings.max_sql_calls, 10_000_000, 0)?;
        policy.sql_calls.default = policy.sql_calls.default.min(policy.sql_calls.max);
        // A run that may ask for `max_memory_mb` must fit the budget on its own.
        let memory_budget_mb = within(
            "memory_budget_mb",
            settings.memory_budget_mb,
            1024 * 1024,
            policy.memory_bytes.max / MIB,
        )?;
        let capacity = sandboxd_experiments::Capacity {
            max_runs: within("max_concurrent", settings.max_concurrent as u64, 10_000, 1)? as usize,
            memory_budget_bytes: memory_budget_mb * MIB,
            wait: Duration::from_millis(within(
                "admission_wait_ms",
                settings.admission_wait_ms,
                600_000,
                0,
            )?),
            threads: match settings.threads {
                0 => sandboxd_experiments::Capacity::default_threads(),
                n => within("threads", n as u64, 1024, 1)? as usize,
            },
        };
        let max_per_agent = within(
            "max_concurrent_per_agent",
            settings.max_concurrent_per_agent as u64,
            10_000,
            1,
        )? as usize;
        Ok(Some(sandboxd_broker::ExperimentsConfig {
            files: sandboxd_experiments::GuestFiles {
                component: settings.guest.clone(),
                cache_dir: settings
                    .cache_dir
                    .clone()
                    .unwrap_or_else(|| self.state_dir.join("experiments")),
            },
            policy,
            capacity,
            max_per_agent,
        }))
    }
}
