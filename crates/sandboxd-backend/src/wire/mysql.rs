//! MySQL protocol (MariaDB) over mysql_async: TCP with a password, or the instance's private
//! socket where the server authenticates the peer's OS user.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use sandboxd_domain::Credentials;
use sandboxd_domain::engine::{
    AdminAccess, AdminStep, MYSQL_SOCKET_FILE, ServerFacts, mysql_identifier,
};
use secrecy::ExposeSecret;

use super::query::{Collector, Cut, QueryAnswer, QueryLimits};
use super::{Reach, WireError, major_version};

fn base(reach: Reach<'_>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(reach.host)
        .tcp_port(reach.port)
        .prefer_socket(false)
        .stmt_cache_size(0)
}

fn admin_opts(admin: &AdminAccess, reach: Reach<'_>) -> OptsBuilder {
    match admin {
        AdminAccess::Socket { directory, user } => base(reach)
            .socket(Some(
                directory.join(MYSQL_SOCKET_FILE).display().to_string(),
            ))
            .user(Some(user)),
        AdminAccess::Password(creds) => base(reach)
            .user(Some(&creds.user))
            .pass(Some(creds.password.expose_secret())),
    }
}

/// The handed-out account over TCP, as a test suite would connect.
fn agent_opts(reach: Reach<'_>, agent: &Credentials, database: &str) -> OptsBuilder {
    base(reach)
        .user(Some(&agent.user))
        .pass(Some(agent.password.expose_secret()))
        .db_name(Some(database))
}

async fn connect(opts: OptsBuilder) -> Result<Conn, WireError> {
    tokio::time::timeout(std::time::Duration::from_secs(3), Conn::new(opts))
        .await
        .map_err(|_| WireError("connect timed out".into()))?
        .map_err(WireError::from_display)
}

