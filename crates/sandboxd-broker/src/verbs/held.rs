//! The sandbox an agent holds, as the verbs that use it (`reset_sandbox`, `sandbox_info`,
//! `sandbox_sql`, `run_experiment`) find it: the agent's own stored sandbox only, or a refusal
//! that says to request one first.

use std::collections::BTreeSet;
use std::time::Duration;

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::{Agent, EngineRef, Instance};

use crate::Broker;
use crate::envelopes::internal;

fn no_sandbox() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::OutOfOrder,
        "you hold no sandbox",
        "call request_sandbox first; it answers your sandbox's credentials",
    )
}

pub(super) fn a_member_died() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::InvalidState,
        "a service of your sandbox is not running any more; nothing was changed",
        "call request_sandbox: it replaces the whole sandbox (with new credentials)",
    )
    .retryable(true)
}

pub(super) fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The argument that names services, as `verb`'s schema has it: one or a list.
fn argument(verb: &str) -> &'static str {
    if verb == "reset_sandbox" {
        "services"
    } else {
        "service"
    }
}

/// The instances `services` names (all of them when None), or a refusal naming what the
/// sandbox has.
pub(super) fn choose<'a>(
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
                    format!("call {verb} again with {} from that list", argument(verb)),
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
}
