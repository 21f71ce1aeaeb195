//! `reset_sandbox`'s work on both backends: an instance filled the way a test suite leaves it
//! (Postgres: 10 tables of 1000 rows each and a database of its own; Redis: 1000 keys), then
//! `Backend::reset` timed. Each run fills again first, so every reset empties a full sandbox.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::wire::{AgentStatement, QueryLimits};
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest, Sweep};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Instance, engines};

use crate::Report;
use crate::cleanup::Cleanup;
use crate::images::local_config;
use crate::stats::Series;

/// Issue 15's targets: Postgres ≤ 100 ms, Redis ≤ 10 ms (p50).
fn target_ms(engine: &str) -> Option<f64> {
    match engine {
        "postgres" => Some(100.0),
        "redis" => Some(10.0),
        _ => None,
    }
}

pub async fn reset(runs: usize, cleanup: &Cleanup, report: &mut Report) -> Result<()> {
    let engines = [engines::lookup("postgres")?, engines::lookup("redis")?];
    let process = cleanup.process_backend("reset")?;
    measure("process", &process, &engines, runs, cleanup, report).await?;
    let docker = DockerBackend::new(local_config(|_| {})).context("docker backend")?;
    if let Err(why) = docker.ping().await {
        report.not_measured.push((
            "docker: reset".into(),
            format!("no Docker engine answers: {why}"),
        ));
        return Ok(());
    }
    let outcome = measure("docker", &docker, &engines, runs, cleanup, report).await;
    if let Err(err) = docker.sweep(&DaemonId::cli(), Sweep::Now).await {
        eprintln!("sweeping the docker network: {err}");
    }
    outcome
}

async fn measure(
    label: &str,
    backend: &dyn Backend,
    engines: &[EngineRef],
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    for engine in engines {
        if let Err(why) = backend.supports(*engine).await {
            report.not_measured.push((
                format!("{label}: reset {engine}"),
                format!("not supported here: {why}"),
            ));
            continue;
        }
        let request = InstanceRequest {
            major: None,
            engine: *engine,
            owner: AgentSlug::parse(&cleanup.owner(&format!("reset-{label}")))?,
            maker: DaemonId::cli(),
            features: Default::default(),
            size: None,
        };
        let instance = backend
            .provision(&request)
            .await
            .with_context(|| format!("provision {engine} on {label}"))?;
        let outcome = series(backend, &instance, runs).await;
        backend
            .teardown(&InstanceHandle::of(&instance))
            .await
            .context("teardown")?;
        let samples = outcome?;
        let mut s = Series::from_samples(
            &format!("{label}: reset_sandbox (full sandbox)"),
            engine.name,
            samples,
        );
        if let Some(target) = target_ms(engine.name) {
            s = s.with_target(target);
        }
        report.series.push(s);
    }
    Ok(())
}

async fn series(backend: &dyn Backend, instance: &Instance, runs: usize) -> Result<Vec<Duration>> {
    // One untimed round: the first reset pays for cold caches.
    fill(backend, instance).await?;
    backend.reset(instance, None).await?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        fill(backend, instance).await?;
        let started = Instant::now();
        backend.reset(instance, None).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// What a test suite leaves behind, written as the agent's own account through the same path
/// `sandbox_sql` takes (one statement per call).
async fn fill(backend: &dyn Backend, instance: &Instance) -> Result<()> {
    let limits = QueryLimits::default();
    let statements: Vec<AgentStatement> = match instance.engine.name {
        "postgres" => (0..10)
            .flat_map(|table| {
                [
                    format!("CREATE TABLE t{table} (id int PRIMARY KEY, v text)"),
                    format!(
                        "INSERT INTO t{table} SELECT g, md5(g::text) FROM generate_series(1, 1000) g"
                    ),
                ]
            })
            .chain(["CREATE DATABASE test_suite".to_owned()])
            .map(AgentStatement::Sql)
            .collect(),
        "redis" => {
            let mut command = vec!["MSET".to_owned()];
            for key in 0..1000 {
                command.push(format!("k{key}"));
                command.push(key.to_string());
            }
            vec![AgentStatement::Command(command)]
        }
        other => return Err(anyhow!("no fill for {other}")),
    };
    for statement in &statements {
        backend.query(instance, statement, limits).await?;
    }
    Ok(())
}
