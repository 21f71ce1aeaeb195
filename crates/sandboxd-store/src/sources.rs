//! Clone sources (a production Postgres an operator registered) and the latest snapshot of each.
//! The DSN is sealed with the store key and bound to the source's name; only
//! [`Store::source_dsn`] opens it. A snapshot is sealed the same way: unless the source strips
//! them, its statistics carry sample values of production's data.

use sandboxd_domain::SourceName;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::clone::{Privacy, Snapshot, Summary};
use sandboxd_domain::{SnapshotSummary, Source};
use secrecy::{ExposeSecret, SecretString};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::error::{Result, StoreError, Violation, violation};

const COLUMNS: &str = "s.name, s.privacy, s.refresh_secs, s.created_at_ms, s.updated_at_ms, \
     s.last_attempt_at_ms, s.last_error, p.taken_at_ms, p.server_version, p.took_ms, p.summary";
const FROM: &str = "clone_sources s LEFT JOIN clone_snapshots p ON p.source = s.name";

fn dsn_label(name: &SourceName) -> String {
    format!("source-dsn:{name}")
}

fn snapshot_label(name: &SourceName) -> String {
    format!("source-snapshot:{name}")
}

fn source_from_row(op: &'static str, row: &AnyRow) -> Result<Source> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let name: String = row.try_get("name").map_err(get)?;
    let name = SourceName::parse(&name).map_err(|e| StoreError::corrupt(op, "source name", e))?;
    let privacy: String = row.try_get("privacy").map_err(get)?;
    let privacy = Privacy::parse(&privacy).ok_or_else(|| {
        StoreError::corrupt(
            op,
            format!("privacy of source {name}"),
            format!("{privacy:?}"),
        )
    })?;
    let refresh: i64 = row.try_get("refresh_secs").map_err(get)?;
    let taken_at_ms: Option<i64> = row.try_get("taken_at_ms").map_err(get)?;
    let snapshot = match taken_at_ms {
        Some(taken_at_ms) => Some(SnapshotSummary {
            taken_at_ms,
            server_version: row.try_get("server_version").map_err(get)?,
            took_ms: row.try_get("took_ms").map_err(get)?,
            contents: summary_from(op, &name, row.try_get("summary").map_err(get)?)?,
        }),
        None => None,
    };
    Ok(Source {
        privacy,
        refresh_secs: u64::try_from(refresh).unwrap_or(0),
        created_at_ms: row.try_get("created_at_ms").map_err(get)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(get)?,
        last_attempt_at_ms: row.try_get("last_attempt_at_ms").map_err(get)?,
        last_error: row.try_get("last_error").map_err(get)?,
        snapshot,
        name,
    })
}

/// The stored summary of a snapshot; None for one stored before summaries were kept.
fn summary_from(
    op: &'static str,
    name: &SourceName,
    text: Option<String>,
) -> Result<Option<Summary>> {
    text.map(|text| {
        serde_json::from_str(&text)
            .map_err(|e| StoreError::corrupt(op, format!("snapshot summary of source {name}"), e))
    })
    .transpose()
}

