//! One settings tree: built-in defaults, then a TOML file (`--config`, or `SANDBOXD_CONFIG`), then
//! `SANDBOXD_*` environment variables with `__` for nesting (`SANDBOXD_PROCESS__RUN_AS=me`).
//! Every default is documented in README.md's configuration reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use sandboxd_admin::AdminConfig;
use sandboxd_backend::docker::DockerConfig;
use sandboxd_backend::kube::KubeConfig;
use sandboxd_backend::process::ProcessConfig;
use sandboxd_broker::{BrokerConfig, PoolConfig, PoolKey, PoolTuning};
use sandboxd_domain::{EngineRef, EnvPrefix, Feature, engines};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

/// Which backend runs instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// Docker when the engine answers and the images are present, else processes.
    Auto,
    Process,
    Docker,
    /// Pods on a Kubernetes cluster (`[kubernetes]`); never picked by `auto`.
    Kubernetes,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub backend: BackendChoice,
    /// Prefix of the rendered environment names.
    pub env_prefix: EnvPrefix,
    /// Where the daemon keeps its state: the SQLite store, the store key, the admin token.
    pub state_dir: PathBuf,
    pub server: ServerSettings,
    pub store: StoreSettings,
    pub broker: BrokerSettings,
    pub admin: AdminSettings,
    pub process: ProcessSettings,
    pub docker: DockerSettings,
    pub kubernetes: KubernetesSettings,
    /// Per-engine overrides, keyed by engine name.
    pub engines: BTreeMap<String, EngineSettings>,
    /// Warm pools on the provisioning backend, keyed by engine name (none by default).
    pub pools: BTreeMap<String, PoolSettings>,
    pub experiments: ExperimentSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            env_prefix: EnvPrefix::default(),
            state_dir: default_state_dir(),
            server: ServerSettings::default(),
            store: StoreSettings::default(),
            broker: BrokerSettings::default(),
            admin: AdminSettings::default(),
            process: ProcessSettings::default(),
            docker: DockerSettings::default(),
            kubernetes: KubernetesSettings::default(),
            engines: BTreeMap::new(),
            pools: BTreeMap::new(),
            experiments: ExperimentSettings::default(),
        }
    }
}

fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/sandboxd")
    } else {
        std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(std::env::temp_dir)
            .join("sandboxd")
    }
}

/// The HTTP server: MCP at `/mcp`, the admin API under `/v1`, the panel, `/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on. Loopback by default; port 0 picks a free port.
    pub listen: String,
    /// Host header values accepted besides loopback names (for a daemon reached by a name).
    pub allowed_hosts: Vec<String>,
    /// Origin header values accepted (browsers); requests without Origin are accepted.
    pub allowed_origins: Vec<String>,
    /// The admin token file (created with a random token when missing). `SANDBOXD_ADMIN_TOKEN`
    /// overrides it.
    pub admin_token_file: Option<PathBuf>,
    /// The largest request body any route accepts (413 past it).
    pub max_body_bytes: usize,
    /// How long a connection may take to send a request's head, and stay idle between requests;
    /// past it the connection is closed.
    pub header_timeout_secs: u64,
    /// How long a request's body may take to arrive after its head (408 past it).
    pub body_timeout_secs: u64,
    /// Connections served at once; more wait in the listen queue until one ends.
    pub max_connections: u32,
}

impl ServerSettings {
    /// 1 MiB: far above any MCP call or form (a verb's text is capped at 16 KiB), far below what
    /// would hurt the daemon.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
    /// Every real client sends its head in one write.
    pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
    /// A whole `max_body_bytes` over a slow link.
    pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
    /// Far more than agents' clients and an operator hold (an MCP client holds one or two), well
    /// under a default file-descriptor limit.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".to_owned(),
            allowed_hosts: vec![],
            allowed_origins: vec![],
            admin_token_file: None,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            header_timeout_secs: Self::DEFAULT_HEADER_TIMEOUT_SECS,
            body_timeout_secs: Self::DEFAULT_BODY_TIMEOUT_SECS,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The state store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// `sqlite:///path/file.db` or `postgres://…`; default `sqlite://<state_dir>/sandboxd.db`.
    pub url: Option<String>,
    /// The key sealing credentials at rest (created when missing); default
    /// `<state_dir>/store.key`.
    pub key_file: Option<PathBuf>,
}

