//! PostgreSQL over tokio-postgres: TCP with a password, or the instance's private unix socket.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sandboxd_domain::engine::{
    Activation, AdminAccess, AdminStep, AgentCluster, ServerFacts, pg_extension_activation,
    pg_feature_databases, pg_identifier, pg_superuser_options, sql_literal,
};
use sandboxd_domain::{Credentials, Feature};
use secrecy::{ExposeSecret, SecretString};
use tokio::net::TcpStream;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use super::capped::{CappedStream, Framing, ReadCap};
use super::query::{Collector, Cut, QueryAnswer, QueryLimits, WIRE_OVERHEAD};
use super::{ActivationError, Reach, WireError};

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

/// How long a reset waits for the agent's sessions to end once it asked them to.
const SESSIONS_GONE: Duration = Duration::from_secs(5);

/// Brings the instance back to how it was handed out ([`AgentCluster`]): the agent's roles are
/// locked out and their sessions ended first, then every database and role the agent made is
/// dropped and `recreate` runs. The agent stays locked out: [`finish_reset`] lets it in again,
/// once whatever else the reset does (features, a clone's schema) is done.
pub(super) async fn reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    admin_database: &str,
    plan: &AgentCluster,
) -> Result<(), WireError> {
    let client = connect(&admin_config(admin, reach, admin_database)).await?;
    let agent_roles = lock_out(&client, plan).await?;
    roll_back_prepared(admin, reach, &client).await?;

    let databases = client
        .query(
            "SELECT datname FROM pg_catalog.pg_database \
             WHERE datname OPERATOR(pg_catalog.<>) ALL ($1::text[]) ORDER BY datname",
            &[&plan.keep_databases],
        )
        .await
        .map_err(refused)?;
    for row in databases {
        let name = pg_identifier(&row.get::<_, String>(0));
        // A template cannot be dropped; the agent may have made its database one. FORCE ends
        // any session still on it (PostgreSQL 13+).
        for statement in [
            format!("ALTER DATABASE {name} IS_TEMPLATE false"),
            format!("DROP DATABASE {name} WITH (FORCE)"),
        ] {
            client.batch_execute(&statement).await.map_err(refused)?;
        }
    }

    // What the agent's roles own or were granted in the databases that stay (before PostgreSQL
    // 15 anyone could create in their public schemas), then the roles the agent made. The
    // shared dependency catalog says which databases hold any: only those are visited.
    let roles: Vec<String> = agent_roles
        .iter()
        .chain([&plan.agent_role])
        .cloned()
        .collect();
    let owners = roles
        .iter()
        .map(|role| pg_identifier(role))
        .collect::<Vec<_>>()
        .join(", ");
    let remaining = client
        .query(
            "SELECT DISTINCT d.datname::pg_catalog.text FROM pg_catalog.pg_shdepend s \
             JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.dbid \
             JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) s.refobjid \
             WHERE r.rolname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) \
               AND d.datallowconn",
            &[&roles],
        )
        .await
        .map_err(refused)?;
    for row in remaining {
        let database: String = row.get(0);
        let drop_owned = format!("DROP OWNED BY {owners}");
        if database == admin_database {
            client.batch_execute(&drop_owned).await.map_err(refused)?;
        } else {
            connect(&admin_config(admin, reach, &database))
                .await?
                .batch_execute(&drop_owned)
                .await
                .map_err(refused)?;
        }
    }
    if !agent_roles.is_empty() {
        let roles = agent_roles
            .iter()
            .map(|role| pg_identifier(role))
            .collect::<Vec<_>>()
            .join(", ");
        client
            .batch_execute(&format!("DROP ROLE {roles}"))
            .await
            .map_err(refused)?;
    }
    run_in_order(admin, reach, admin_database, &client, &plan.recreate).await
}

