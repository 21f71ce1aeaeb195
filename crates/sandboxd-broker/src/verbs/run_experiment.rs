//! `run_experiment`: the agent's Python script under its limits in the WebAssembly runtime,
//! `sql()` against the chosen Postgres service of its own sandbox as its own account
//! (`crate::experiments`). Counted toward the agent's caps; admitted within the runtime's
//! capacity.

use std::time::Instant;

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::RunExperimentArgs;
use sandboxd_domain::{Agent, Instance, Protocol};
use sandboxd_experiments::{Capacity, Ending, Full, Unavailable};

use super::Answer;
use super::answer::ExperimentEvidence;
use crate::Broker;
use crate::envelopes::internal;
use crate::experiments::AgentSql;

/// A script longer than this is refused before anything runs.
const SCRIPT_MAX: usize = 64 * 1024;

/// How much printed output an error message repeats.
const OUTPUT_IN_ERROR: usize = 4 * 1024;

/// The runtime had no room: `limit_exceeded` naming the cap's setting (retryable).
fn full(err: &Full, capacity: Capacity) -> ErrorEnvelope {
    let cap = match err {
        Full::Runs { .. } => format!("experiments.max_concurrent = {}", capacity.max_runs),
        Full::Memory { .. } | Full::MemoryNeverFits { .. } => format!(
            "experiments.memory_budget_mb = {}",
            capacity.memory_budget_bytes / (1024 * 1024)
        ),
    };
    let (remediate, retryable) = match err {
        Full::MemoryNeverFits { .. } => (
            "call run_experiment again with a smaller limits.memory_bytes",
            false,
        ),
        _ => (
            "call run_experiment again in a few seconds, or with a smaller limits.memory_bytes",
            true,
        ),
    };
    ErrorEnvelope::new(
        ErrorCode::LimitExceeded,
        format!("{err} ({cap})"),
        remediate,
    )
    .retryable(retryable)
}

fn unavailable(err: &Unavailable) -> ErrorEnvelope {
    let remediate = match err {
        Unavailable::GuestMissing { .. } | Unavailable::CompileFailed { .. } => {
            "tell the operator: the experiment runtime needs its guest (scripts/build-guest.sh); \
             retry after"
        }
        Unavailable::Connection { .. } => {
            "call sandbox_info to see whether your sandbox is running, request_sandbox for a \
             new one if not, then run the experiment again"
        }
        _ => "call run_experiment again with the same script in a few seconds",
    };
    ErrorEnvelope::new(ErrorCode::RuntimeUnavailable, err.to_string(), remediate).retryable(true)
}

/// What the script printed before it stopped, for an error message (its tail when long).
fn printed_before(output: &str) -> String {
    if output.is_empty() {
        return String::new();
    }
    let chars = output.chars().count();
    let tail: String = output
        .chars()
        .skip(chars.saturating_sub(OUTPUT_IN_ERROR))
        .collect();
    let cut = if chars > OUTPUT_IN_ERROR {
        format!(" (its last {OUTPUT_IN_ERROR} characters)")
    } else {
        String::new()
    };
    format!("\n\nIt printed before that{cut}:\n{tail}")
}

