//! MySQL protocol (MariaDB) over mysql_async: TCP with a password, or the instance's private
//! socket where the server authenticates the peer's OS user.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use sandboxd_domain::Credentials;
use sandboxd_domain::engine::{
    AdminAccess, AdminStep, MYSQL_SOCKET_FILE, ServerFacts, mysql_identifier,
};
use secrecy::ExposeSecret;

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
    let opts = base(reach)
        .user(Some(&agent.user))
        .pass(Some(agent.password.expose_secret()))
        .db_name(Some(database));
    let mut conn = connect(opts).await?;
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

/// Drops every database whose name matches one of `patterns` (`LIKE`), then runs `recreate`.
pub(super) async fn reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    patterns: &[String],
    recreate: &[AdminStep],
) -> Result<(), WireError> {
    let mut conn = connect(admin_opts(admin, reach)).await?;
    let wire = WireError::from_display;
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

/// The server's version, asked as the handed-out account.
pub(super) async fn version(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    let opts = base(reach)
        .user(Some(&agent.user))
        .pass(Some(agent.password.expose_secret()))
        .db_name(Some(database));
    let mut conn = connect(opts).await?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(WireError::from_display)?;
    let _ = conn.disconnect().await;
    version.ok_or_else(|| WireError("SELECT VERSION() answered nothing".into()))
}
