//! The operator's verbs: agents, projects, tasks, sandboxes, settings, audit. Called by the admin
//! API, the panel and the CLI; every change is audited with the operator as actor.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rand::RngCore;
use sandboxd_domain::audit::{AuditFilter, AuditPage};
use sandboxd_domain::error::{allowed_list, quote};
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{Actor, Agent, Project, Task};
use sandboxd_domain::{
    AgentSlug, BackendKind, DaemonId, EngineRef, FeatureRequest, InputError, ProjectSlug,
};
use sandboxd_store::{NewAgent, token_hash};
use secrecy::SecretString;

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::config::SANDBOX_DB_ENABLED;
use crate::error::{BrokerError, not_opted_in};
use crate::janitor::JanitorReport;
use crate::pools::{PoolKey, PoolView, ResizeError};

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
}

/// One instance of a sandbox as the operator sees it.
#[derive(Debug, Clone)]
pub struct InstanceView {
    pub name: String,
    pub engine: EngineRef,
    pub backend: BackendKind,
    pub host: String,
    pub port: u16,
    pub created_at_ms: i64,
    pub live: bool,
    pub status: String,
    /// The image it runs from (Docker), or None (processes).
    pub image: Option<String>,
    /// False for an instance no agent's sandbox record knows: one this daemon made that a
    /// crash left (the janitor reaps it), or a foreign one.
    pub tracked: bool,
    /// When its owner last got it; None when untracked.
    pub last_used_at_ms: Option<i64>,
}

/// A sandbox: every instance of one owner made by one maker.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub owner: AgentSlug,
    /// The daemon (this one or another) or the CLI that made it.
    pub maker: DaemonId,
    /// Made by another daemon or the CLI: listed, never touched by this one.
    pub foreign: bool,
    pub engines: Vec<EngineRef>,
    pub backends: Vec<BackendKind>,
    pub created_at_ms: i64,
    /// When its owner last got it (provisioned or a cache hit); None when the broker does not
    /// track it. The idle TTL counts from here.
    pub last_used_at_ms: Option<i64>,
    /// `live`, `degraded` (some member not live), `dead`.
    pub status: &'static str,
    pub instances: Vec<InstanceView>,
}

