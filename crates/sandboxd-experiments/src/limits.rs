//! What one run may cost. Every limit has a default and a ceiling; an agent may ask for less or
//! more up to the ceiling, never past it, and the answer states the limits the run had.

use std::time::Duration;

use sandboxd_domain::verbs::ExperimentLimits as LimitsRequest;
use serde::Serialize;

/// The limits one run is held to, as the runtime enforces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Wall time from the first instruction to the answer (epoch interruption, and a timer
    /// around every host call).
    pub wall_ms: u64,
    /// Units of WebAssembly fuel (about one per instruction): CPU, apart from time spent
    /// waiting on `sql()`.
    pub fuel: u64,
    /// Linear memory of the guest, bytes (CPython's heap lives in it).
    pub memory_bytes: u64,
    /// Characters of printed output kept; the rest is counted and dropped.
    pub output_chars: u32,
    /// `sql()` calls per run.
    pub sql_calls: u32,
    /// Time one `sql()` statement may take (`statement_timeout` on the agent's connection).
    pub sql_ms: u64,
    /// Rows one `sql()` call answers; the rest are dropped and the answer says so.
    pub sql_rows: u32,
}

/// Which limit a run met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    WallMs,
    Fuel,
    MemoryBytes,
    OutputChars,
    SqlCalls,
    SqlMs,
    SqlRows,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::WallMs => "wall_ms",
            Limit::Fuel => "fuel",
            Limit::MemoryBytes => "memory_bytes",
            Limit::OutputChars => "output_chars",
            Limit::SqlCalls => "sql_calls",
            Limit::SqlMs => "sql_ms",
            Limit::SqlRows => "sql_rows",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One limit's default and the range an agent may pick from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bounds {
    pub min: u64,
    pub default: u64,
    pub max: u64,
}

/// The defaults and ceilings of every limit (an operator's to change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub wall_ms: Bounds,
    pub fuel: Bounds,
    pub memory_bytes: Bounds,
    pub output_chars: Bounds,
    pub sql_calls: Bounds,
    pub sql_ms: Bounds,
    pub sql_rows: Bounds,
}

const MIB: u64 = 1024 * 1024;

impl Default for Policy {
    fn default() -> Self {
        Self {
            wall_ms: Bounds {
                min: 100,
                default: 10_000,
                max: 60_000,
            },
            // CPython in the guest spends a few hundred units per bytecode; the default lets a
            // loop run about as long as the default wall time allows.
            fuel: Bounds {
                min: 1_000_000,
                default: 20_000_000_000,
                max: 200_000_000_000,
            },
            // The interpreter's own image takes about 30 MiB of it.
            memory_bytes: Bounds {
                min: 64 * MIB,
                default: 256 * MIB,
                max: 1024 * MIB,
            },
            output_chars: Bounds {
                min: 1,
                default: 64 * 1024,
                max: 1024 * 1024,
            },
            sql_calls: Bounds {
                min: 0,
                default: 1_000,
                max: 100_000,
            },
            sql_ms: Bounds {
                min: 10,
                default: 5_000,
                max: 30_000,
            },
            sql_rows: Bounds {
                min: 1,
                default: 1_000,
                max: 10_000,
            },
        }
    }
}

/// A limit asked for outside its range: which, what was asked, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limits.{limit} is {asked}; allowed: {min} to {max} (default {default})")]
pub struct OutOfBounds {
    pub limit: Limit,
    pub asked: u64,
    pub min: u64,
    pub max: u64,
    pub default: u64,
}

impl Policy {
    /// One limit's default and range.
    pub fn bounds(&self, limit: Limit) -> Bounds {
        match limit {
            Limit::WallMs => self.wall_ms,
            Limit::Fuel => self.fuel,
            Limit::MemoryBytes => self.memory_bytes,
            Limit::OutputChars => self.output_chars,
            Limit::SqlCalls => self.sql_calls,
            Limit::SqlMs => self.sql_ms,
            Limit::SqlRows => self.sql_rows,
        }
    }