pub(super) async fn server_facts(
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<ServerFacts, WireError> {
    let mut conn = connect(admin_opts(admin, reach)).await?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(WireError::from_display)?;
    let _ = conn.disconnect().await;
    Ok(ServerFacts {
        major_version: version.as_deref().and_then(major_version),
    })
}

pub(super) async fn run_step(
    admin: Option<&AdminAccess>,
    reach: Reach<'_>,
    step: &AdminStep,
) -> Result<(), WireError> {
    let admin = admin.ok_or_else(|| WireError("MySQL needs superuser access".into()))?;
    let AdminStep::Sql {
        database,
        statement,
    } = step
    else {
        return Err(WireError("MySQL runs SQL steps only".into()));
    };
    let mut conn = connect(admin_opts(admin, reach).db_name(database.clone())).await?;
    conn.query_drop(statement.expose_secret())
        .await
        .map_err(WireError::from_display)?;
    let _ = conn.disconnect().await;
    Ok(())
}

pub(super) async fn probe(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<(), WireError> {
    let mut conn = connect(agent_opts(reach, agent, database)).await?;
    let one: Option<i64> = conn
        .query_first("SELECT 1")
        .await
        .map_err(WireError::from_display)?;
    let _ = conn.disconnect().await;
    match one {
        Some(1) => Ok(()),
        other => Err(WireError(format!("SELECT 1 answered {other:?}"))),
    }
}

/// Rolls back every XA transaction left prepared, then drops every database whose name matches
/// one of `patterns` (`LIKE`), then runs `recreate`.
pub(super) async fn reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    patterns: &[String],
    recreate: &[AdminStep],
) -> Result<(), WireError> {
    let mut conn = connect(admin_opts(admin, reach)).await?;
    let wire = WireError::from_display;
    roll_back_prepared(&mut conn).await?;
    let mut names: Vec<String> = Vec::new();
    for pattern in patterns {
        let found: Vec<String> = conn
            .exec(
                "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE ?",
                (pattern,),
            )
            .await
            .map_err(wire)?;
        names.extend(found);
    }
    names.sort();
    names.dedup();
    for name in &names {
        conn.query_drop(format!(
            "DROP DATABASE IF EXISTS {}",
            mysql_identifier(name)
        ))
        .await
        .map_err(wire)?;
    }
    for step in recreate {
        let AdminStep::Sql {
            database: None,
            statement,
        } = step
        else {
            return Err(WireError(
                "MySQL resets run SQL steps in no database only".into(),
            ));
        };
        conn.query_drop(statement.expose_secret())
            .await
            .map_err(wire)?;
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// Rolls back every XA transaction left prepared: since MariaDB 10.5 one outlives its session and
/// keeps its locks, so `DROP DATABASE` would wait for it for ever. Each xid is rebuilt from the
/// bytes `XA RECOVER` answers, as hex literals: nothing the agent named goes in as SQL text.
async fn roll_back_prepared(conn: &mut Conn) -> Result<(), WireError> {
    let wire = WireError::from_display;
    let prepared: Vec<(i64, usize, usize, Vec<u8>)> =
        conn.query("XA RECOVER").await.map_err(wire)?;
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    for (format, gtrid_len, bqual_len, data) in prepared {
        let (Some(gtrid), Some(bqual)) = (
            data.get(..gtrid_len),
            data.get(gtrid_len..gtrid_len.saturating_add(bqual_len)),
        ) else {
            return Err(WireError(format!(
                "XA RECOVER answered an xid of {} bytes for {gtrid_len} + {bqual_len}",
                data.len()
            )));
        };
        conn.query_drop(format!(
            "XA ROLLBACK X'{}', X'{}', {format}",
            hex(gtrid),
            hex(bqual)
        ))
        .await
        .map_err(wire)?;
    }
    Ok(())
}

/// The server's version, asked as the handed-out account.
pub(super) async fn version(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    let mut conn = connect(agent_opts(reach, agent, database)).await?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(WireError::from_display)?;
    let _ = conn.disconnect().await;
    version.ok_or_else(|| WireError("SELECT VERSION() answered nothing".into()))
}

/// One statement as the handed-out account (`sandbox_sql`), its rows under `limits`. Sent as a
/// prepared statement, which the server accepts only one at a time. The client refuses a
/// packet over `limits.wire_max()` from its header, before buffering it, so a row larger than
/// the limit ends the answer as it arrives.
pub(super) async fn agent_query(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
    statement: &str,
    limits: QueryLimits,
) -> Result<QueryAnswer, WireError> {
    let opts = agent_opts(reach, agent, database).max_allowed_packet(Some(limits.wire_max()));
    let mut conn = connect(opts).await?;
    conn.query_drop(format!(
        "SET SESSION max_statement_time = {}",
        limits.timeout.as_secs_f64()
    ))
    .await
    .map_err(WireError::from_display)?;
    let mut collector = Collector::new(limits);
    match collect(&mut conn, statement, &mut collector).await {
        Err(err) if packet_too_large(&err) => collector.cut(Cut::MaxBytes),
        Err(err) => return Err(WireError::from_display(err)),
        Ok(()) => {}
    }
    // A result cut short is not drained: the connection is dropped instead.
    if !collector.answer.truncated {
        let _ = conn.disconnect().await;
    }
    Ok(collector.answer)
}

async fn collect(
    conn: &mut Conn,
    statement: &str,
    collector: &mut Collector,
) -> Result<(), mysql_async::Error> {
    let mut result = conn.exec_iter(statement, ()).await?;
    let columns: Vec<String> = result
        .columns_ref()
        .iter()
        .map(|c| c.name_str().into_owned())
        .collect();
    if !columns.is_empty() {
        collector.describe(columns);
    }
    while let Some(row) = result.next().await? {
        if !collector.push(row.unwrap().into_iter().map(json_of).collect()) {
            break;
        }
    }
    if !collector.answer.truncated {
        collector.complete(result.affected_rows());
    }
    Ok(())
}

/// The client's refusal of a packet over its `max_allowed_packet` (mysql_common's
/// `PacketTooLarge`, which mysql_async hands on inside an I/O error), not the server's.
fn packet_too_large(err: &mysql_async::Error) -> bool {
    matches!(
        err,
        mysql_async::Error::Io(mysql_async::IoError::Io(io))
            if io.to_string().contains("larger than max_allowed_packet")
    )
}

/// A MySQL value as JSON: numbers as numbers, text (and bytes, lossily) as strings, dates and
/// times in their SQL text form.
fn json_of(value: mysql_async::Value) -> serde_json::Value {
    use mysql_async::Value as V;
    match value {
        V::NULL => serde_json::Value::Null,
        V::Bytes(bytes) => String::from_utf8_lossy(&bytes).into_owned().into(),
        V::Int(n) => n.into(),
        V::UInt(n) => n.into(),
        V::Float(f) => f64::from(f).into(),
        V::Double(f) => f.into(),
        V::Date(y, mo, d, h, mi, s, us) => {
            let mut text = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
            if us > 0 {
                text.push_str(&format!(".{us:06}"));
            }
            text.into()
        }
        V::Time(negative, days, h, mi, s, us) => {
            let hours = u64::from(days) * 24 + u64::from(h);
            let sign = if negative { "-" } else { "" };
            let mut text = format!("{sign}{hours:02}:{mi:02}:{s:02}");
            if us > 0 {
                text.push_str(&format!(".{us:06}"));
            }
            text.into()
        }
    }
}
