//! PostgreSQL over tokio-postgres: TCP with a password, or the instance's private unix socket.

use std::time::Duration;

use futures::StreamExt;
use sandboxd_domain::engine::{
    Activation, AdminAccess, AdminStep, ServerFacts, pg_extension_activation, pg_identifier,
};
use sandboxd_domain::{Credentials, Feature};
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use super::query::{Collector, QueryAnswer, QueryLimits};
use super::{ActivationError, Reach, WireError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// SQLSTATEs for "the extension's files are not installed": 58P01 (undefined_file, before
/// PostgreSQL 15) and 0A000 (feature_not_supported, "extension … is not available").
const NOT_INSTALLED: [&str; 2] = ["58P01", "0A000"];

fn admin_config(admin: &AdminAccess, reach: Reach<'_>, database: &str) -> Config {
    let mut config = Config::new();
    config
        .port(reach.port)
        .dbname(database)
        .connect_timeout(CONNECT_TIMEOUT)
        .application_name("sandboxd");
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
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(WireError::from_display)?;
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
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(WireError::from_display)?;
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
        .map_err(WireError::from_display)
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

pub(super) async fn activate(
    admin: &AdminAccess,
    reach: Reach<'_>,
    database: &str,
    feature: &Feature,
) -> Result<(), ActivationError> {
    let Activation::PgExtension { extension, .. } = feature.spec().activation else {
        return Err(ActivationError::Missing(format!(
            "{} is not a PostgreSQL extension",
            feature.name()
        )));
    };
    let client = connect(&admin_config(admin, reach, database)).await?;
    let statement = pg_extension_activation(extension);
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

/// Drops what the agent made (its databases, the roles it created, whatever it owns in the
/// superuser's database) and runs `recreate`, one connection per database in step order.
pub(super) async fn reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    admin_database: &str,
    owned_by: Option<&str>,
    roles_created_by: Option<&str>,
    recreate: &[AdminStep],
) -> Result<(), WireError> {
    let client = connect(&admin_config(admin, reach, admin_database)).await?;
    let wire = WireError::from_display;
    if let Some(owner) = owned_by {
        let rows = client
            .query(
                "SELECT d.datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba \
                 WHERE r.rolname = $1",
                &[&owner],
            )
            .await
            .map_err(wire)?;
        for row in rows {
            let name: String = row.get(0);
            // FORCE ends the agent's open sessions on it (PostgreSQL 13+).
            client
                .batch_execute(&format!(
                    "DROP DATABASE {} WITH (FORCE)",
                    pg_identifier(&name)
                ))
                .await
                .map_err(wire)?;
        }
    }
    if let Some(creator) = roles_created_by {
        // From PostgreSQL 16 on, a role made by a CREATEROLE role is granted to its creator
        // WITH ADMIN OPTION: that grant is how the agent's own roles are found.
        let rows = client
            .query(
                "SELECT r.rolname FROM pg_auth_members m \
                 JOIN pg_roles r ON r.oid = m.roleid JOIN pg_roles c ON c.oid = m.member \
                 WHERE c.rolname = $1 AND m.admin_option AND NOT r.rolsuper",
                &[&creator],
            )
            .await
            .map_err(wire)?;
        for row in rows {
            let role = pg_identifier(&row.get::<_, String>(0));
            client
                .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
                .await
                .map_err(wire)?;
        }
        // Anything the agent made in the superuser's own database (before PostgreSQL 15 its
        // public schema took anyone's tables).
        client
            .batch_execute(&format!("DROP OWNED BY {}", pg_identifier(creator)))
            .await
            .map_err(wire)?;
    }
    let mut current: Option<(String, Client)> = None;
    for step in recreate {
        let AdminStep::Sql {
            database,
            statement,
        } = step
        else {
            return Err(WireError("Postgres runs SQL steps only".into()));
        };
        let database = database.as_deref().unwrap_or(admin_database);
        let statement = statement.expose_secret();
        if database == admin_database {
            client.batch_execute(statement).await.map_err(wire)?;
            continue;
        }
        if current.as_ref().is_none_or(|(name, _)| name != database) {
            current = Some((
                database.to_owned(),
                connect(&admin_config(admin, reach, database)).await?,
            ));
        }
        if let Some((_, other)) = &current {
            other.batch_execute(statement).await.map_err(wire)?;
        }
    }
    Ok(())
}

/// The server's version, asked as the handed-out account.
pub(super) async fn version(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    let client = connect(&agent_config(reach, agent, database)).await?;
    let row = client
        .query_one("SELECT current_setting('server_version')", &[])
        .await
        .map_err(WireError::from_display)?;
    Ok(row.get(0))
}

/// One statement as the handed-out account (`sandbox_sql`), its rows as text under `limits`.
pub(super) async fn agent_query(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
    statement: &str,
    limits: QueryLimits,
) -> Result<QueryAnswer, WireError> {
    let connection = AgentConnection::open(
        reach,
        agent,
        database,
        "sandboxd sandbox_sql",
        limits.timeout,
    )
    .await?;
    connection
        .run(statement, limits)
        .await
        .map_err(|err| WireError(err.to_string()))
}

/// A connection as the handed-out account that runs one statement at a time, each cancelled
/// by the server past the `statement_timeout` set when it opened (`run_experiment`'s `sql()`).
#[derive(Debug)]
pub struct AgentConnection {
    client: Client,
}

/// Why a statement on an [`AgentConnection`] gave no rows.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StatementError {
    /// The server refused it: its message and SQLSTATE.
    #[error("{0}")]
    Refused(String),
    /// The server cancelled it at `statement_timeout`.
    #[error("cancelled at the statement timeout")]
    TimedOut,
    /// The connection is gone.
    #[error("the connection failed: {0}")]
    Closed(String),
}

impl From<tokio_postgres::Error> for StatementError {
    fn from(err: tokio_postgres::Error) -> Self {
        if err.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
            return StatementError::TimedOut;
        }
        if err.is_closed() || err.as_db_error().is_none() {
            return StatementError::Closed(err.to_string());
        }
        StatementError::Refused(refused(err).0)
    }
}

