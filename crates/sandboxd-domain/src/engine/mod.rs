//! What sandboxd knows about one kind of database server. An engine is a `static` [`Engine`]
//! value: its data (name, images, port, deadline, allowlist, accounts) as plain fields, and its
//! behaviour as the pure functions of [`EngineRecipes`] (container recipe, process recipe, setup
//! steps, env rendering). Backends read both; they never `match` on an engine's name. The
//! registry of engines and the [`EngineRef`](crate::engines::EngineRef) handle live in
//! [`crate::engines`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::credentials::Credentials;
use crate::names::EnvPrefix;
use crate::space::DataSize;

mod quote;
mod recipe;
mod render;

pub use quote::{mysql_identifier, pg_identifier, sql_literal};
pub use recipe::{
    AdminAccess, AdminStep, AgentCluster, CommandPlan, ContainerRecipe, ContainerSecret,
    MYSQL_SOCKET_FILE, PlannedFile, ProcessContext, ProcessRecipe, ResetPlan, ServerFacts, Signal,
    TemplateOutput, TemplatePlan, Tmpfs,
};
pub use render::{Endpoint, EnvRendering, UrlPath};

/// One kind of database server, as data. Each engine file defines one `static` of it and the
/// registry lists it; nothing else in the workspace names an engine.
pub struct Engine {
    /// The name agents and operators use (`postgres`).
    pub name: &'static str,
    /// A human name (`PostgreSQL`).
    pub title: &'static str,
    pub protocol: Protocol,
    /// Images that run this engine, in the order they are tried: the official image first, then
    /// the one `scripts/build-images.sh` builds (`sandboxd-local/…`), so either works unconfigured.
    pub images: &'static [&'static str],
    /// The port the server listens on inside its container.
    pub port: u16,
    pub readiness_deadline: Duration,
    pub feature_kind: FeatureKind,
    /// The allowlist: the only features that can ever be activated.
    pub features: &'static [FeatureSpec],
    /// The superuser the daemon keeps.
    pub admin_user: &'static str,
    /// The database the superuser connects to for setup (empty: the server's default).
    pub admin_database: &'static str,
    /// The handed-out (non-superuser) account.
    pub agent_user: &'static str,
    /// The handed-out account's database.
    pub agent_database: &'static str,
    /// Whether the server keeps its data in files, on a data space a project may size
    /// (`sandboxd projects set … --size`); false for one that keeps it in memory, sized by the
    /// memory cap.
    pub data_on_disk: bool,
    /// The URL and env vars an agent's evidence carries.
    pub env: EnvRendering,
    /// What the engine does, as pure functions.
    pub recipes: &'static dyn EngineRecipes,
}

/// An engine's behaviour: pure functions from credentials and facts to the recipes backends
/// carry out.
pub trait EngineRecipes: Send + Sync + 'static {
    /// How to run the engine's image as a container whose data space is `size` (the data
    /// tmpfs and what the server sizes to it).
    fn container(
        &self,
        admin: &Credentials,
        agent: &Credentials,
        size: DataSize,
    ) -> ContainerRecipe;
    /// How to run the engine as a local child process; None when it runs only in containers.
    fn process(&self) -> Option<ProcessRecipe>;
    /// Statements run as superuser once the server answers, creating the handed-out account.
    fn setup(&self, agent: &Credentials, facts: ServerFacts) -> Vec<AdminStep>;
    /// How to bring a live instance back to how `setup` left it, keeping the handed-out
    /// account and its credentials (`reset_sandbox`). `database` is the agent's database as the
    /// instance names it: `agent_database`, or the source's name a clone's was renamed to.
    fn reset(&self, agent: &Credentials, facts: ServerFacts, database: &str) -> ResetPlan;
    /// Statements run as superuser on a warm-pool member once the server answers, before its
    /// features: everything `setup` makes that does not depend on the handed-out account.
    fn pool_prepare(&self) -> Vec<AdminStep> {
        Vec::new()
    }
    /// Statements run as superuser when a prepared pool member is handed to an agent: after
    /// them it is as `setup` would have left it. Kept short (one round trip where the engine
    /// allows): an agent waits for them. `database` is the agent's database as the member
    /// names it (a pooled clone's goes by its source's name).
    fn mint(&self, agent: &Credentials, facts: ServerFacts, database: &str) -> Vec<AdminStep> {
        let _ = database;
        self.setup(agent, facts)
    }
}

