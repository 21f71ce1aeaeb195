//! The audit log: who did what, when, with what outcome and how long it took. Append-only;
//! read newest first, filtered, a page at a time with a cursor.
//!
//! The store cannot tell a credential from other text: callers never put one in `subject` or
//! `detail` (the broker's audit helpers take only names, codes and counts).

use sandboxd_domain::Actor;
use sandboxd_domain::ProjectSlug;
use sandboxd_domain::audit::{
    AuditEntry, AuditFilter, AuditPage, DEFAULT_PAGE, MAX_PAGE, OutcomeFilter,
};
use sandboxd_domain::clock::now_ms;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::conditions::Conditions;
use crate::error::{Result, StoreError};
use crate::ids::time_ordered_id;

/// `detail` is cut to this many characters: it is a one-line summary, not a log.
pub const DETAIL_MAX_CHARS: usize = 1000;

/// One row to append. [`NewAuditEntry::stamp`] gives it its id and time.
#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    pub actor: Actor,
    /// A verb name, or `provision`, `teardown`, `reap`, …
    pub action: String,
    /// What it acted on: a sandbox owner, a task id, a project, …
    pub subject: String,
    pub project: Option<ProjectSlug>,
    /// `ok` or an error code.
    pub outcome: String,
    pub duration_ms: u64,
    /// A short summary; cut to [`DETAIL_MAX_CHARS`]. Never a credential.
    pub detail: String,
}

/// An entry with the id and time of the moment it happened, written later: the id orders the
/// log, so a row written after later ones still lists in its event's place.
#[derive(Debug, Clone)]
pub struct StampedAuditEntry {
    id: String,
    at_ms: i64,
    entry: NewAuditEntry,
}

impl NewAuditEntry {
    /// Stamps the entry now, when its event happened, however late it is written.
    pub fn stamp(self) -> StampedAuditEntry {
        StampedAuditEntry {
            id: time_ordered_id(),
            at_ms: now_ms(),
            entry: self,
        }
    }
}

impl StampedAuditEntry {
    /// What was done: what a failure to write the row may say of it.
    pub fn action(&self) -> &str {
        &self.entry.action
    }

    /// The entry as it is stored: its detail cut to [`DETAIL_MAX_CHARS`].
    fn stored(&self) -> AuditEntry {
        let entry = &self.entry;
        AuditEntry {
            id: self.id.clone(),
            at_ms: self.at_ms,
            actor: entry.actor.clone(),
            action: entry.action.clone(),
            subject: entry.subject.clone(),
            project: entry.project.clone(),
            outcome: entry.outcome.clone(),
            duration_ms: entry.duration_ms.min(i64::MAX.unsigned_abs()),
            detail: cut(&entry.detail, DETAIL_MAX_CHARS),
        }
    }
}

const COLUMNS: &str = "id, at_ms, actor, action, subject, project, outcome, duration_ms, detail";
const INSERT: &str = "INSERT INTO audit (id, at_ms, actor, action, subject, project, outcome, \
                      duration_ms, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

fn entry_from_row(op: &'static str, row: &AnyRow) -> Result<AuditEntry> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let id: String = row.try_get("id").map_err(get)?;
    let what = |column: &str| format!("{column} of audit entry {id:?}");
    let actor: String = row.try_get("actor").map_err(get)?;
    let actor = Actor::decode(&actor).ok_or_else(|| {
        StoreError::corrupt(op, what("actor"), format!("unknown actor {actor:?}"))
    })?;
    let project: Option<String> = row.try_get("project").map_err(get)?;
    let project = project
        .map(|p| ProjectSlug::parse(&p))
        .transpose()
        .map_err(|e| StoreError::corrupt(op, what("project"), e))?;
    let duration_ms: i64 = row.try_get("duration_ms").map_err(get)?;
    Ok(AuditEntry {
        at_ms: row.try_get("at_ms").map_err(get)?,
        actor,
        action: row.try_get("action").map_err(get)?,
        subject: row.try_get("subject").map_err(get)?,
        project,
        outcome: row.try_get("outcome").map_err(get)?,
        duration_ms: u64::try_from(duration_ms).unwrap_or(0),
        detail: row.try_get("detail").map_err(get)?,
        id,
    })
}

