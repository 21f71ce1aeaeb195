//! The admin API's wire types. The broker's and the store's types are not the wire format: each
//! is mapped here, field by field, so a change inside cannot silently change the API (and a
//! token hash or a credential cannot leak through a derived `Serialize`).
//!
//! The module is public and every type goes both ways (`Serialize` and `Deserialize`): the
//! daemon encodes answers with them and the `sandboxd` CLI decodes them, so the two cannot
//! disagree about a field's name or type. Answers do not deny unknown fields (an older client
//! still reads a newer daemon's answer); request bodies do (a typo is refused, not ignored).

use std::collections::BTreeMap;

use sandboxd_broker::{
    InstanceView, JanitorReport, PoolView, SandboxView, SettingsView, SourceTls, Spawned,
};
use sandboxd_domain::audit::{AuditEntry, AuditPage};
use sandboxd_domain::{Actor, Agent, Project, Source, Task};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// What every error answer carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `unauthorized`, `invalid_name`, `unknown_engine`, `feature_not_allowed`,
    /// `invalid_input`, `malformed_json`, `not_found`, `conflict`, `internal`.
    pub error: String,
    /// What went wrong and how to fix it; never a credential, never internal detail.
    pub message: String,
}

/// The master switch (§2): the stored value, the value this running daemon uses, and the
/// environment override if one is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Settings {
    /// This daemon's identity (created with its store): the `maker` of every sandbox it makes.
    pub daemon_id: String,
    pub sandbox_db_enabled_stored: bool,
    pub sandbox_db_enabled_running: bool,
    /// `ROBOCO_SANDBOX_DB_ENABLED` as read at start; it wins over the stored value.
    pub env_override: Option<bool>,
    /// When a stored change takes effect.
    pub takes_effect: String,
}

impl From<SettingsView> for Settings {
    fn from(view: SettingsView) -> Self {
        Self {
            daemon_id: view.daemon_id.to_string(),
            sandbox_db_enabled_stored: view.sandbox_db_enabled_stored,
            sandbox_db_enabled_running: view.sandbox_db_enabled_running,
            env_override: view.env_override,
            takes_effect: view.takes_effect.to_owned(),
        }
    }
}

/// One warm pool: its sizes and what it holds now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PoolOut {
    /// The pool's name: its engine (`postgres`), or `<engine>@<source>` for a pool of clones.
    pub pool: String,
    pub engine: String,
    /// For a pool of clones: the source its members are clones of.
    pub clone_of: Option<String>,
    /// For a pool of clones: when the snapshot its members are made from was taken (Unix
    /// milliseconds); null while the source has none and the pool waits for one.
    pub snapshot_taken_at_ms: Option<i64>,
    /// The backend its members run on (the provisioning backend).
    pub backend: String,
    /// Features every member has active.
    pub features: Vec<String>,
    pub min_idle: usize,
    pub max_total: usize,
    /// What the pool aims to hold idle now: `min_idle`, more after requests found it empty.
    pub target: usize,
    pub idle: usize,
    pub starting: usize,
    /// Members handed out to agents since the daemon started.
    pub handed_out: u64,
    /// Requests that found the pool empty (served by a cold provision).
    pub misses: u64,
    /// Members that stopped answering while idle or failed their hand-out.
    pub quarantined: u64,
    /// Failed starts in a row; 0 when the last start worked.
    pub failures: u32,
    /// Milliseconds the pool still waits before its next start, while it backs off.
    pub backing_off_ms: Option<u64>,
    /// Why the last start failed (no credentials).
    pub last_error: Option<String>,
}

impl From<PoolView> for PoolOut {
    fn from(view: PoolView) -> Self {
        Self {
            pool: view.key.to_string(),
            engine: view.engine.name.to_owned(),
            clone_of: view.key.clone_of.as_ref().map(ToString::to_string),
            snapshot_taken_at_ms: view.snapshot_taken_at_ms,
            backend: view.backend.to_owned(),
            features: view.features,
            min_idle: view.min_idle,
            max_total: view.max_total,
            target: view.target,
            idle: view.idle,
            starting: view.starting,
            handed_out: view.handed_out,
            misses: view.misses,
            quarantined: view.quarantined,
            failures: view.failures,
            backing_off_ms: view
                .backing_off_for
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            last_error: view.last_error,
        }
    }
}

