//! What several daemon replicas on one store coordinate through: leases (a name one holder
//! keeps until it expires), the replicas' heartbeats, and which replica's warm pools hold a
//! member. The store only keeps and compares times; what a lease protects is the broker's.

use sandboxd_domain::clock::now_ms;

use crate::Store;
use crate::error::{Result, StoreError};

impl Store {
    /// Takes `name` for `holder` until `ttl_ms` from now, or extends it when `holder` has it
    /// already. False while another holder's lease has not expired. One statement: two
    /// replicas asking at once never both get it.
    pub async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<bool> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at_ms = excluded.expires_at_ms \
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms < $4",
        )
        .bind(name)
        .bind(holder)
        .bind(now.saturating_add(ttl_ms))
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("acquire_lease"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives `name` up, if `holder` has it.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("release_lease"))?;
        Ok(())
    }

    /// Who holds `name` now (an unexpired lease), if anyone.
    pub async fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT holder FROM leases WHERE name = $1 AND expires_at_ms >= $2")
            .bind(name)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("lease_holder"))
    }

    /// Records that replica `id` is alive now.
    pub async fn replica_seen(&self, id: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO replicas (id, seen_at_ms) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET seen_at_ms = excluded.seen_at_ms",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("replica_seen"))?;
        Ok(())
    }

    /// Records that replica `replica`'s warm pools hold the member `name`.
    pub async fn register_pool_member(&self, name: &str, replica: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO pool_members (name, replica, registered_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET replica = excluded.replica, \
             registered_at_ms = excluded.registered_at_ms",
        )
        .bind(name)
        .bind(replica)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("register_pool_member"))?;
        Ok(())
    }

    pub async fn forget_pool_member(&self, name: &str) -> Result<()> {
        sqlx::query("DELETE FROM pool_members WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("forget_pool_member"))?;
        Ok(())
    }

    /// Whether the member `name` belongs to the pools of a replica seen within `within_ms`.
    pub async fn pool_member_alive(&self, name: &str, within_ms: i64) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT r.seen_at_ms FROM pool_members m JOIN replicas r ON r.id = m.replica \
             WHERE m.name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("pool_member_alive"))?;
        Ok(found.is_some_and(|seen| now_ms().saturating_sub(seen) <= within_ms))
    }
}
