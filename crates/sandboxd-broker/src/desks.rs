//! The two desks the gateways are handed: facets over the one broker, so the agent < operator
//! boundary is held by the types, not by convention. The agent gateway (MCP) gets an
//! [`AgentDesk`]: it authenticates a token, keeps MCP sessions, shows an agent its verbs and
//! offer, and runs one verb of the agent's manifest — nothing an operator does. The operator
//! surface (admin API and panel) gets an [`OperatorDesk`]. Only the daemon holds the [`Broker`]
//! itself. The architecture test checks that the MCP crate names neither `Broker` nor
//! `OperatorDesk`, and the admin crate not `Broker`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_backend::FeatureProbe;
use sandboxd_backend::clone::SourceTls;
use sandboxd_domain::audit::{AuditFilter, AuditPage};
use sandboxd_domain::call::{Call, Malformed};
use sandboxd_domain::clone::{CloneChoice, Privacy};
use sandboxd_domain::envelope::Envelope;
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::roles::RoleSpec;
use sandboxd_domain::{
    Actor, Agent, AgentSlug, DaemonId, DataSize, EngineRef, FeatureRequest, Project, ProjectSizes,
    ProjectSlug, Source, SourceName, Task,
};
use secrecy::SecretString;

use crate::{
    Broker, BrokerError, Evidence, JanitorReport, PoolKey, PoolView, SandboxView, SettingsView,
    Spawned, metrics,
};

/// What the agent gateway may do. Made by [`Broker::agent_desk`].
#[derive(Debug, Clone)]
pub struct AgentDesk {
    broker: Broker,
}

/// What the operator surface may do. Made by [`Broker::operator_desk`].
#[derive(Debug, Clone)]
pub struct OperatorDesk {
    broker: Broker,
}

impl Broker {
    /// The facet the agent gateway is handed.
    pub fn agent_desk(&self) -> AgentDesk {
        AgentDesk {
            broker: self.clone(),
        }
    }

    /// The facet the operator surface is handed.
    pub fn operator_desk(&self) -> OperatorDesk {
        OperatorDesk {
            broker: self.clone(),
        }
    }
}

impl AgentDesk {
    /// Resolves a bearer token to its agent.
    pub async fn authenticate(&self, token: &SecretString) -> Result<Option<Agent>, BrokerError> {
        self.broker.authenticate(token).await
    }

    /// Records that `agent` opened session `id` (just stored by the transport), then evicts
    /// that agent's sessions past the `keep` it used most recently. Returns the evicted ids (for
    /// the transport to close), or `None` when `id` is not stored or already someone's: then it
    /// must not be handed out.
    pub async fn bind_mcp_session(
        &self,
        id: &str,
        agent: &AgentSlug,
        keep: usize,
    ) -> Result<Option<Vec<String>>, BrokerError> {
        self.broker.bind_mcp_session(id, agent, keep).await
    }

    /// Marks session `id` used now; false when it is unknown, expired or not `agent`'s (then
    /// the caller must refuse it like an unknown session).
    pub async fn touch_mcp_session(
        &self,
        id: &str,
        agent: &AgentSlug,
    ) -> Result<bool, BrokerError> {
        self.broker.touch_mcp_session(id, agent).await
    }

    /// A live session's state; `None` when it is unknown or expired.
    pub async fn mcp_session(&self, id: &str) -> Result<Option<String>, BrokerError> {
        self.broker.mcp_session(id).await
    }

    pub async fn save_mcp_session(&self, id: &str, state_json: &str) -> Result<(), BrokerError> {
        self.broker.save_mcp_session(id, state_json).await
    }

    pub async fn drop_mcp_session(&self, id: &str) -> Result<(), BrokerError> {
        self.broker.drop_mcp_session(id).await
    }

    /// The project of `agent`, and no other: what its tools and briefing offer.
    pub async fn project_of(&self, agent: &Agent) -> Result<Option<Project>, BrokerError> {
        self.broker.project(&agent.project).await
    }

    /// The role's manifest, if the role is configured.
    pub fn manifest(&self, role: &str) -> Option<&RoleSpec> {
        self.broker.manifest(role)
    }

    /// [`Self::offered_names`] for an agent of `project`: where its `engine` is a clone, what
    /// the image of the major version the clone runs provides.
    pub async fn offered_names_in(
        &self,
        project: &Project,
        engine: EngineRef,
        patience: Duration,
    ) -> Vec<&'static str> {
        self.broker
            .offered_names_in(project, engine, patience)
            .await
    }

    /// Of `engines`, those this sandboxd's backend runs: what agents are offered.
    pub async fn runnable(&self, engines: &[EngineRef]) -> Vec<EngineRef> {
        self.broker.runnable(engines).await
    }

    /// Runs one call for an authenticated agent, as the gateway parsed it, and answers its
    /// envelope. The manifest is checked first; every call is audited.
    pub async fn call(&self, agent: &Agent, call: Result<Call, Malformed>) -> Envelope<Evidence> {
        self.broker.call(agent, call).await
    }
}

