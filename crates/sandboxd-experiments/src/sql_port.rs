//! The guest's one way out: `sql()`, served by whoever runs the experiment (the broker, over the
//! agent's own connection). The runtime knows nothing of databases; it only counts, times and
//! bounds the calls.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One value a script binds to a statement's placeholder (`$1`, `$2`, …): sent apart from the
/// statement, never spliced into its text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SqlParam {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

/// What one statement answered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SqlRows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
    pub affected: Option<u64>,
    /// True when rows were left out at the run's `sql_rows` limit (or a byte cap).
    pub truncated: bool,
}

/// Why a statement gave no rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlRefusal {
    /// The server refused it (a syntax error, a permission denied): its own words.
    Server(String),
    /// The server cancelled it at the statement time limit.
    TimedOut,
    /// The connection is gone or never came up: the run cannot go on.
    Unavailable(String),
}

/// Runs the statements of one experiment, in order, as the agent's account.
#[async_trait::async_trait]
pub trait SqlPort: Send + Sync {
    /// One statement with `params` bound to its placeholders (none: the statement as it is),
    /// at most `max_rows` rows back, cancelled by the server past `timeout` (the runtime also
    /// stops waiting a little after, and at the run's own deadline).
    async fn run(
        &mut self,
        statement: &str,
        params: &[SqlParam],
        max_rows: usize,
        timeout: Duration,
    ) -> Result<SqlRows, SqlRefusal>;
}