fn new_token() -> SecretString {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(format!("sbx_{}", hex::encode(bytes)))
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

    /// Resolves a bearer token to its agent.
    pub async fn authenticate(&self, token: &SecretString) -> Result<Option<Agent>, BrokerError> {
        Ok(self.store().agent_by_token_hash(&token_hash(token)).await?)
    }

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
        let services = project_row.sandbox_services.clone().unwrap_or_default();
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
                .offered_names(*engine, BRIEFING_PATIENCE)
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

    /// Creates or updates a project's sandbox opt-in. Features must be for opted-in services;
    /// an empty service list means "not opted in".
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
        for feature in extensions.iter().flat_map(|e| e.features()) {
            if let Some(why) = self.unavailable_here(feature).await {
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

    /// Every sandbox: what the backends list, joined with what the broker tracks.
    pub async fn sandboxes(&self) -> Result<Vec<SandboxView>, BrokerError> {
        let tracked: BTreeMap<String, i64> = self
            .store()
            .instance_summaries()
            .await?
            .into_iter()
            .map(|s| (s.name, s.last_used_at_ms))
            .collect();
        // This daemon's sandboxes first, then foreign ones, each by owner.
        let mut by_owner: BTreeMap<(bool, AgentSlug, DaemonId), Vec<InstanceView>> =
            BTreeMap::new();
        for instance in self.inner.backends.list_all().await {
            let last_used_at_ms = tracked.get(&instance.handle.name).copied();
            let foreign = instance.handle.maker != self.inner.daemon;
            if !foreign && instance.handle.owner.is_pool_slot() {
                // A warm pool's member, not anyone's sandbox: the pools' view shows it.
                continue;
            }
            by_owner
                .entry((
                    foreign,
                    instance.handle.owner.clone(),
                    instance.handle.maker.clone(),
                ))
                .or_default()
                .push(InstanceView {
                    last_used_at_ms,
                    tracked: last_used_at_ms.is_some(),
                    name: instance.handle.name,
                    engine: instance.handle.engine,
                    backend: instance.handle.backend,
                    host: instance.host,
                    port: instance.port,
                    created_at_ms: instance.created_at_ms,
                    live: instance.live,
                    status: instance.status,
                    image: instance.image,
                });
        }
        Ok(by_owner
            .into_iter()
            .map(|((foreign, owner, maker), instances)| {
                let live = instances.iter().filter(|i| i.live).count();
                SandboxView {
                    maker,
                    foreign,
                    engines: instances.iter().map(|i| i.engine).collect(),
                    backends: instances
                        .iter()
                        .map(|i| i.backend)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    created_at_ms: instances.iter().map(|i| i.created_at_ms).min().unwrap_or(0),
                    last_used_at_ms: instances.iter().filter_map(|i| i.last_used_at_ms).max(),
                    status: if live == instances.len() {
                        "live"
                    } else if live == 0 {
                        "dead"
                    } else {
                        "degraded"
                    },
                    owner,
                    instances,
                }
            })
            .collect())
    }

    /// Tears down one owner's sandbox. Returns how many instances went.
    pub async fn teardown_sandbox(&self, owner: &AgentSlug) -> Result<usize, BrokerError> {
        let started = Instant::now();
        let removed = self.release(owner).await.map_err(BrokerError::from)?;
        if removed == 0 {
            let foreign = self
                .inner
                .backends
                .list_all()
                .await
                .into_iter()
                .find(|i| &i.handle.owner == owner && i.handle.maker != self.inner.daemon);
            if let Some(foreign) = foreign {
                return Err(BrokerError::Foreign {
                    name: foreign.handle.name,
                    maker: foreign.handle.maker,
                });
            }
        }
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::TeardownSandbox,
            subject: owner.as_str(),
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("{removed} instance(s)"),
        })
        .await;
        Ok(removed)
    }

    /// The warm pools and what they hold now.
    pub fn pools(&self) -> Vec<PoolView> {
        self.inner.pools.views()
    }

    /// New sizes for a warm pool, persisted (they outlive a restart and override the
    /// configuration's) and applied at once: the pool starts or removes members to match.
    pub async fn resize_pool(
        &self,
        key: &PoolKey,
        min_idle: usize,
        max_total: usize,
    ) -> Result<PoolView, BrokerError> {
        let started = Instant::now();
        self.inner
            .pools
            .resize(key, min_idle, max_total)
            .map_err(|err| match err {
                ResizeError::Invalid(detail) => BrokerError::Input(InputError::Malformed {
                    what: "pool sizes",
                    detail,
                }),
                ResizeError::NoPool => BrokerError::NotFound {
                    what: "warm pool",
                    id: format!(
                        "{key} (pools are configured in the config file: {}; configured: {})",
                        key.config_table(),
                        sandboxd_domain::error::allowed_list(
                            self.pools()
                                .iter()
                                .map(|v| v.key.to_string())
                                .collect::<Vec<_>>()
                                .iter()
                                .map(String::as_str)
                        )
                    ),
                },
            })?;
        self.store()
            .set_setting(
                &crate::pools::size_setting(key),
                &format!("{min_idle},{max_total}"),
            )
            .await?;
        let subject = key.to_string();
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetSetting,
            subject: &subject,
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("warm pool: min_idle {min_idle}, max_total {max_total}"),
        })
        .await;
        Ok(self
            .pools()
            .into_iter()
            .find(|v| v.key == *key)
            .expect("the pool just resized exists"))
    }

    pub async fn settings(&self) -> Result<SettingsView, BrokerError> {
        let stored = crate::config::stored_switch(self.store()).await?;
        Ok(SettingsView {
            daemon_id: self.inner.daemon.clone(),
            sandbox_db_enabled_stored: stored,
            sandbox_db_enabled_running: self.inner.enabled,
            env_override: self.inner.config.enabled_override,
            takes_effect: "on the next restart of sandboxd",
        })
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

    pub async fn audit_log(&self, filter: &AuditFilter) -> Result<AuditPage, BrokerError> {
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
