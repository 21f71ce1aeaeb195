//! Hand-overs: a task leaving its holder (`i_am_done`, `i_documented`, `pass_review`,
//! `fail_review`, `unclaim`). The move and the holder's record of it (`hand_overs`, one row per
//! agent: its last) are one transaction, so whatever a crash cuts, a store that shows the task
//! moved also knows who moved it and how: a retry whose first answer was lost is answered as
//! the repeat it is, even when the call's audit row was never written.

use sandboxd_domain::AgentSlug;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::lifecycle::{Handed, TaskState};
use sandboxd_domain::roles::Verb;
use sqlx::Row;

use crate::Store;
use crate::error::{Result, StoreError};

/// An agent's last hand-over and when the store made it (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastHandOver {
    pub handed: Handed,
    pub at_ms: i64,
}

impl Store {
    /// Moves the task `agent` holds in `handed.from` to `handed.to`, unclaimed, and records the
    /// move as the agent's last hand-over, in one transaction. `false` (nothing changes) when
    /// the task is not in `handed.from` held by `agent`.
    pub async fn hand_over(&self, agent: &AgentSlug, handed: &Handed) -> Result<bool> {
        const OP: &str = "hand_over";
        let at_ms = now_ms();
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        // The first statement writes, so on SQLite the transaction takes the write lock at once.
        let moved = sqlx::query(
            "UPDATE tasks SET state = $1, claimed_by = NULL, updated_at_ms = $2 \
             WHERE id = $3 AND state = $4 AND claimed_by = $5",
        )
        .bind(handed.to.as_str())
        .bind(at_ms)
        .bind(handed.task.as_str())
        .bind(handed.from.as_str())
        .bind(agent.as_str())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        if moved.rows_affected() == 0 {
            tx.rollback().await.map_err(StoreError::db(OP))?;
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO hand_overs (agent, task_id, verb, from_state, to_state, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (agent) DO UPDATE SET task_id = excluded.task_id, \
               verb = excluded.verb, from_state = excluded.from_state, \
               to_state = excluded.to_state, at_ms = excluded.at_ms",
        )
        .bind(agent.as_str())
        .bind(handed.task.as_str())
        .bind(handed.verb.name())
        .bind(handed.from.as_str())
        .bind(handed.to.as_str())
        .bind(at_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        tx.commit().await.map_err(StoreError::db(OP))?;
        Ok(true)
    }

    /// The last hand-over `agent` made, if any (and its task still exists).
    pub async fn last_hand_over(&self, agent: &AgentSlug) -> Result<Option<LastHandOver>> {
        const OP: &str = "last_hand_over";
        let Some(row) = sqlx::query(
            "SELECT task_id, verb, from_state, to_state, at_ms FROM hand_overs WHERE agent = $1",
        )
        .bind(agent.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db(OP))?
        else {
            return Ok(None);
        };
        let get = |e: sqlx::Error| StoreError::db(OP)(e);
        let task: String = row.try_get("task_id").map_err(get)?;
        let verb: String = row.try_get("verb").map_err(get)?;
        let state = |column: &str| -> Result<TaskState> {
            let text: String = row.try_get(column).map_err(get)?;
            TaskState::parse(&text).ok_or_else(|| {
                StoreError::corrupt(OP, format!("{column} of {agent}'s hand-over"), text)
            })
        };
        let handed = Handed {
            verb: Verb::parse(&verb).map_err(|e| {
                StoreError::corrupt(OP, format!("verb of {agent}'s hand-over"), e.to_string())
            })?,
            task,
            from: state("from_state")?,
            to: state("to_state")?,
        };
        Ok(Some(LastHandOver {
            handed,
            at_ms: row.try_get("at_ms").map_err(get)?,
        }))
    }
}