fn filter_conditions(filter: &AuditFilter) -> Conditions {
    let mut conditions = Conditions::default();
    if let Some(actor) = &filter.actor {
        conditions.push("actor = {}", actor.encode());
    }
    if let Some(project) = &filter.project {
        conditions.push("project = {}", project.to_string());
    }
    match &filter.outcome {
        None => {}
        Some(OutcomeFilter::Ok) => conditions.push_fixed("outcome = 'ok'"),
        Some(OutcomeFilter::Failed) => conditions.push_fixed("outcome <> 'ok'"),
        Some(OutcomeFilter::Is(code)) => conditions.push("outcome = {}", code.clone()),
    }
    conditions
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

impl Store {
    /// Appends one entry, stamped now, and returns it as stored.
    pub async fn append_audit(&self, entry: &NewAuditEntry) -> Result<AuditEntry> {
        let stamped = entry.clone().stamp();
        self.append_audits(std::slice::from_ref(&stamped)).await?;
        Ok(stamped.stored())
    }

    /// Appends `entries` in one transaction: all or none.
    pub async fn append_audits(&self, entries: &[StampedAuditEntry]) -> Result<()> {
        const OP: &str = "append_audits";
        if entries.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        for stamped in entries {
            let row = stamped.stored();
            sqlx::query(INSERT)
                .bind(row.id)
                .bind(row.at_ms)
                .bind(row.actor.encode())
                .bind(row.action)
                .bind(row.subject)
                .bind(row.project.map(|p| p.to_string()))
                .bind(row.outcome)
                .bind(i64::try_from(row.duration_ms).unwrap_or(i64::MAX))
                .bind(row.detail)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        tx.commit().await.map_err(StoreError::db(OP))?;
        Ok(())
    }

    /// One page of entries matching `filter`, newest first.
    pub async fn list_audit(&self, filter: &AuditFilter) -> Result<AuditPage> {
        const OP: &str = "list_audit";
        let limit = match filter.limit {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };

        let conditions = filter_conditions(filter);
        let count_sql = format!("SELECT COUNT(*) FROM audit {}", conditions.sql());
        let mut count = sqlx::query_scalar(sqlx::AssertSqlSafe(count_sql));
        for value in &conditions.values {
            count = count.bind(value.as_str());
        }
        let total: i64 = count
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;

        let mut conditions = conditions;
        if let Some(before) = &filter.before {
            conditions.push("id < {}", before.clone());
        }
        // One more than asked tells whether an older page exists.
        let page_sql = format!(
            "SELECT {COLUMNS} FROM audit {} ORDER BY id DESC LIMIT ${}",
            conditions.sql(),
            conditions.values.len() + 1
        );
        let mut page = sqlx::query(sqlx::AssertSqlSafe(page_sql));
        for value in &conditions.values {
            page = page.bind(value.as_str());
        }
        let rows = page
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
        let mut entries = rows
            .iter()
            .map(|row| entry_from_row(OP, row))
            .collect::<Result<Vec<_>>>()?;
        let next_before = if entries.len() > limit as usize {
            entries.truncate(limit as usize);
            entries.last().map(|e| e.id.clone())
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            next_before,
            total: u64::try_from(total).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_domain::AgentSlug;

    #[test]
    fn actors_round_trip_and_stay_apart() {
        let agent = Actor::Agent(AgentSlug::parse("operator").expect("valid slug"));
        for actor in [agent.clone(), Actor::Operator, Actor::Daemon] {
            assert_eq!(Actor::decode(&actor.encode()), Some(actor));
        }
        assert_ne!(agent.encode(), Actor::Operator.encode());
        assert_eq!(Actor::decode("agent:NOT OK"), None);
    }

    #[test]
    fn placeholders_follow_binding_order() {
        let filter = AuditFilter {
            actor: Some(Actor::Daemon),
            outcome: Some(OutcomeFilter::Failed),
            project: Some(ProjectSlug::parse("p").expect("valid")),
            ..Default::default()
        };
        let conditions = filter_conditions(&filter);
        assert_eq!(
            conditions.sql(),
            "WHERE actor = $1 AND project = $2 AND outcome <> 'ok'"
        );
        assert_eq!(conditions.values, ["daemon", "p"]);
    }

    #[test]
    fn detail_is_cut_on_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("hi", 2), "hi");
    }
}
