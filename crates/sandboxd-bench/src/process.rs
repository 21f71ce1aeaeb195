//! Process backend scenarios: provision-to-ready per engine, cache-free, one owner per run.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sandboxd_backend::process::ProcessBackend;
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

use crate::cleanup::Cleanup;
use crate::stats::Series;

/// Target p50 per engine on this machine (issue: postgres ≤ 400 ms, redis ≤ 50 ms, mariadb ≤ 1 s).
fn target_ms(engine: &str) -> Option<f64> {
    match engine {
        "postgres" => Some(400.0),
        "redis" => Some(50.0),
        "mariadb" => Some(1000.0),
        _ => None,
    }
}

pub async fn provision_to_ready(
    runs: usize,
    engines: &[EngineRef],
    cleanup: &Cleanup,
) -> Result<Vec<Series>> {
    let backend = cleanup.process_backend("process")?;
    let mut series = Vec::new();
    for engine in engines {
        if let Err(why) = backend.supports(*engine).await {
            eprintln!("skipping {engine} on the process backend: {why}");
            continue;
        }
        // One untimed run builds the template, as any first use on a machine does.
        let warmup = run_once(&backend, *engine, cleanup, "warmup").await?;
        teardown(&backend, warmup.1).await?;
        let mut provision = Vec::with_capacity(runs);
        let mut teardowns = Vec::with_capacity(runs);
        for run in 0..runs {
            let (elapsed, handle) =
                run_once(&backend, *engine, cleanup, &format!("p{run}")).await?;
            provision.push(elapsed);
            teardowns.push(teardown(&backend, handle).await?);
        }
        let mut s = Series::from_samples("process: provision to ready", engine.name, provision);
        if let Some(t) = target_ms(engine.name) {
            s = s.with_target(t);
        }
        series.push(s);
        series.push(Series::from_samples(
            "process: teardown",
            engine.name,
            teardowns,
        ));
    }
    Ok(series)
}

async fn run_once(
    backend: &ProcessBackend,
    engine: EngineRef,
    cleanup: &Cleanup,
    tag: &str,
) -> Result<(Duration, InstanceHandle)> {
    let owner = AgentSlug::parse(&cleanup.owner(tag))?;
    let request = InstanceRequest {
        major: None,
        engine,
        owner,
        maker: DaemonId::cli(),
        features: Default::default(),
        size: None,
    };
    let started = Instant::now();
    let instance = backend
        .provision(&request)
        .await
        .with_context(|| format!("provision {engine}"))?;
    let elapsed = started.elapsed();
    Ok((elapsed, InstanceHandle::of(&instance)))
}

async fn teardown(backend: &ProcessBackend, handle: InstanceHandle) -> Result<Duration> {
    let started = Instant::now();
    backend.teardown(&handle).await.context("teardown")?;
    Ok(started.elapsed())
}