impl Engine {
    /// The first image tried when the operator configured none.
    pub fn default_image(&self) -> &'static str {
        self.images.first().copied().unwrap_or(self.name)
    }

    pub fn feature(&self, name: &str) -> Option<&'static FeatureSpec> {
        self.features.iter().find(|f| f.name == name)
    }

    pub fn container(
        &self,
        admin: &Credentials,
        agent: &Credentials,
        size: DataSize,
    ) -> ContainerRecipe {
        self.recipes.container(admin, agent, size)
    }

    pub fn process(&self) -> Option<ProcessRecipe> {
        self.recipes.process()
    }

    pub fn setup(&self, agent: &Credentials, facts: ServerFacts) -> Vec<AdminStep> {
        self.recipes.setup(agent, facts)
    }

    /// The reset of an instance whose agent's database is `database`.
    pub fn reset(&self, agent: &Credentials, facts: ServerFacts, database: &str) -> ResetPlan {
        self.recipes.reset(agent, facts, database)
    }

    pub fn pool_prepare(&self) -> Vec<AdminStep> {
        self.recipes.pool_prepare()
    }

    /// The hand-out of a pool member whose agent's database is `database`.
    pub fn mint(&self, agent: &Credentials, facts: ServerFacts, database: &str) -> Vec<AdminStep> {
        self.recipes.mint(agent, facts, database)
    }

    pub fn render(
        &self,
        endpoint: &Endpoint<'_>,
        prefix: &EnvPrefix,
    ) -> (String, BTreeMap<String, String>) {
        self.env.render(endpoint, prefix)
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

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
    /// `CREATE EXTENSION IF NOT EXISTS "<extension>" SCHEMA extensions CASCADE`, then its
    /// `companions` the server has, in `template1` and the agent's database
    /// ([`pg_extension_activation`], [`pg_feature_databases`]).
    PgExtension {
        extension: &'static str,
        /// Extensions of the same package that a suite using the feature creates beside it and
        /// could not create itself (only a superuser may): made with it where the server has
        /// them, skipped where it has not.
        companions: &'static [&'static str],
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

/// The schema allowlisted PostgreSQL extensions are created in: owned by the superuser, USAGE
/// granted to everyone, on every role's default `search_path` in every database
/// ([`PG_DEFAULT_SEARCH_PATH`]). The agent owns `public`, so an extension script running there
/// (as superuser, with `CASCADE`) could call functions the agent planted; in this schema it
/// cannot plant anything.
pub const PG_EXTENSION_SCHEMA: &str = "extensions";

/// The database `CREATE DATABASE` copies unless told otherwise: what a Django, Rails or pytest
/// run makes its test databases from. It is the daemon's: owned by the superuser, nobody else
/// creates anything in it, and it carries the extension schema, every feature the sandbox has
/// and the pre-installed extensions, so a database copied from it has them too.
pub const PG_TEMPLATE_DATABASE: &str = "template1";

/// Every role's default `search_path`, in every database (`ALTER ROLE ALL SET`, below the
/// database's and the role's own settings): the extension schema after the usual ones, so a
/// database the agent makes reaches its features by their plain names, as its own does.
/// Superuser sessions never see it ([`PG_SUPERUSER_SETTINGS`] outranks it).
pub const PG_DEFAULT_SEARCH_PATH: &str = "\"$user\", public, extensions";

/// The databases the daemon makes allowlisted extensions in, in order: [`PG_TEMPLATE_DATABASE`],
/// so every database the agent or its test runner makes from it has them, then the agent's own
/// (`agent_database`), made before the feature was asked for. `template0` cannot be changed; a
/// database copied from the agent's has what that has.
pub fn pg_feature_databases(agent_database: &str) -> [&str; 2] {
    [PG_TEMPLATE_DATABASE, agent_database]
}

/// Settings every superuser session of the daemon starts with, as startup options, so they win
/// over anything set on the database or a role (`ALTER DATABASE … SET`, `ALTER ROLE … SET`):
/// the agent owns its database and may set its settings, and the daemon's superuser work there
/// must never resolve a name through a schema the agent controls, run as the agent's role, read
/// its string literals under other escaping rules, or wait forever on a lock the agent holds.
/// Client startup options outrank database and role settings, and `RESET` returns to them.
pub const PG_SUPERUSER_SETTINGS: &[(&str, &str)] = &[
    // Only the catalog, then the session's own temporary schema (which only it can write):
    // nothing the agent made is visible by an unqualified name.
    ("search_path", "pg_catalog,pg_temp"),
    // A database-level `SET role = <agent>` would make the superuser's session the agent's.
    ("role", "none"),
    ("standard_conforming_strings", "on"),
    ("default_transaction_read_only", "off"),
    ("check_function_bodies", "on"),
    ("statement_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    // A lock the agent holds fails the daemon's statement instead of stalling it for good.
    ("lock_timeout", "30s"),
    ("plpgsql.variable_conflict", "error"),
    ("plpgsql.extra_errors", "none"),
    ("plpgsql.extra_warnings", "none"),
];

/// [`PG_SUPERUSER_SETTINGS`] as the `options` startup parameter (`-c name=value …`).
pub fn pg_superuser_options() -> String {
    PG_SUPERUSER_SETTINGS
        .iter()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The superuser's statements activating `extension` and the `companions` the server has:
/// [`pg_extension_schema`], then the extension and what it needs, created in that schema. It
/// runs in the agent's database and in [`PG_TEMPLATE_DATABASE`], so every operator is qualified
/// (the session's `search_path` is pinned as well, [`PG_SUPERUSER_SETTINGS`]).
pub fn pg_extension_activation(extension: &str, companions: &[&str]) -> String {
    let mut statements = vec![
        pg_extension_schema(),
        format!(
            "CREATE EXTENSION IF NOT EXISTS {} SCHEMA {} CASCADE",
            pg_identifier(extension),
            pg_identifier(PG_EXTENSION_SCHEMA)
        ),
    ];
    statements.extend(companions.iter().map(|c| pg_extension_if_available(c)));
    statements.join("; ")
}

/// The start of every superuser statement that creates extensions: make sure the extension
/// schema exists and is the superuser's (an agent-made schema of that name is refused), then
/// pin `search_path` to `pg_catalog` and that schema for the rest of the session, so an
/// extension's script (run with `search_path` set to its schema) finds only the catalog's and
/// the superuser's objects.
pub fn pg_extension_schema() -> String {
    let schema = pg_identifier(PG_EXTENSION_SCHEMA);
    let literal = sql_literal(PG_EXTENSION_SCHEMA);
    format!(
        "DO $sbx$ BEGIN \
           IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace \
                          WHERE nspname OPERATOR(pg_catalog.=) {literal}) THEN \
             CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO PUBLIC; \
           END IF; \
           IF (SELECT nspowner FROM pg_catalog.pg_namespace \
               WHERE nspname OPERATOR(pg_catalog.=) {literal}) \
              OPERATOR(pg_catalog.<>) (SELECT oid FROM pg_catalog.pg_roles \
                                       WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN \
             RAISE EXCEPTION 'schema {PG_EXTENSION_SCHEMA} is not owned by the superuser'; \
           END IF; \
         END $sbx$; \
         SET search_path = pg_catalog, {schema}"
    )
}

/// `extension` created in the extension schema when the server has its files, nothing when it
/// has not (an operator's image without contrib still starts). After [`pg_extension_schema`].
pub fn pg_extension_if_available(extension: &str) -> String {
    format!(
        "DO $sbx$ BEGIN \
           IF EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions \
                      WHERE name OPERATOR(pg_catalog.=) {}) THEN \
             CREATE EXTENSION IF NOT EXISTS {} SCHEMA {} CASCADE; \
           END IF; \
         END $sbx$",
        sql_literal(extension),
        pg_identifier(extension),
        pg_identifier(PG_EXTENSION_SCHEMA)
    )
}
