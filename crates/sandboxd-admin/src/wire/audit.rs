//! `/v1/audit`: the audit log, a page at a time.

use sandboxd_domain::Actor;
use sandboxd_domain::audit::{AuditEntry, AuditPage};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only entries of this agent (its slug).
    pub agent: Option<String>,
    /// Only entries about this project.
    pub project: Option<String>,
    /// `ok`, `failed` (anything but ok), or one error code.
    pub outcome: Option<String>,
    /// The `next_before` of the previous page.
    pub before: Option<String>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryOut {
    pub id: String,
    pub at_ms: i64,
    /// `operator`, `daemon` or `agent:<slug>`.
    pub actor: String,
    pub action: String,
    pub subject: String,
    pub project: Option<String>,
    /// `ok` or an error code.
    pub outcome: String,
    pub duration_ms: u64,
    pub detail: String,
}

pub fn actor_text(actor: &Actor) -> String {
    match actor {
        Actor::Agent(slug) => format!("agent:{slug}"),
        other => other.to_string(),
    }
}

impl From<AuditEntry> for AuditEntryOut {
    fn from(e: AuditEntry) -> Self {
        Self {
            actor: actor_text(&e.actor),
            id: e.id,
            at_ms: e.at_ms,
            action: e.action,
            subject: e.subject,
            project: e.project.map(|p| p.to_string()),
            outcome: e.outcome,
            duration_ms: e.duration_ms,
            detail: e.detail,
        }
    }
}

/// One page of the audit log, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditPageOut {
    pub entries: Vec<AuditEntryOut>,
    /// Pass as `before` for the next (older) page; `null` on the last page.
    pub next_before: Option<String>,
    /// Entries matching the filter in all.
    pub total: u64,
}

impl From<AuditPage> for AuditPageOut {
    fn from(p: AuditPage) -> Self {
        Self {
            entries: p.entries.into_iter().map(AuditEntryOut::from).collect(),
            next_before: p.next_before,
            total: p.total,
        }
    }
}
