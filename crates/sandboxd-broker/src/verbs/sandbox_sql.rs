//! `sandbox_sql`: one statement (or Redis command) against one of the agent's own services, as
//! its own account, rows back under stated limits.

use std::time::{Duration, Instant};

use sandboxd_backend::wire::{AgentStatement, Cut, QueryLimits};
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::SandboxSqlArgs;
use sandboxd_domain::{Agent, Instance};

use super::Answer;
use super::answer::SqlEvidence;
use super::held::{a_member_died, choose, millis};
use crate::Broker;

/// An answer whose first row (or the server's message) alone is over `max_bytes`: nothing of
/// it was kept (on the wire, the connection ended as it arrived).
fn over_max_bytes(instance: &Instance, limits: QueryLimits) -> ErrorEnvelope {
    let how = match instance.engine.protocol {
        sandboxd_domain::Protocol::Redis => {
            "ask for less at once: GETRANGE, LRANGE or HSCAN with COUNT, SCAN instead of KEYS"
        }
        _ => {
            "select less: substring(column, 1, n), length(column), fewer columns, or a \
             narrower WHERE"
        }
    };
    ErrorEnvelope::new(
        ErrorCode::LimitExceeded,
        format!(
            "{}'s answer is larger than sandbox_sql's byte limit (limits.max_bytes = {} bytes) \
             from its first row on; nothing of it was kept",
            instance.engine.name, limits.max_bytes
        ),
        format!("{how}, and call sandbox_sql again"),
    )
}

/// Characters of a server's error message an answer repeats.
const SQL_ERROR_CHARS: usize = 4096;

/// `sandbox_sql`'s caps: what an agent may ask for at most.
const SQL_MAX_ROWS: u32 = 1000;

const SQL_MAX_BYTES: usize = 1024 * 1024;

const SQL_TIMEOUT: Duration = Duration::from_secs(10);

/// A statement longer than this is refused before anything runs.
const SQL_MAX_TEXT: usize = 64 * 1024;

impl Broker {
    /// `sandbox_sql`: one statement (or Redis command) against one of the agent's own services,
    /// as its own account, rows back as JSON under stated limits.
    pub(crate) async fn sandbox_sql(&self, agent: &Agent, args: SandboxSqlArgs) -> Answer {
        if args.statement.len() > SQL_MAX_TEXT {
            return Err(ErrorEnvelope::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the statement is {} bytes; at most {SQL_MAX_TEXT}",
                    args.statement.len()
                ),
                "send a shorter statement",
            ));
        }
        let max_rows = match args.max_rows {
            None => SQL_MAX_ROWS,
            Some(n) if (1..=SQL_MAX_ROWS).contains(&n) => n,
            Some(n) => {
                return Err(ErrorEnvelope::new(
                    ErrorCode::InvalidArgument,
                    format!("max_rows is {n}; allowed: 1 to {SQL_MAX_ROWS}"),
                    "call sandbox_sql again with max_rows in that range, or without it",
                ));
            }
        };
        let _heavy = self.heavy_call(&agent.slug, Verb::SandboxSql)?;
        let instances = self.held_sandbox(agent).await?;
        let service = [args.service.clone()];
        let instance = choose("sandbox_sql", &instances, Some(&service))?[0];
        let statement = statement_for(instance, &args.statement)?;
        let backend = self
            .inner
            .backends
            .for_kind(instance.backend)
            .ok_or_else(a_member_died)?;
        let limits = QueryLimits {
            max_rows: max_rows as usize,
            max_bytes: SQL_MAX_BYTES,
            timeout: SQL_TIMEOUT,
        };
        let started = Instant::now();
        let answer = backend
            .query(instance, &statement, limits)
            .await
            .map_err(|err| {
                // The server's own words (a syntax error, a permission denied), not our framing,
                // cut like any text an answer carries.
                let said = match err {
                    sandboxd_backend::BackendError::Wire { detail, .. } => detail,
                    other => other.to_string(),
                };
                let said = sandboxd_experiments::cut_to(&said, SQL_ERROR_CHARS);
                ErrorEnvelope::new(
                    ErrorCode::InvalidArgument,
                    format!("{} did not run it: {said}", instance.engine.name),
                    "fix the statement (one statement, your own objects; the error above is the \
                     server's), or call sandbox_info if the service may be down",
                )
            })?;
        let elapsed = started.elapsed();
        if let Err(err) = self.store().touch_instances_of(&agent.slug).await {
            tracing::warn!(agent = %agent.slug, error = %err, "recording the sandbox's use failed");
        }
        if answer.rows.is_empty() && answer.cut == Some(Cut::MaxBytes) {
            return Err(over_max_bytes(instance, limits));
        }
        let rows = answer.rows.len();
        let held = self.held_task_id(&agent.slug).await;
        let briefing = format!(
            "{} answered {rows} row(s){} in {} ms.",
            instance.engine.name,
            match answer.cut {
                Some(cut) if answer.truncated => format!(", cut at limits.{}", cut.name()),
                _ if answer.truncated => ", cut at a limit (see limits)".to_owned(),
                _ => String::new(),
            },
            millis(elapsed)
        );
        let evidence = SqlEvidence {
            service: instance.engine.name,
            columns: answer.columns,
            rows: answer.rows,
            affected: answer.affected,
            truncated: answer.truncated,
            cut_at: answer.cut.map(Cut::name),
            limits,
            elapsed_ms: millis(elapsed),
        };
        Ok((
            OkEnvelope::new(
                held,
                "run your next statement, or your tests with the sandbox's credentials",
                briefing,
            )
            .with_evidence(evidence),
            format!("{}: {rows} row(s)", instance.engine.name),
        ))
    }
}

/// The statement as its engine takes it: SQL as is, a Redis command line split like a shell
/// would (quotes group words).
fn statement_for(instance: &Instance, text: &str) -> Result<AgentStatement, ErrorEnvelope> {
    if text.trim().is_empty() {
        return Err(ErrorEnvelope::new(
            ErrorCode::InvalidArgument,
            "the statement is empty",
            "send one statement",
        ));
    }
    match instance.engine.protocol {
        sandboxd_domain::Protocol::Redis => match shlex::split(text) {
            Some(words) if !words.is_empty() => Ok(AgentStatement::Command(words)),
            _ => Err(ErrorEnvelope::new(
                ErrorCode::InvalidArgument,
                "the Redis command line has an unclosed quote",
                "send one command with balanced quotes, e.g. SET \"my key\" value",
            )),
        },
        _ => Ok(AgentStatement::Sql(text.to_owned())),
    }
}