/// The broker: lifetimes, the janitor, roles.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerSettings {
    /// Sandboxes younger than this are never reaped.
    pub grace_secs: u64,
    /// Reap sandboxes older than this whatever their owner does (unset: no limit).
    pub max_lifetime_secs: Option<u64>,
    /// Reap sandboxes their owner has not asked for in this long (unset: never).
    pub idle_ttl_secs: Option<u64>,
    pub janitor_interval_secs: u64,
    /// An MCP session unused for this long is refused (the client starts a new one) and swept.
    pub mcp_session_ttl_secs: u64,
    /// MCP sessions one agent holds at once; opening one more closes its least recently used.
    pub mcp_sessions_per_agent: usize,
    /// A TOML role file (`[roles.<name>] verbs = [...]`); default: the built-in roles.
    pub roles_file: Option<PathBuf>,
    /// A warm pool whose member failed to start waits this long before the next attempt,
    /// doubling with every further failure…
    pub pool_backoff_base_ms: u64,
    /// …up to this long.
    pub pool_backoff_max_secs: u64,
    /// How often idle pool members are asked whether they still answer.
    pub pool_check_interval_secs: u64,
    /// How long a feature probe is trusted before what runs the engine (the image's id, the
    /// host's programs and packages) is compared again; a change means a new probe.
    pub feature_probe_recheck_secs: u64,
    /// Replicas on a PostgreSQL store: how long an agent's lease outlives a crashed holder
    /// (another replica takes over after it). Unused on SQLite.
    pub lease_ttl_secs: u64,
    /// `sandbox_sql`, `run_experiment` and `reset_sandbox` calls one agent may have under way
    /// at once; past it a call is refused (`limit_exceeded`, retryable).
    pub max_heavy_calls_per_agent: usize,
    /// The most data space a project may give one engine (`projects set … --size`), in MiB.
    pub max_sandbox_size_mb: u64,
}

impl Default for BrokerSettings {
    fn default() -> Self {
        let base = BrokerConfig::default();
        Self {
            grace_secs: base.grace.as_secs(),
            max_lifetime_secs: base.max_lifetime.map(|d| d.as_secs()),
            idle_ttl_secs: base.idle_ttl.map(|d| d.as_secs()),
            janitor_interval_secs: base.janitor_interval.as_secs(),
            mcp_session_ttl_secs: base.mcp_session_ttl.as_secs(),
            mcp_sessions_per_agent: sandboxd_mcp::McpConfig::DEFAULT_SESSIONS_PER_AGENT,
            roles_file: None,
            pool_backoff_base_ms: millis(base.pool_tuning.backoff_base),
            pool_backoff_max_secs: base.pool_tuning.backoff_max.as_secs(),
            pool_check_interval_secs: base.pool_tuning.check_interval.as_secs(),
            feature_probe_recheck_secs: base.feature_probe_recheck.as_secs(),
            lease_ttl_secs: sandboxd_broker::ReplicationConfig::default()
                .lease_ttl
                .as_secs(),
            max_heavy_calls_per_agent: base.max_heavy_calls_per_agent,
            max_sandbox_size_mb: base.max_sandbox_size_mb,
        }
    }
}

/// `run_experiment`: the guest, where its compiled form is kept, and the limits agents get.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentSettings {
    /// Off: `run_experiment` is refused and no runtime is built.
    pub enabled: bool,
    /// The guest component `scripts/build-guest.sh` builds.
    pub guest: PathBuf,
    /// Where the compiled guest is kept (compiled once per wasmtime version, engine
    /// configuration and guest); default `<state_dir>/experiments`.
    pub cache_dir: Option<PathBuf>,
    /// Wall time a run gets unless it asks otherwise, and the most it may ask for.
    pub wall_ms: u64,
    pub max_wall_ms: u64,
    /// Guest memory a run gets unless it asks otherwise, and the most it may ask for.
    pub memory_mb: u64,
    pub max_memory_mb: u64,
    /// The most `sql()` calls a run may ask for.
    pub max_sql_calls: u64,
    /// Experiments running at once, all agents together…
    pub max_concurrent: usize,
    /// …and of one agent.
    pub max_concurrent_per_agent: usize,
    /// The most the memory limits of the experiments running may add up to: a run that does
    /// not fit waits `admission_wait_ms`, then is refused.
    pub memory_budget_mb: u64,
    pub admission_wait_ms: u64,
    /// Threads that run guests, apart from the daemon's own (0: one fewer than the host's
    /// CPUs, at least one).
    pub threads: usize,
}

