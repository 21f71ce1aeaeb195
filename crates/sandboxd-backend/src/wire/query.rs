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
    /// Rows an INSERT, UPDATE, DELETE, MERGE or `CREATE TABLE … AS` wrote, as the server
    /// counted them (0 for DDL); None for a statement that returns rows (its rows are the
    /// answer, even with `RETURNING`) and for Redis.
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

/// A value bound to a statement's placeholder (`$1` …), sent apart from the statement's text.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl Param {
    /// The value as the server's input functions read it; None for NULL.
    pub(crate) fn as_text(&self) -> Option<String> {
        match self {
            Param::Null => None,
            Param::Bool(b) => Some(b.to_string()),
            Param::Int(n) => Some(n.to_string()),
            Param::Float(f) if f.is_nan() => Some("NaN".to_owned()),
            Param::Float(f) if f.is_infinite() => {
                Some(if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned())
            }
            Param::Float(f) => Some(format!("{f:?}")),
            Param::Text(text) => Some(text.clone()),
        }
    }
}

/// Collects rows under `limits`; `push` answers false once no more rows fit.
#[derive(Debug)]
pub(crate) struct Collector {
    limits: QueryLimits,
    bytes: usize,
    /// The statement described a row set: its count is of rows returned, not affected.
    returns_rows: bool,
    pub answer: QueryAnswer,
}

impl Collector {
    pub fn new(limits: QueryLimits) -> Self {
        Self {
            limits,
            bytes: 0,
            returns_rows: false,
            answer: QueryAnswer::default(),
        }
    }

    pub fn limits(&self) -> QueryLimits {
        self.limits
    }

    /// The columns of a statement that returns rows (a SELECT, `RETURNING`, SHOW, EXPLAIN).
    pub fn describe(&mut self, columns: Vec<String>) {
        self.answer.columns = columns;
        self.returns_rows = true;
    }

    /// The server's count at the end of the statement: rows it wrote, unless it returned rows
    /// (then the count is of those, which `rows` already shows).
    pub fn complete(&mut self, count: u64) {
        if !self.returns_rows {
            self.answer.affected = Some(count);
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

    #[test]
    fn only_a_statement_without_rows_reports_rows_affected() {
        let mut select = Collector::new(QueryLimits::default());
        select.describe(vec!["n".into()]);
        assert!(select.push(vec![json!("1")]));
        select.complete(1);
        assert_eq!(select.answer.affected, None);

        let mut update = Collector::new(QueryLimits::default());
        update.complete(3);
        assert_eq!(update.answer.affected, Some(3));
    }

    #[test]
    fn params_are_sent_as_the_servers_input_reads_them() {
        assert_eq!(Param::Null.as_text(), None);
        assert_eq!(Param::Bool(true).as_text().as_deref(), Some("true"));
        assert_eq!(Param::Int(-7).as_text().as_deref(), Some("-7"));
        assert_eq!(Param::Float(0.1).as_text().as_deref(), Some("0.1"));
        assert_eq!(Param::Float(1e300).as_text().as_deref(), Some("1e300"));
        assert_eq!(Param::Float(2.0).as_text().as_deref(), Some("2.0"));
        assert_eq!(
            Param::Float(f64::NEG_INFINITY).as_text().as_deref(),
            Some("-Infinity")
        );
        let quote = "it's'; drop table x; --";
        assert_eq!(Param::Text(quote.into()).as_text().as_deref(), Some(quote));
    }
}
