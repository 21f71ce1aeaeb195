//! Projects (what they opt into) and their tasks.

use std::collections::BTreeSet;
use std::time::Instant;

use sandboxd_domain::error::{allowed_list, quote};
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::{Actor, Project, Task};
use sandboxd_domain::{EngineRef, FeatureRequest, InputError, ProjectSlug};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::{BrokerError, not_opted_in};

impl Broker {
    /// Creates or updates a project's sandbox opt-in. Features must be for opted-in services;
    /// an empty service list means "not opted in". An engine the primary backend cannot run is
    /// refused when it is added; one the project already has stays (its agents are told it
    /// does not run here, and its operator how to provide it), so other settings can change.
    pub async fn set_project(
        &self,
        slug: &ProjectSlug,
        services: Option<Vec<EngineRef>>,
        extensions: Option<FeatureRequest>,
    ) -> Result<Project, BrokerError> {
        let started = Instant::now();
        let mut deduped: Vec<EngineRef> = Vec::new();
        for engine in services.iter().flatten() {
            if !deduped.contains(engine) {
                deduped.push(*engine);
            }
        }
        let extensions = extensions.filter(|e| !e.is_empty());
        if let Some(extensions) = &extensions {
            let opted: BTreeSet<EngineRef> = deduped.iter().copied().collect();
            if let Some(stray) = extensions.engines().find(|e| !opted.contains(e)) {
                return Err(not_opted_in(
                    "sandbox_extensions",
                    "extensions for",
                    stray,
                    &deduped,
                ));
            }
        }
        let current = self.store().get_project(slug).await?;
        let stored = current
            .as_ref()
            .and_then(|p| p.sandbox_services.clone())
            .unwrap_or_default();
        let adding: Vec<EngineRef> = deduped
            .iter()
            .copied()
            .filter(|engine| !stored.contains(engine))
            .collect();
        self.check_runnable(&adding).await?;
        for feature in extensions.iter().flat_map(|e| e.features()) {
            if let Some(why) = self.unavailable_for(current.as_ref(), feature).await {
                return Err(BrokerError::FeatureUnavailable(why));
            }
        }
        let services = (!deduped.is_empty()).then_some(deduped);
        let project = self
            .store()
            .put_project(slug, services.as_deref(), extensions.as_ref())
            .await?;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetProject,
            subject: slug.as_str(),
            project: Some(slug),
            outcome: Outcome::Ok,
            started,
            detail: format!(
                "services {}; extensions {}",
                project
                    .sandbox_services
                    .as_ref()
                    .map(|s| s.iter().map(|e| e.name).collect::<Vec<_>>().join(","))
                    .unwrap_or_else(|| "none".into()),
                project
                    .sandbox_extensions
                    .as_ref()
                    .map(|e| serde_json::to_string(e).unwrap_or_default())
                    .unwrap_or_else(|| "none".into())
            ),
        })
        .await;
        Ok(project)
    }

    pub async fn projects(&self) -> Result<Vec<Project>, BrokerError> {
        Ok(self.store().list_projects().await?)
    }

    pub async fn project(&self, slug: &ProjectSlug) -> Result<Option<Project>, BrokerError> {
        Ok(self.store().get_project(slug).await?)
    }

    pub async fn add_task(
        &self,
        project: &ProjectSlug,
        title: &str,
        description: &str,
    ) -> Result<Task, BrokerError> {
        let started = Instant::now();
        if title.trim().is_empty() || title.len() > 200 {
            return Err(InputError::Malformed {
                what: "task title",
                detail: "give a title of 1 to 200 characters".into(),
            }
            .into());
        }
        if description.len() > 16 * 1024 {
            return Err(InputError::Malformed {
                what: "task description",
                detail: "at most 16 KiB".into(),
            }
            .into());
        }
        let task = self
            .store()
            .create_task(project, title, description)
            .await
            .map_err(|e| {
                if e.is_not_found() {
                    BrokerError::NotFound {
                        what: "project",
                        id: project.to_string(),
                    }
                } else {
                    e.into()
                }
            })?;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::AddTask,
            subject: &task.id,
            project: Some(project),
            outcome: Outcome::Ok,
            started,
            detail: String::new(),
        })
        .await;
        Ok(task)
    }

    pub async fn tasks(
        &self,
        project: Option<&ProjectSlug>,
        state: Option<TaskState>,
    ) -> Result<Vec<Task>, BrokerError> {
        Ok(self.store().list_tasks(project, state).await?)
    }
}

/// Parses a task state for filters, naming the states that exist.
pub fn parse_task_state(value: &str) -> Result<TaskState, InputError> {
    TaskState::parse(value).ok_or_else(|| InputError::Malformed {
        what: "task state",
        detail: format!(
            "unknown state {}; states: {}",
            quote(value),
            allowed_list(TaskState::ALL.iter().map(|s| s.as_str()))
        ),
    })
}