impl Default for ExperimentSettings {
    fn default() -> Self {
        let policy = sandboxd_experiments::Policy::default();
        let capacity = sandboxd_experiments::Capacity::default();
        Self {
            enabled: true,
            guest: PathBuf::from("/var/cache/sandboxd-guest/current/experiment.wasm"),
            cache_dir: None,
            wall_ms: policy.wall_ms.default,
            max_wall_ms: policy.wall_ms.max,
            memory_mb: policy.memory_bytes.default / MIB,
            max_memory_mb: policy.memory_bytes.max / MIB,
            max_sql_calls: policy.sql_calls.max,
            max_concurrent: capacity.max_runs,
            max_concurrent_per_agent: sandboxd_broker::ExperimentsConfig::DEFAULT_MAX_PER_AGENT,
            memory_budget_mb: capacity.memory_budget_bytes / MIB,
            admission_wait_ms: millis(capacity.wait),
            threads: 0,
        }
    }
}

const MIB: u64 = 1024 * 1024;

/// The operator surface: the panel's logins. The admin token itself is
/// `server.admin_token_file` or `SANDBOXD_ADMIN_TOKEN`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// How long a panel login lasts.
    pub session_ttl_secs: u64,
    /// Mark the panel's cookies `Secure`: only behind a TLS proxy (a browser drops them over
    /// plain HTTP).
    pub secure_cookies: bool,
    /// Panel logins held at once; the one closest to expiring is dropped past this.
    pub max_sessions: usize,
    /// Wrong panel login tokens one client (IP, IPv6 by /64) may send per window; past that,
    /// 429 (the right token always logs in).
    pub login_attempts: u32,
    pub login_window_secs: u64,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            session_ttl_secs: AdminConfig::DEFAULT_SESSION_TTL.as_secs(),
            secure_cookies: false,
            max_sessions: AdminConfig::DEFAULT_MAX_SESSIONS,
            login_attempts: AdminConfig::DEFAULT_LOGIN_ATTEMPTS,
            login_window_secs: AdminConfig::DEFAULT_LOGIN_WINDOW.as_secs(),
        }
    }
}

impl Settings {
    pub fn store_url(&self) -> String {
        self.store
            .url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.state_dir.join("sandboxd.db").display()))
    }

    pub fn store_key_file(&self) -> PathBuf {
        self.store
            .key_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("store.key"))
    }

    pub fn admin_token_file(&self) -> PathBuf {
        self.server
            .admin_token_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("admin.token"))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessSettings {
    pub root: PathBuf,
    pub template_dir: PathBuf,
    pub run_as: String,
    pub uid_pool_prefix: String,
    pub uid_pool_size: u32,
    pub lease_dir: PathBuf,
    pub memory_limit_mb: u64,
    pub data_limit_mb: u64,
    pub wal_limit_mb: u64,
    pub pids_limit: u64,
    pub stop_timeout_secs: u64,
    pub grace_secs: u64,
}