impl AgentConnection {
    pub(crate) async fn open(
        reach: Reach<'_>,
        agent: &Credentials,
        database: &str,
        application: &str,
        statement_timeout: std::time::Duration,
    ) -> Result<Self, WireError> {
        let mut config = agent_config(reach, agent, database);
        config.application_name(application);
        let client = connect(&config).await?;
        client
            .batch_execute(&format!(
                "SET statement_timeout = {}",
                statement_timeout.as_millis()
            ))
            .await
            .map_err(refused)?;
        Ok(Self { client })
    }

    /// One statement, its rows as text under `limits` (its `timeout` is the connection's).
    pub async fn run(
        &self,
        statement: &str,
        limits: QueryLimits,
    ) -> Result<QueryAnswer, StatementError> {
        // One statement only: the extended protocol's Parse refuses several in one string, so
        // `SELECT 1; DROP …` never reaches the simple protocol that would run both.
        self.client.prepare(statement).await?;
        let stream = self.client.simple_query_raw(statement).await?;
        futures::pin_mut!(stream);
        let mut collector = Collector::new(limits);
        while let Some(message) = stream.next().await {
            match message? {
                SimpleQueryMessage::RowDescription(columns) => {
                    collector.answer.columns =
                        columns.iter().map(|c| c.name().to_owned()).collect();
                }
                SimpleQueryMessage::Row(row) => {
                    let values = (0..row.len())
                        .map(|i| {
                            row.get(i)
                                .map_or(serde_json::Value::Null, serde_json::Value::from)
                        })
                        .collect();
                    if !collector.push(values) {
                        break;
                    }
                }
                SimpleQueryMessage::CommandComplete(count) => {
                    collector.answer.affected = Some(count)
                }
                _ => {}
            }
        }
        Ok(collector.answer)
    }
}
