//! The audit trail the broker writes: one [`AuditRecord`] per verb call and per provision,
//! release, reap and operator change. Actions and outcomes are enums, so a row can only say what
//! the broker knows how to say; the store keeps their names.

use std::fmt;
use std::time::Instant;

use sandboxd_domain::Actor;
use sandboxd_domain::ProjectSlug;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::lifecycle;
use sandboxd_domain::roles::Verb;
use sandboxd_store::NewAuditEntry;

use crate::Broker;

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    /// An agent's verb call.
    Verb(Verb),
    Provision,
    Release,
    Reconcile,
    Reap,
    SpawnAgent,
    RemoveAgent,
    SetProject,
    AddTask,
    TeardownSandbox,
    SetSetting,
    Login,
    JanitorRun,
    PutSource,
    RemoveSource,
    Snapshot,
    /// An operator asked the daemon to restart in place.
    Restart,
}

impl AuditAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verb(verb) => verb.name(),
            Self::Provision => "provision",
            Self::Release => "release",
            Self::Reconcile => "reconcile",
            Self::Reap => "reap",
            Self::SpawnAgent => "spawn_agent",
            Self::RemoveAgent => "remove_agent",
            Self::SetProject => "set_project",
            Self::AddTask => "add_task",
            Self::TeardownSandbox => "teardown_sandbox",
            Self::SetSetting => "set_setting",
            Self::Login => "login",
            Self::JanitorRun => "janitor_run",
            Self::PutSource => "put_source",
            Self::RemoveSource => "remove_source",
            Self::Snapshot => "snapshot",
            Self::Restart => "restart",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How it ended: `ok`, an error code an agent would see, a refused login, or logins refused
/// unread because the client tried too often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed(ErrorCode),
    Unauthorized,
    RateLimited,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed(code) => code.as_str(),
            Self::Unauthorized => "unauthorized",
            Self::RateLimited => "rate_limited",
        }
    }

    pub fn of<T, E>(result: &Result<T, E>, failure: ErrorCode) -> Self {
        match result {
            Ok(_) => Self::Ok,
            Err(_) => Self::Failed(failure),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One audit row as the broker builds it. `subject` and `detail` carry names, engines, codes
/// and counts only: never a credential.
#[derive(Debug)]
pub(crate) struct AuditRecord<'a> {
    pub actor: Actor,
    pub action: AuditAction,
    /// What it acted on: a sandbox owner, a task id, a project, …
    pub subject: &'a str,
    pub project: Option<&'a ProjectSlug>,
    pub outcome: Outcome,
    /// When the action began; the row records how long it took.
    pub started: Instant,
    pub detail: String,
}

impl Broker {
    /// Records that a client reached the login limit of the operator surface (`panel`); its
    /// further attempts are refused without a row each. `detail` names the client and the
    /// limit, never anything typed.
    pub async fn audit_login_limited(&self, surface: &str, detail: String) {
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::Login,
            subject: surface,
            project: None,
            outcome: Outcome::RateLimited,
            started: Instant::now(),
            detail,
        })
        .await;
    }

    /// Appends an audit row after the answer: stamped now, queued for the writer (written
    /// here only when the queue is full or stopped, or when the daemon reads it back to decide
    /// a later call). A failure to audit is logged, never returned to the caller.
    #[tracing::instrument(name = "audit", skip_all, fields(action = %record.action))]
    pub(crate) async fn audit(&self, record: AuditRecord<'_>) {
        let entry = NewAuditEntry {
            actor: record.actor,
            action: record.action.as_str().to_owned(),
            subject: record.subject.to_owned(),
            project: record.project.cloned(),
            outcome: record.outcome.as_str().to_owned(),
            duration_ms: u64::try_from(record.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail: record.detail,
        };
        // A task move's row decides whether a later hand-over call is a repeat
        // (`verbs/lifecycle.rs` reads the caller's moves back): it is in the store before the
        // answer, so no crash loses a move its caller was told of.
        let read_back = matches!(record.action, AuditAction::Verb(verb) if lifecycle::moves_tasks(verb))
            && record.outcome == Outcome::Ok;
        if read_back {
            self.inner.audit.write_now(entry.stamp()).await;
        } else {
            self.inner.audit.push(entry.stamp()).await;
        }
    }

    /// Waits until every audit row of an action that ended before this call is in the store:
    /// what a reader of the audit log calls first to see its own writes.
    pub async fn flush_audit(&self) {
        self.inner.audit.flush().await;
    }

    /// Writes every queued audit row and stops the writer; rows of later actions are written
    /// by the actions themselves. Called at a clean stop after every task that audits ended,
    /// and before a restart re-executes the daemon.
    pub async fn stop_audit(&self) {
        self.inner.audit.stop().await;
    }
}