impl Broker {
    /// `run_experiment`: the script under its limits, `sql()` against the chosen service.
    pub(crate) async fn run_experiment(&self, agent: &Agent, args: RunExperimentArgs) -> Answer {
        if args.script.trim().is_empty() || args.script.len() > SCRIPT_MAX {
            return Err(ErrorEnvelope::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the script is {} bytes; it must be 1 to {SCRIPT_MAX}",
                    args.script.len()
                ),
                "send a short Python script that prints what you want back",
            ));
        }
        let _heavy = self.heavy_call(&agent.slug, Verb::RunExperiment)?;
        let _experiment = self.inner.caps.experiments.take(&agent.slug)?;
        let Some(runtime) = self.inner.experiments.as_ref() else {
            return Err(ErrorEnvelope::new(
                ErrorCode::RuntimeUnavailable,
                "experiments are turned off on this sandboxd (experiments.enabled)",
                "tell the operator if you need run_experiment; use sandbox_sql meanwhile",
            )
            .retryable(false));
        };
        let limits = runtime
            .policy()
            .resolve(&args.limits.unwrap_or_default())
            .map_err(|err| {
                ErrorEnvelope::new(
                    ErrorCode::InvalidArgument,
                    err.to_string(),
                    format!(
                        "call run_experiment again with limits.{} in that range, or without it",
                        err.limit
                    ),
                )
            })?;
        let instances = self.held_sandbox(agent).await?;
        let instance = sql_service(&instances, args.service.as_deref())?.clone();
        let backend = self
            .inner
            .backends
            .for_kind(instance.backend)
            .cloned()
            .ok_or_else(|| {
                internal(
                    "finding your sandbox's backend",
                    &format!("no {} backend", instance.backend),
                )
            })?;
        let port = AgentSql::new(backend, instance.clone());
        let started = Instant::now();
        let outcome = runtime.run(&args.script, limits, Box::new(port)).await;
        let took = started.elapsed();
        let run = match outcome {
            Ok(run) => run,
            Err(Unavailable::Full(err)) => {
                self.inner.metrics.experiment("refused", took, &[]);
                return Err(full(&err, runtime.capacity()));
            }
            Err(err) => {
                tracing::warn!(agent = %agent.slug, error = %err, "an experiment could not run");
                self.inner.metrics.experiment("unavailable", took, &[]);
                return Err(unavailable(&err));
            }
        };
        let mut met: Vec<&'static str> = run.report.limits_met.iter().map(|l| l.name()).collect();
        if let Ending::LimitHit { limit, .. } = &run.ending {
            met.push(limit.name());
        }
        let outcome = match &run.ending {
            Ending::Completed => "completed",
            Ending::ScriptError { .. } => "script_error",
            Ending::LimitHit { .. } => "limit",
        };
        self.inner.metrics.experiment(outcome, took, &met);
        let calls = run.report.sql_calls.len() as u64 + run.report.sql_calls_dropped;
        if calls > 0
            && let Err(err) = self.store().touch_instances_of(&agent.slug).await
        {
            tracing::warn!(agent = %agent.slug, error = %err, "recording the sandbox's use failed");
        }
        let report = run.report;
        match run.ending {
            Ending::ScriptError { traceback } => Err(ErrorEnvelope::new(
                ErrorCode::ScriptError,
                format!(
                    "your script raised an error:\n{}{}",
                    traceback.trim_end(),
                    printed_before(&report.output)
                ),
                "fix the script and call run_experiment again",
            )),
            Ending::LimitHit { limit, detail } => {
                let bounds = runtime.policy().bounds(limit);
                Err(ErrorEnvelope::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "limit {limit} reached: {}{}",
                        detail.trim_end(),
                        printed_before(&report.output)
                    ),
                    format!(
                        "make the script do less, or call run_experiment again with \
                         limits.{limit} higher (allowed up to {})",
                        bounds.max
                    ),
                ))
            }
            Ending::Completed => {
                let held = self.held_task_id(&agent.slug).await;
                let cut = if report.limits_met.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = report.limits_met.iter().map(|l| l.name()).collect();
                    format!(" Cut at a limit: {} (see evidence).", names.join(", "))
                };
                let briefing = format!(
                    "The script ran in {} ms with {calls} sql() call(s) against {}; its output is \
                     in evidence.output.{cut}",
                    report.elapsed_ms, instance.engine.name
                );
                let elapsed_ms = report.elapsed_ms;
                let evidence = ExperimentEvidence {
                    service: instance.engine.name,
                    report,
                };
                Ok((
                    OkEnvelope::new(
                        held,
                        "read evidence.output; run another experiment, or your tests",
                        briefing,
                    )
                    .with_evidence(evidence),
                    format!(
                        "experiment on {}: {calls} sql() call(s), {} ms",
                        instance.engine.name, elapsed_ms
                    ),
                ))
            }
        }
    }
}

/// The service `sql()` talks to: the one named, else the sandbox's first Postgres.
fn sql_service<'a>(
    instances: &'a [Instance],
    named: Option<&str>,
) -> Result<&'a Instance, ErrorEnvelope> {
    let speaks_sql = |i: &&Instance| i.engine.protocol == Protocol::Postgres;
    let allowed: Vec<&str> = instances
        .iter()
        .filter(speaks_sql)
        .map(|i| i.engine.name)
        .collect();
    let found = match named {
        Some(name) => instances
            .iter()
            .filter(speaks_sql)
            .find(|i| i.engine.name == name),
        None => instances.iter().find(speaks_sql),
    };
    found.ok_or_else(|| {
        let message = match named {
            Some(name) => format!(
                "sql() cannot talk to {}; it talks to a Postgres service of your sandbox: {}",
                sandboxd_domain::error::quote(name),
                allowed_list(allowed.iter().copied())
            ),
            None => "your sandbox has no Postgres service for sql() to talk to".to_owned(),
        };
        ErrorEnvelope::new(
            ErrorCode::InvalidArgument,
            message,
            if allowed.is_empty() {
                "run experiments in a project that opted into postgres".to_owned()
            } else {
                "call run_experiment again with a service from that list, or without service"
                    .to_owned()
            },
        )
    })
}
