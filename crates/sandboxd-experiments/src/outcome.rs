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
    /// The first calls, one by one (at most a thousand)…
    pub sql_calls: Vec<SqlCall>,
    /// …and how many more were made.
    pub sql_calls_dropped: u64,
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
    /// The script raised: the traceback from its own frames on, cut like output
    /// ([`cut_to`]).
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
    /// No room for the run within the runtime's capacity (retryable, later).
    #[error(transparent)]
    Full(#[from] crate::capacity::Full),
}

/// Characters beyond a cap that a text may keep whole: more than the mark of a cut takes, so a
/// text the guest already cut is not cut again.
pub(crate) const CUT_ROOM: usize = 80;

/// `text` cut to `max` characters when it is longer by more than [`CUT_ROOM`]: its start and
/// its end (where a traceback names the error), and between them how much was left out.
/// The guest (`app.py`'s `capped`) cuts the same way.
pub fn cut_to(text: &str, max: usize) -> String {
    let chars = text.chars().count();
    if chars <= max.saturating_add(CUT_ROOM) {
        return text.to_owned();
    }
    let head = max / 2;
    let tail = max - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(chars - tail).collect();
    format!(
        "{start}\n… ({} characters left out) …\n{end}",
        chars - head - tail
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_keeps_its_start_and_end() {
        let text = format!("Traceback\n{}\nException: the end", "y".repeat(10_000));
        let cut = cut_to(&text, 100);
        assert!(cut.starts_with("Traceback\n"), "{cut}");
        assert!(cut.ends_with("Exception: the end"), "{cut}");
        assert!(cut.contains("characters left out"), "{cut}");
        assert!(
            cut.chars().count() <= 100 + CUT_ROOM,
            "{}",
            cut.chars().count()
        );
        // Cut once, never again.
        assert_eq!(cut_to(&cut, 100), cut);
        assert_eq!(cut_to("short", 1), "short");
    }
}
