//! One statement (or Redis command) run as the handed-out account for `sandbox_sql`: its limits
//! and its answer. The limits are enforced while the rows arrive, so a huge result never sits in
//! memory: past `max_rows` or `max_bytes` the rest is dropped and the answer says so. Below the
//! driver, the connection itself reads at most [`QueryLimits::wire_max`] bytes per message
//! (`capped.rs`), so a single value larger than `max_bytes` is cut while it arrives, not after.

use std::time::Duration;

use serde::Serialize;

/// What one query may cost.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueryLimits {
    pub max_rows: usize,
    /// Bytes of row values (their JSON text), summed.
    pub max_bytes: usize,
    /// The server cancels the statement past this (`statement_timeout`, `max_statement_time`),
    /// and sandboxd stops waiting a little after.
    #[serde(serialize_with = "as_millis", rename = "timeout_ms")]
    pub timeout: Duration,
}

fn as_millis<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
}

/// What a connection may read beyond `max_bytes`: the protocol's framing, column names, the
/// server's notices and its greeting.
pub(crate) const WIRE_OVERHEAD: usize = 256 * 1024;

impl QueryLimits {
    /// The most one answer (or one message of it) may take on the wire: `max_bytes` and a fixed
    /// overhead. A row over this on the wire is over `max_bytes` as JSON text, so a row cut
    /// here would have been cut by [`Collector`] anyway.
    pub(crate) fn wire_max(&self) -> usize {
        self.max_bytes.saturating_add(WIRE_OVERHEAD)
    }
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_rows: 1000,
            max_bytes: 1024 * 1024,
            timeout: Duration::from_secs(10),
        }
    }
}

/// What a query answered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueryAnswer {
    /// Column names, in order (empty for a statement without rows).
    pub columns: Vec<String>,
    /// Rows of JSON values (SQL text values as strings, NULL as null; Redis replies as JSON).
    pub rows: Vec<Vec<serde_json::Value>>,
    /// Rows the statement affected or returned, as the server counted them, when it says.
    pub affected: Option<u64>,
    /// True when rows were left out because a limit was reached.
    pub truncated: bool,
    /// Which limit cut it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

/// The limit that cut an answer, named as [`QueryLimits`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    MaxRows,
    /// The rows' JSON text, or a single row or message on the wire, went past `max_bytes`.
    MaxBytes,
}

impl Cut {
    pub fn name(self) -> &'static str {
        match self {
            Cut::MaxRows => "max_rows",
            Cut::MaxBytes => "max_bytes",
        }
    }
}

/// Collects rows under `limits`; `push` answers false once no more rows fit.
#[derive(Debug)]
pub(crate) struct Collector {
    limits: QueryLimits,
    bytes: usize,
    pub answer: QueryAnswer,
}

impl Collector {
    pub fn new(limits: QueryLimits) -> Self {
        Self {
            limits,
            bytes: 0,
            answer: QueryAnswer::default(),
        }
    }

    /// Adds one row unless it breaks a limit; false when the result is cut here.
    pub fn push(&mut self, row: Vec<serde_json::Value>) -> bool {
        if self.answer.truncated {
            return false;
        }
        if self.answer.rows.len() >= self.limits.max_rows {
            self.cut(Cut::MaxRows);
            return false;
        }
        let size: usize = row.iter().map(|v| v.to_string().len()).sum();
        if self.bytes + size > self.limits.max_bytes {
            self.cut(Cut::MaxBytes);
            return false;
        }
        self.bytes += size;
        self.answer.rows.push(row);
        true
    }

    /// Marks the answer cut at `limit` (the first cut is the one named).
    pub fn cut(&mut self, limit: Cut) {
        if !self.answer.truncated {
            self.answer.truncated = true;
            self.answer.cut = Some(limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_stop_at_either_limit_and_say_so() {
        let limits = QueryLimits {
            max_rows: 2,
            max_bytes: 100,
            timeout: Duration::from_secs(1),
        };
        let mut by_rows = Collector::new(limits);
        assert!(by_rows.push(vec![json!("a")]));
        assert!(by_rows.push(vec![json!("b")]));
        assert!(!by_rows.push(vec![json!("c")]));
        assert_eq!(by_rows.answer.rows.len(), 2);
        assert!(by_rows.answer.truncated);
        assert_eq!(by_rows.answer.cut, Some(Cut::MaxRows));

        let mut by_bytes = Collector::new(limits);
        assert!(!by_bytes.push(vec![json!("x".repeat(200))]));
        assert!(by_bytes.answer.rows.is_empty());
        assert!(by_bytes.answer.truncated);
        assert_eq!(by_bytes.answer.cut, Some(Cut::MaxBytes));
        // Once cut, nothing more is taken, even a row that would fit.
        assert!(!by_bytes.push(vec![json!("y")]));

        let shown = serde_json::to_value(limits).expect("json");
        assert_eq!(shown["timeout_ms"], 1000);
    }
}
