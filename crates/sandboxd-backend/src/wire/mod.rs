//! One client per protocol family, used for the three things the daemon says to a server: who are
//! you (as superuser), run this setup step, and does the handed-out account answer. Dispatch is by
//! [`Protocol`], never by engine name.

use std::collections::{BTreeMap, BTreeSet};

use sandboxd_domain::engine::{AdminAccess, AdminStep, ResetPlan, ServerFacts};
use sandboxd_domain::{Credentials, Engine, Feature, Protocol};

mod account;
mod capped;
mod mongo;
mod mysql;
pub(crate) mod postgres;
mod query;
mod redis;
mod session;

pub use postgres::{AgentConnection, StatementError};
pub use query::{Cut, Param, QueryAnswer, QueryLimits};
pub use session::AdminSession;

/// Where a server answers over TCP.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    pub host: &'a str,
    pub port: u16,
}

/// A failed exchange with a server. The text comes from the driver, which never echoes
/// passwords.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

impl WireError {
    pub(crate) fn from_display(err: impl std::fmt::Display) -> Self {
        Self(err.to_string())
    }
}

/// The superuser's password credentials, for `server`s that have no socket access.
fn password_admin<'a>(admin: &'a AdminAccess, server: &str) -> Result<&'a Credentials, WireError> {
    match admin {
        AdminAccess::Password(creds) => Ok(creds),
        AdminAccess::Socket { .. } => Err(WireError(format!(
            "{server} superuser access needs a password"
        ))),
    }
}

/// The major version at the front of a version string (`11.4.2-MariaDB` → 11).
fn major_version(version: &str) -> Option<u32> {
    version.split('.').next()?.trim().parse().ok()
}

/// The outcome of activating one feature.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// The server does not have the feature's files (extension / module not installed).
    #[error("{0}")]
    Missing(String),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Connects as superuser and asks the server what it is.
