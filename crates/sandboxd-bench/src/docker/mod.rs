//! Docker cold provision (issue 3): sandboxd's Docker backend beside the floor (`docker run` of
//! the same image plus a readiness loop) and the testcontainers-rs peer, for postgres, redis and
//! the postgres+redis set, interleaved run by run so drift hits every subject alike. Also the
//! teardown of each, and the timeline of every single-engine provision (where the time goes).
//!
//! `runs.rs` is one provision and teardown of a subject by each contender; `summary.rs` turns
//! the samples into the report's series, checks and phases.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::{Backend, Sweep};
use sandboxd_domain::{DaemonId, EngineRef, engines};

use crate::cleanup::Cleanup;
use crate::containers;
use crate::images::{local_config, local_images};
use crate::peer::Peer;
use crate::stats::Report;
use runs::{STANDARD_POSTGRES, Samples, Scenario, Who};
use summary::summarize;

mod runs;
mod summary;

pub use runs::name_of;

pub async fn cold_provision(
    runs: usize,
    with_peer: bool,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let images = local_images();
    let config = local_config(|c| c.grace = Duration::ZERO);
    let backend = DockerBackend::new(config).context("docker backend")?;
    if let Err(why) = backend.ping().await {
        report.not_measured.push((
            "Docker cold provision, teardown, testcontainers-rs".into(),
            format!("no Docker engine answers: {why}"),
        ));
        return Ok(());
    }
    let postgres = engines::lookup("postgres")?;
    let redis = engines::lookup("redis")?;
    for engine in [postgres, redis] {
        if let Err(why) = backend.supports(engine).await {
            report.not_measured.push((
                "Docker cold provision".into(),
                format!("image for {engine} missing: {why}"),
            ));
            return Ok(());
        }
    }
    if let Ok(version) = backend.engine_version().await {
        report.machine.push(("container engine".into(), version));
    }
    let peer = if with_peer {
        match Peer::spawn(&cleanup.path("tc")?, cleanup.pid()).await {
            Ok(peer) => {
                if let Some((client, server)) = &peer.shim {
                    report.notes.push(format!(
                        "testcontainers-rs {} asks for Engine API {client} without negotiating; \
                         Docker here speaks {server} and refuses newer clients, so the \
                         testcontainers runs go through a unix-socket shim that rewrites the \
                         version in each request path (a byte copy otherwise). Without it \
                         testcontainers cannot start a container on this engine at all.",
                        TESTCONTAINERS_VERSION
                    ));
                }
                Some(peer)
            }
            Err(err) => {
                report.not_measured.push((
                    "testcontainers-rs peer".into(),
                    format!("the worker did not start: {err:#}"),
                ));
                None
            }
        }
    } else {
        None
    };
    let mut scenario = Scenario {
        backend,
        images,
        cleanup,
        peer,
        counter: 0,
    };
    let subjects: [Vec<EngineRef>; 3] = [vec![postgres], vec![redis], vec![postgres, redis]];
    let mut whos = vec![Who::Sandboxd, Who::Floor];
    if scenario.peer.is_some() {
        whos.push(Who::Testcontainers);
        if containers::image_present(STANDARD_POSTGRES).await {
            whos.push(Who::TestcontainersStandard);
        }
    }
    whos.push(Who::Replay);

    // One untimed round first: the first container of an image pays for cold caches.
    for subject in &subjects {
        for &who in whos
            .iter()
            .filter(|&&w| w != Who::Replay || subject.len() == 1)
        {
            if let Err(err) = scenario.once(who, subject, false).await {
                eprintln!("warm-up {} {}: {err:#}", who.label(), name_of(subject));
            }
        }
    }

    let mut samples: BTreeMap<(Who, String), Samples> = BTreeMap::new();
    for run in 0..runs {
        eprintln!("docker: run {}/{runs}", run + 1);
        for subject in &subjects {
            // Rotate who goes first, so no one always runs on a machine the previous run warmed.
            let mut order: Vec<Who> = whos
                .iter()
                .copied()
                .filter(|&w| w != Who::Replay || subject.len() == 1)
                .collect();
            let len = order.len();
            order.rotate_left(run % len);
            for who in order {
                let entry = samples.entry((who, name_of(subject))).or_default();
                match scenario.once(who, subject, true).await {
                    Ok(outcome) => {
                        entry.ready.push(outcome.ready);
                        entry.teardown.push(outcome.teardown);
                        entry.timelines.extend(outcome.timeline);
                    }
                    Err(err) => {
                        let why = format!("{err:#}");
                        eprintln!("{} {}: {why}", who.label(), name_of(subject));
                        entry.failures.push(why);
                    }
                }
            }
        }
    }
    drop(scenario.peer.take());
    // The network the runs' containers joined goes with the last of them, as after a stop.
    if let Err(err) = scenario.backend.sweep(&DaemonId::cli(), Sweep::Now).await {
        eprintln!("sweeping the docker network: {err}");
    }
    summarize(&samples, &subjects, report);
    Ok(())
}

const TESTCONTAINERS_VERSION: &str = "0.28.0";
