//! The verbs an agent uses on the sandbox it holds, between `request_sandbox` and its release:
//! `reset_sandbox` (empty it in place, same credentials), `sandbox_info` (describe it) and
//! `sandbox_sql` (one statement as the agent's own account). All work on the agent's own stored
//! sandbox only; `reset_sandbox` is serialized with its other sandbox calls.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_backend::wire::{AgentStatement, Cut, QueryLimits};
use sandboxd_domain::Agent;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::{ResetSandboxArgs, SandboxSqlArgs};
use sandboxd_domain::{EngineRef, Instance};
use serde_json::json;

use crate::Broker;
use crate::envelopes::internal;

fn no_sandbox() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::OutOfOrder,
        "you hold no sandbox",
        "call request_sandbox first; it answers your sandbox's credentials",
    )
}

fn a_member_died() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::InvalidState,
        "a service of your sandbox is not running any more; nothing was changed",
        "call request_sandbox: it replaces the whole sandbox (with new credentials)",
    )
    .retryable(true)
}

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

fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

impl Broker {
    /// The agent's stored sandbox, or the refusal that says to request one first.
    pub(crate) async fn held_sandbox(&self, agent: &Agent) -> Result<Vec<Instance>, ErrorEnvelope> {
        let instances = self
            .store()
            .instances_of(&agent.slug)
            .await
            .map_err(|e| internal("reading your sandbox", &e))?;
        if instances.is_empty() {
            return Err(no_sandbox());
        }
        Ok(instances)
    }

    /// `reset_sandbox`: every chosen service of the agent's sandbox back to how it was handed
    /// out, in place (same endpoint, same credentials), in parallel.
    pub(crate) async fn reset_sandbox(
        &self,
        agent: &Agent,
        args: ResetSandboxArgs,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        // Counted before waiting for the turn: a flood of resets is refused, not queued.
        let _heavy = self.heavy_call(&agent.slug, Verb::ResetSandbox)?;
        let _turn = self
            .turn(&agent.slug)
            .await
            .map_err(|e| crate::envelopes::internal("waiting for the agent's turn", &e))?;
        let instances = self.held_sandbox(agent).await?;
        let chosen = choose("reset_sandbox", &instances, args.services.as_deref())?;
        if !self.all_live(&instances).await {
            return Err(a_member_died());
        }
        let resets = chosen.iter().map(|instance| async move {
            let started = Instant::now();
            let outcome = match self.inner.backends.for_kind(instance.backend) {
                Some(backend) => match self.snapshot_to_reclone(instance).await {
                    Ok(snapshot) => backend
                        .reset(instance, snapshot.as_ref())
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                },
                None => Err(format!("no {} backend is configured", instance.backend)),
            };
            (*instance, outcome, started.elapsed())
        });
        let results = join_all(resets).await;
        let mut evidence = Vec::new();
        let mut failed = Vec::new();
        for (instance, outcome, elapsed) in &results {
            self.inner
                .metrics
                .reset(instance.engine, outcome.is_ok(), *elapsed);
            match outcome {
                Ok(()) => evidence.push(json!({
                    "service": instance.engine.name,
                    "reset_ms": millis(*elapsed),
                })),
                Err(err) => {
                    tracing::warn!(agent = %agent.slug, instance = %instance.name, error = %err, "reset failed");
                    failed.push(format!("{}: {err}", instance.engine.name));
                }
            }
        }
        if !failed.is_empty() {
            return Err(ErrorEnvelope::new(
                ErrorCode::InvalidState,
                format!(
                    "your sandbox could not be reset: {}; its credentials are unchanged, its \
                     data may be partly gone",
                    failed.join("; ")
                ),
                "call reset_sandbox again, or release_sandbox and request_sandbox for a fresh one",
            )
            .retryable(true));
        }
        if let Err(err) = self.store().touch_instances_of(&agent.slug).await {
            tracing::warn!(agent = %agent.slug, error = %err, "recording the sandbox's use failed");
        }
        let names: Vec<&str> = chosen.iter().map(|i| i.engine.name).collect();
        let held = self.held_task_id(&agent.slug).await;
        Ok((
            OkEnvelope::new(
                held,
                "run your tests again: the same host, port and credentials work",
                format!(
                    "Reset {}: every database, table, key and role you made is gone; the \
                     features you had are active again.",
                    names.join(", ")
                ),
            )
            .with_evidence(serde_json::Value::Array(evidence)),
            format!("reset {}", names.join(",")),
        ))
    }

