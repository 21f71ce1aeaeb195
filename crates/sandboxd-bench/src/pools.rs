//! Warm pools through the real daemon (`sandboxd serve`, driven over its admin API and MCP):
//! - `request_sandbox` of postgres+redis answered from warm pools, beside the same request
//!   provisioned cold by a daemon without pools, on each backend (one daemon per subject, run
//!   one after the other on the same machine and images);
//! - what an idle postgres+redis pool pair costs in memory on the process backend (PSS of every
//!   process of each member, its held superuser connection included);
//! - the daemon's RSS with 100 live sandboxes (redis on the process backend: its uid pool has
//!   128 accounts, one per instance).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::cleanup::Cleanup;
use crate::daemon::{Daemon, call, find_binary, rss_kib};
use crate::images::local_images;
use crate::stats::{Check, Measure, Report, Series};

/// Targets of SPEC §7 / the instant-sandboxes issue.
const WARM_P50_MS: f64 = 15.0;
const WARM_P99_MS: f64 = 50.0;
const PAIRS_PER_GIB: f64 = 40.0;
const DAEMON_RSS_MIB: f64 = 40.0;
const LIVE_SANDBOXES: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Process,
    Docker,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Docker => "docker",
        }
    }
}

/// The daemon's settings for `backend`, with pools of `min_idle` members for postgres and
/// redis (and a ceiling of twice that) when `min_idle` is set.
fn settings(backend: Backend, cleanup: &Cleanup, min_idle: Option<usize>) -> Vec<(String, String)> {
    sized_settings(backend, cleanup, min_idle.map(|m| (m, m * 2)))
}

/// The daemon's settings for `backend`, with postgres and redis pools of `(min_idle,
/// max_total)` when set.
pub(crate) fn sized_settings(
    backend: Backend,
    cleanup: &Cleanup,
    sizes: Option<(usize, usize)>,
) -> Vec<(String, String)> {
    let mut env = vec![("SANDBOXD_BACKEND".to_owned(), backend.name().to_owned())];
    if backend == Backend::Docker {
        for (engine, image) in local_images() {
            env.push((
                format!("SANDBOXD_ENGINES__{}__IMAGE", engine.to_uppercase()),
                image,
            ));
        }
        // Its own label namespace: the sweep finds whatever a crashed daemon left.
        env.push((
            "SANDBOXD_DOCKER__LABEL_NAMESPACE".to_owned(),
            cleanup.label_namespace(),
        ));
    }
    if let Some((min_idle, max_total)) = sizes {
        for engine in ["POSTGRES", "REDIS"] {
            env.push((
                format!("SANDBOXD_POOLS__{engine}__MIN_IDLE"),
                min_idle.to_string(),
            ));
            env.push((
                format!("SANDBOXD_POOLS__{engine}__MAX_TOTAL"),
                max_total.to_string(),
            ));
        }
    }
    env
}

pub(crate) async fn pools(daemon: &Daemon) -> Result<Vec<Value>> {
    let answer = daemon
        .admin(reqwest::Method::GET, "/v1/pools", Value::Null)
        .await?;
    answer.as_array().cloned().context("a list of pools")
}

