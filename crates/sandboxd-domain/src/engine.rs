//! The `Engine` trait: everything sandboxd needs to know about one kind of database server, as data
//! and pure functions. Backends read it; they never `match` on an engine's name.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::credentials::Credentials;
use crate::error::InputError;
use crate::names::EnvPrefix;

/// The wire protocol family of an engine. Backends keep one client per family, so an engine that
/// speaks an existing protocol needs no backend code at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Postgres,
    Redis,
    Mysql,
    Mongo,
}

/// What an engine's features are called in the evidence an agent receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureKind {
    /// `available_extensions`
    Extension,
    /// `available_modules`
    Module,
}

impl FeatureKind {
    pub fn evidence_key(self) -> &'static str {
        match self {
            Self::Extension => "available_extensions",
            Self::Module => "available_modules",
        }
    }
}

/// One allowlisted feature and how the daemon activates it, as the service superuser, after the
/// base readiness probe passed.
#[derive(Debug)]
pub struct FeatureSpec {
    pub name: &'static str,
    pub summary: &'static str,
    pub activation: Activation,
}

#[derive(Debug)]
pub enum Activation {
    /// `CREATE EXTENSION IF NOT EXISTS "<extension>"` in the agent's database.
    PgExtension {
        extension: &'static str,
        /// The Debian package providing it; `{major}` stands for the server's major version.
        package: &'static str,
    },
    /// Makes sure a Redis module is loaded: present in `MODULE LIST` under one of `names`, else
    /// `MODULE LOAD` of the first of `libraries` the server can load.
    RedisModule {
        names: &'static [&'static str],
        libraries: &'static [&'static str],
        package: &'static str,
    },
}

impl Activation {
    /// What to install to get this feature, for error messages and `doctor`.
    pub fn package_hint(&self, major_version: Option<u32>) -> String {
        let package = match self {
            Self::PgExtension { package, .. } | Self::RedisModule { package, .. } => *package,
        };
        match major_version {
            Some(major) => package.replace("{major}", &major.to_string()),
            None => package.to_owned(),
        }
    }
}

/// A tmpfs mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmpfs {
    pub path: &'static str,
    pub size_mb: u32,
    pub mode: &'static str,
    /// Owner of the mount. Some Docker versions ignore `mode` where the image already has the
    /// directory, leaving a root-owned 0755 mount the non-root server cannot write; the official
    /// images' service users are uid 999, so owning the mount works for them and ours alike.
    pub uid: Option<u32>,
}

/// How to run an engine's image as a container. The secrets are the superuser's: the image's own
/// environment contract takes them from the environment, as the official images document.
#[derive(Debug)]
pub struct ContainerRecipe {
    pub env: Vec<(String, SecretString)>,
    /// Arguments after the image's entrypoint.
    pub command: Vec<String>,
    /// The image's non-root user, when its entrypoint supports starting as it.
    pub user: Option<&'static str>,
    pub tmpfs: Vec<Tmpfs>,
    /// Capabilities the entrypoint needs; empty when `user` is set.
    pub capabilities: Vec<&'static str>,
}

/// The file name of a MySQL-protocol server's socket inside its private socket directory.
pub const MYSQL_SOCKET_FILE: &str = "mysqld.sock";

/// How the daemon, as superuser, talks to an instance.
#[derive(Debug, Clone)]
pub enum AdminAccess {
    /// Over TCP with the superuser's password.
    Password(Credentials),
    /// Over the instance's private unix socket (directory mode 0700), trusted by the server.
    Socket { directory: PathBuf, user: String },
}

/// A statement the daemon runs as superuser once the server answers.
#[derive(Debug)]
pub enum AdminStep {
    /// SQL (Postgres, MySQL); `database` None means the superuser's default database.
    Sql {
        database: Option<String>,
        statement: SecretString,
    },
    /// A MongoDB command document (JSON) run against `database`.
    MongoCommand {
        database: String,
        command: SecretString,
    },
}

/// What a running server told the daemon about itself before the setup steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerFacts {
    pub major_version: Option<u32>,
}

/// One planned command of the process backend. Paths are already resolved.
#[derive(Debug, Clone)]
pub struct CommandPlan {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// A file the process backend writes into the instance directory (mode 0600) before launch.
#[derive(Debug)]
pub struct PlannedFile {
    pub relative_path: &'static str,
    pub content: SecretString,
}

/// Paths and values a process recipe may use.
#[derive(Debug)]
pub struct ProcessContext<'a> {
    /// Resolved paths of the recipe's programs, keyed by program name.
    pub programs: &'a BTreeMap<&'static str, PathBuf>,
    /// The data directory (a copy of the template, or empty).
    pub data_dir: &'a Path,
    /// Private directory (mode 0700) for unix sockets.
    pub socket_dir: &'a Path,
    /// The instance directory holding both, plus logs and metadata.
    pub instance_dir: &'a Path,
    pub port: u16,
    /// The OS user the server runs as.
    pub run_as: &'a str,
    /// The OS user the daemon runs as (servers that authenticate the socket's peer need it).
    pub daemon_user: &'a str,
    pub admin: &'a Credentials,
    pub agent: &'a Credentials,
}