    /// What a reset makes a clone a clone of again: its source's latest snapshot (the reset
    /// removes the schema the agent owned). None for an instance that is not a clone.
    async fn snapshot_to_reclone(
        &self,
        instance: &sandboxd_domain::Instance,
    ) -> Result<Option<sandboxd_domain::clone::Snapshot>, String> {
        let Some(origin) = &instance.clone else {
            return Ok(None);
        };
        let source =
            sandboxd_domain::SourceName::parse(&origin.source).map_err(|e| e.to_string())?;
        self.store()
            .latest_snapshot(&source)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("source {source} has no snapshot any more"))
            .map(Some)
    }

    /// `sandbox_sql`: one statement (or Redis command) against one of the agent's own services,
    /// as its own account, rows back as JSON under stated limits.
    pub(crate) async fn sandbox_sql(
        &self,
        agent: &Agent,
        args: SandboxSqlArgs,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
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
        let evidence = json!({
            "service": instance.engine.name,
            "columns": answer.columns,
            "rows": answer.rows,
            "affected": answer.affected,
            "truncated": answer.truncated,
            "cut_at": answer.cut.map(Cut::name),
            "limits": limits,
            "elapsed_ms": millis(elapsed),
        });
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

    /// `sandbox_info`: what the agent's sandbox is, without changing it (not even its idle
    /// clock: looking is not using).
    pub(crate) async fn sandbox_info(
        &self,
        agent: &Agent,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        let instances = self.held_sandbox(agent).await?;
        let config = &self.inner.config;
        let described = instances.iter().map(|instance| async move {
            let backend = self.inner.backends.for_kind(instance.backend);
            let live = match backend {
                Some(backend) => backend
                    .is_live(&sandboxd_backend::InstanceHandle::of(instance))
                    .await
                    .unwrap_or(false),
                None => false,
            };
            let version = match (backend, live) {
                (Some(backend), true) => backend
                    .server_version(instance)
                    .await
                    .unwrap_or_else(|err| format!("unknown ({err})")),
                _ => "unknown (not running)".to_owned(),
            };
            let last_used = self
                .store()
                .last_used_of(&instance.name)
                .await
                .ok()
                .flatten()
                .unwrap_or(instance.created_at_ms);
            let idle_ends = config
                .idle_ttl
                .map(|ttl| last_used + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
            let lifetime_ends = config.max_lifetime.map(|max| {
                instance.created_at_ms + i64::try_from(max.as_millis()).unwrap_or(i64::MAX)
            });
            json!({
                "service": instance.engine.name,
                "engine": instance.engine.title,
                "version": version,
                "backend": instance.backend.to_string(),
                "live": live,
                "features": instance.features.iter().map(|f| f.name()).collect::<Vec<_>>(),
                "host": instance.host,
                "port": instance.port,
                "database": instance.database,
                "user": instance.agent.user,
                "created_at_ms": instance.created_at_ms,
                "last_used_at_ms": last_used,
                "idle_timeout_secs": config.idle_ttl.map(|d| d.as_secs()),
                "released_if_idle_at_ms": idle_ends,
                "max_lifetime_secs": config.max_lifetime.map(|d| d.as_secs()),
                "released_at_latest_at_ms": lifetime_ends,
                "clone": instance.clone,
                "size_mb": instance.size.map(|size| size.mb()),
            })
        });
        let evidence: Vec<serde_json::Value> = join_all(described).await;
        let now = now_ms();
        let soonest = |key: &str| {
            evidence
                .iter()
                .filter_map(|e| e[key].as_i64())
                .min()
                .map(|at| (at - now).max(0) / 1000)
        };
        let ending = match (
            soonest("released_if_idle_at_ms"),
            soonest("released_at_latest_at_ms"),
        ) {
            (Some(idle), Some(latest)) if latest <= idle => {
                format!("it is released in {latest} s (maximum lifetime), used or not")
            }
            (Some(idle), Some(latest)) => format!(
                "it is released in {idle} s unless used sooner (idle timeout), and in {latest} s \
                 at the latest (maximum lifetime)"
            ),
            (Some(idle), None) => {
                format!("it is released in {idle} s unless used sooner (idle timeout)")
            }
            (None, Some(latest)) => {
                format!("it is released in {latest} s (maximum lifetime), used or not")
            }
            (None, None) => "it lasts until you release it or finish your task".to_owned(),
        };
        let names: Vec<&str> = instances.iter().map(|i| i.engine.name).collect();
        let held = self.held_task_id(&agent.slug).await;
        Ok((
            OkEnvelope::new(
                held,
                "use the credentials request_sandbox gave you; reset_sandbox empties the sandbox",
                format!("Your sandbox: {}; {ending}.", names.join(", ")),
            )
            .with_evidence(serde_json::Value::Array(evidence)),
            format!("described {}", names.join(",")),
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

/// The instances `services` names (all of them when None), or a refusal naming what the
/// sandbox has.
fn choose<'a>(
    verb: &str,
    instances: &'a [Instance],
    services: Option<&[String]>,
) -> Result<Vec<&'a Instance>, ErrorEnvelope> {
    let Some(services) = services else {
        return Ok(instances.iter().collect());
    };
    let present: BTreeSet<&str> = instances.iter().map(|i| i.engine.name).collect();
    let mut chosen = Vec::new();
    for name in services {
        let engine = EngineRef::parse(name).ok();
        match instances.iter().find(|i| Some(i.engine) == engine) {
            Some(instance) => chosen.push(instance),
            None => {
                return Err(ErrorEnvelope::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "your sandbox has no service {}; it has {}",
                        sandboxd_domain::error::quote(name),
                        allowed_list(present.iter().copied())
                    ),
                    format!("call {verb} again with a service from that list"),
                ));
            }
        }
    }
    if chosen.is_empty() {
        return Err(ErrorEnvelope::new(
            ErrorCode::InvalidArgument,
            "services is empty",
            format!(
                "name services to reset (your sandbox has {}), or leave services out to reset \
                 them all",
                allowed_list(present.iter().copied())
            ),
        ));
    }
    chosen.dedup_by_key(|i| i.engine);
    Ok(chosen)
}