impl OperatorDesk {
    pub async fn spawn_agent(
        &self,
        slug: &AgentSlug,
        role: &str,
        project: &ProjectSlug,
    ) -> Result<Spawned, BrokerError> {
        self.broker.spawn_agent(slug, role, project).await
    }

    /// Removes an agent; its sandbox is released first (best effort) and it can no longer
    /// authenticate.
    pub async fn remove_agent(&self, slug: &AgentSlug) -> Result<(), BrokerError> {
        self.broker.remove_agent(slug).await
    }

    pub async fn agents(&self, project: Option<&ProjectSlug>) -> Result<Vec<Agent>, BrokerError> {
        self.broker.agents(project).await
    }

    pub async fn agent(&self, slug: &AgentSlug) -> Result<Option<Agent>, BrokerError> {
        self.broker.agent(slug).await
    }

    /// Creates or updates a project's sandbox opt-in. Features must be for opted-in services;
    /// an empty service list means "not opted in".
    pub async fn set_project(
        &self,
        slug: &ProjectSlug,
        services: Option<Vec<EngineRef>>,
        extensions: Option<FeatureRequest>,
    ) -> Result<Project, BrokerError> {
        self.broker.set_project(slug, services, extensions).await
    }

    pub async fn projects(&self) -> Result<Vec<Project>, BrokerError> {
        self.broker.projects().await
    }

    pub async fn project(&self, slug: &ProjectSlug) -> Result<Option<Project>, BrokerError> {
        self.broker.project(slug).await
    }

    pub async fn add_task(
        &self,
        project: &ProjectSlug,
        title: &str,
        description: &str,
    ) -> Result<Task, BrokerError> {
        self.broker.add_task(project, title, description).await
    }

    pub async fn tasks(
        &self,
        project: Option<&ProjectSlug>,
        state: Option<TaskState>,
    ) -> Result<Vec<Task>, BrokerError> {
        self.broker.tasks(project, state).await
    }

    /// Every sandbox: what the backends list, joined with what the broker tracks.
    pub async fn sandboxes(&self) -> Result<Vec<SandboxView>, BrokerError> {
        self.broker.sandboxes().await
    }

    /// Tears down one owner's sandbox. Returns how many instances went.
    pub async fn teardown_sandbox(&self, owner: &AgentSlug) -> Result<usize, BrokerError> {
        self.broker.teardown_sandbox(owner).await
    }

    /// The warm pools and what they hold now.
    pub fn pools(&self) -> Vec<PoolView> {
        self.broker.pools()
    }

    /// New sizes for a warm pool, persisted (they outlive a restart and override the
    /// configuration's) and applied at once: the pool starts or removes members to match.
    pub async fn resize_pool(
        &self,
        key: &PoolKey,
        min_idle: usize,
        max_total: usize,
    ) -> Result<PoolView, BrokerError> {
        self.broker.resize_pool(key, min_idle, max_total).await
    }

    pub async fn settings(&self) -> Result<SettingsView, BrokerError> {
        self.broker.settings().await
    }

    /// Persists the master switch at once; it takes effect at the next start.
    pub async fn set_enabled(&self, enabled: bool) -> Result<SettingsView, BrokerError> {
        self.broker.set_enabled(enabled).await
    }

    /// Asks the daemon to drain and re-execute itself in place (live sandboxes stay); returns
    /// at once, so the caller can answer before the drain begins.
    pub async fn request_restart(&self) {
        self.broker.request_restart().await
    }

    pub async fn audit_log(&self, filter: &AuditFilter) -> Result<AuditPage, BrokerError> {
        self.broker.audit_log(filter).await
    }

    /// Records an attempt to log in to the operator surface (`panel`). Nothing of what was
    /// typed is kept: only whether it was the admin token.
    pub async fn audit_login(&self, surface: &str, accepted: bool) {
        self.broker.audit_login(surface, accepted).await
    }

    /// Records that a client reached the login limit of the operator surface (`panel`); its
    /// further attempts are refused without a row each. `detail` names the client and the
    /// limit, never anything typed.
    pub async fn audit_login_limited(&self, surface: &str, detail: String) {
        self.broker.audit_login_limited(surface, detail).await
    }

    /// One janitor pass now (`sandboxd janitor run`).
    pub async fn run_janitor(&self) -> JanitorReport {
        self.broker.run_janitor().await
    }