/// Waits until every pool holds at least `idle` ready members and starts none: a warm
/// hand-out is measured on a settled machine, not beside a member's start.
pub(crate) async fn until_idle(daemon: &Daemon, idle: u64, within: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        let pools = pools(daemon).await?;
        let settled = |p: &Value| p["idle"].as_u64() >= Some(idle) && p["starting"] == 0;
        if !pools.is_empty() && pools.iter().all(settled) {
            return Ok(());
        }
        if let Some(stuck) = pools.iter().find(|p| p["backing_off_ms"].is_u64()) {
            bail!("a pool backs off: {stuck}");
        }
        if started.elapsed() > within {
            bail!("pools not filled to {idle} within {within:?}: {pools:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn project(daemon: &Daemon, name: &str, services: &[&str]) -> Result<()> {
    daemon
        .admin(
            reqwest::Method::PUT,
            &format!("/v1/projects/{name}"),
            json!({"sandbox_services": services}),
        )
        .await
        .map(drop)
}

/// `runs` agents one after the other, each timed from `request_sandbox` to its answer and
/// released after; with pools, each request waits until the pools are full again (2 idle
/// members each, none starting), so every one is a warm hand-out.
async fn requests(
    daemon: &Daemon,
    runs: usize,
    warm: bool,
    tag: &str,
    cleanup: &Cleanup,
) -> Result<Vec<Duration>> {
    let project_name = cleanup.owner(tag);
    project(daemon, &project_name, &["postgres", "redis"]).await?;
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let agent = daemon
            .working_agent(&project_name, &format!("{project_name}-{i}"))
            .await?;
        if warm {
            until_idle(daemon, 2, Duration::from_secs(120)).await?;
        }
        let started = Instant::now();
        call(&agent, "request_sandbox").await?;
        samples.push(started.elapsed());
        call(&agent, "i_am_done").await?;
        let _ = agent.cancel().await;
    }
    Ok(samples)
}

/// Stops a daemon after removing what it made: its agents' sandboxes were released, its pools
/// drain at a clean stop; on Docker `sandboxd teardown --maker` then removes anything left and
/// the daemon's network.
pub(crate) async fn stop(daemon: Daemon, binary: &Path, env: &[(String, String)]) -> Result<()> {
    let settings = daemon
        .admin(reqwest::Method::GET, "/v1/settings", Value::Null)
        .await?;
    let maker = settings["daemon_id"]
        .as_str()
        .context("daemon id")?
        .to_owned();
    daemon.stop().await;
    let out = tokio::process::Command::new(binary)
        .args(["teardown", "--maker", &maker])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "sandboxd teardown --maker {maker}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

pub async fn pools_scenario(
    binary: Option<&Path>,
    runs: usize,
    docker_runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let Some(binary) = find_binary(binary) else {
        report.not_measured.push((
            "warm-pool hand-out".into(),
            "no sandboxd binary: build it first (cargo build --release -p sandboxd)".into(),
        ));
        return Ok(());
    };
    let profile = if binary.components().any(|c| c.as_os_str() == "release") {
        "release"
    } else {
        "debug"
    };
    let docker = tokio::process::Command::new("docker")
        .args(["info"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    let mut backends = vec![(Backend::Process, runs)];
    if docker {
        backends.push((Backend::Docker, docker_runs));
    } else {
        report.not_measured.push((
            "warm-pool hand-out on docker".into(),
            "no Docker engine answers".into(),
        ));
    }
    for (backend, runs) in backends {
        let subject = format!("postgres+redis ({}, {profile} daemon)", backend.name());
        let cold_env = settings(backend, cleanup, None);
        // Short names: a process instance's socket path must stay within 107 bytes.
        let initial = &backend.name()[..1];
        let daemon = Daemon::spawn(&binary, cleanup, &format!("c{initial}"), &cold_env).await?;
        let cold = requests(&daemon, runs, false, &format!("c{initial}"), cleanup).await;
        stop(daemon, &binary, &cold_env).await?;
        let cold =
            Series::from_samples("request_sandbox over MCP, cold (no pool)", &subject, cold?);

        let warm_env = settings(backend, cleanup, Some(2));
        let daemon = Daemon::spawn(&binary, cleanup, &format!("w{initial}"), &warm_env).await?;
        let warm = requests(&daemon, runs, true, &format!("w{initial}"), cleanup).await;
        stop(daemon, &binary, &warm_env).await?;
        let warm =
            Series::from_samples("request_sandbox over MCP, from warm pools", &subject, warm?)
                .with_target(WARM_P50_MS)
                .with_ratio("cold", &cold);
        report.checks.push(Check {
            target: format!(
                "warm request_sandbox postgres+redis over MCP ({}): p50 ≤ {WARM_P50_MS} ms, p99 ≤ {WARM_P99_MS} ms",
                backend.name()
            ),
            holds: warm.p50_ms <= WARM_P50_MS && warm.p99_ms <= WARM_P99_MS,
            measured: format!(
                "p50 {:.1} ms, p99 {:.1} ms over {} runs (cold: p50 {:.1} ms)",
                warm.p50_ms, warm.p99_ms, warm.runs, cold.p50_ms
            ),
        });
        report.series.push(cold);
        report.series.push(warm);
    }
    idle_pair_memory(&binary, cleanup, report).await?;
    daemon_with_live_sandboxes(&binary, profile, cleanup, report).await
}

/// PSS (KiB) of every process in the process group `pgid` (a process instance runs in its
/// own group: the server and everything it forked).
fn group_pss_kib(pgid: i32) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // Fields after the command's closing parenthesis: state, ppid, pgrp.
                    let rest = stat.rsplit_once(')')?.1;
                    rest.split_whitespace().nth(2)?.parse::<i32>().ok()
                })
                == Some(pgid)
        })
        .filter_map(|pid| {
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            rollup
                .lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .sum()
}

/// Idle pool members on the process backend, their memory summed per postgres+redis pair.
async fn idle_pair_memory(binary: &Path, cleanup: &Cleanup, report: &mut Report) -> Result<()> {
    const PAIRS: usize = 8;
    let env = settings(Backend::Process, cleanup, Some(PAIRS));
    let daemon = Daemon::spawn(binary, cleanup, "pss", &env).await?;
    let measured = async {
        until_idle(&daemon, PAIRS as u64, Duration::from_secs(120)).await?;
        // Let the members settle (checkpointer, autovacuum launcher) before reading.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let root = cleanup.path("pss")?.join("i");
        let mut total_kib = 0.0;
        let mut members = 0;
        for dir in std::fs::read_dir(&root)?.filter_map(Result::ok) {
            let meta: Value = serde_json::from_str(
                &std::fs::read_to_string(
                    sandboxd_backend::process::metadata_path(&dir.path()).unwrap_or_default(),
                )
                .unwrap_or_default(),
            )
            .unwrap_or_default();
            if !meta["owner"]
                .as_str()
                .is_some_and(|o| o.starts_with("pool-"))
            {
                continue;
            }
            let pid = meta["pid"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .context("a member's pid")?;
            total_kib += group_pss_kib(pid);
            members += 1;
        }
        if members != PAIRS * 2 {
            bail!("found {members} idle members, expected {}", PAIRS * 2);
        }
        Ok(total_kib / PAIRS as f64 / 1024.0)
    }
    .await;
    stop(daemon, binary, &env).await?;
    let per_pair_mib = measured?;
    let pairs_per_gib = 1024.0 / per_pair_mib;
    report.measures.push(Measure {
        subject: "idle pool pair postgres+redis, PSS (process backend)".into(),
        value: per_pair_mib,
        unit: "MiB".into(),
        note: format!("{PAIRS} pairs idle, each with its held superuser connection; {pairs_per_gib:.0} pairs per GiB"),
    });
    report.checks.push(Check {
        target: format!(
            "≥ {PAIRS_PER_GIB} idle postgres+redis pool pairs per GiB (process backend, PSS)"
        ),
        holds: pairs_per_gib >= PAIRS_PER_GIB,
        measured: format!("{per_pair_mib:.1} MiB per pair: {pairs_per_gib:.0} pairs per GiB"),
    });
    Ok(())
}

/// The daemon's RSS with `LIVE_SANDBOXES` agents each holding a sandbox and an MCP session.
async fn daemon_with_live_sandboxes(
    binary: &Path,
    profile: &str,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let env = settings(Backend::Process, cleanup, None);
    let daemon = Daemon::spawn(binary, cleanup, "live100", &env).await?;
    let measured = async {
        let pid = daemon.pid()?;
        let name = cleanup.owner("live");
        project(&daemon, &name, &["redis"]).await?;
        let mut agents = Vec::with_capacity(LIVE_SANDBOXES);
        for i in 0..LIVE_SANDBOXES {
            let agent = daemon.working_agent(&name, &format!("{name}-{i}")).await?;
            call(&agent, "request_sandbox").await?;
            agents.push(agent);
        }
        let rss = rss_kib(pid, "VmRSS:")? / 1024.0;
        for agent in &agents {
            call(agent, "i_am_done").await?;
        }
        for agent in agents {
            let _ = agent.cancel().await;
        }
        Ok::<f64, anyhow::Error>(rss)
    }
    .await;
    stop(daemon, binary, &env).await?;
    let rss = measured?;
    report.measures.push(Measure {
        subject: format!("daemon RSS with {LIVE_SANDBOXES} live sandboxes"),
        value: rss,
        unit: "MiB".into(),
        note: format!(
            "`sandboxd serve` ({profile} build), {LIVE_SANDBOXES} agents each holding a redis sandbox \
             and an open MCP session (process backend)"
        ),
    });
    report.checks.push(Check {
        target: format!("daemon RSS ≤ {DAEMON_RSS_MIB} MB with {LIVE_SANDBOXES} live sandboxes"),
        holds: rss <= DAEMON_RSS_MIB,
        measured: format!("{rss:.1} MiB"),
    });
    Ok(())
}
