//! Opening the store: the URL, the pool, the SQLite file's settings, and the migrations.
//!
//! Both databases go through sqlx's `Any` driver so every query in this crate is written once.
//! The `Any` driver builds SQLite connections from the URL alone, which cannot ask for WAL, so
//! `prepare_sqlite_file` opens the file once with SQLite's own options first (WAL is a property
//! of the file and sticks), and every pooled connection then sets its per-connection pragmas.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqlSafeStr};

use crate::error::{Result, StoreError};

/// How long a SQLite connection waits for another writer before giving up.
pub(crate) const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which database a store lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

impl StoreKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres", // not-an-engine: the store's own database kind
        }
    }
}

/// The migrations, compiled in (no `migrations/` directory is needed at run time). Each file is
/// portable DDL: TEXT and BIGINT columns only, so the same statements run on both databases.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("../migrations/0001_initial.sql")),
    (
        2,
        "mcp_sessions",
        include_str!("../migrations/0002_mcp_sessions.sql"),
    ),
    (
        3,
        "last_used",
        include_str!("../migrations/0003_last_used.sql"),
    ),
    (
        4,
        "mcp_session_last_used",
        include_str!("../migrations/0004_mcp_session_last_used.sql"),
    ),
    (
        5,
        "clone_sources",
        include_str!("../migrations/0005_clone_sources.sql"),
    ),
    (
        6,
        "replicas",
        include_str!("../migrations/0006_replicas.sql"),
    ),
    (
        7,
        "mcp_session_agent",
        include_str!("../migrations/0007_mcp_session_agent.sql"),
    ),
    (
        8,
        "sandbox_sizes",
        include_str!("../migrations/0008_sandbox_sizes.sql"),
    ),
    (
        9,
        "snapshot_summary",
        include_str!("../migrations/0009_snapshot_summary.sql"),
    ),
    (
        10,
        "hand_overs",
        include_str!("../migrations/0010_hand_overs.sql"),
    ),
];

fn migrator() -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// The URL without its password, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // userinfo ends at the last '@' before the first '/' of the path.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

pub(crate) fn kind_of(url: &str) -> Result<StoreKind> {
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "sqlite" => Ok(StoreKind::Sqlite),
        "postgres" | "postgresql" => Ok(StoreKind::Postgres), // not-an-engine: URL scheme
        _ => Err(StoreError::Url {
            url: redact_url(url),
            detail: "use sqlite:///path/to/file.db or postgres://user:password@host:port/database"
                .to_owned(),
        }),
    }
}

/// Creates the SQLite file (mode 0600, parent directories as needed) and switches it to WAL.
async fn prepare_sqlite_file(url: &str) -> Result<()> {
    let open_err = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
        url: url.to_owned(),
        source,
    };
    let options = SqliteConnectOptions::from_str(url).map_err(|e| open_err(Box::new(e)))?;
    let path = options.get_filename();
    let in_memory = path.as_os_str().is_empty()
        || path.to_string_lossy().starts_with("file:sqlx-in-memory")
        || url.contains("mode=memory");
    if in_memory {
        return Err(StoreError::Url {
            url: url.to_owned(),
            detail:
                "the store must be a file (sqlite:///path/to/file.db), not an in-memory database"
                    .to_owned(),
        });
    }
    create_private_file(path).map_err(|e| open_err(Box::new(e)))?;
    let mut conn = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        .connect()
        .await
        .map_err(|e| open_err(Box::new(e)))?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| open_err(Box::new(e)))?;
    conn.close().await.map_err(|e| open_err(Box::new(e)))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_err(
            format!("SQLite refused write-ahead logging (journal_mode is {mode})").into(),
        ));
    }
    Ok(())
}

/// The file holds token hashes and sealed credentials: readable by the daemon's user only.
/// SQLite gives its `-wal` and `-shm` files the main file's mode.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the pool and brings the schema up to date.
pub(crate) async fn connect(url: &str) -> Result<(AnyPool, StoreKind)> {
    sqlx::any::install_default_drivers();
    let kind = kind_of(url)?;
    let shown = redact_url(url);
    let options = match kind {
        StoreKind::Sqlite => {
            prepare_sqlite_file(url).await?;
            // SQLite has one writer at a time; a few connections let readers run beside it.
            AnyPoolOptions::new()
                .max_connections(4)
                .after_connect(|conn, _meta| {
                    Box::pin(async move {
                        let pragmas = format!(
                            "PRAGMA foreign_keys = ON; PRAGMA busy_timeout = {}; \
                             PRAGMA synchronous = NORMAL;",
                            SQLITE_BUSY_TIMEOUT.as_millis()
                        );
                        sqlx::raw_sql(sqlx::AssertSqlSafe(pragmas))
                            .execute(conn)
                            .await?;
                        Ok(())
                    })
                })
        }
        StoreKind::Postgres => AnyPoolOptions::new().max_connections(10),
    };
    let pool = options
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .map_err(|e| StoreError::Open {
            url: shown.clone(),
            source: Box::new(e),
        })?;
    migrator()
        .run(&pool)
        .await
        .map_err(|e| StoreError::Migrate {
            source: Box::new(e),
        })?;
    tracing::debug!(url = %shown, kind = kind.as_str(), "store opened");
    Ok((pool, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_the_password() {
        assert_eq!(
            redact_url("postgres://sandbox:s3cret@127.0.0.1:5432/db"),
            "postgres://sandbox:***@127.0.0.1:5432/db"
        );
        assert_eq!(
            redact_url("postgres://u:p@ss@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(
            redact_url("sqlite:///var/lib/x.db"),
            "sqlite:///var/lib/x.db"
        );
    }

    #[test]
    fn kinds_from_schemes() {
        assert_eq!(kind_of("sqlite:///x.db").ok(), Some(StoreKind::Sqlite));
        assert_eq!(kind_of("postgresql://h/db").ok(), Some(StoreKind::Postgres));
        assert!(kind_of("mysql://h/db").is_err());
    }
}
