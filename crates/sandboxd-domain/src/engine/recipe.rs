//! What an engine's behaviour produces: the recipes backends carry out. A container recipe (env,
//! command, user, tmpfs), a process recipe (programs, template, launch, superuser access), the
//! superuser's setup steps, and the endpoint the evidence is rendered from. All plain data; the
//! backends do the I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use secrecy::SecretString;

use crate::credentials::Credentials;

/// A tmpfs mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmpfs {
    pub path: &'static str,
    pub size_mb: u64,
    pub mode: &'static str,
    /// Owner of the mount. Some Docker versions ignore `mode` where the image already has the
    /// directory, leaving a root-owned 0755 mount the non-root server cannot write; the official
    /// images' service users are uid 999, so owning the mount works for them and ours alike.
    pub uid: Option<u32>,
}

/// How to run an engine's image as a container. No secret is part of its configuration: `env`
/// holds plain settings (they show in `docker inspect`), and the superuser's password, when the
/// image needs one, travels as `secret`.
#[derive(Debug)]
pub struct ContainerRecipe {
    /// Plain settings, never a secret.
    pub env: Vec<(String, String)>,
    /// The superuser's password for images that read it from `<var>` or `<var>_FILE` (the
    /// official images' contract). The Docker backend sets `<var>_FILE=/dev/stdin` and writes the
    /// value to the container's stdin as it starts, so it sits in no config, file or env var.
    pub secret: Option<ContainerSecret>,
    /// Arguments after the image's entrypoint.
    pub command: Vec<String>,
    /// The image's non-root user, when its entrypoint supports starting as it.
    pub user: Option<&'static str>,
    pub tmpfs: Vec<Tmpfs>,
    /// Capabilities the entrypoint needs; empty when `user` is set.
    pub capabilities: Vec<&'static str>,
}

/// A secret handed to a container's entrypoint through `<var>_FILE`.
#[derive(Debug)]
pub struct ContainerSecret {
    /// `POSTGRES_PASSWORD`: the entrypoint reads the file named by `POSTGRES_PASSWORD_FILE`.
    pub var: &'static str,
    pub value: SecretString,
}

impl ContainerSecret {
    /// `POSTGRES_PASSWORD_FILE`
    pub fn file_var(&self) -> String {
        format!("{}_FILE", self.var)
    }
}

/// The file name of a MySQL-protocol server's socket inside its private socket directory.
pub const MYSQL_SOCKET_FILE: &str = "mysqld.sock";

/// How the daemon, as superuser, talks to an instance.
#[derive(Debug, Clone)]
pub enum AdminAccess {
    /// Over TCP with the superuser's password.
    Password(Credentials),
    /// Over the instance's private unix socket (directory mode 0700), authenticated by the
    /// server from the socket's peer: only the daemon's OS user is admitted (Postgres `peer` with
    /// an ident map, MariaDB `unix_socket`). Never `trust`.
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
    /// One Redis command and its arguments (they may carry a password hash).
    RedisCommand { words: Vec<SecretString> },
}

/// How `reset_sandbox` empties a live instance in place, keeping the handed-out account.
#[derive(Debug)]
pub enum ResetPlan {
    /// A server with roles and databases that is the agent's alone (Postgres): see
    /// [`AgentCluster`].
    AgentCluster(AgentCluster),
    /// SQL servers without roles of the agent's (MySQL): drop every database whose name matches
    /// one of `name_patterns` (SQL `LIKE`), then run `recreate`.
    SqlDatabases {
        name_patterns: Vec<String>,
        recreate: Vec<AdminStep>,
    },
    /// Commands run as superuser, each a command and its arguments (Redis).
    Commands(Vec<Vec<&'static str>>),
    /// The engine cannot be reset in place; why.
    Unsupported(&'static str),
}

/// How a Postgres instance goes back to how it was handed out. The instance belongs to one
/// agent, so everything in it that the daemon did not make is the agent's doing, however it
/// was made (a role a role of the agent created, a database such a role owns): every database
/// but `keep_databases` and every role but `keep_roles`, the server's built-in roles and
/// superusers is the agent's. While the daemon rebuilds, the agent is out: its role and every
/// role it made lose `LOGIN` and their sessions are ended first, so nothing the agent does can
/// race the superuser's statements. Then the databases go, what the roles own in the databases
/// left, the roles, and `recreate` runs. `restore_agent` ends every reset, failed or not: the
/// agent's role as handed out (login, attributes, password, no role settings).
#[derive(Debug)]
pub struct AgentCluster {
    pub agent_role: String,
    pub keep_databases: Vec<String>,
    pub keep_roles: Vec<String>,
    /// The agent's database, recreated by `recreate` (after a failed reset too, when missing).
    pub agent_database: String,
    pub recreate: Vec<AdminStep>,
    pub restore_agent: Vec<AdminStep>,
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
    /// The instance's memory cap, for servers that size their caches and limits to it.
    pub memory_limit_mb: u64,
    /// The size cap of the instance's directory (the data directory's space).
    pub data_limit_mb: u64,
    /// The size cap of the recipe's `wal_dir`, when it has one.
    pub wal_limit_mb: u64,
}

/// A template data directory, built once and copied per instance.
#[derive(Debug)]
pub struct TemplatePlan {
    /// Run first: what each prints becomes a file of the build directory (`ctx.instance_dir`
    /// while a template is built) that `commands` may read, and is removed once they ran.
    pub outputs: Vec<TemplateOutput>,
    pub commands: Vec<CommandPlan>,
    /// Files written into the template after the commands ran.
    pub files: Vec<PlannedFile>,
}

/// A template step whose standard output is kept as `file` (SQL an install step loads).
#[derive(Debug)]
pub struct TemplateOutput {
    pub command: CommandPlan,
    pub file: &'static str,
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
    /// A subdirectory of the data directory the server must always be able to write (a
    /// write-ahead log), given its own size-capped space so a full data directory fails a
    /// statement instead of the server.
    pub wal_dir: Option<&'static str>,
}

/// A signal name, so the domain stays free of libc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Int,
}
