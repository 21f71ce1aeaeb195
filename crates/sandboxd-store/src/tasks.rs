//! Tasks and their notes. The store offers compare-and-set operations; which transitions a verb
//! may make is decided by `sandboxd_domain::lifecycle`, not here.
//!
//! Claim-locking (§2: two agents can never hold the same task) rests on one rule: every change
//! of `state` / `claimed_by` is a single `UPDATE … WHERE id = … AND state = <expected> AND
//! claimed_by <expected>` and its row count says whether it won. Both databases make that
//! atomic: SQLite has one writer at a time, and PostgreSQL re-checks the `WHERE` of a blocked
//! `UPDATE` against the row the other writer committed. No database-specific locking clause is
//! needed, so there is one code path. The states are the domain's
//! [`TaskState`].

use sandboxd_domain::clock::now_ms;
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::{AgentSlug, ProjectSlug};
use sandboxd_domain::{NoteKind, Task, TaskNote};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::conditions::Conditions;
use crate::error::{Result, StoreError, Violation, violation};
use crate::ids::time_ordered_id;

const COLUMNS: &str =
    "id, project, title, description, state, claimed_by, created_at_ms, updated_at_ms";
const NOTE_COLUMNS: &str = "id, task_id, agent, kind, private, body, at_ms";

/// How often [`Store::claim_next`] retries after losing a race. Every lost race means another
/// caller's claim succeeded, so this bounds pathological churn, not normal contention.
const CLAIM_ATTEMPTS: u32 = 200;

fn task_from_row(op: &'static str, row: &AnyRow) -> Result<Task> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let id: String = row.try_get("id").map_err(get)?;
    let what = |column: &str| format!("{column} of task {id:?}");
    let project: String = row.try_get("project").map_err(get)?;
    let project =
        ProjectSlug::parse(&project).map_err(|e| StoreError::corrupt(op, what("project"), e))?;
    let state: String = row.try_get("state").map_err(get)?;
    let state = TaskState::parse(&state).ok_or_else(|| {
        StoreError::corrupt(op, what("state"), format!("unknown state {state:?}"))
    })?;
    let claimed_by: Option<String> = row.try_get("claimed_by").map_err(get)?;
    let claimed_by = claimed_by
        .map(|slug| AgentSlug::parse(&slug))
        .transpose()
        .map_err(|e| StoreError::corrupt(op, what("claimed_by"), e))?;
    Ok(Task {
        project,
        title: row.try_get("title").map_err(get)?,
        description: row.try_get("description").map_err(get)?,
        state,
        claimed_by,
        created_at_ms: row.try_get("created_at_ms").map_err(get)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(get)?,
        id,
    })
}

fn note_from_row(op: &'static str, row: &AnyRow) -> Result<TaskNote> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let id: String = row.try_get("id").map_err(get)?;
    let what = |column: &str| format!("{column} of note {id}");
    let agent: String = row.try_get("agent").map_err(get)?;
    let agent = AgentSlug::parse(&agent).map_err(|e| StoreError::corrupt(op, what("agent"), e))?;
    let kind: String = row.try_get("kind").map_err(get)?;
    let kind = NoteKind::parse(&kind)
        .ok_or_else(|| StoreError::corrupt(op, what("kind"), format!("unknown kind {kind:?}")))?;
    let private: i64 = row.try_get("private").map_err(get)?;
    Ok(TaskNote {
        task_id: row.try_get("task_id").map_err(get)?,
        agent,
        kind,
        private: private != 0,
        text: row.try_get("body").map_err(get)?,
        at_ms: row.try_get("at_ms").map_err(get)?,
        id,
    })
}

/// Maps a write's error: a foreign key that did not hold means the row the write references,
/// `what` `id`, does not exist. (A task's project never changes after creation, so a write that
/// sets a claimant can only miss the agent.)
fn missing_reference(
    op: &'static str,
    what: &'static str,
    id: String,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| match violation(&e) {
        Violation::ForeignKey => StoreError::NotFound { op, what, id },
        _ => StoreError::db(op)(e),
    }
}

