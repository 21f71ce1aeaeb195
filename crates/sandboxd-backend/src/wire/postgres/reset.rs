//! A reset on PostgreSQL: the agent locked out and its sessions ended, what it made dropped, the
//! instance as it was handed out again, and the agent let in at the end ([`finish_reset`]).

use std::time::Duration;

use sandboxd_domain::engine::{AdminAccess, AdminStep, AgentCluster, pg_identifier, sql_literal};
use secrecy::ExposeSecret;
use tokio_postgres::Client;

use super::{admin_config, connect, refused};
use crate::wire::{Reach, WireError};

/// How long a reset waits for the agent's sessions to end once it asked them to.
const SESSIONS_GONE: Duration = Duration::from_secs(5);

/// Brings the instance back to how it was handed out ([`AgentCluster`]): the agent's roles are
/// locked out and their sessions ended first, then every database and role the agent made is
/// dropped and `recreate` runs. The agent stays locked out: [`finish_reset`] lets it in again,
/// once whatever else the reset does (features, a clone's schema) is done.
pub(in crate::wire) async fn reset(
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
pub(in crate::wire) async fn finish_reset(
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