/// New sizes for a warm pool: persisted, applied at once, kept across restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPool {
    /// Idle members kept ready (at most `max_total`).
    pub min_idle: usize,
    /// Most members held at once, idle or starting (at least 1).
    pub max_total: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSettings {
    /// Persisted at once; takes effect at the next restart.
    pub sandbox_db_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectOut {
    pub slug: String,
    /// Engines the project opted into; `null` when not opted in.
    pub sandbox_services: Option<Vec<String>>,
    /// Standing features per engine, e.g. `{"<engine>": ["<feature>"]}`.
    pub sandbox_extensions: Option<BTreeMap<String, Vec<String>>>,
    /// Engines handed out as clones: `{"<engine>": "<source>"}`; empty when none.
    #[serde(default)]
    pub sandbox_clones: BTreeMap<String, String>,
    /// The data space of engines with one of their own, `{"postgres": "2G"}`; the others get
    /// their backend's default. Empty when none.
    #[serde(default)]
    pub sandbox_sizes: BTreeMap<String, String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Project> for ProjectOut {
    fn from(p: Project) -> Self {
        Self {
            slug: p.slug.to_string(),
            sandbox_services: p
                .sandbox_services
                .map(|s| s.iter().map(|e| e.name.to_owned()).collect()),
            sandbox_extensions: p.sandbox_extensions.map(|e| e.to_map()),
            sandbox_clones: p
                .sandbox_clones
                .iter()
                .map(|(e, s)| (e.name.to_owned(), s.to_string()))
                .collect(),
            sandbox_sizes: p.sandbox_sizes.to_map(),
            created_at_ms: p.created_at_ms,
            updated_at_ms: p.updated_at_ms,
        }
    }
}

/// A project's sandbox opt-in. Both fields replace what is stored; `null` or an empty list
/// means "not opted in". Engines and features are validated against the registry and each
/// engine's allowlist; features may only name opted-in engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutProject {
    #[serde(default)]
    pub sandbox_services: Option<Vec<String>>,
    #[serde(default)]
    pub sandbox_extensions: Option<BTreeMap<String, Vec<String>>>,
    /// Engines handed out as clones of a registered source, `{"<engine>": "<source>"}`;
    /// absent: unchanged, `{}`: none.
    #[serde(default)]
    pub sandbox_clones: Option<BTreeMap<String, String>>,
    /// The data space of opted-in engines that keep their data on disk, `{"postgres": "2G",
    /// "mariadb": "1G"}` (whole M or G, at least 256M, at most the operator's ceiling
    /// `broker.max_sandbox_size_mb`); absent: unchanged, `{}`: every engine at its backend's
    /// default.
    #[serde(default)]
    pub sandbox_sizes: Option<BTreeMap<String, String>>,
}

/// A source as an operator sees it: never its DSN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceOut {
    pub name: String,
    /// `keep-values` or `no-values` (statistics without sample values).
    pub privacy: String,
    /// Seconds between snapshots; 0: on demand only.
    pub refresh_secs: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_attempt_at_ms: Option<i64>,
    /// Why the last snapshot attempt failed; `null` when it succeeded.
    pub last_error: Option<String>,
    /// The latest snapshot; `null` before the first.
    pub snapshot: Option<SnapshotOut>,
    /// How sandboxd reaches it over TLS (read from its DSN, of which nothing else is shown);
    /// `null` when its DSN cannot be read.
    pub tls: Option<SourceTlsOut>,
}

/// A source's TLS: what the snapshot's connection and `pg_dump` both do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceTlsOut {
    /// libpq's `sslmode`: `disable`, `prefer`, `require`, `verify-ca` or `verify-full`.
    pub mode: String,
    /// The DSN named no `sslmode`: `verify-full` off loopback, `prefer` on it.
    pub default: bool,
    /// What a verifying mode trusts: the CA file (`sslrootcert`) or `system`; `null` when the
    /// mode checks no certificate.
    pub roots: Option<String>,
    /// Every address the DSN names is loopback or a Unix socket.
    pub loopback: bool,
    /// One line: the mode and what it checks.
    pub summary: String,
    /// Set when the host is not loopback and the mode checks no certificate: what that exposes
    /// and how to fix it.
    pub warning: Option<String>,
}