impl Store {
    /// Creates an open, unclaimed task in `project`. [`StoreError::NotFound`] when the project
    /// does not exist.
    pub async fn create_task(
        &self,
        project: &ProjectSlug,
        title: &str,
        description: &str,
    ) -> Result<Task> {
        const OP: &str = "create_task";
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        // The first statement writes, so on SQLite the transaction takes the write lock at once
        // (waiting out the busy timeout) instead of failing later on a read-to-write upgrade.
        let seq: i64 = sqlx::query_scalar(
            "UPDATE counters SET value = value + 1 WHERE name = 'task' RETURNING value",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        let now = now_ms();
        let sql = format!(
            "INSERT INTO tasks (id, seq, project, title, description, state, claimed_by, \
             created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(format!("t-{seq}"))
            .bind(seq)
            .bind(project.as_str())
            .bind(title)
            .bind(description)
            .bind(TaskState::Open.as_str())
            .bind(now)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(missing_reference(OP, "project", project.to_string()))?;
        let task = task_from_row(OP, &row)?;
        tx.commit().await.map_err(StoreError::db(OP))?;
        Ok(task)
    }

    pub async fn get_task(&self, id: &str) -> Result<Option<Task>> {
        const OP: &str = "get_task";
        let sql = format!("SELECT {COLUMNS} FROM tasks WHERE id = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| task_from_row(OP, &row))
            .transpose()
    }

    /// Tasks (of one project, in one state, if given), oldest first.
    pub async fn list_tasks(
        &self,
        project: Option<&ProjectSlug>,
        state: Option<TaskState>,
    ) -> Result<Vec<Task>> {
        const OP: &str = "list_tasks";
        let mut conditions = Conditions::default();
        if let Some(project) = project {
            conditions.push("project = {}", project.to_string());
        }
        if let Some(state) = state {
            conditions.push("state = {}", state.as_str().to_owned());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks {} ORDER BY seq",
            conditions.sql()
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in &conditions.values {
            query = query.bind(value.as_str());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(|row| task_from_row(OP, row))
            .collect()
    }

    /// Atomically claims the oldest unclaimed task of `project` in `from`: it moves to `to`,
    /// held by `agent`. `None` when there is no such task. Concurrent callers never get the
    /// same task.
    pub async fn claim_next(
        &self,
        project: &ProjectSlug,
        from: TaskState,
        to: TaskState,
        agent: &AgentSlug,
    ) -> Result<Option<Task>> {
        const OP: &str = "claim_next";
        let claim_sql = format!(
            "UPDATE tasks SET state = $1, claimed_by = $2, updated_at_ms = $3 \
             WHERE id = $4 AND state = $5 AND claimed_by IS NULL RETURNING {COLUMNS}"
        );
        for _ in 0..CLAIM_ATTEMPTS {
            let candidate: Option<String> = sqlx::query_scalar(
                "SELECT id FROM tasks WHERE project = $1 AND state = $2 AND claimed_by IS NULL \
                 ORDER BY seq LIMIT 1",
            )
            .bind(project.as_str())
            .bind(from.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
            let Some(id) = candidate else {
                return Ok(None);
            };
            let claimed = sqlx::query(sqlx::AssertSqlSafe(claim_sql.clone()))
                .bind(to.as_str())
                .bind(agent.as_str())
                .bind(now_ms())
                .bind(&id)
                .bind(from.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(missing_reference(OP, "agent", agent.to_string()))?;
            if let Some(row) = claimed {
                return task_from_row(OP, &row).map(Some);
            }
            // Another caller took `id` between the two statements: look again.
            tracing::debug!(task = %id, agent = %agent, "lost a claim race; retrying");
        }
        Err(StoreError::Contention {
            op: OP,
            attempts: CLAIM_ATTEMPTS,
        })
    }

    /// Compare-and-set on a task's state and claimant: when the task is in `expected_state` and
    /// held by `expected_claimant` (`None`: unclaimed), it moves to `new_state` held by
    /// `new_claimant`, and the answer is `true`. `false` when the expectation did not hold;
    /// [`StoreError::NotFound`] when there is no such task (or no such new claimant).
    pub async fn transition(
        &self,
        task_id: &str,
        expected_state: TaskState,
        expected_claimant: Option<&AgentSlug>,
        new_state: TaskState,
        new_claimant: Option<&AgentSlug>,
    ) -> Result<bool> {
        const OP: &str = "transition";
        let claimant_check = match expected_claimant {
            Some(_) => "claimed_by = $6",
            None => "claimed_by IS NULL",
        };
        let sql = format!(
            "UPDATE tasks SET state = $1, claimed_by = $2, updated_at_ms = $3 \
             WHERE id = $4 AND state = $5 AND {claimant_check}"
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(new_state.as_str())
            .bind(new_claimant.map(AgentSlug::as_str))
            .bind(now_ms())
            .bind(task_id)
            .bind(expected_state.as_str());
        if let Some(expected) = expected_claimant {
            query = query.bind(expected.as_str());
        }
        let result = query.execute(&self.pool).await.map_err(missing_reference(
            OP,
            "agent",
            new_claimant.map(|a| a.to_string()).unwrap_or_default(),
        ))?;
        if result.rows_affected() > 0 {
            return Ok(true);
        }
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
        match exists {
            Some(_) => Ok(false),
            None => Err(StoreError::NotFound {
                op: OP,
                what: "task",
                id: format!("{task_id:?}"),
            }),
        }
    }

    /// The task `agent` is working on: claimed by it and `in_progress` or `in_review`. If the
    /// broker ever let an agent hold two, the most recently changed one.
    pub async fn active_task_of(&self, agent: &AgentSlug) -> Result<Option<Task>> {
        const OP: &str = "active_task_of";
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE claimed_by = $1 AND state IN ($2, $3) \
             ORDER BY updated_at_ms DESC, seq DESC LIMIT 1"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent.as_str())
            .bind(TaskState::InProgress.as_str())
            .bind(TaskState::InReview.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| task_from_row(OP, &row))
            .transpose()
    }

    /// Records a note or a piece of evidence on a task. [`StoreError::NotFound`] when the task
    /// does not exist.
    pub async fn record_task_note(
        &self,
        task_id: &str,
        agent: &AgentSlug,
        kind: NoteKind,
        private: bool,
        text: &str,
    ) -> Result<TaskNote> {
        const OP: &str = "record_task_note";
        let sql = format!(
            "INSERT INTO task_notes ({NOTE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             RETURNING {NOTE_COLUMNS}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(time_ordered_id())
            .bind(task_id)
            .bind(agent.as_str())
            .bind(kind.as_str())
            .bind(i64::from(private))
            .bind(text)
            .bind(now_ms())
            .fetch_one(&self.pool)
            .await
            .map_err(missing_reference(OP, "task", format!("{task_id:?}")))?;
        note_from_row(OP, &row)
    }

    /// A task's notes and evidence, oldest first; private ones only when asked for.
    pub async fn list_task_notes(
        &self,
        task_id: &str,
        include_private: bool,
    ) -> Result<Vec<TaskNote>> {
        const OP: &str = "list_task_notes";
        let sql = if include_private {
            format!("SELECT {NOTE_COLUMNS} FROM task_notes WHERE task_id = $1 ORDER BY id")
        } else {
            format!(
                "SELECT {NOTE_COLUMNS} FROM task_notes WHERE task_id = $1 AND private = 0 \
                 ORDER BY id"
            )
        };
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(task_id)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(|row| note_from_row(OP, row))
            .collect()
    }
}
