//! Agents: spawned with a token shown once (only its hash is kept) and a briefing of what their
//! project offers; removed with their sandbox.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::RngCore;
use sandboxd_domain::error::quote;
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{Actor, Agent, Project};
use sandboxd_domain::{AgentSlug, EngineRef, InputError, ProjectSlug};
use sandboxd_store::{NewAgent, token_hash};
use secrecy::SecretString;

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::BrokerError;

/// How long spawning an agent waits for a feature probe under way before its briefing names the
/// allowlist.
const BRIEFING_PATIENCE: Duration = Duration::from_secs(10);

/// The marker a spawned agent's environment carries when its project offers sandboxes.
pub const SERVICES_AVAILABLE_ENV: &str = "ROBOCO_SANDBOX_SERVICES_AVAILABLE";

/// What spawning an agent returns (§3.1): the token (shown once; only its hash is stored), the
/// manifest, the spawn environment and the briefing lines.
#[derive(Debug)]
pub struct Spawned {
    pub agent: AgentSlug,
    pub role: String,
    pub project: ProjectSlug,
    pub token: SecretString,
    pub manifest: Vec<Verb>,
    pub env: BTreeMap<String, String>,
    pub briefing: Vec<String>,
}

fn new_token() -> SecretString {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(format!("sbx_{}", hex::encode(bytes)))
}

impl Broker {
    pub async fn spawn_agent(
        &self,
        slug: &AgentSlug,
        role: &str,
        project: &ProjectSlug,
    ) -> Result<Spawned, BrokerError> {
        let started = Instant::now();
        if slug.is_pool_slot() {
            return Err(InputError::InvalidName {
                kind: "agent slug",
                value: quote(slug.as_str()),
                rule: "slugs of the form pool-<8 hex digits> are reserved for warm-pool members",
            }
            .into());
        }
        let spec = self.inner.config.roles.check(role)?.clone();
        let project_row = self.existing_project(project).await?;
        let token = new_token();
        let hash = token_hash(&token);
        self.store()
            .create_agent(&NewAgent {
                slug,
                role,
                project,
                token_hash: &hash,
            })
            .await
            .map_err(|e| {
                if e.is_conflict() {
                    BrokerError::Conflict {
                        what: "agent",
                        id: slug.to_string(),
                    }
                } else {
                    e.into()
                }
            })?;
        let mut env = BTreeMap::new();
        let mut briefing = vec![format!(
            "You are {slug}, a {role} on project {project}. Your verbs: {}.",
            spec.verbs
                .iter()
                .map(|v| v.name())
                .collect::<Vec<_>>()
                .join(", ")
        )];
        // Only what runs here: an engine the backend cannot run is not offered.
        let opted_in = project_row.sandbox_services.clone().unwrap_or_default();
        let services = self.runnable(&opted_in).await;
        if !services.is_empty() && spec.allows(Verb::RequestSandbox) {
            let csv = services
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(",");
            env.insert(SERVICES_AVAILABLE_ENV.to_owned(), csv.clone());
            briefing.push(format!(
                "This project offers throwaway databases ({csv}): call request_sandbox() once \
                 you hold a task and your tests need one; it answers with credentials and an env \
                 dict to export. Never use any other database credentials."
            ));
            briefing.extend(self.features_briefing(&services, &project_row).await);
        }
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SpawnAgent,
            subject: slug.as_str(),
            project: Some(project),
            outcome: Outcome::Ok,
            started,
            detail: format!("role {role}"),
        })
        .await;
        Ok(Spawned {
            agent: slug.clone(),
            role: role.to_owned(),
            project: project.clone(),
            token,
            manifest: spec.verbs.iter().copied().collect(),
            env,
            briefing,
        })
    }

    /// The briefing's word on features: what is always active, and what a call may add (only
    /// what this sandboxd's backend provides).
    async fn features_briefing(&self, services: &[EngineRef], project: &Project) -> Vec<String> {
        let standing = project.sandbox_extensions.clone().unwrap_or_default();
        let mut always = Vec::new();
        let mut extra = Vec::new();
        for engine in services {
            let active = standing.for_engine(*engine);
            if !active.is_empty() {
                let names: Vec<&str> = active.iter().map(|f| f.name()).collect();
                always.push(format!("{} {}", engine.name, names.join(", ")));
            }
            let more: Vec<&str> = self
                .offered_names_in(project, *engine, BRIEFING_PATIENCE)
                .await
                .into_iter()
                .filter(|name| !active.iter().any(|f| f.name() == *name))
                .collect();
            if !more.is_empty() {
                extra.push(format!("{} {}", engine.name, more.join(", ")));
            }
        }
        let mut lines = Vec::new();
        if !always.is_empty() {
            lines.push(format!(
                "Every sandbox of this project has these features active: {}.",
                always.join("; ")
            ));
        }
        if !extra.is_empty() {
            lines.push(format!(
                "Features you may add with request_sandbox(extensions=…): {}.",
                extra.join("; ")
            ));
        }
        lines
    }

    /// Removes an agent; its sandbox is released first (best effort) and it can no longer
    /// authenticate.
    pub async fn remove_agent(&self, slug: &AgentSlug) -> Result<(), BrokerError> {
        let started = Instant::now();
        let agent = self
            .store()
            .get_agent(slug)
            .await?
            .ok_or_else(|| BrokerError::NotFound {
                what: "agent",
                id: slug.to_string(),
            })?;
        self.release_best_effort(&agent, "agent removed").await;
        // A task the agent held goes back to where it was waiting.
        if let Ok(Some(task)) = self.store().active_task_of(slug).await {
            let back = if task.state == TaskState::InReview {
                TaskState::Review
            } else {
                TaskState::Open
            };
            let _ = self
                .store()
                .transition(&task.id, task.state, Some(slug), back, None)
                .await;
        }
        self.store().delete_agent(slug).await?;
        self.inner.locks.forget(slug);
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::RemoveAgent,
            subject: slug.as_str(),
            project: Some(&agent.project),
            outcome: Outcome::Ok,
            started,
            detail: String::new(),
        })
        .await;
        Ok(())
    }

    pub async fn agents(&self, project: Option<&ProjectSlug>) -> Result<Vec<Agent>, BrokerError> {
        Ok(self.store().list_agents(project).await?)
    }

    pub async fn agent(&self, slug: &AgentSlug) -> Result<Option<Agent>, BrokerError> {
        Ok(self.store().get_agent(slug).await?)
    }
}