impl Store {
    /// Registers the source or replaces its DSN and settings. Replacing drops its snapshot: it
    /// may be of another server.
    pub async fn put_source(
        &self,
        name: &SourceName,
        dsn: &SecretString,
        privacy: Privacy,
        refresh_secs: u64,
    ) -> Result<Source> {
        const OP: &str = "put_source";
        let now = now_ms();
        let sealed = self
            .cipher
            .seal(&dsn_label(name), dsn.expose_secret().as_bytes());
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        sqlx::query("DELETE FROM clone_snapshots WHERE source = $1")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(
            "INSERT INTO clone_sources (name, sealed_dsn, privacy, refresh_secs, created_at_ms, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (name) DO UPDATE SET sealed_dsn = excluded.sealed_dsn, \
             privacy = excluded.privacy, refresh_secs = excluded.refresh_secs, \
             updated_at_ms = excluded.updated_at_ms, last_attempt_at_ms = NULL, last_error = NULL",
        )
        .bind(name.as_str())
        .bind(sealed)
        .bind(privacy.as_str())
        .bind(i64::try_from(refresh_secs).unwrap_or(i64::MAX))
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        tx.commit().await.map_err(StoreError::db(OP))?;
        self.get_source(name)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                op: OP,
                what: "source",
                id: name.to_string(),
            })
    }

    pub async fn get_source(&self, name: &SourceName) -> Result<Option<Source>> {
        const OP: &str = "get_source";
        let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE s.name = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| source_from_row(OP, &row))
            .transpose()
    }

    /// Every source, by name.
    pub async fn list_sources(&self) -> Result<Vec<Source>> {
        const OP: &str = "list_sources";
        let sql = format!("SELECT {COLUMNS} FROM {FROM} ORDER BY s.name");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(|row| source_from_row(OP, row))
            .collect()
    }

    /// Deletes the source and its snapshot; `false` when there was none.
    pub async fn delete_source(&self, name: &SourceName) -> Result<bool> {
        const OP: &str = "delete_source";
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        sqlx::query("DELETE FROM clone_snapshots WHERE source = $1")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let result = sqlx::query("DELETE FROM clone_sources WHERE name = $1")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(|e| match violation(&e) {
                Violation::ForeignKey => StoreError::InUse {
                    op: OP,
                    what: "source",
                    id: name.to_string(),
                    detail: "a snapshot still refers to it",
                },
                _ => StoreError::db(OP)(e),
            })?;
        tx.commit().await.map_err(StoreError::db(OP))?;
        Ok(result.rows_affected() > 0)
    }

    /// The source's DSN, opened: for the daemon's own read-only connection, nothing else.
    pub async fn source_dsn(&self, name: &SourceName) -> Result<Option<SecretString>> {
        const OP: &str = "source_dsn";
        let Some(plaintext) = self
            .open_sealed(
                OP,
                "SELECT sealed_dsn FROM clone_sources WHERE name = $1",
                name,
                &dsn_label(name),
            )
            .await?
        else {
            return Ok(None);
        };
        let dsn = String::from_utf8(plaintext.to_vec())
            .map_err(|_| StoreError::corrupt(OP, format!("DSN of source {name}"), "not UTF-8"))?;
        Ok(Some(SecretString::from(dsn)))
    }

    /// The one sealed value `query` selects for `name`, opened with `label`.
    async fn open_sealed(
        &self,
        op: &'static str,
        query: &'static str,
        name: &SourceName,
        label: &str,
    ) -> Result<Option<secrecy::zeroize::Zeroizing<Vec<u8>>>> {
        let sealed: Option<String> = sqlx::query_scalar(query)
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(op))?;
        sealed
            .map(|sealed| {
                self.cipher
                    .open(label, &sealed)
                    .map_err(|_| StoreError::Decrypt {
                        op,
                        name: name.to_string(),
                    })
            })
            .transpose()
    }

    /// Stores `snapshot` as the source's latest (the one before it is dropped) and clears the
    /// last error. [`StoreError::NotFound`] when the source was removed meanwhile.
    pub async fn put_snapshot(
        &self,
        name: &SourceName,
        snapshot: &Snapshot,
        took_ms: i64,
    ) -> Result<()> {
        const OP: &str = "put_snapshot";
        let body = serde_json::to_vec(snapshot).expect("a snapshot always serializes");
        let sealed = self.cipher.seal(&snapshot_label(name), &body);
        let summary = serde_json::to_string(&Summary::of(snapshot))
            .expect("a snapshot summary always serializes");
        let now = now_ms();
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        let updated = sqlx::query(
            "UPDATE clone_sources SET last_attempt_at_ms = $2, last_error = NULL WHERE name = $1",
        )
        .bind(name.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                op: OP,
                what: "source",
                id: name.to_string(),
            });
        }
        sqlx::query("DELETE FROM clone_snapshots WHERE source = $1")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(
            "INSERT INTO clone_snapshots (source, taken_at_ms, server_version, took_ms, \
             sealed_body, summary) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(name.as_str())
        .bind(snapshot.taken_at_ms)
        .bind(snapshot.server_version.as_str())
        .bind(took_ms)
        .bind(sealed)
        .bind(summary)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        tx.commit().await.map_err(StoreError::db(OP))
    }

    /// Records a failed snapshot attempt; the snapshot before it stays.
    pub async fn snapshot_failed(&self, name: &SourceName, error: &str) -> Result<()> {
        const OP: &str = "snapshot_failed";
        sqlx::query(
            "UPDATE clone_sources SET last_attempt_at_ms = $2, last_error = $3 WHERE name = $1",
        )
        .bind(name.as_str())
        .bind(now_ms())
        .bind(error)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db(OP))?;
        Ok(())
    }

    /// The source's latest snapshot, opened.
    pub async fn latest_snapshot(&self, name: &SourceName) -> Result<Option<Snapshot>> {
        const OP: &str = "latest_snapshot";
        let Some(body) = self
            .open_sealed(
                OP,
                "SELECT sealed_body FROM clone_snapshots WHERE source = $1",
                name,
                &snapshot_label(name),
            )
            .await?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| StoreError::corrupt(OP, format!("snapshot of source {name}"), e))
    }
}
