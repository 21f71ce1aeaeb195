//! Which pool (`PoolKey`), how one is configured (`PoolConfig`), and the setting an operator's sizes are stored under.

use std::collections::BTreeSet;

use sandboxd_domain::{EngineRef, Feature, SourceName};

use super::PoolView;

/// Which pool: an engine's (`postgres`), or an engine's clones of a source (`postgres@shop`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub engine: EngineRef,
    /// The source every member is a clone of; None: ordinary members.
    pub clone_of: Option<SourceName>,
}

impl PoolKey {
    pub fn engine(engine: EngineRef) -> Self {
        Self {
            engine,
            clone_of: None,
        }
    }

    /// `<engine>` or `<engine>@<source>`; the error names what is allowed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (engine, source) = match text.split_once('@') {
            Some((engine, source)) => (engine, Some(source)),
            None => (text, None),
        };
        let engine = EngineRef::parse(engine).map_err(|e| e.to_string())?;
        let clone_of = source
            .map(|source| {
                if !crate::sources::clonable(engine) {
                    return Err(format!(
                        "{engine} cannot be a clone; clonable: {}",
                        crate::sources::clonable_list()
                    ));
                }
                SourceName::parse(source).map_err(|e| e.to_string())
            })
            .transpose()?;
        Ok(Self { engine, clone_of })
    }

    /// Its table in the config file: `[pools.postgres]`, `[pools."postgres@shop"]`.
    pub fn config_table(&self) -> String {
        match &self.clone_of {
            Some(_) => format!("[pools.\"{self}\"]"),
            None => format!("[pools.{self}]"),
        }
    }

    /// The metrics' `clone_of` label: the source, or empty.
    pub(crate) fn source_label(&self) -> String {
        self.clone_of
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.clone_of {
            Some(source) => write!(f, "{}@{source}", self.engine.name),
            None => f.write_str(self.engine.name),
        }
    }
}

/// One pool as configured (`[pools.<engine>]`, `[pools."<engine>@<source>"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub engine: EngineRef,
    /// Members are clones of this source's latest snapshot.
    pub clone_of: Option<SourceName>,
    /// Features every member has active; a request whose features include them takes a
    /// member (the rest are activated after the hand-out).
    pub features: BTreeSet<Feature>,
    /// Idle members kept ready at all times.
    pub min_idle: usize,
    /// Most members the pool holds at once, idle or starting.
    pub max_total: usize,
}

impl PoolConfig {
    /// The ceiling when none is given: 4, or `min_idle` when that is more.
    pub const DEFAULT_MAX_TOTAL: usize = 4;

    /// The ceiling for `min_idle` when none is given: [`Self::DEFAULT_MAX_TOTAL`] raised to it
    /// (a `min_idle` alone raises the ceiling with it).
    pub fn default_max_total(min_idle: usize) -> usize {
        Self::DEFAULT_MAX_TOTAL.max(min_idle)
    }

    /// An operator's new sizes for a pool configured as `current` (None: a pool not there yet):
    /// a `min_idle` alone keeps the pool's ceiling, raised to it when it is more.
    pub fn sizes(
        current: Option<&PoolView>,
        min_idle: usize,
        max_total: Option<usize>,
    ) -> (usize, usize) {
        let max_total = max_total.unwrap_or(match current {
            Some(pool) => pool.max_total.max(min_idle),
            None => Self::default_max_total(min_idle),
        });
        (min_idle, max_total)
    }

    pub fn key(&self) -> PoolKey {
        PoolKey {
            engine: self.engine,
            clone_of: self.clone_of.clone(),
        }
    }

    /// `min_idle` ≤ `max_total`, and a pool of at least one member.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_total == 0 {
            return Err(format!(
                "pools.{}: max_total must be at least 1",
                self.key()
            ));
        }
        if self.min_idle > self.max_total {
            return Err(format!(
                "pools.{}: min_idle ({}) must not exceed max_total ({})",
                self.key(),
                self.min_idle,
                self.max_total
            ));
        }
        Ok(())
    }
}

/// The settings key holding an operator's sizes for a pool (`min_idle,max_total`).
pub(crate) fn size_setting(key: &PoolKey) -> String {
    format!("pool_size.{key}")
}

/// Sizes read back from [`size_setting`]; None when malformed.
pub(crate) fn parse_sizes(value: &str) -> Option<(usize, usize)> {
    let (min_idle, max_total) = value.split_once(',')?;
    Some((
        min_idle.trim().parse().ok()?,
        max_total.trim().parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min_idle: usize, max_total: usize) -> PoolConfig {
        PoolConfig {
            engine: sandboxd_domain::engines::all().next().expect("an engine"),
            clone_of: None,
            features: BTreeSet::new(),
            min_idle,
            max_total,
        }
    }

    #[test]
    fn sizes_are_validated_with_the_rule_named() {
        assert!(config(2, 4).validate().is_ok());
        assert!(config(0, 1).validate().is_ok());
        assert!(
            config(5, 4)
                .validate()
                .expect_err("refused")
                .contains("must not exceed max_total")
        );
        assert!(
            config(0, 0)
                .validate()
                .expect_err("refused")
                .contains("at least 1")
        );
    }

    #[test]
    fn a_min_idle_alone_raises_the_ceiling_with_it() {
        assert_eq!(PoolConfig::sizes(None, 2, None), (2, 4));
        assert_eq!(PoolConfig::sizes(None, 6, None), (6, 6));
        assert_eq!(PoolConfig::sizes(None, 6, Some(8)), (6, 8));
    }

    #[test]
    fn stored_sizes_parse_back() {
        assert_eq!(parse_sizes("2,6"), Some((2, 6)));
        assert_eq!(parse_sizes(" 0 , 1 "), Some((0, 1)));
        assert_eq!(parse_sizes("2"), None);
        assert_eq!(parse_sizes("a,b"), None);
    }
}
