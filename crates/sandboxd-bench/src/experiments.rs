//! `run_experiment` through the real daemon over MCP: a trivial script (`print(1)`) as the first
//! run after a start (cold) and after that (warm), and a script making 100 `sql()` calls beside
//! the same 100 statements sent as 100 `sandbox_sql` calls, what an agent would do without
//! experiments.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rmcp::RoleClient;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use crate::cleanup::Cleanup;
use crate::daemon::{Daemon, call_with, find_binary};
use crate::stats::{Check, Report, Series};

/// The target for a warm trivial run over MCP.
const WARM_TARGET_MS: f64 = 10.0;

async fn timed(
    agent: &RunningService<RoleClient, ()>,
    verb: &str,
    args: Value,
) -> Result<Duration> {
    let started = Instant::now();
    call_with(agent, verb, args).await?;
    Ok(started.elapsed())
}

fn guest_env() -> Vec<(String, String)> {
    let guest = std::env::var("SANDBOXD_EXPERIMENT_GUEST")
        .unwrap_or_else(|_| "/var/cache/sandboxd-guest/current/experiment.wasm".into());
    let cache = std::env::var("SANDBOXD_EXPERIMENT_CACHE")
        .unwrap_or_else(|_| "/var/cache/sandboxd-guest/compiled".into());
    vec![
        ("SANDBOXD_EXPERIMENTS__GUEST".into(), guest),
        ("SANDBOXD_EXPERIMENTS__CACHE_DIR".into(), cache),
    ]
}

/// A daemon with a developer holding a postgres sandbox.
async fn ready_agent(
    binary: &Path,
    cleanup: &Cleanup,
    name: &str,
) -> Result<(Daemon, RunningService<RoleClient, ()>)> {
    let daemon = Daemon::spawn(binary, cleanup, name, &guest_env()).await?;
    let project = format!("{name}-{}", std::process::id());
    daemon
        .admin(
            reqwest::Method::PUT,
            &format!("/v1/projects/{project}"),
            json!({"sandbox_services": ["postgres"]}),
        )
        .await?;
    let agent = daemon
        .working_agent(&project, &format!("{project}-a"))
        .await?;
    call_with(&agent, "request_sandbox", json!({})).await?;
    Ok((daemon, agent))
}

pub async fn experiments(
    binary: Option<&Path>,
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let Some(binary) = find_binary(binary) else {
        report.not_measured.push((
            "run_experiment".into(),
            "no sandboxd binary: build it first (cargo build --release -p sandboxd)".into(),
        ));
        return Ok(());
    };
    let binary: PathBuf = binary;
    let trivial = json!({"script": "print(1)"});

    // Cold: the first run after each start (the compiled guest is loaded from its cache).
    let mut cold = Vec::new();
    for i in 0..runs.clamp(1, 5) {
        let (daemon, agent) = ready_agent(&binary, cleanup, &format!("exp-cold{i}")).await?;
        let sample = timed(&agent, "run_experiment", trivial.clone()).await;
        let _ = agent.cancel().await;
        daemon.stop().await;
        cold.push(sample?);
    }

    let (daemon, agent) = ready_agent(&binary, cleanup, "exp-warm").await?;
    let outcome = warm(&agent, runs, trivial).await;
    let _ = agent.cancel().await;
    daemon.stop().await;
    let (warm, hundred, peer) = outcome?;

    let profile = if binary.components().any(|c| c.as_os_str() == "release") {
        "release"
    } else {
        "debug"
    };
    let subject = format!("print(1), process-backend postgres ({profile} daemon)");
    let warm_series = Series::from_samples("run_experiment over MCP, warm", &subject, warm)
        .with_target(WARM_TARGET_MS);
    let cold_series = Series::from_samples(
        "run_experiment over MCP, first run after start",
        &subject,
        cold,
    )
    .with_ratio("warm", &warm_series);
    report.checks.push(Check {
        target: format!("warm trivial run_experiment p50 ≤ {WARM_TARGET_MS} ms over MCP"),
        holds: warm_series.p50_ms <= WARM_TARGET_MS,
        measured: format!(
            "p50 {:.1} ms, p99 {:.1} ms over {} runs ({profile} daemon)",
            warm_series.p50_ms, warm_series.p99_ms, warm_series.runs
        ),
    });
    let peer_series = Series::from_samples(
        "100 statements as 100 sandbox_sql calls over MCP (peer)",
        "INSERT one row each",
        peer,
    );
    let hundred_series = Series::from_samples(
        "run_experiment with 100 sql() calls over MCP",
        "INSERT one row each",
        hundred,
    )
    .with_ratio("100 × sandbox_sql", &peer_series);
    report
        .series
        .extend([warm_series, cold_series, hundred_series, peer_series]);
    Ok(())
}

async fn warm(
    agent: &RunningService<RoleClient, ()>,
    runs: usize,
    trivial: Value,
) -> Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    // One untimed run: the connection pool and caches of the MCP path.
    call_with(agent, "run_experiment", trivial.clone()).await?;
    let mut warm = Vec::with_capacity(runs * 5);
    for _ in 0..runs * 5 {
        warm.push(timed(agent, "run_experiment", trivial.clone()).await?);
    }
    call_with(
        agent,
        "sandbox_sql",
        json!({"service": "postgres", "statement": "CREATE TABLE bench (id int, v text)"}),
    )
    .await?;
    let script = json!({
        "script": "for i in range(100):\n    sql(f\"INSERT INTO bench VALUES ({i}, 'x')\")\nprint('ok')"
    });
    let mut hundred = Vec::with_capacity(runs);
    let mut peer = Vec::with_capacity(runs);
    for _ in 0..runs.max(3) {
        let envelope = {
            let started = Instant::now();
            let envelope = call_with(agent, "run_experiment", script.clone()).await?;
            hundred.push(started.elapsed());
            envelope
        };
        let calls = envelope["evidence"]["sql_calls"]
            .as_array()
            .context("sql_calls")?
            .len();
        if calls != 100 {
            bail!("the experiment made {calls} sql() calls, not 100: {envelope}");
        }
        let started = Instant::now();
        for i in 0..100 {
            call_with(
                agent,
                "sandbox_sql",
                json!({"service": "postgres", "statement": format!("INSERT INTO bench VALUES ({i}, 'x')")}),
            )
            .await?;
        }
        peer.push(started.elapsed());
    }
    Ok((warm, hundred, peer))
}