    /// The operator's ceiling on one engine's data space.
    pub fn max_sandbox_size(&self) -> DataSize {
        self.broker.max_sandbox_size()
    }

    /// The data space an engine gets where its project sets none: the primary backend's
    /// default.
    pub fn default_sandbox_size(&self) -> DataSize {
        self.broker.default_sandbox_size()
    }

    /// Refuses sizes a project may not have, before anything is stored: each for an opted-in
    /// engine (that keeps its data on disk: [`ProjectSizes`] holds no other) and none above
    /// the operator's ceiling, which the refusal names.
    pub fn check_project_sizes(
        &self,
        services: &[EngineRef],
        sizes: &ProjectSizes,
    ) -> Result<(), BrokerError> {
        self.broker.check_project_sizes(services, sizes)
    }

    /// Sets a project's data space per engine (empty: every engine at its backend's default),
    /// checked as [`Broker::check_project_sizes`] says. Live sandboxes take the new size when
    /// next requested: a member of another size is replaced, with new credentials.
    pub async fn set_project_sizes(
        &self,
        slug: &ProjectSlug,
        sizes: ProjectSizes,
    ) -> Result<Project, BrokerError> {
        self.broker.set_project_sizes(slug, sizes).await
    }

    /// Registers `name` (or replaces its DSN and settings; its snapshot goes with the old DSN).
    /// The DSN's syntax and TLS keys are checked and a CA file it names is read; nothing
    /// connects to it until a snapshot is taken. A DSN whose TLS protects nothing on the
    /// network is kept, with a warning ([`Broker::source_tls`] shows it).
    pub async fn put_source(
        &self,
        name: &SourceName,
        dsn: &SecretString,
        privacy: Privacy,
        refresh_secs: u64,
    ) -> Result<Source, BrokerError> {
        self.broker
            .put_source(name, dsn, privacy, refresh_secs)
            .await
    }

    pub async fn sources(&self) -> Result<Vec<Source>, BrokerError> {
        self.broker.sources().await
    }

    /// How source `name` is reached over TLS (its mode, what it trusts, a warning when that
    /// protects nothing on the network), read from its sealed DSN, of which nothing else is
    /// shown. None when there is no such source.
    pub async fn source_tls(&self, name: &SourceName) -> Result<Option<SourceTls>, BrokerError> {
        self.broker.source_tls(name).await
    }

    pub async fn source(&self, name: &SourceName) -> Result<Option<Source>, BrokerError> {
        self.broker.source(name).await
    }

    /// Removes the source and its snapshot; refused while a project clones it. `false` when
    /// there was none.
    pub async fn remove_source(&self, name: &SourceName) -> Result<bool, BrokerError> {
        self.broker.remove_source(name).await
    }

    /// Takes a snapshot of `name` now and stores it as its latest. A failure is recorded on
    /// the source (the snapshot before it stays) and returned; neither quotes the DSN.
    pub async fn snapshot_source(
        &self,
        name: &SourceName,
        actor: Actor,
    ) -> Result<Source, BrokerError> {
        self.broker.snapshot_source(name, actor).await
    }

    /// Sets which of a project's engines are handed out as clones of which source (empty:
    /// none). Each engine must be clonable and opted in, each source registered.
    pub async fn set_project_clones(
        &self,
        slug: &ProjectSlug,
        clones: Vec<(EngineRef, CloneChoice)>,
    ) -> Result<Project, BrokerError> {
        self.broker.set_project_clones(slug, clones).await
    }

    /// Checks a clone list against the services a project is about to opt into, so a caller
    /// setting both can refuse before storing either.
    pub async fn check_project_clones(
        &self,
        services: &[EngineRef],
        clones: &[(EngineRef, CloneChoice)],
    ) -> Result<(), BrokerError> {
        self.broker.check_project_clones(services, clones).await
    }

    /// [`Self::offered`] for `project`: of the image its clone of `engine` runs, when it is
    /// one.
    pub async fn offered_in(
        &self,
        project: &Project,
        engine: EngineRef,
        patience: Duration,
    ) -> Option<Arc<FeatureProbe>> {
        self.broker.offered_in(project, engine, patience).await
    }

    /// Of `engines`, those this sandboxd's backend cannot run, each with why and what provides
    /// it.
    pub async fn unrunnable(&self, engines: &[EngineRef]) -> BTreeMap<EngineRef, String> {
        self.broker.unrunnable(engines).await
    }

    pub fn metrics(&self) -> &metrics::Metrics {
        self.broker.metrics()
    }

    /// This daemon's identity: the maker label of every instance it provisions.
    pub fn daemon_id(&self) -> &DaemonId {
        self.broker.daemon_id()
    }
}