impl From<SourceTls> for SourceTlsOut {
    fn from(tls: SourceTls) -> Self {
        Self {
            mode: tls.mode.as_str().to_owned(),
            default: !tls.explicit,
            roots: tls.roots.as_ref().map(ToString::to_string),
            loopback: tls.loopback,
            summary: tls.summary(),
            warning: tls.warning(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotOut {
    pub taken_at_ms: i64,
    /// The source's server, e.g. `PostgreSQL 18.6`.
    pub server_version: String,
    pub took_ms: i64,
}

impl SourceOut {
    /// `s` with its TLS, which the store's row does not carry (it is read from the DSN).
    pub fn new(s: Source, tls: Option<SourceTls>) -> Self {
        Self {
            name: s.name.to_string(),
            privacy: s.privacy.as_str().to_owned(),
            refresh_secs: s.refresh_secs,
            created_at_ms: s.created_at_ms,
            updated_at_ms: s.updated_at_ms,
            last_attempt_at_ms: s.last_attempt_at_ms,
            last_error: s.last_error,
            snapshot: s.snapshot.map(|p| SnapshotOut {
                taken_at_ms: p.taken_at_ms,
                server_version: p.server_version,
                took_ms: p.took_ms,
            }),
            tls: tls.map(SourceTlsOut::from),
        }
    }
}

/// Registers (or replaces) a source. The DSN is libpq's (`host=… user=… password=… dbname=…`
/// or a `postgresql://` URL) for a role that may read the catalog and statistics (e.g. a
/// member of `pg_read_all_data`); sandboxd only ever opens read-only transactions with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSource {
    pub dsn: String,
    /// `keep-values` (default) or `no-values`.
    #[serde(default)]
    pub privacy: Option<String>,
    /// Seconds between snapshots; absent or 0: on demand only.
    #[serde(default)]
    pub refresh_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentOut {
    pub slug: String,
    pub role: String,
    pub project: String,
    pub created_at_ms: i64,
}

impl From<Agent> for AgentOut {
    fn from(a: Agent) -> Self {
        Self {
            slug: a.slug.to_string(),
            role: a.role,
            project: a.project.to_string(),
            created_at_ms: a.created_at_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnAgent {
    pub slug: String,
    /// A role of the daemon's role book (`developer`, `qa`, `pr_reviewer`, `documenter`,
    /// `auditor` by default).
    pub role: String,
    pub project: String,
}

/// The spawn answer (§3.1). The token is shown here once and never again: only its hash is
/// stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SpawnedOut {
    pub agent: String,
    pub role: String,
    pub project: String,
    /// The agent's bearer token for the MCP gateway.
    pub token: String,
    /// The exact verbs of the role.
    pub manifest: Vec<String>,
    /// The spawn environment: only `ROBOCO_SANDBOX_SERVICES_AVAILABLE`, and only for an
    /// opted-in project and a role that may request sandboxes. Never a credential.
    pub env: BTreeMap<String, String>,
    pub briefing: Vec<String>,
}

impl From<Spawned> for SpawnedOut {
    fn from(s: Spawned) -> Self {
        Self {
            agent: s.agent.to_string(),
            role: s.role,
            project: s.project.to_string(),
            token: s.token.expose_secret().to_owned(),
            manifest: s.manifest.iter().map(|v| v.name().to_owned()).collect(),
            env: s.env,
            briefing: s.briefing,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentsQuery {
    /// Only this project's agents.
    pub project: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskOut {
    pub id: String,
    pub project: String,
    pub title: String,
    pub description: String,
    /// `open`, `in_progress`, `review`, `in_review` or `done`.
    pub state: String,
    pub claimed_by: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Task> for TaskOut {
    fn from(t: Task) -> Self {
        Self {
            id: t.id,
            project: t.project.to_string(),
            title: t.title,
            description: t.description,
            state: t.state.as_str().to_owned(),
            claimed_by: t.claimed_by.map(|s| s.to_string()),
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.updated_at_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    pub project: String,
    /// 1 to 200 characters.
    pub title: String,
    /// At most 16 KiB.
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TasksQuery {
    pub project: Option<String>,
    /// A task state, e.g. `open`.
    pub state: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InstanceOut {
    pub name: String,
    pub engine: String,
    pub backend: String,
    pub host: String,
    pub port: u16,
    pub created_at_ms: i64,
    pub live: bool,
    pub status: String,
    /// The image it runs from (Docker); null for a process.
    pub image: Option<String>,
    /// False for an instance no agent's sandbox record knows: one a crash left (the janitor
    /// reaps it), or a foreign one.
    pub tracked: bool,
}

impl From<InstanceView> for InstanceOut {
    fn from(i: InstanceView) -> Self {
        Self {
            name: i.name,
            engine: i.engine.name.to_owned(),
            backend: i.backend.as_str().to_owned(),
            host: i.host,
            port: i.port,
            created_at_ms: i.created_at_ms,
            live: i.live,
            status: i.status,
            image: i.image,
            tracked: i.tracked,
        }
    }
}

/// Every instance of one owner (an agent slug) made by one maker. No credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SandboxOut {
    pub owner: String,
    /// What made it: a daemon's id (this daemon's is in `GET /v1/settings`) or `cli`.
    pub maker: String,
    /// Made by another daemon or the CLI: this daemon lists it and never touches it.
    pub foreign: bool,
    pub engines: Vec<String>,
    pub backends: Vec<String>,
    pub created_at_ms: i64,
    /// When its owner last got it (provisioned or answered from the cache); `null` when no
    /// agent's sandbox record knows it. The janitor's idle TTL counts from here.
    pub last_used_at_ms: Option<i64>,
    /// `live`, `degraded` (some member not live) or `dead`.
    pub status: String,
    pub instances: Vec<InstanceOut>,
}

impl From<SandboxView> for SandboxOut {
    fn from(s: SandboxView) -> Self {
        Self {
            owner: s.owner.to_string(),
            maker: s.maker.to_string(),
            foreign: s.foreign,
            engines: s.engines.iter().map(|e| e.name.to_owned()).collect(),
            backends: s.backends.iter().map(|b| b.as_str().to_owned()).collect(),
            created_at_ms: s.created_at_ms,
            last_used_at_ms: s.last_used_at_ms,
            status: s.status.to_owned(),
            instances: s.instances.into_iter().map(InstanceOut::from).collect(),
        }
    }
}

/// Which sandboxes to list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SandboxesQuery {
    /// Also list foreign sandboxes: made by another daemon or the CLI (default false).
    pub all: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TeardownOut {
    pub owner: String,
    /// How many instances were removed.
    pub removed: usize,
}

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReapedOut {
    pub instance: String,
    /// `owner_gone`, `max_lifetime`, `idle` or `dead`.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JanitorOut {
    /// Instances the backends listed.
    pub examined: usize,
    pub reaped: Vec<ReapedOut>,
    /// Skipped: younger than the grace window.
    pub kept_young: usize,
    /// Made by another daemon or the CLI: listed, never touched.
    pub foreign: usize,
    /// Stored sandbox records whose instances no backend lists any more.
    pub forgotten: usize,
}

impl From<JanitorReport> for JanitorOut {
    fn from(r: JanitorReport) -> Self {
        Self {
            examined: r.examined,
            reaped: r
                .reaped
                .into_iter()
                .map(|(instance, reason)| ReapedOut {
                    instance,
                    reason: reason.as_str().to_owned(),
                })
                .collect(),
            kept_young: r.kept_young,
            foreign: r.foreign,
            forgotten: r.forgotten,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;

    use super::*;

    /// What the daemon encodes, a client decodes to the same value.
    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: T) {
        let json = serde_json::to_value(&value).expect("serializes");
        let back: T = serde_json::from_value(json.clone()).expect("deserializes");
        assert_eq!(back, value, "{json}");
    }

    #[test]
    fn answers_decode_to_what_was_encoded() {
        round_trip(Settings {
            daemon_id: "0a1b2c3d".into(),
            sandbox_db_enabled_stored: true,
            sandbox_db_enabled_running: false,
            env_override: None,
            takes_effect: "at the next restart".into(),
        });
        round_trip(ProjectOut {
            slug: "p".into(),
            sandbox_services: Some(vec!["postgres".into()]),
            sandbox_extensions: Some(BTreeMap::from([("postgres".into(), vec!["vector".into()])])),
            sandbox_clones: BTreeMap::from([("postgres".into(), "shop".into())]),
            sandbox_sizes: BTreeMap::from([("postgres".into(), "2G".into())]),
            created_at_ms: 1,
            updated_at_ms: 2,
        });
        round_trip(SourceOut {
            name: "shop".into(),
            privacy: "no-values".into(),
            refresh_secs: 3600,
            created_at_ms: 1,
            updated_at_ms: 2,
            last_attempt_at_ms: Some(3),
            last_error: None,
            snapshot: Some(SnapshotOut {
                taken_at_ms: 3,
                server_version: "PostgreSQL 18.6".into(),
                took_ms: 400,
            }),
            tls: Some(
                SourceTls::new(Some("require"), None, false)
                    .expect("valid")
                    .into(),
            ),
        });
        round_trip(SandboxOut {
            owner: "dev-1".into(),
            maker: "cli".into(),
            foreign: true,
            engines: vec!["redis".into()],
            backends: vec!["process".into()],
            created_at_ms: 3,
            last_used_at_ms: None,
            status: "live".into(),
            instances: vec![InstanceOut {
                name: "sbx-dev-1-redis".into(),
                engine: "redis".into(),
                backend: "process".into(),
                host: "127.0.0.1".into(),
                port: 6400,
                created_at_ms: 3,
                live: true,
                status: "running".into(),
                image: None,
                tracked: true,
            }],
        });
        round_trip(JanitorOut {
            examined: 2,
            reaped: vec![ReapedOut {
                instance: "sbx-x".into(),
                reason: "owner_gone".into(),
            }],
            kept_young: 1,
            foreign: 3,
            forgotten: 0,
        });
        round_trip(ErrorBody {
            error: "not_found".into(),
            message: "no such project".into(),
        });
    }

    #[test]
    fn answers_tolerate_new_fields_and_requests_refuse_unknown_ones() {
        let answer = serde_json::json!({"owner": "a", "removed": 1, "added_later": true});
        assert!(serde_json::from_value::<TeardownOut>(answer).is_ok());
        let request = serde_json::json!({"sandbox_db_enabled": true, "typo": 1});
        assert!(serde_json::from_value::<PutSettings>(request).is_err());
    }
}