/// Takes `LOGIN` from the agent's role and every role it made, and ends their sessions: from
/// here until [`finish_reset`] nothing of the agent's runs beside the superuser. Returns the
/// roles the agent made (every role the daemon did not: the instance is the agent's alone).
async fn lock_out(client: &Client, plan: &AgentCluster) -> Result<Vec<String>, WireError> {
    let made: Vec<String> = client
        .query(
            "SELECT rolname FROM pg_catalog.pg_roles \
             WHERE oid OPERATOR(pg_catalog.>=) 16384 AND NOT rolsuper \
               AND rolname OPERATOR(pg_catalog.<>) ALL ($1::text[]) ORDER BY rolname",
            &[&plan.keep_roles],
        )
        .await
        .map_err(refused)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let statements = made
        .iter()
        .chain([&plan.agent_role])
        .map(|role| format!("ALTER ROLE {} NOLOGIN", pg_identifier(role)))
        .collect::<Vec<_>>()
        .join("; ");
    client.batch_execute(&statements).await.map_err(refused)?;
    // A session that was logging in as the lock was taken may show up a moment later: asked
    // again until none is left.
    let deadline = tokio::time::Instant::now() + SESSIONS_GONE;
    loop {
        let left: i64 = client
            .query_one(
                "SELECT pg_catalog.count(pg_catalog.pg_terminate_backend(a.pid)) \
                 FROM pg_catalog.pg_stat_activity a \
                 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.usesysid \
                 WHERE NOT r.rolsuper \
                   AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()",
                &[],
            )
            .await
            .map_err(refused)?
            .get(0);
        if left == 0 {
            return Ok(made);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WireError(format!(
                "{left} session(s) of the agent did not end within {} s",
                SESSIONS_GONE.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rolls back every prepared transaction: it outlives its session, holds its locks, and keeps
/// its database from being dropped. `ROLLBACK PREPARED` runs in the transaction's database.
async fn roll_back_prepared(
    admin: &AdminAccess,
    reach: Reach<'_>,
    client: &Client,
) -> Result<(), WireError> {
    let prepared = client
        .query(
            "SELECT gid, database::text FROM pg_catalog.pg_prepared_xacts",
            &[],
        )
        .await
        .map_err(refused)?;
    for row in prepared {
        let (gid, database): (String, String) = (row.get(0), row.get(1));
        connect(&admin_config(admin, reach, &database))
            .await?
            .batch_execute(&format!("ROLLBACK PREPARED {}", sql_literal(&gid)))
            .await
            .map_err(refused)?;
    }
    Ok(())
}

/// The end of every reset, failed or not: the agent's database exists (recreated when a
/// failed reset dropped it) and the agent's role is as it was handed out, able to log in.
pub(super) async fn finish_reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    admin_database: &str,
    plan: &AgentCluster,
) -> Result<(), WireError> {
    let client = connect(&admin_config(admin, reach, admin_database)).await?;
    let present = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) $1",
            &[&plan.agent_database],
        )
        .await
        .map_err(refused)?
        .is_some();
    if !present {
        run_in_order(admin, reach, admin_database, &client, &plan.recreate).await?;
    }
    run_in_order(admin, reach, admin_database, &client, &plan.restore_agent).await
}

/// Runs SQL `steps` in order, on `client` for the admin database and on one connection per
/// other database.
async fn run_in_order(
    admin: &AdminAccess,
    reach: Reach<'_>,
    admin_database: &str,
    client: &Client,
    steps: &[AdminStep],
) -> Result<(), WireError> {
    let mut current: Option<(String, Client)> = None;
    for step in steps {
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
            client.batch_execute(statement).await.map_err(refused)?;
            continue;
        }
        if current.as_ref().is_none_or(|(name, _)| name != database) {
            current = Some((
                database.to_owned(),
                connect(&admin_config(admin, reach, database)).await?,
            ));
        }
        if let Some((_, other)) = &current {
            other.batch_execute(statement).await.map_err(refused)?;
        }
    }
    Ok(())
}

/// The server's version, asked as the handed-out account (`sandbox_info`). Read under a small
/// cap: what the server says at login follows the agent's own role settings.
pub(super) async fn version(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    let cap = ReadCap::new(WIRE_OVERHEAD, Some(WIRE_OVERHEAD));
    let connection = AgentConnection::open_under(
        reach,
        agent,
        database,
        "sandboxd sandbox_info",
        Duration::from_secs(10),
        cap,
    )
    .await?;
    let row = connection
        .client
        .query_one("SELECT current_setting('server_version')", &[])
        .await
        .map_err(WireError::from_display)?;
    Ok(row.get(0))
}

/// One statement as the handed-out account (`sandbox_sql`), its rows as text under `limits`.
/// The connection reads at most `limits.wire_max()` bytes in all, so neither one huge value
/// nor a long tail of rows after the cut is ever held or read on.
pub(super) async fn agent_query(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
    statement: &str,
    limits: QueryLimits,
) -> Result<QueryAnswer, WireError> {
    let cap = ReadCap::new(limits.wire_max(), Some(limits.wire_max()));
    let connection = AgentConnection::open_under(
        reach,
        agent,
        database,
        "sandboxd sandbox_sql",
        limits.timeout,
        cap,
    )
    .await?;
    connection
        .run(statement, limits)
        .await
        .map_err(|err| WireError(err.to_string()))
}

/// A connection as the handed-out account that runs one statement at a time, each cancelled
/// by the server past the `statement_timeout` set when it opened (`run_experiment`'s `sql()`).
/// It reads no message larger than the running statement's `limits.wire_max()`.
#[derive(Debug)]
pub struct AgentConnection {
    client: Client,
    /// What the connection may read; tripped when the server sent more than that.
    cap: Arc<ReadCap>,
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
    /// A held connection: no total, each statement's messages bounded by its own limits.
    pub(crate) async fn open(
        reach: Reach<'_>,
        agent: &Credentials,
        database: &str,
        application: &str,
        statement_timeout: std::time::Duration,
    ) -> Result<Self, WireError> {
        let cap = ReadCap::new(WIRE_OVERHEAD, None);
        Self::open_under(reach, agent, database, application, statement_timeout, cap).await
    }

    /// Connects over a TCP stream read under `cap` (`capped.rs`), without TLS negotiation (the
    /// stream follows PostgreSQL's message framing from the first byte).
    async fn open_under(
        reach: Reach<'_>,
        agent: &Credentials,
        database: &str,
        application: &str,
        statement_timeout: std::time::Duration,
        cap: Arc<ReadCap>,
    ) -> Result<Self, WireError> {
        let mut config = agent_config(reach, agent, database);
        config
            .application_name(application)
            .ssl_mode(tokio_postgres::config::SslMode::Disable);
        let opened = async {
            let tcp = TcpStream::connect((reach.host, reach.port))
                .await
                .map_err(WireError::from_display)?;
            tcp.set_nodelay(true).map_err(WireError::from_display)?;
            let stream = CappedStream::new(tcp, cap.clone(), Framing::postgres());
            config.connect_raw(stream, NoTls).await.map_err(refused)
        };
        let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, opened)
            .await
            .map_err(|_| WireError("connect timed out".into()))??;
        // The connection future drives the socket; it ends when the client is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
            .batch_execute(&format!(
                "SET statement_timeout = {}",
                statement_timeout.as_millis()
            ))
            .await
            .map_err(refused)?;
        Ok(Self { client, cap })
    }

    /// True once the connection is gone (cut at a limit, or closed by the server): a held
    /// connection's owner opens another.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// One statement, its rows as text under `limits` (its `timeout` is the connection's).
    /// A row or message past `limits.wire_max()` ends the connection as it arrives: the rows
    /// before it are the answer, cut at `max_bytes`.
    pub async fn run(
        &self,
        statement: &str,
        limits: QueryLimits,
    ) -> Result<QueryAnswer, StatementError> {
        self.cap.limit_messages(limits.wire_max());
        let mut collector = Collector::new(limits);
        match self.collect(statement, &mut collector).await {
            Err(_) if self.cap.tripped() => collector.cut(Cut::MaxBytes),
            outcome => outcome?,
        }
        Ok(collector.answer)
    }

    async fn collect(
        &self,
        statement: &str,
        collector: &mut Collector,
    ) -> Result<(), StatementError> {
        // One statement only: the extended protocol's Parse refuses several in one string, so
        // `SELECT 1; DROP …` never reaches the simple protocol that would run both.
        self.client.prepare(statement).await?;
        let stream = self.client.simple_query_raw(statement).await?;
        futures::pin_mut!(stream);
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
        Ok(())
    }
}
