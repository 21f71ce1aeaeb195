//! What a run answers: its report (output, the `sql()` calls, what it cost) and how it ended.

use serde::Serialize;

use crate::limits::{Limit, Limits};

/// One `sql()` call, as evidence.
#[derive(Debug, Clone, Serialize)]
pub struct SqlCall {
    /// The statement's first characters.
    pub statement: String,
    pub elapsed_ms: f64,
    pub rows: usize,
    /// `ok`, `refused` (the server said no), `timed_out` or `limit` (the run's limit refused it).
    pub outcome: &'static str,
}

/// What the run did, whichever way it ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// What the script printed (at most `limits.output_chars` characters).
    pub output: String,
    /// Characters of output dropped at the limit.
    pub output_dropped: u64,
    pub sql_calls: Vec<SqlCall>,
    pub elapsed_ms: f64,
    /// Fuel the script burned (unknown when it was interrupted).
    pub fuel_used: Option<u64>,
    /// The most linear memory the guest asked for, bytes.
    pub memory_peak_bytes: u64,
    pub limits: Limits,
    /// Limits met that cut something without ending the run (rows, output).
    pub limits_met: Vec<Limit>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The script ran to its end.
    Completed,
    /// The script raised: the traceback from its own frames on.
    ScriptError { traceback: String },
    /// A limit stopped it.
    LimitHit { limit: Limit, detail: String },
}

/// A run that happened.
#[derive(Debug, Clone)]
pub struct Run {
    pub ending: Ending,
    pub report: RunReport,
}

/// The runtime could not run the script at all: not the script's fault, worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error(
        "the experiment guest is not installed (looked for {path}); an operator installs it with scripts/build-guest.sh"
    )]
    GuestMissing { path: String },
    #[error("the compiled experiment guest was unusable ({detail}); it is being compiled again")]
    GuestCorrupt { detail: String },
    #[error(
        "the experiment guest is being compiled (for {seconds} s so far); it is ready in a moment"
    )]
    Compiling { seconds: u64 },
    #[error("compiling the experiment guest failed: {detail}")]
    CompileFailed { detail: String },
    #[error("the experiment runtime failed: {detail}")]
    Runtime { detail: String },
    #[error("the sandbox connection failed: {detail}")]
    Connection { detail: String },
}
