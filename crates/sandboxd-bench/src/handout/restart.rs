//! Item 5 of the hand-out scenario: the first hand-out after an in-place restart.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::driver::{Driver, agent_token, counters};
use super::{WARM_POOLS, fail_on};
use crate::cleanup::Cleanup;
use crate::daemon::Daemon;
use crate::pools::{project, until_idle};

/// The run `/v1/settings` answers for: a restart is done when it changes.
async fn running_since(daemon: &Daemon) -> Result<i64> {
    let settings = daemon
        .admin(reqwest::Method::GET, "/v1/settings", Value::Null)
        .await?;
    settings["running_since_ms"]
        .as_i64()
        .context("running_since_ms")
}

pub(super) struct Restarted {
    pub(super) protocol: String,
    pub(super) restart: Duration,
    pub(super) first: Duration,
    pub(super) warm: bool,
    pub(super) detail: String,
}

/// Item 5: an agent opened (stateless 2026-07-28, so no session to lose) with full pools; the
/// daemon restarted in place; its first request_sandbox once the new run answers.
pub(super) async fn restart(
    daemon: &Daemon,
    driver: &mut Driver,
    tag: &str,
    cleanup: &Cleanup,
) -> Result<Restarted> {
    let name = cleanup.owner(tag);
    project(daemon, &name, &["postgres", "redis"]).await?;
    let id = format!("{name}-0");
    let token = agent_token(daemon, &name, &id).await?;
    let protocol = driver.open(&id, &token, "2026-07-28").await?;
    until_idle(daemon, WARM_POOLS.0 as u64, Duration::from_secs(300)).await?;
    let before = running_since(daemon).await?;
    let started = Instant::now();
    daemon
        .admin(reqwest::Method::POST, "/v1/restart", Value::Null)
        .await?;
    loop {
        if matches!(running_since(daemon).await, Ok(since) if since != before) {
            break;
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!("the daemon did not answer as a new run within 180 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart = started.elapsed();
    let idle: Vec<String> = crate::pools::pools(daemon)
        .await?
        .iter()
        .map(|p| format!("{} {}", p["pool"].as_str().unwrap_or("?"), p["idle"]))
        .collect();
    let timed = driver.request(std::slice::from_ref(&id)).await?;
    let moved = counters(daemon).await?;
    driver.done(&[id]).await?;
    fail_on(&timed, "request_sandbox after the restart")?;
    let first = *timed.samples.first().context("a timed request")?;
    let warm = !moved.is_empty()
        && moved
            .values()
            .all(|(out, misses)| *out >= 1 && *misses == 0);
    Ok(Restarted {
        protocol,
        restart,
        first,
        warm,
        detail: format!(
            "{} (idle when the new run answered: {})",
            if warm {
                "a pool hit"
            } else {
                "not from a pool"
            },
            idle.join(", ")
        ),
    })
}
