//! Production-faithful clones (issue 12) on Docker: the snapshot of a 50-table source (a
//! PostgreSQL 18 instance filled through its own account: 50 tables of 1000 rows, each with a
//! secondary index, analyzed), a clone's cold hand-out beside a plain cold provision of the
//! same image, alternated run by run so both see the same machine, and the hand-out of a clone
//! from a warm pool of clones (a member made by `provision_idle_clone` beforehand, untimed; the
//! hand-out mints the agent's account, hands it the schema and proves the account). Then, per
//! clone data set of the testkit (the shop, the wide one), plan agreement, the snapshot's time
//! and the cold hand-out (`agreement.rs`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sandboxd_backend::clone::{Fidelity, provision_clone, provision_idle_clone, take_snapshot};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::wire::{AgentStatement, QueryLimits};
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest, Sweep};
use sandboxd_domain::clone::{Privacy, Snapshot};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Instance, engines};
use secrecy::{ExposeSecret, SecretString};

use crate::Report;
use crate::agreement;
use crate::cleanup::Cleanup;
use crate::images::local_config;
use crate::stats::Series;

const TABLES: usize = 50;
const MAJOR: u32 = 18;

fn request(engine: EngineRef, cleanup: &Cleanup, tag: &str) -> Result<InstanceRequest> {
    Ok(InstanceRequest {
        major: Some(MAJOR),
        engine,
        owner: AgentSlug::parse(&cleanup.owner(tag))?,
        maker: DaemonId::cli(),
        features: Default::default(),
        size: None,
    })
}

pub async fn clones(runs: usize, cleanup: &Cleanup, report: &mut Report) -> Result<()> {
    let docker = DockerBackend::new(local_config(|_| {})).context("docker backend")?;
    if let Err(why) = docker.ping().await {
        report.not_measured.push((
            "docker: clones".into(),
            format!("no Docker engine answers: {why}"),
        ));
        return Ok(());
    }
    let postgres = engines::lookup("postgres")?;
    let source = docker
        .provision(&request(postgres, cleanup, "clone-source")?)
        .await
        .context("provision the PostgreSQL 18 source")?;
    // Pool members are owned by a pool slot, not by a `bench-<pid>-` owner: they live under
    // the label namespace the sweep removes whole, so an interrupted run leaves none.
    let namespace = cleanup.label_namespace();
    let pooled = DockerBackend::new(local_config(|c| c.label_namespace = namespace))
        .context("docker backend for pool members")?;
    let outcome = measure(&docker, &pooled, postgres, &source, runs, cleanup, report).await;
    if let Err(err) = docker.teardown(&InstanceHandle::of(&source)).await {
        eprintln!("removing the clone source: {err}");
    }
    let outcome = match outcome {
        Ok(()) => {
            let request = |tag: &str| request(postgres, cleanup, tag);
            agreement::plan_agreement(&docker, postgres, request, runs, cleanup, report).await
        }
        failed => failed,
    };
    for (backend, maker) in [(&docker, DaemonId::cli()), (&pooled, pool_maker(cleanup)?)] {
        if let Err(err) = backend.sweep(&maker, Sweep::Now).await {
            eprintln!("sweeping the docker network: {err}");
        }
    }
    outcome
}

async fn measure(
    docker: &DockerBackend,
    pooled: &DockerBackend,
    postgres: EngineRef,
    source: &Instance,
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    fill(docker, source).await?;
    let dsn = SecretString::from(format!(
        "host={} port={} user={} password={} dbname={}",
        source.host,
        source.port,
        source.agent.user,
        source.agent.password.expose_secret(),
        source.database
    ));
    let (snapshot, snapshots) = timed_snapshots(docker, postgres, "bench", &dsn, runs).await?;
    let (mut cloned, mut plain, mut warm) = (
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
    );
    for round in 0..=runs {
        let clone = timed_clone(docker, postgres, &snapshot, cleanup, round).await?;
        let fresh = timed_plain(docker, postgres, cleanup, round).await?;
        let handed = timed_pooled_clone(pooled, postgres, &snapshot, cleanup, round).await?;
        if round > 0 {
            cloned.push(clone);
            plain.push(fresh);
            warm.push(handed);
        }
    }
    let subject = format!("postgres {MAJOR}, {TABLES} tables");
    report.series.push(Series::from_samples(
        "docker: snapshot of a source",
        &subject,
        snapshots,
    ));
    let plain = Series::from_samples("docker: plain cold provision", &subject, plain);
    let cloned = Series::from_samples("docker: clone hand-out (cold)", &subject, cloned)
        .with_ratio("plain cold provision", &plain);
    let warm = Series::from_samples(
        "docker: clone hand-out from a warm pool of clones",
        &subject,
        warm,
    )
    .with_ratio("cold clone hand-out", &cloned);
    report.series.push(cloned);
    report.series.push(warm);
    report.series.push(plain);
    Ok(())
}