    /// The limits a run gets for `request`, or the first one asked for out of its range.
    pub fn resolve(&self, request: &LimitsRequest) -> Result<Limits, OutOfBounds> {
        let pick = |limit: Limit, bounds: Bounds, asked: Option<u64>| match asked {
            None => Ok(bounds.default),
            Some(asked) if (bounds.min..=bounds.max).contains(&asked) => Ok(asked),
            Some(asked) => Err(OutOfBounds {
                limit,
                asked,
                min: bounds.min,
                max: bounds.max,
                default: bounds.default,
            }),
        };
        let narrow = |value: u64| u32::try_from(value).unwrap_or(u32::MAX);
        Ok(Limits {
            wall_ms: pick(Limit::WallMs, self.wall_ms, request.wall_ms)?,
            fuel: pick(Limit::Fuel, self.fuel, request.fuel)?,
            memory_bytes: pick(Limit::MemoryBytes, self.memory_bytes, request.memory_bytes)?,
            output_chars: narrow(pick(
                Limit::OutputChars,
                self.output_chars,
                request.output_chars.map(u64::from),
            )?),
            sql_calls: narrow(pick(
                Limit::SqlCalls,
                self.sql_calls,
                request.sql_calls.map(u64::from),
            )?),
            sql_ms: pick(Limit::SqlMs, self.sql_ms, request.sql_ms)?,
            sql_rows: narrow(pick(
                Limit::SqlRows,
                self.sql_rows,
                request.sql_rows.map(u64::from),
            )?),
        })
    }
}

impl Limits {
    pub fn wall(&self) -> Duration {
        Duration::from_millis(self.wall_ms)
    }

    pub fn sql_timeout(&self) -> Duration {
        Duration::from_millis(self.sql_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_out_limits_take_their_defaults() {
        let policy = Policy::default();
        let limits = policy.resolve(&LimitsRequest::default()).expect("defaults");
        assert_eq!(limits.wall_ms, policy.wall_ms.default);
        assert_eq!(u64::from(limits.sql_rows), policy.sql_rows.default);
    }

    #[test]
    fn a_limit_past_its_ceiling_is_refused_naming_the_range() {
        let policy = Policy::default();
        let err = policy
            .resolve(&LimitsRequest {
                wall_ms: Some(2_000),
                memory_bytes: Some(8 * 1024 * MIB),
                ..LimitsRequest::default()
            })
            .expect_err("too much memory");
        assert_eq!(err.limit, Limit::MemoryBytes);
        let text = err.to_string();
        assert!(text.contains("limits.memory_bytes"), "{text}");
        assert!(
            text.contains(&policy.memory_bytes.max.to_string()),
            "{text}"
        );
    }

    #[test]
    fn the_verbs_schema_states_the_shipped_ranges() {
        let schema = sandboxd_domain::verbs::schema(sandboxd_domain::roles::Verb::RunExperiment);
        let shown = &schema["$defs"]["ExperimentLimits"]["properties"];
        let policy = Policy::default();
        for limit in [
            Limit::WallMs,
            Limit::Fuel,
            Limit::MemoryBytes,
            Limit::OutputChars,
            Limit::SqlCalls,
            Limit::SqlMs,
            Limit::SqlRows,
        ] {
            let bounds = policy.bounds(limit);
            let property = &shown[limit.name()];
            assert_eq!(property["minimum"], bounds.min, "{limit}: {property}");
            assert_eq!(property["maximum"], bounds.max, "{limit}: {property}");
            let description = property["description"].as_str().unwrap_or_default();
            assert!(
                description.contains(&format!("default {}", bounds.default)),
                "{limit}: {property}"
            );
        }
    }

    #[test]
    fn a_limit_inside_its_range_is_taken_as_asked() {
        let limits = Policy::default()
            .resolve(&LimitsRequest {
                wall_ms: Some(2_000),
                sql_calls: Some(0),
                ..LimitsRequest::default()
            })
            .expect("in range");
        assert_eq!(limits.wall(), Duration::from_secs(2));
        assert_eq!(limits.sql_calls, 0);
    }
}
