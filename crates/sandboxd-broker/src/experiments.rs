//! The experiment runtime's side in the broker: its configuration, and the `sql()` port of a
//! run, a connection to the agent's own Postgres sandbox as its own account, opened on the
//! first call and closed with the run (the verb is `verbs/run_experiment.rs`).

use std::time::Duration;

use sandboxd_backend::wire::{AgentConnection, Cut, Param, QueryLimits, StatementError};
use sandboxd_domain::Instance;
use sandboxd_experiments::{Capacity, GuestFiles, Policy, SqlParam, SqlPort, SqlRefusal, SqlRows};

/// Where the runtime finds its guest, the limits agents may pick from, and how much it runs
/// at once.
#[derive(Debug, Clone)]
pub struct ExperimentsConfig {
    pub files: GuestFiles,
    pub policy: Policy,
    /// Runs at once, their memory budget, the wait for room, the guests' threads.
    pub capacity: Capacity,
    /// Experiments one agent may have under way at once.
    pub max_per_agent: usize,
}

impl ExperimentsConfig {
    pub const DEFAULT_MAX_PER_AGENT: usize = 2;
}

/// Bytes of row values one `sql()` call may bring back, whatever its row limit.
const SQL_MAX_BYTES: usize = 4 * 1024 * 1024;

/// `sql()` over the agent's own account on one of its sandbox's services.
pub(crate) struct AgentSql {
    backend: std::sync::Arc<dyn sandboxd_backend::Backend>,
    instance: Instance,
    connection: Option<AgentConnection>,
}

impl AgentSql {
    /// A port whose connection opens on the script's first `sql()` call.
    pub(crate) fn new(
        backend: std::sync::Arc<dyn sandboxd_backend::Backend>,
        instance: Instance,
    ) -> Self {
        Self {
            backend,
            instance,
            connection: None,
        }
    }
}

#[async_trait::async_trait]
impl SqlPort for AgentSql {
    async fn run(
        &mut self,
        statement: &str,
        params: &[SqlParam],
        max_rows: usize,
        timeout: Duration,
    ) -> Result<SqlRows, SqlRefusal> {
        // A connection cut at the byte limit is gone: the next statement opens another.
        if self
            .connection
            .as_ref()
            .is_some_and(AgentConnection::is_closed)
        {
            self.connection = None;
        }
        if self.connection.is_none() {
            let opened = self
                .backend
                .agent_connection(&self.instance, "sandboxd run_experiment", timeout)
                .await
                .map_err(|err| SqlRefusal::Unavailable(err.to_string()))?;
            self.connection = Some(opened);
        }
        let connection = self.connection.as_ref().expect("opened above");
        let limits = QueryLimits {
            max_rows,
            max_bytes: SQL_MAX_BYTES,
            timeout,
        };
        let answer = if params.is_empty() {
            connection.run(statement, limits).await
        } else {
            let params: Vec<Param> = params.iter().map(bound).collect();
            connection.run_bound(statement, &params, limits).await
        };
        match answer {
            Ok(answer) if answer.rows.is_empty() && answer.cut == Some(Cut::MaxBytes) => {
                // Cut on the wire, the connection ended with it.
                let closed = if connection.is_closed() {
                    " and the connection was closed (the next sql() opens a new session)"
                } else {
                    ""
                };
                Err(SqlRefusal::Server(format!(
                    "the answer's first row (or the server's message) is larger than the \
                     {SQL_MAX_BYTES} bytes one sql() call may bring back; nothing of it was \
                     kept{closed}; select less, e.g. substring(column, 1, n) or length(column)"
                )))
            }
            Ok(answer) => Ok(SqlRows {
                columns: answer.columns,
                rows: answer.rows,
                affected: answer.affected,
                truncated: answer.truncated,
            }),
            Err(StatementError::Refused(said)) => Err(SqlRefusal::Server(said)),
            Err(StatementError::TimedOut) => Err(SqlRefusal::TimedOut),
            Err(StatementError::Closed(detail)) => Err(SqlRefusal::Unavailable(detail)),
        }
    }
}

/// A script's value as the backend binds it.
fn bound(param: &SqlParam) -> Param {
    match param {
        SqlParam::Null => Param::Null,
        SqlParam::Bool(b) => Param::Bool(*b),
        SqlParam::Int(n) => Param::Int(*n),
        SqlParam::Float(f) => Param::Float(*f),
        SqlParam::Text(text) => Param::Text(text.clone()),
    }
}
