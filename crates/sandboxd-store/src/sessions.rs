//! MCP session state, persisted so a client's session survives a daemon restart. The state is
//! the client's `initialize` parameters as JSON; it holds no credential. Each row also records
//! when the session was last used, so the broker can expire idle sessions and sweep them (the
//! store takes the cut-off times, the broker decides them), and the agent that opened it, so a
//! session answers to its owner alone and an agent's sessions can be counted.

use sandboxd_domain::clock::now_ms;

use crate::Store;
use crate::error::{Result, StoreError};

impl Store {
    /// The state of session `id`, if it exists and was used at or after `used_since_ms`.
    pub async fn get_mcp_session(&self, id: &str, used_since_ms: i64) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT state FROM mcp_sessions WHERE id = $1 AND last_used_at_ms >= $2")
            .bind(id)
            .bind(used_since_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("get_mcp_session"))
    }

    /// Stores a session's state; a new or re-stored session counts as used now.
    pub async fn put_mcp_session(&self, id: &str, state: &str) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO mcp_sessions (id, state, created_at_ms, last_used_at_ms) \
             VALUES ($1, $2, $3, $3) \
             ON CONFLICT (id) DO UPDATE SET state = excluded.state, \
             last_used_at_ms = excluded.last_used_at_ms",
        )
        .bind(id)
        .bind(state)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("put_mcp_session"))?;
        Ok(())
    }

    /// Records that `agent` opened session `id`, which must be stored and belong to no one yet;
    /// false otherwise (nothing changes).
    pub async fn bind_mcp_session(&self, id: &str, agent: &str) -> Result<bool> {
        let done =
            sqlx::query("UPDATE mcp_sessions SET agent = $2 WHERE id = $1 AND agent IS NULL")
                .bind(id)
                .bind(agent)
                .execute(&self.pool)
                .await
                .map_err(StoreError::db("bind_mcp_session"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether session `id` exists, belongs to `agent` and was used at or after
    /// `used_since_ms`; if so it is marked used at `now_ms`. The write is skipped while the
    /// recorded use is at or after `refresh_before_ms`, so a busy session costs one read per
    /// request, not one write.
    pub async fn touch_mcp_session(
        &self,
        id: &str,
        agent: &str,
        now_ms: i64,
        used_since_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<bool> {
        const OP: &str = "touch_mcp_session";
        let last_used: Option<i64> = sqlx::query_scalar(
            "SELECT last_used_at_ms FROM mcp_sessions WHERE id = $1 AND agent = $2",
        )
        .bind(id)
        .bind(agent)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db(OP))?;
        match last_used {
            Some(at) if at >= used_since_ms => {
                if at < refresh_before_ms {
                    // Only forward: a concurrent touch that wrote a later time wins.
                    sqlx::query(
                        "UPDATE mcp_sessions SET last_used_at_ms = $2 \
                         WHERE id = $1 AND last_used_at_ms < $2",
                    )
                    .bind(id)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await
                    .map_err(StoreError::db(OP))?;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    pub async fn delete_mcp_session(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("delete_mcp_session"))?;
        Ok(())
    }

    /// Deletes `agent`'s sessions but the `keep` used most recently (the most recently opened
    /// first among equals); returns the ids that went.
    pub async fn evict_mcp_sessions(&self, agent: &str, keep: usize) -> Result<Vec<String>> {
        const OP: &str = "evict_mcp_sessions";
        // No `OFFSET` without `LIMIT` in SQLite, and an agent holds few rows: skip in Rust.
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM mcp_sessions WHERE agent = $1 \
             ORDER BY last_used_at_ms DESC, created_at_ms DESC, id DESC",
        )
        .bind(agent)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(OP))?;
        let evicted: Vec<String> = ids.into_iter().skip(keep).collect();
        for id in &evicted {
            sqlx::query("DELETE FROM mcp_sessions WHERE id = $1 AND agent = $2")
                .bind(id)
                .bind(agent)
                .execute(&self.pool)
                .await
                .map_err(StoreError::db(OP))?;
        }
        Ok(evicted)
    }

    /// Deletes every session last used before `used_before_ms`; returns how many went.
    pub async fn sweep_mcp_sessions(&self, used_before_ms: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM mcp_sessions WHERE last_used_at_ms < $1")
            .bind(used_before_ms)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("sweep_mcp_sessions"))?;
        Ok(done.rows_affected())
    }

    /// How many sessions are stored, expired or not.
    pub async fn count_mcp_sessions(&self) -> Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM mcp_sessions")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("count_mcp_sessions"))
    }
}
