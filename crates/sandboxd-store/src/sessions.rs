//! MCP session state, persisted so a client's session survives a daemon restart. The state is
//! the client's `initialize` parameters as JSON; it holds no credential.

use sandboxd_domain::clock::now_ms;

use crate::Store;
use crate::error::{Result, StoreError};

impl Store {
    pub async fn get_mcp_session(&self, id: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT state FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("get_mcp_session"))
    }

    pub async fn put_mcp_session(&self, id: &str, state: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO mcp_sessions (id, state, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET state = excluded.state",
        )
        .bind(id)
        .bind(state)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("put_mcp_session"))?;
        Ok(())
    }

    pub async fn delete_mcp_session(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("delete_mcp_session"))?;
        Ok(())
    }
}
