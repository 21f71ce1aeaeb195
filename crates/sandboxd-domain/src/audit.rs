//! What the audit trail holds and how it is read: an entry, the filter of a read, a page.

use crate::ProjectSlug;
use crate::entities::Actor;

/// Page size when the filter asks for none, and the most a page may hold.
pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Time-ordered: sorting by id sorts by time.
    pub id: String,
    pub at_ms: i64,
    pub actor: Actor,
    pub action: String,
    pub subject: String,
    pub project: Option<ProjectSlug>,
    pub outcome: String,
    pub duration_ms: u64,
    pub detail: String,
}

impl AuditEntry {
    pub fn is_ok(&self) -> bool {
        self.outcome == "ok"
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeFilter {
    Ok,
    /// Any outcome but `ok`.
    Failed,
    /// Exactly this outcome (an error code).
    Is(String),
}

/// Which entries to read. Every set field narrows the result.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<Actor>,
    pub project: Option<ProjectSlug>,
    pub outcome: Option<OutcomeFilter>,
    /// Only entries older than this id: the `next_before` of the previous page.
    pub before: Option<String>,
    /// Page size; 0 means [`DEFAULT_PAGE`], more than [`MAX_PAGE`] means [`MAX_PAGE`].
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; `None` on the last page.
    pub next_before: Option<String>,
    /// How many entries match the filter in all (ignoring `before` and `limit`).
    pub total: u64,
}
