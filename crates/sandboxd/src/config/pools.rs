//! `[pools.<engine>]` and `[pools."<engine>@<source>"]`: warm pools on the provisioning backend,
//! validated into the broker's `PoolConfig`s. Sizes an operator stored (`sandboxd pools set`)
//! win over these at start, and pools only stored are added to them (the broker's
//! `pools::stored`).

use sandboxd_broker::{PoolConfig, PoolKey};
use sandboxd_domain::Feature;
use serde::{Deserialize, Serialize};

use super::{ConfigError, Settings};

/// One warm pool: an engine's (`[pools.<engine>]`), or of an engine's clones of a source
/// (`[pools."<engine>@<source>"]`, whose members are clones of the source's latest snapshot).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolSettings {
    /// Idle members kept ready, started, proven and prepared, without any agent account.
    pub min_idle: usize,
    /// Most members the pool holds at once, idle or starting; it grows towards this when
    /// requests find it empty and shrinks back to `min_idle` when they stop. Unset: 4, or
    /// `min_idle` when that is more (a `min_idle` alone raises the ceiling with it).
    pub max_total: Option<usize>,
    /// Features every member has active (allowlisted names of the engine).
    pub features: Vec<String>,
}

impl PoolSettings {
    /// The pool's ceiling: as set, else 4 raised to `min_idle` (as for a pool an operator adds
    /// with `sandboxd pools set`).
    pub fn max_total(&self) -> usize {
        self.max_total
            .unwrap_or(PoolConfig::default_max_total(self.min_idle))
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            min_idle: 1,
            max_total: None,
            features: Vec::new(),
        }
    }
}

impl Settings {
    /// The warm pools, validated: a registered engine, allowlisted features, sane sizes.
    pub fn pool_configs(&self) -> Result<Vec<PoolConfig>, ConfigError> {
        self.pools
            .iter()
            .map(|(name, pool)| {
                let invalid = |e: String| ConfigError::Invalid(format!("[pools.{name}]: {e}"));
                let key = PoolKey::parse(name).map_err(invalid)?;
                let engine = key.engine;
                let features = pool
                    .features
                    .iter()
                    .map(|f| Feature::parse(engine, f).map_err(|e| invalid(e.to_string())))
                    .collect::<Result<_, _>>()?;
                let config = PoolConfig {
                    engine,
                    clone_of: key.clone_of,
                    features,
                    min_idle: pool.min_idle,
                    max_total: pool.max_total(),
                };
                config.validate().map_err(ConfigError::Invalid)?;
                Ok(config)
            })
            .collect()
    }
}