impl Default for ProcessSettings {
    fn default() -> Self {
        let base = ProcessConfig::default();
        Self {
            root: base.root,
            template_dir: base.template_dir,
            run_as: base.run_as,
            uid_pool_prefix: base.uid_pool_prefix,
            uid_pool_size: base.uid_pool_size,
            lease_dir: base.lease_dir,
            memory_limit_mb: base.memory_limit_mb,
            data_limit_mb: base.data_limit_mb,
            wal_limit_mb: base.wal_limit_mb,
            pids_limit: base.pids_limit,
            stop_timeout_secs: base.stop_timeout.as_secs(),
            grace_secs: base.grace.as_secs(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerSettings {
    /// `unix:///var/run/docker.sock`, or Podman's compatible socket.
    pub socket: String,
    /// A network to attach instances to (nothing published; host = container name). Unset:
    /// the daemon's instances join its own network (inter-container traffic off), whose
    /// subnet comes from `subnet_pool`.
    pub network: Option<String>,
    /// The IPv4 range daemon networks' subnets come from.
    pub subnet_pool: String,
    /// Prefix length of each daemon network's subnet.
    pub subnet_prefix: u8,
    /// Prefix length of each instance's own network, on an engine whose bridge networks
    /// cannot turn inter-container traffic off (Podman).
    pub instance_subnet_prefix: u8,
    /// Label namespace: labels are `<ns>.sandbox`, `<ns>.owner`, …
    pub label_namespace: String,
    /// Containers run as a uid from `uid_base .. uid_base + uid_count`, a range no host
    /// account uses; 0: the image's own user.
    pub uid_base: u32,
    pub uid_count: u32,
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids_limit: i64,
    /// Open files (`RLIMIT_NOFILE`, soft = hard) in each container; must not exceed the
    /// engine's own hard limit.
    pub nofile_limit: u64,
    /// Processes of the container's uid (`RLIMIT_NPROC`, soft = hard), likewise.
    pub nproc_limit: u64,
    /// A same-named container younger than this is never cleared.
    pub grace_secs: u64,
    /// How long a container may take to stop at teardown before it is killed.
    pub stop_timeout_secs: u64,
}

impl Default for DockerSettings {
    fn default() -> Self {
        let base = DockerConfig::default();
        Self {
            socket: base.socket,
            network: base.network,
            subnet_pool: base.subnet_pool,
            subnet_prefix: base.subnet_prefix,
            instance_subnet_prefix: base.instance_subnet_prefix,
            label_namespace: base.label_namespace,
            uid_base: base.uid_base,
            uid_count: base.uid_count,
            memory_mb: base.memory_mb,
            cpus: base.cpus,
            pids_limit: base.pids_limit,
            nofile_limit: base.nofile_limit,
            nproc_limit: base.nproc_limit,
            grace_secs: base.grace.as_secs(),
            stop_timeout_secs: base.stop_timeout.as_secs(),
        }
    }
}

/// The Kubernetes backend (`backend = "kubernetes"`, or `enabled` beside another primary).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesSettings {
    /// Build it even when it is not the provisioning backend, so `ls`, `teardown`, the janitor
    /// and a restarted daemon see its instances.
    pub enabled: bool,
    /// A kubeconfig file; unset: the cluster sandboxd runs in, else `$KUBECONFIG` or
    /// `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context; unset: its current one.
    pub context: Option<String>,
    /// The namespace every object is made in (it must exist).
    pub namespace: String,
    /// Labels are `<prefix>/sandbox`, `<prefix>/owner`, …
    pub label_prefix: String,
    /// Pods run as a uid (and gid, fsGroup) from `uid_base .. uid_base + uid_count`.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Memory request = limit per Pod.
    pub memory_mb: u64,
    /// CPU limit per Pod.
    pub cpus: f64,
    /// CPU request per Pod (what the scheduler reserves).
    pub cpu_request: f64,
    /// Hand agents a ClusterIP Service's name instead of the Pod's address.
    pub service: bool,
    /// The label an agent's own Pods carry (valued with its slug): the only Pods an instance's
    /// NetworkPolicy admits, besides sandboxd.
    pub agent_label: String,
    /// The label of an agent's own namespace (valued with its slug): its Pods are admitted only
    /// from there, since a Pod's labels are whoever made it to choose. Empty: by Pod label
    /// alone, in sandboxd's namespace (forgeable; `doctor` says so).
    pub agent_namespace_label: String,
    /// Labels of sandboxd's own Pods (when it runs in the cluster), admitted by the policies.
    pub daemon_pod_labels: BTreeMap<String, String>,
    /// Address ranges of sandboxd (when it runs outside the cluster), admitted by the policies.
    pub daemon_cidrs: Vec<String>,
    /// `IfNotPresent`, `Always` or `Never`.
    pub image_pull_policy: String,
    /// A same-named Pod younger than this is never cleared.
    pub grace_secs: u64,
    /// How long a Pod may take to be scheduled and started.
    pub start_timeout_secs: u64,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let base = KubeConfig::default();
        Self {
            enabled: false,
            kubeconfig: base.kubeconfig,
            context: base.context,
            namespace: base.namespace,
            label_prefix: base.label_prefix,
            uid_base: base.uid_base,
            uid_count: base.uid_count,
            memory_mb: base.memory_mb,
            cpus: base.cpus,
            cpu_request: base.cpu_request,
            service: base.service,
            agent_label: base.agent_label,
            agent_namespace_label: base.agent_namespace_label,
            daemon_pod_labels: base.daemon_pod_labels,
            daemon_cidrs: base.daemon_cidrs,
            image_pull_policy: base.image_pull_policy,
            grace_secs: base.grace.as_secs(),
            start_timeout_secs: base.start_timeout.as_secs(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// The image to run for this engine on Docker. Unset: the engine's official image, else
    /// the locally built `sandboxd-local/…` one, whichever is present.
    pub image: Option<String>,
    /// Overrides the engine's readiness deadline.
    pub readiness_deadline_secs: Option<u64>,
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One warm pool: an engine's (`[pools.<engine>]`), or of an engine's clones of a source
/// (`[pools."<engine>@<source>"]`, whose members are clones of the source's latest snapshot).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolSettings {
    /// Idle members kept ready, started, proven and prepared, without any agent account.
    pub min_idle: usize,
    /// Most members the pool holds at once, idle or starting; it grows towards this when
    /// requests find it empty and shrinks back to `min_idle` when they stop. Unset: 4, or
    /// `min_idle` when that is more (a `min_idle` alone raises the ceiling with it).
    pub max_total: Option<usize>,
    /// Features every member has active (allowlisted names of the engine).
    pub features: Vec<String>,
}

impl PoolSettings {
    /// The ceiling when the file sets none.
    pub const DEFAULT_MAX_TOTAL: usize = 4;

    /// The pool's ceiling: as set, else [`Self::DEFAULT_MAX_TOTAL`] raised to `min_idle`.
    pub fn max_total(&self) -> usize {
        self.max_total
            .unwrap_or(Self::DEFAULT_MAX_TOTAL.max(self.min_idle))
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            min_idle: 1,
            max_total: None,
            features: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Invalid(String),
}

impl Settings {
    /// Defaults → `file` (if given and present) → `SANDBOXD_*` env.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} does not exist",
                    file.display()
                )));
            }
            figment = figment.merge(Toml::file(file));
        }
        // Only variables naming a settings section are configuration; others sharing the
        // prefix (SANDBOXD_CONFIG, SANDBOXD_LOG, test switches) are not.
        let sections: Vec<String> = serde_json::to_value(Settings::default())
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        figment = figment.merge(
            Env::prefixed("SANDBOXD_")
                .filter(move |key| {
                    let section = key.as_str().split("__").next().unwrap_or_default();
                    sections.iter().any(|s| s.eq_ignore_ascii_case(section))
                })
                .split("__"),
        );
        let settings: Settings = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        // Zero would make every panel login expire at once, or keep none.
        if self.admin.session_ttl_secs == 0 {
            return Err(ConfigError::Invalid(
                "admin.session_ttl_secs must be at least 1".into(),
            ));
        }
        // Zero would refuse every body, even an MCP `initialize`.
        if self.server.max_body_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.max_body_bytes must be at least 1".into(),
            ));
        }
        // Zero would cut every connection at once, or serve none.
        if self.server.header_timeout_secs == 0
            || self.server.body_timeout_secs == 0
            || self.server.max_connections == 0
        {
            return Err(ConfigError::Invalid(
                "server.header_timeout_secs, server.body_timeout_secs and \
                 server.max_connections must be at least 1"
                    .into(),
            ));
        }
        if self.broker.mcp_sessions_per_agent == 0 {
            return Err(ConfigError::Invalid(
                "broker.mcp_sessions_per_agent must be at least 1".into(),
            ));
        }
        // Zero would refuse every panel login, or count attempts over no time at all.
        if self.admin.login_attempts == 0 || self.admin.login_window_secs == 0 {
            return Err(ConfigError::Invalid(
                "admin.login_attempts and admin.login_window_secs must be at least 1".into(),
            ));
        }
        if self.broker.max_heavy_calls_per_agent == 0 {
            return Err(ConfigError::Invalid(
                "broker.max_heavy_calls_per_agent must be at least 1".into(),
            ));
        }
        if self.broker.max_sandbox_size_mb < sandboxd_domain::DataSize::MIN_MB {
            return Err(ConfigError::Invalid(format!(
                "broker.max_sandbox_size_mb must be at least {} (the least size a project may \
                 ask for)",
                sandboxd_domain::DataSize::MIN_MB
            )));
        }
        if self.broker.mcp_session_ttl_secs == 0 {
            return Err(ConfigError::Invalid(
                "broker.mcp_session_ttl_secs must be at least 1".into(),
            ));
        }
        if self.admin.max_sessions == 0 {
            return Err(ConfigError::Invalid(
                "admin.max_sessions must be at least 1".into(),
            ));
        }
        for name in self.engines.keys() {
            EngineRef::parse(name)
                .map_err(|e| ConfigError::Invalid(format!("[engines.{name}]: {e}")))?;
        }
        if self.broker.pool_backoff_base_ms == 0 || self.broker.pool_check_interval_secs == 0 {
            return Err(ConfigError::Invalid(
                "broker.pool_backoff_base_ms and broker.pool_check_interval_secs must be at \
                 least 1"
                    .into(),
            ));
        }
        self.pool_configs()?;
        self.experiments_config()?;
        Ok(())
    }

    /// `run_experiment`'s configuration (None when turned off), its limits validated.
    pub fn experiments_config(
        &self,
    ) -> Result<Option<sandboxd_broker::ExperimentsConfig>, ConfigError> {
        let settings = &self.experiments;
        if !settings.enabled {
            return Ok(None);
        }
        let mut policy = sandboxd_experiments::Policy::default();
        let within = |name: &str, value: u64, max: u64, floor: u64| {
            if value < floor || value > max {
                return Err(ConfigError::Invalid(format!(
                    "experiments.{name} is {value}; allowed: {floor} to {max}"
                )));
            }
            Ok(value)
        };
        policy.wall_ms.max = within(
            "max_wall_ms",
            settings.max_wall_ms,
            600_000,
            policy.wall_ms.min,
        )?;
        policy.wall_ms.default = within(
            "wall_ms",
            settings.wall_ms,
            policy.wall_ms.max,
            policy.wall_ms.min,
        )?;
        let memory_floor = policy.memory_bytes.min / MIB;
        policy.memory_bytes.max = within(
            "max_memory_mb",
            settings.max_memory_mb,
            16 * 1024,
            memory_floor,
        )? * MIB;
        policy.memory_bytes.default = within(
            "memory_mb",
            settings.memory_mb,
            policy.memory_bytes.max / MIB,
            memory_floor,
        )? * MIB;
        policy.sql_calls.max = within("max_sql_calls", settings.max_sql_calls, 10_000_000, 0)?;
        policy.sql_calls.default = policy.sql_calls.default.min(policy.sql_calls.max);
        // A run that may ask for `max_memory_mb` must fit the budget on its own.
        let memory_budget_mb = within(
            "memory_budget_mb",
            settings.memory_budget_mb,
            1024 * 1024,
            policy.memory_bytes.max / MIB,
        )?;
        let capacity = sandboxd_experiments::Capacity {
            max_runs: within("max_concurrent", settings.max_concurrent as u64, 10_000, 1)? as usize,
            memory_budget_bytes: memory_budget_mb * MIB,
            wait: Duration::from_millis(within(
                "admission_wait_ms",
                settings.admission_wait_ms,
                600_000,
                0,
            )?),
            threads: match settings.threads {
                0 => sandboxd_experiments::Capacity::default_threads(),
                n => within("threads", n as u64, 1024, 1)? as usize,
            },
        };
        let max_per_agent = within(
            "max_concurrent_per_agent",
            settings.max_concurrent_per_agent as u64,
            10_000,
            1,
        )? as usize;
        Ok(Some(sandboxd_broker::ExperimentsConfig {
            files: sandboxd_experiments::GuestFiles {
                component: settings.guest.clone(),
                cache_dir: settings
                    .cache_dir
                    .clone()
                    .unwrap_or_else(|| self.state_dir.join("experiments")),
            },
            policy,
            capacity,
            max_per_agent,
        }))
    }

    /// The warm pools, validated: a registered engine, allowlisted features, sane sizes.
    pub fn pool_configs(&self) -> Result<Vec<PoolConfig>, ConfigError> {
        self.pools
            .iter()
            .map(|(name, pool)| {
                let invalid = |e: String| ConfigError::Invalid(format!("[pools.{name}]: {e}"));
                let key = PoolKey::parse(name).map_err(invalid)?;
                let engine = key.engine;
                let features = pool
                    .features
                    .iter()
                    .map(|f| Feature::parse(engine, f).map_err(|e| invalid(e.to_string())))
                    .collect::<Result<_, _>>()?;
                let config = PoolConfig {
                    engine,
                    clone_of: key.clone_of,
                    features,
                    min_idle: pool.min_idle,
                    max_total: pool.max_total(),
                };
                config.validate().map_err(ConfigError::Invalid)?;
                Ok(config)
            })
            .collect()
    }

    pub fn pool_tuning(&self) -> PoolTuning {
        PoolTuning {
            backoff_base: Duration::from_millis(self.broker.pool_backoff_base_ms),
            backoff_max: Duration::from_secs(self.broker.pool_backoff_max_secs),
            check_interval: Duration::from_secs(self.broker.pool_check_interval_secs),
            ..PoolTuning::default()
        }
    }

    /// The images that may run `engine` on Docker, in the order they are tried: the configured
    /// one alone, else the engine's list.
    pub fn images_for(&self, engine: EngineRef) -> Vec<String> {
        match self.engines.get(engine.name).and_then(|e| e.image.clone()) {
            Some(image) => vec![image],
            None => engine.images.iter().map(|i| (*i).to_owned()).collect(),
        }
    }

    pub fn deadlines(&self) -> BTreeMap<String, Duration> {
        engines::all()
            .filter_map(|engine| {
                let secs = self.engines.get(engine.name)?.readiness_deadline_secs?;
                Some((engine.name.to_owned(), Duration::from_secs(secs)))
            })
            .collect()
    }

    /// The operator surface's configuration, with the daemon's admin token.
    pub fn admin_config(&self, admin_token: SecretString) -> AdminConfig {
        AdminConfig {
            admin_token,
            session_ttl: Duration::from_secs(self.admin.session_ttl_secs),
            secure_cookies: self.admin.secure_cookies,
            max_sessions: self.admin.max_sessions,
            login_attempts: self.admin.login_attempts,
            login_window: Duration::from_secs(self.admin.login_window_secs),
        }
    }

    /// Whether the Kubernetes backend is wanted: it provisions, or it is enabled beside.
    pub fn kubernetes_wanted(&self) -> bool {
        self.backend == BackendChoice::Kubernetes || self.kubernetes.enabled
    }

    pub fn kube_config(&self) -> KubeConfig {
        let k = &self.kubernetes;
        KubeConfig {
            kubeconfig: k.kubeconfig.clone(),
            context: k.context.clone(),
            namespace: k.namespace.clone(),
            label_prefix: k.label_prefix.clone(),
            uid_base: k.uid_base,
            uid_count: k.uid_count,
            memory_mb: k.memory_mb,
            cpus: k.cpus,
            cpu_request: k.cpu_request,
            service: k.service,
            agent_label: k.agent_label.clone(),
            agent_namespace_label: k.agent_namespace_label.clone(),
            daemon_pod_labels: k.daemon_pod_labels.clone(),
            daemon_cidrs: k.daemon_cidrs.clone(),
            image_pull_policy: k.image_pull_policy.clone(),
            grace: Duration::from_secs(k.grace_secs),
            start_timeout: Duration::from_secs(k.start_timeout_secs),
            images: engines::all()
                .map(|engine| (engine.name.to_owned(), self.images_for(engine)))
                .collect(),
            deadlines: self.deadlines(),
        }
    }

    pub fn process_config(&self) -> ProcessConfig {
        ProcessConfig {
            root: self.process.root.clone(),
            template_dir: self.process.template_dir.clone(),
            run_as: self.process.run_as.clone(),
            uid_pool_prefix: self.process.uid_pool_prefix.clone(),
            uid_pool_size: self.process.uid_pool_size,
            lease_dir: self.process.lease_dir.clone(),
            memory_limit_mb: self.process.memory_limit_mb,
            data_limit_mb: self.process.data_limit_mb,
            wal_limit_mb: self.process.wal_limit_mb,
            pids_limit: self.process.pids_limit,
            stop_timeout: Duration::from_secs(self.process.stop_timeout_secs),
            grace: Duration::from_secs(self.process.grace_secs),
            deadlines: self.deadlines(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the settings tree, dotted; per-engine maps as `engines.<engine>.…`.
    fn leaf_keys(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) if prefix == "engines" || prefix == "pools" => {
                let per_engine = format!("{prefix}.<engine>");
                for engine_settings in map.values() {
                    leaf_keys(&per_engine, engine_settings, out);
                }
            }
            serde_json::Value::Object(map) => {
                for (key, child) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaf_keys(&path, child, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }

    #[test]
    fn the_readme_documents_every_setting() {
        let readme = include_str!("../../../README.md");
        let mut defaults = Settings::load(None).expect("defaults");
        // The per-engine maps are empty by default: one entry each shows their keys.
        defaults
            .engines
            .insert("postgres".into(), EngineSettings::default());
        defaults
            .pools
            .insert("postgres".into(), PoolSettings::default());
        let settings = serde_json::to_value(defaults).expect("json");
        let mut keys = Vec::new();
        leaf_keys("", &settings, &mut keys);
        keys.dedup();
        assert!(
            keys.contains(&"broker.idle_ttl_secs".to_owned()),
            "{keys:?}"
        );
        let missing: Vec<&String> = keys
            .iter()
            .filter(|key| !readme.contains(&format!("| `{key}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "README's configuration reference lacks {missing:?}"
        );
    }

    #[test]
    fn defaults_load_without_a_file() {
        let settings = Settings::load(None).expect("defaults are valid");
        assert_eq!(settings.backend, BackendChoice::Auto);
        assert_eq!(settings.env_prefix.as_str(), "ROBOCO_TEST");
        assert_eq!(settings.docker.memory_mb, 512);
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail decides the closure's error type
    fn env_overrides_the_file_and_other_prefixed_variables_are_not_config() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("s.toml", "[process]\nrun_as = \"from-file\"\n")?;
            jail.set_env("SANDBOXD_PROCESS__RUN_AS", "from-env");
            jail.set_env("SANDBOXD_DOCKER__NETWORK", "agents");
            jail.set_env("SANDBOXD_REQUIRE_DOCKER", "1");
            let settings =
                Settings::load(Some(std::path::Path::new("s.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(settings.process.run_as, "from-env");
            assert_eq!(settings.docker.network.as_deref(), Some("agents"));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail decides the closure's error type
    fn admin_settings_reach_the_admin_config_from_the_file_and_the_env() {
        let token = || SecretString::from("t".repeat(16));
        let defaults = Settings::load(None)
            .expect("defaults")
            .admin_config(token());
        let built_in = AdminConfig::new(token());
        assert_eq!(defaults.session_ttl, built_in.session_ttl);
        assert_eq!(defaults.secure_cookies, built_in.secure_cookies);
        assert_eq!(defaults.max_sessions, built_in.max_sessions);
        assert_eq!(defaults.login_attempts, built_in.login_attempts);
        assert_eq!(defaults.login_window, built_in.login_window);
        figment::Jail::expect_with(|jail| {
            // Shares the `SANDBOXD_ADMIN` prefix but is not a setting of `[admin]`.
            jail.set_env("SANDBOXD_ADMIN_TOKEN", "t".repeat(16));
            jail.create_file(
                "s.toml",
                "[admin]\nsession_ttl_secs = 600\nsecure_cookies = true\nmax_sessions = 8\n",
            )?;
            let file = Some(std::path::Path::new("s.toml"));
            let config = Settings::load(file)
                .map_err(|e| e.to_string())?
                .admin_config(token());
            assert_eq!(config.session_ttl, Duration::from_secs(600));
            assert!(config.secure_cookies);
            assert_eq!(config.max_sessions, 8);
            jail.set_env("SANDBOXD_ADMIN__SESSION_TTL_SECS", "60");
            jail.set_env("SANDBOXD_ADMIN__SECURE_COOKIES", "false");
            jail.set_env("SANDBOXD_ADMIN__MAX_SESSIONS", "3");
            let config = Settings::load(file)
                .map_err(|e| e.to_string())?
                .admin_config(token());
            assert_eq!(config.session_ttl, Duration::from_secs(60));
            assert!(!config.secure_cookies);
            assert_eq!(config.max_sessions, 3);
            jail.set_env("SANDBOXD_ADMIN__MAX_SESSIONS", "0");
            let err = Settings::load(file).expect_err("no sessions at all");
            assert!(err.to_string().contains("admin.max_sessions"), "{err}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail decides the closure's error type
    fn a_min_idle_alone_raises_the_pools_ceiling_and_a_set_one_is_kept() {
        // In a Jail: other tests set SANDBOXD_* variables, which `load` reads.
        figment::Jail::expect_with(|jail| {
            let pool = |toml: &str| {
                jail.create_file("s.toml", toml).expect("write");
                Settings::load(Some(std::path::Path::new("s.toml")))
                    .and_then(|settings| settings.pool_configs())
                    .map(|pools| (pools[0].min_idle, pools[0].max_total))
            };
            assert_eq!(
                pool("[pools.postgres]\nmin_idle = 6\n").expect("ok"),
                (6, 6)
            );
            assert_eq!(
                pool("[pools.postgres]\nmin_idle = 2\n").expect("ok"),
                (2, 4)
            );
            assert_eq!(
                pool("[pools.postgres]\nmin_idle = 2\nmax_total = 9\n").expect("ok"),
                (2, 9)
            );
            let err = pool("[pools.postgres]\nmin_idle = 6\nmax_total = 4\n").expect_err("refused");
            assert!(
                err.to_string().contains("must not exceed max_total"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn file_values_override_defaults_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sandboxd.toml");
        std::fs::write(
            &path,
            "backend = \"process\"\nenv_prefix = \"ACME\"\n[engines.postgres]\nimage = \"mirror/pg:16\"\n",
        )
        .expect("write");
        let settings = Settings::load(Some(&path)).expect("valid file");
        assert_eq!(settings.backend, BackendChoice::Process);
        assert_eq!(
            settings.images_for(EngineRef::parse("postgres").expect("registered")),
            ["mirror/pg:16"]
        );
        std::fs::write(&path, "bakend = \"process\"\n").expect("write");
        let err = Settings::load(Some(&path)).expect_err("typo");
        assert!(err.to_string().contains("bakend"), "{err}");
        std::fs::write(&path, "[engines.oracle]\nimage = \"x\"\n").expect("write");
        let err = Settings::load(Some(&path)).expect_err("unknown engine");
        assert!(err.to_string().contains("allowed: postgres"), "{err}");
    }
}