pub async fn server_facts(
    engine: &Engine,
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<ServerFacts, WireError> {
    match engine.protocol {
        Protocol::Postgres => postgres::server_facts(admin, reach, engine.admin_database).await,
        Protocol::Redis => redis::server_facts(admin, reach).await,
        Protocol::Mysql => mysql::server_facts(admin, reach).await,
        Protocol::Mongo => mongo::server_facts(admin, reach).await,
    }
}

/// Runs one setup step as superuser (or, with `admin` None, unauthenticated over loopback for a
/// server's bootstrap).
pub async fn run_step(
    engine: &Engine,
    admin: Option<&AdminAccess>,
    reach: Reach<'_>,
    step: &AdminStep,
) -> Result<(), WireError> {
    match engine.protocol {
        Protocol::Postgres => postgres::run_step(admin, reach, engine.admin_database, step).await,
        Protocol::Mysql => mysql::run_step(admin, reach, step).await,
        Protocol::Mongo => mongo::run_step(admin, reach, step).await,
        Protocol::Redis => redis::run_step(admin, reach, step).await,
    }
}

/// One authenticated round trip with the handed-out account: the readiness probe.
pub async fn probe(
    engine: &Engine,
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<(), WireError> {
    match engine.protocol {
        Protocol::Postgres => postgres::probe(reach, agent, database).await,
        Protocol::Redis => redis::probe(reach, agent).await,
        Protocol::Mysql => mysql::probe(reach, agent, database).await,
        Protocol::Mongo => mongo::probe(reach, agent, database).await,
    }
}

/// Activates features as superuser, in the agent's database where that matters (Postgres: and
/// in `template1`, so the databases the agent makes have them too).
pub async fn activate(
    engine: &Engine,
    admin: &AdminAccess,
    reach: Reach<'_>,
    database: &str,
    features: &BTreeSet<Feature>,
) -> Result<(), (Feature, ActivationError)> {
    match engine.protocol {
        Protocol::Postgres => postgres::activate(admin, reach, database, features).await,
        Protocol::Redis => {
            for feature in features {
                redis::activate(admin, reach, feature)
                    .await
                    .map_err(|err| (*feature, err))?;
            }
            Ok(())
        }
        Protocol::Mysql | Protocol::Mongo => match features.first() {
            None => Ok(()),
            Some(feature) => Err((
                *feature,
                ActivationError::Missing(format!("{} has no activatable features", engine.title)),
            )),
        },
    }
}

/// The version of each loaded feature the server reports, by feature name, asked as superuser:
/// Redis modules (`MODULE LIST`); other engines report none.
pub async fn feature_versions(
    engine: &Engine,
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<BTreeMap<&'static str, String>, WireError> {
    match engine.protocol {
        Protocol::Redis => redis::module_versions(admin, reach, engine.features).await,
        Protocol::Postgres | Protocol::Mysql | Protocol::Mongo => Ok(BTreeMap::new()),
    }
}

/// Empties a live instance in place as superuser (`ResetPlan`), keeping the handed-out account.
pub async fn reset(
    engine: &Engine,
    admin: &AdminAccess,
    reach: Reach<'_>,
    plan: &ResetPlan,
) -> Result<(), WireError> {
    match (engine.protocol, plan) {
        (_, ResetPlan::Unsupported(why)) => Err(WireError((*why).to_owned())),
        (Protocol::Postgres, ResetPlan::AgentCluster(plan)) => {
            postgres::reset(admin, reach, engine.admin_database, plan).await
        }
        (
            Protocol::Mysql,
            ResetPlan::SqlDatabases {
                name_patterns,
                recreate,
                ..
            },
        ) => mysql::reset(admin, reach, name_patterns, recreate).await,
        (Protocol::Redis, ResetPlan::Commands(commands)) => {
            redis::reset(admin, reach, commands).await
        }
        (protocol, plan) => Err(WireError(format!(
            "no reset of this kind for the {protocol:?} protocol: {plan:?}"
        ))),
    }
}

/// The end of every reset, whether it succeeded or not: for a server the agent was locked out
/// of ([`ResetPlan::AgentCluster`]), its database made present and its account restored and let
/// in again. Nothing for the others.
pub async fn finish_reset(
    engine: &Engine,
    admin: &AdminAccess,
    reach: Reach<'_>,
    plan: &ResetPlan,
) -> Result<(), WireError> {
    match (engine.protocol, plan) {
        (Protocol::Postgres, ResetPlan::AgentCluster(plan)) => {
            postgres::finish_reset(admin, reach, engine.admin_database, plan).await
        }
        _ => Ok(()),
    }
}

/// The server's full version, asked as the handed-out account (never the superuser).
pub async fn version(
    engine: &Engine,
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    match engine.protocol {
        Protocol::Postgres => postgres::version(reach, agent, database).await,
        Protocol::Redis => redis::version(reach, agent).await,
        Protocol::Mysql => mysql::version(reach, agent, database).await,
        Protocol::Mongo => mongo::version(reach, agent, database).await,
    }
}

/// What `sandbox_sql` runs: an SQL statement, or a Redis command and its arguments.
#[derive(Debug, Clone)]
pub enum AgentStatement {
    Sql(String),
    Command(Vec<String>),
}

/// One statement (or command) as the handed-out account, never the superuser, under `limits`;
/// the server's own refusal (a syntax error, a permission denied) is the error.
pub async fn agent_query(
    engine: &Engine,
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
    statement: &AgentStatement,
    limits: QueryLimits,
) -> Result<QueryAnswer, WireError> {
    // The server cancels a statement at the limit; this covers one that ignores it (a Redis
    // blocking command) or a server that stopped answering.
    let deadline = limits.timeout + std::time::Duration::from_secs(2);
    let query = async {
        match (engine.protocol, statement) {
            (Protocol::Postgres, AgentStatement::Sql(sql)) => {
                postgres::agent_query(reach, agent, database, sql, limits).await
            }
            (Protocol::Mysql, AgentStatement::Sql(sql)) => {
                mysql::agent_query(reach, agent, database, sql, limits).await
            }
            (Protocol::Redis, AgentStatement::Command(command)) => {
                redis::agent_query(reach, agent, command, limits).await
            }
            (Protocol::Mongo, _) => Err(WireError(
                "MongoDB sandboxes take no sandbox_sql yet; connect with the credentials".into(),
            )),
            (protocol, statement) => Err(WireError(format!(
                "a {protocol:?} server takes no {statement:?}"
            ))),
        }
    };
    tokio::time::timeout(deadline, query)
        .await
        .map_err(|_| WireError(format!("no answer within {} ms", deadline.as_millis())))?
}
