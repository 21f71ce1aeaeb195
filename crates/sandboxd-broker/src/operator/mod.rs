//! The operator's verbs: agents (`agents.rs`), projects and tasks (`projects.rs`), sandboxes and
//! warm pools (`sandboxes.rs`), settings, audit and the janitor (here). Called by the admin API,
//! the panel and the CLI; every change is audited with the operator as actor.

use std::time::Instant;

use sandboxd_domain::audit::{AuditFilter, AuditPage};
use sandboxd_domain::{Actor, Project};
use sandboxd_domain::{DaemonId, ProjectSlug};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::config::{ENABLED_OVERRIDE_ENV, SANDBOX_DB_ENABLED};
use crate::error::BrokerError;
use crate::janitor::JanitorReport;

mod agents;
mod projects;
mod sandboxes;

pub use agents::{SERVICES_AVAILABLE_ENV, Spawned};
pub use projects::parse_task_state;
pub use sandboxes::{InstanceView, SandboxView};

/// The master switch: what is stored, what this running daemon uses, and whether the environment
/// overrides the store.
#[derive(Debug, Clone)]
pub struct SettingsView {
    /// This daemon's identity: the maker of every instance it provisions.
    pub daemon_id: DaemonId,
    pub sandbox_db_enabled_stored: bool,
    pub sandbox_db_enabled_running: bool,
    pub env_override: Option<bool>,
    pub takes_effect: &'static str,
    /// When this run of the daemon started (Unix ms): a restart shows as a new value.
    pub running_since_ms: i64,
}

impl SettingsView {
    /// The override as the operator would write it (`ROBOCO_SANDBOX_DB_ENABLED=on`), when the
    /// environment sets one.
    pub fn override_text(&self) -> Option<String> {
        self.env_override
            .map(|on| format!("{ENABLED_OVERRIDE_ENV}={}", if on { "on" } else { "off" }))
    }

    /// True when the stored value waits for a restart to rule (and no override hides it).
    pub fn restart_pending(&self) -> bool {
        self.env_override.is_none()
            && self.sandbox_db_enabled_stored != self.sandbox_db_enabled_running
    }
}

impl Broker {
    /// The project named `slug`, or [`BrokerError::NotFound`] naming it.
    pub(crate) async fn existing_project(
        &self,
        slug: &ProjectSlug,
    ) -> Result<Project, BrokerError> {
        self.store()
            .get_project(slug)
            .await?
            .ok_or_else(|| BrokerError::NotFound {
                what: "project",
                id: slug.to_string(),
            })
    }

    pub async fn settings(&self) -> Result<SettingsView, BrokerError> {
        let stored = crate::config::stored_switch(self.store()).await?;
        Ok(SettingsView {
            daemon_id: self.inner.daemon.clone(),
            sandbox_db_enabled_stored: stored,
            sandbox_db_enabled_running: self.inner.enabled,
            env_override: self.inner.config.enabled_override,
            takes_effect: "on the next restart of sandboxd (`sandboxd restart`)",
            running_since_ms: self.inner.started_at_ms,
        })
    }

    /// Asks the daemon to restart in place (audited): the binary's serve loop stops accepting,
    /// finishes what is under way, joins its tasks and re-executes itself; live sandboxes stay
    /// and are adopted, and the stored switch rules from then on.
    pub async fn request_restart(&self) {
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::Restart,
            subject: "sandboxd",
            project: None,
            outcome: Outcome::Ok,
            started: Instant::now(),
            detail: String::new(),
        })
        .await;
        self.inner.restart.cancel();
    }

    /// Cancelled once an operator asked for a restart: what the binary's serve loop waits on.
    pub fn restart_requested(&self) -> tokio_util::sync::CancellationToken {
        self.inner.restart.clone()
    }

    /// Persists the master switch at once; it takes effect at the next start.
    pub async fn set_enabled(&self, enabled: bool) -> Result<SettingsView, BrokerError> {
        let started = Instant::now();
        self.store()
            .set_setting(SANDBOX_DB_ENABLED, if enabled { "true" } else { "false" })
            .await?;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetSetting,
            subject: SANDBOX_DB_ENABLED,
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("stored {enabled}; takes effect on the next restart"),
        })
        .await;
        self.settings().await
    }

    /// A page of the audit log, rows of every action that ended before the call included.
    pub async fn audit_log(&self, filter: &AuditFilter) -> Result<AuditPage, BrokerError> {
        self.flush_audit().await;
        Ok(self.store().list_audit(filter).await?)
    }

    /// Records an attempt to log in to the operator surface (`panel`). Nothing of what was
    /// typed is kept: only whether it was the admin token.
    pub async fn audit_login(&self, surface: &str, accepted: bool) {
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::Login,
            subject: surface,
            project: None,
            outcome: if accepted {
                Outcome::Ok
            } else {
                Outcome::Unauthorized
            },
            started: Instant::now(),
            detail: String::new(),
        })
        .await;
    }

    /// One janitor pass now (`sandboxd janitor run`).
    pub async fn run_janitor(&self) -> JanitorReport {
        let started = Instant::now();
        let report = self.janitor_pass().await;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::JanitorRun,
            subject: "sandboxes",
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!(
                "{} examined, {} reaped, {} kept (grace)",
                report.examined,
                report.reaped.len(),
                report.kept_young
            ),
        })
        .await;
        report
    }
}