/// A template data directory, built once and copied per instance.
#[derive(Debug)]
pub struct TemplatePlan {
    pub commands: Vec<CommandPlan>,
    /// Files written into the template after the commands ran.
    pub files: Vec<PlannedFile>,
}

/// How to run an engine as a local child process (the process backend).
#[derive(Debug)]
pub struct ProcessRecipe {
    /// What to install to get the server (a Debian package name where Debian has one), for
    /// `doctor` and "not installed" errors.
    pub package: &'static str,
    /// Program names the recipe needs.
    pub programs: &'static [&'static str],
    /// Directories searched before `PATH`; `*` matches one path component (highest version wins).
    pub search_dirs: &'static [&'static str],
    /// Builds a template data directory in `ctx.data_dir`; None when the engine starts empty.
    pub template: Option<fn(&ProcessContext<'_>) -> TemplatePlan>,
    /// The server process for one instance, plus files to write before it starts.
    pub launch: fn(&ProcessContext<'_>) -> (CommandPlan, Vec<PlannedFile>),
    /// How the daemon reaches the instance as superuser.
    pub admin: fn(&ProcessContext<'_>) -> AdminAccess,
    /// Steps run without credentials over the private socket before `setup`, for servers that
    /// start with no superuser (MongoDB's localhost exception).
    pub bootstrap: Option<fn(&ProcessContext<'_>) -> Vec<AdminStep>>,
    /// A signal the server treats as "shut down fast" (SIGTERM is the default choice).
    pub graceful_signal: Signal,
}

/// A signal name, so the domain stays free of libc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Int,
}

/// The host, port and credentials an agent uses, from which URLs and env are rendered.
#[derive(Debug)]
pub struct Endpoint<'a> {
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    pub password: &'a SecretString,
    pub database: &'a str,
}

/// One kind of database server. Implement it once per engine and add one line to
/// [`crate::engines::REGISTRY`]; nothing else in the workspace names an engine.
pub trait Engine: Send + Sync + fmt::Debug + 'static {
    /// The name agents and operators use (`postgres`).
    fn name(&self) -> &'static str;
    /// A human name (`PostgreSQL`).
    fn title(&self) -> &'static str;
    fn protocol(&self) -> Protocol;
    fn default_image(&self) -> &'static str;
    /// The port the server listens on inside its container.
    fn port(&self) -> u16;
    fn readiness_deadline(&self) -> Duration;
    fn feature_kind(&self) -> FeatureKind;
    /// The allowlist: the only features that can ever be activated.
    fn features(&self) -> &'static [FeatureSpec];
    /// The superuser the daemon keeps.
    fn admin_user(&self) -> &'static str;
    /// The database the superuser connects to for setup (empty: the server's default).
    fn admin_database(&self) -> &'static str {
        ""
    }
    /// The handed-out (non-superuser) account and its database.
    fn agent_user(&self) -> &'static str {
        "sandbox"
    }
    fn agent_database(&self) -> &'static str {
        "sandbox"
    }
    fn container(&self, admin: &Credentials, agent: &Credentials) -> ContainerRecipe;
    fn process(&self) -> Option<ProcessRecipe>;
    /// Statements run as superuser once the server answers, creating the handed-out account.
    fn setup(&self, agent: &Credentials, facts: ServerFacts) -> Vec<AdminStep>;
    /// `(url, env)` for the evidence.
    fn render(
        &self,
        endpoint: &Endpoint<'_>,
        prefix: &EnvPrefix,
    ) -> (String, BTreeMap<String, String>);

    fn feature(&self, name: &str) -> Option<&'static FeatureSpec> {
        self.features().iter().find(|f| f.name == name)
    }
}

/// A handle to a registered engine: cheap to copy, compared and ordered by name, serialized as
/// its name.
#[derive(Clone, Copy)]
pub struct EngineRef(pub(crate) &'static dyn Engine);

impl EngineRef {
    /// Looks a name up in the registry.
    pub fn parse(name: &str) -> Result<Self, InputError> {
        crate::engines::lookup(name)
    }

    pub fn get(self) -> &'static dyn Engine {
        self.0
    }
}

impl std::ops::Deref for EngineRef {
    type Target = dyn Engine;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl fmt::Debug for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl fmt::Display for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl PartialEq for EngineRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}
impl Eq for EngineRef {}

impl Hash for EngineRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
    }
}

impl PartialOrd for EngineRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EngineRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name().cmp(other.0.name())
    }
}

impl std::str::FromStr for EngineRef {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for EngineRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for EngineRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// Quotes an SQL string literal (standard-conforming: doubled single quotes). Only ever applied
/// to values the daemon generated (hex passwords) or validated, but quoted anyway.
pub fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Quotes an SQL identifier with double quotes (Postgres) .
pub fn pg_identifier(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}
