//! PostgreSQL over tokio-postgres: TCP with a password, or the instance's private unix socket.
//! Here: how every session is opened (the superuser's pinned, the handed-out account's), setup
//! steps, the readiness probe and feature activation; `reset.rs` empties an instance again,
//! `agent.rs` holds the handed-out account's own connections.

use std::collections::BTreeSet;
use std::time::Duration;

use sandboxd_domain::engine::{
    Activation, AdminAccess, AdminStep, ServerFacts, pg_extension_activation, pg_feature_databases,
    pg_superuser_options,
};
use sandboxd_domain::{Credentials, Feature};
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::{Client, Config, NoTls};

use super::{ActivationError, Reach, WireError};

mod agent;
mod bound;
mod reset;

pub use agent::{AgentConnection, StatementError};
pub(super) use agent::{agent_query, version};
pub(super) use reset::{finish_reset, reset};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// SQLSTATEs for "the extension's files are not installed": 58P01 (undefined_file, before
/// PostgreSQL 15) and 0A000 (feature_not_supported, "extension … is not available").
const NOT_INSTALLED: [&str; 2] = ["58P01", "0A000"];

/// Every superuser session of the daemon is opened here, and nowhere else. It starts with
/// [`pg_superuser_options`]: settings the agent cannot override from its database or role
/// (`search_path` only `pg_catalog, pg_temp`, no `role`, …), so no name in the daemon's SQL
/// resolves to anything the agent planted, whatever database it runs in.
fn admin_config(admin: &AdminAccess, reach: Reach<'_>, database: &str) -> Config {
    let mut config = Config::new();
    config
        .port(reach.port)
        .dbname(database)
        .connect_timeout(CONNECT_TIMEOUT)
        .application_name("sandboxd")
        .options(pg_superuser_options());
    match admin {
        AdminAccess::Socket { directory, user } => {
            config.host_path(directory).user(user);
        }
        AdminAccess::Password(creds) => {
            config
                .host(reach.host)
                .user(&creds.user)
                .password(creds.password.expose_secret());
        }
    }
    config
}

/// The handed-out account over TCP, as a test suite would connect.
fn agent_config(reach: Reach<'_>, agent: &Credentials, database: &str) -> Config {
    let mut config = Config::new();
    config
        .host(reach.host)
        .port(reach.port)
        .user(&agent.user)
        .password(agent.password.expose_secret())
        .dbname(database)
        .connect_timeout(CONNECT_TIMEOUT);
    config
}

async fn connect(config: &Config) -> Result<Client, WireError> {
    let (client, connection) = config.connect(NoTls).await.map_err(refused)?;
    // The connection future drives the socket; it ends when the client is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

pub(super) async fn server_facts(
    admin: &AdminAccess,
    reach: Reach<'_>,
    admin_database: &str,
) -> Result<ServerFacts, WireError> {
    let client = connect(&admin_config(admin, reach, admin_database)).await?;
    let row = client
        .query_one(
            "SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4",
            &[],
        )
        .await
        .map_err(refused)?;
    let version_num: i32 = row.get(0);
    Ok(ServerFacts {
        major_version: u32::try_from(version_num / 10_000).ok(),
    })
}

pub(super) async fn run_step(
    admin: Option<&AdminAccess>,
    reach: Reach<'_>,
    admin_database: &str,
    step: &AdminStep,
) -> Result<(), WireError> {
    let admin = admin.ok_or_else(|| WireError("Postgres needs superuser access".into()))?;
    let AdminStep::Sql {
        database,
        statement,
    } = step
    else {
        return Err(WireError("Postgres runs SQL steps only".into()));
    };
    let client = connect(&admin_config(
        admin,
        reach,
        database.as_deref().unwrap_or(admin_database),
    ))
    .await?;
    client
        .batch_execute(statement.expose_secret())
        .await
        .map_err(refused)
}

/// A superuser connection into `database`, for a session held open.
pub(crate) async fn connect_admin(
    admin: &AdminAccess,
    reach: Reach<'_>,
    database: &str,
) -> Result<Client, WireError> {
    connect(&admin_config(admin, reach, database)).await
}

/// The server's own refusal (its message and SQLSTATE), or the driver's error.
pub(crate) fn refused(err: tokio_postgres::Error) -> WireError {
    match err.as_db_error() {
        Some(db) => WireError(format!("{} ({})", db.message(), db.code().code())),
        None => WireError::from_display(err),
    }
}

pub(super) async fn execute(client: &Client, statement: &SecretString) -> Result<(), WireError> {
    client
        .batch_execute(statement.expose_secret())
        .await
        .map_err(refused)
}

pub(super) async fn ping(client: &Client) -> Result<(), WireError> {
    client
        .simple_query("SELECT 1")
        .await
        .map(drop)
        .map_err(WireError::from_display)
}

pub(super) async fn probe(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<(), WireError> {
    let client = connect(&agent_config(reach, agent, database)).await?;
    ping(&client).await
}

/// Activates `features` as superuser in `template1` and then in `database`, the agent's
/// ([`pg_feature_databases`]): the template so that every database the agent or its test runner
/// makes has them, the agent's own because it exists already. One pinned session per database
/// ([`admin_config`]); `template1` is the daemon's (nobody else creates anything there), and
/// in the agent's database every name the statements use is qualified or the superuser's.
pub(super) async fn activate(
    admin: &AdminAccess,
    reach: Reach<'_>,
    database: &str,
    features: &BTreeSet<Feature>,
) -> Result<(), (Feature, ActivationError)> {
    let Some(first) = features.first() else {
        return Ok(());
    };
    for target in pg_feature_databases(database) {
        let client = connect(&admin_config(admin, reach, target))
            .await
            .map_err(|err| (*first, err.into()))?;
        for feature in features {
            activate_one(&client, feature)
                .await
                .map_err(|err| (*feature, err))?;
        }
    }
    Ok(())
}

/// One feature's extension (and its companions the server has) on `client`'s database.
async fn activate_one(client: &Client, feature: &Feature) -> Result<(), ActivationError> {
    let Activation::PgExtension {
        extension,
        companions,
        ..
    } = feature.spec().activation
    else {
        return Err(ActivationError::Missing(format!(
            "{} is not a PostgreSQL extension",
            feature.name()
        )));
    };
    let statement = pg_extension_activation(extension, companions);
    match client.batch_execute(&statement).await {
        Ok(()) => Ok(()),
        Err(err)
            if err
                .code()
                .is_some_and(|c| NOT_INSTALLED.contains(&c.code())) =>
        {
            Err(ActivationError::Missing(format!(
                "extension {extension} is not installed on the server"
            )))
        }
        Err(err) => Err(ActivationError::Wire(WireError::from_display(
            err.as_db_error()
                .map(|db| db.message().to_owned())
                .unwrap_or_else(|| err.to_string()),
        ))),
    }
}
