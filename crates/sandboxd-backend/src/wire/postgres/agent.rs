//! The handed-out account's own connections: `sandbox_info`'s version, `sandbox_sql`'s one
//! statement, and the held connection of `run_experiment`'s `sql()`, each read under a cap.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sandboxd_domain::Credentials;
use tokio::net::TcpStream;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::{CONNECT_TIMEOUT, agent_config, refused};
use crate::wire::capped::{CappedStream, Framing, ReadCap};
use crate::wire::query::{Collector, Cut, QueryAnswer, QueryLimits, WIRE_OVERHEAD};
use crate::wire::{Reach, WireError};

/// The server's version, asked as the handed-out account (`sandbox_info`). Read under a small
/// cap: what the server says at login follows the agent's own role settings.
pub(in crate::wire) async fn version(
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
pub(in crate::wire) async fn agent_query(
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
    pub(super) client: Client,
    /// What the connection may read; tripped when the server sent more than that.
    pub(super) cap: Arc<ReadCap>,
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
                    collector.describe(columns.iter().map(|c| c.name().to_owned()).collect());
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
                SimpleQueryMessage::CommandComplete(count) => collector.complete(count),
                _ => {}
            }
        }
        Ok(())
    }
}