/// `runs` keep-values snapshots of the source at `dsn`, timed, after one untimed round that
/// pays for cold caches (the pg_dump image's layers); the last snapshot and the times.
pub async fn timed_snapshots(
    docker: &DockerBackend,
    postgres: EngineRef,
    source: &str,
    dsn: &SecretString,
    runs: usize,
) -> Result<(Snapshot, Vec<Duration>)> {
    let mut snapshot: Option<Snapshot> = None;
    let mut times = Vec::with_capacity(runs);
    for round in 0..=runs {
        let started = Instant::now();
        let taken = take_snapshot(docker, postgres, source, dsn, Privacy::KeepValues)
            .await
            .context("snapshot")?;
        if round > 0 {
            times.push(started.elapsed());
        }
        snapshot = Some(taken);
    }
    Ok((snapshot.context("no snapshot")?, times))
}

/// The maker of the pool members: this run's own.
fn pool_maker(cleanup: &Cleanup) -> Result<DaemonId> {
    Ok(DaemonId::parse(&format!("bench{}", cleanup.pid()))?)
}

/// A pool member that is already a clone (made untimed, as a pool makes it ahead of any
/// request), then its hand-out timed: what an agent waits for when the pool has one.
async fn timed_pooled_clone(
    docker: &DockerBackend,
    postgres: EngineRef,
    snapshot: &Snapshot,
    cleanup: &Cleanup,
    round: usize,
) -> Result<Duration> {
    let slot = AgentSlug::pool_slot();
    let mut request = request(postgres, cleanup, &format!("pooled-{round}"))?;
    request.owner = slot;
    // A maker of its own: its network is not the CLI maker's one of the other backend.
    request.maker = pool_maker(cleanup)?;
    let (member, _) = provision_idle_clone(docker, &request, snapshot)
        .await
        .context("a pool member that is a clone")?;
    let owner = AgentSlug::parse(&cleanup.owner(&format!("pooled-{round}")))?;
    let started = Instant::now();
    let instance = docker.hand_out(member, &owner).await.context("hand-out")?;
    let took = started.elapsed();
    docker.teardown(&InstanceHandle::of(&instance)).await?;
    Ok(took)
}

async fn timed_clone(
    docker: &DockerBackend,
    postgres: EngineRef,
    snapshot: &Snapshot,
    cleanup: &Cleanup,
    round: usize,
) -> Result<Duration> {
    let request = request(postgres, cleanup, &format!("clone-{round}"))?;
    let started = Instant::now();
    let (instance, _) = provision_clone(docker, &request, snapshot, Fidelity::FULL)
        .await
        .context("clone")?;
    let took = started.elapsed();
    docker.teardown(&InstanceHandle::of(&instance)).await?;
    Ok(took)
}

async fn timed_plain(
    docker: &DockerBackend,
    postgres: EngineRef,
    cleanup: &Cleanup,
    round: usize,
) -> Result<Duration> {
    let request = request(postgres, cleanup, &format!("plain-{round}"))?;
    let started = Instant::now();
    let instance = docker.provision(&request).await.context("provision")?;
    let took = started.elapsed();
    docker.teardown(&InstanceHandle::of(&instance)).await?;
    Ok(took)
}

/// The source's schema and data, written as its own account (one statement per call).
async fn fill(docker: &DockerBackend, source: &Instance) -> Result<()> {
    let limits = QueryLimits::default();
    let statements = (0..TABLES)
        .flat_map(|t| {
            [
                format!(
                    "CREATE TABLE t{t} (id int PRIMARY KEY, k int NOT NULL, v text, at timestamptz)"
                ),
                format!(
                    "INSERT INTO t{t} SELECT g, g % 97, md5(g::text), now() - g * interval '1 min' \
                     FROM generate_series(1, 1000) g"
                ),
                format!("CREATE INDEX t{t}_k ON t{t} (k, at)"),
            ]
        })
        .chain(["ANALYZE".to_owned()])
        .map(AgentStatement::Sql);
    for statement in statements {
        docker
            .query(source, &statement, limits)
            .await
            .context("filling the source")?;
    }
    Ok(())
}
