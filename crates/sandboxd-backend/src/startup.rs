//! The part of provisioning every backend shares once a server was started: wait until the
//! superuser gets in, create the handed-out account, wait until that account answers, activate
//! features. All of it within the engine's readiness deadline.

use std::future::Future;
use std::time::Duration;

use sandboxd_domain::engine::{AdminAccess, AdminStep, ServerFacts};
use sandboxd_domain::{Credentials, EngineRef};
use tokio::time::Instant;

use crate::error::BackendError;
use crate::readiness::{Attempt, poll_until_ready};
use crate::wire::{self, Reach};

/// When a provision makes the handed-out account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Account {
    /// Now: the instance is an agent's as soon as it is ready.
    Now,
    /// When a warm-pool member is handed out (`Backend::hand_out`); until then only the
    /// superuser gets in.
    AtHandOut,
}

#[derive(Debug)]
pub(crate) struct Startup<'a> {
    pub engine: EngineRef,
    pub name: &'a str,
    pub reach: Reach<'a>,
    pub admin: &'a AdminAccess,
    pub agent: &'a Credentials,
    pub database: &'a str,
    /// Steps run without credentials before the superuser exists (MongoDB processes).
    pub bootstrap: Vec<AdminStep>,
    /// When the handed-out account is made: now, or when a pool member is handed out.
    pub account: Account,
    pub deadline: Duration,
}

/// Brings a started server to ready. `still_running` is asked after every failed attempt, so a
/// server that died is reported at once instead of at the deadline.
pub(crate) async fn bring_up<F, Fut>(
    startup: Startup<'_>,
    still_running: F,
) -> Result<ServerFacts, BackendError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), BackendError>>,
{
    let deadline = startup.deadline;
    // Each phase polls within what is left; a timeout names the whole deadline.
    phases(startup, still_running)
        .await
        .map_err(|err| match err {
            BackendError::ReadinessTimeout {
                name, last_error, ..
            } => BackendError::ReadinessTimeout {
                name,
                deadline,
                last_error,
            },
            other => other,
        })
}

async fn phases<F, Fut>(startup: Startup<'_>, still_running: F) -> Result<ServerFacts, BackendError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), BackendError>>,
{
    let started = Instant::now();
    let remaining = || startup.deadline.saturating_sub(started.elapsed());
    let engine = startup.engine.get();
    let wire_error = |operation: &'static str, err: wire::WireError| BackendError::Wire {
        operation,
        name: startup.name.to_owned(),
        detail: err.to_string(),
    };

    for step in &startup.bootstrap {
        poll_until_ready(startup.name, remaining(), || async {
            match wire::run_step(engine, None, startup.reach, step).await {
                Ok(()) => Ok(()),
                Err(err) => Err(not_yet(&still_running, err).await),
            }
        })
        .await?;
    }

    let facts = poll_until_ready(startup.name, remaining(), || async {
        match wire::server_facts(engine, startup.admin, startup.reach).await {
            Ok(facts) => Ok(facts),
            Err(err) => Err(not_yet(&still_running, err).await),
        }
    })
    .await?;

    if startup.account == Account::AtHandOut {
        for step in engine.pool_prepare() {
            wire::run_step(engine, Some(startup.admin), startup.reach, &step)
                .await
                .map_err(|err| wire_error("preparing a pool member", err))?;
        }
        return Ok(facts);
    }
    for step in engine.setup(startup.agent, facts) {
        wire::run_step(engine, Some(startup.admin), startup.reach, &step)
            .await
            .map_err(|err| wire_error("creating the handed-out account", err))?;
    }

    poll_until_ready(startup.name, remaining(), || async {
        match wire::probe(engine, startup.reach, startup.agent, startup.database).await {
            Ok(()) => Ok(()),
            Err(err) => Err(not_yet(&still_running, err).await),
        }
    })
    .await?;
    Ok(facts)
}

async fn not_yet<F, Fut>(still_running: &F, err: wire::WireError) -> Attempt
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), BackendError>>,
{
    match still_running().await {
        Ok(()) => Attempt::NotYet(err.to_string()),
        Err(dead) => Attempt::Fatal(dead),
    }
}
