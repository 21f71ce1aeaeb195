//! Persisted operator settings, e.g. `sandbox_db_enabled`. The store keeps strings; what a key
//! means, its default and its environment override belong to the broker.

use std::collections::BTreeMap;

use sandboxd_domain::DaemonId;
use sandboxd_domain::clock::now_ms;
use sqlx::{AnyPool, Row};

use crate::Store;
use crate::error::{Result, StoreError};

/// The settings key of the store's daemon id.
const DAEMON_ID: &str = "daemon_id";

/// The store's daemon id, created on first open. Insert-if-absent then read back, so replicas
/// opening a new shared store at once agree on one id.
pub(crate) async fn daemon_id(pool: &AnyPool) -> Result<DaemonId> {
    const OP: &str = "daemon_id";
    sqlx::query(
        "INSERT INTO settings (key, value, updated_at_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(DAEMON_ID)
    .bind(DaemonId::generate().as_str())
    .bind(now_ms())
    .execute(pool)
    .await
    .map_err(StoreError::db(OP))?;
    let stored: String = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
        .bind(DAEMON_ID)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db(OP))?;
    DaemonId::parse(&stored).map_err(|e| StoreError::corrupt(OP, format!("setting {DAEMON_ID}"), e))
}

impl Store {
    /// The stored value of `key`, if one was ever set.
    pub async fn get_setting(&self, key: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("get_setting"))
    }

    /// Stores `value` under `key`, replacing any earlier value.
    pub async fn set_setting(&self, key: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO settings (key, value, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
             updated_at_ms = excluded.updated_at_ms",
        )
        .bind(key)
        .bind(value)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("set_setting"))?;
        Ok(())
    }

    /// Every stored setting, by key.
    pub async fn list_settings(&self) -> Result<BTreeMap<String, String>> {
        let rows = sqlx::query("SELECT key, value FROM settings ORDER BY key")
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list_settings"))?;
        rows.iter()
            .map(|row| Ok((row.try_get("key")?, row.try_get("value")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("list_settings"))
    }
}
