//! Docker cold provision (issue 3): sandboxd's Docker backend beside the floor (`docker run` of
//! the same image plus a readiness loop) and the testcontainers-rs peer, for postgres, redis and
//! the postgres+redis set, interleaved run by run so drift hits every subject alike. Also the
//! teardown of each, and the timeline of every single-engine provision (where the time goes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use sandboxd_backend::docker::{DockerBackend, DockerConfig};
use sandboxd_backend::{
    Backend, InstanceHandle, InstanceRequest, Sweep, provision_set, teardown_all,
};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, engines};

use crate::cleanup::Cleanup;
use crate::containers::{self, Timeline};
use crate::peer::Peer;
use crate::stats::{Check, Report, Series};

/// What a testcontainers-rs user runs: the standard image, which runs initdb at every start
/// (`scripts/build-images.sh` tags the local image with baking switched off that way; the
/// official `postgres` image has no baked cluster).
const STANDARD_POSTGRES: &str = "sandboxd-local/postgres:17-unbaked";

/// Local images: nothing can be pulled on this machine.
/// The Docker backend's settings for the local images, nothing else changed but `tweak`.
pub fn local_config(tweak: impl FnOnce(&mut DockerConfig)) -> DockerConfig {
    let mut config = DockerConfig {
        images: local_images()
            .into_iter()
            .map(|(engine, image)| (engine, vec![image]))
            .collect(),
        ..DockerConfig::default()
    };
    tweak(&mut config);
    config
}

pub fn local_images() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "postgres".to_owned(),
            "sandboxd-local/postgres:17".to_owned(),
        ),
        ("redis".to_owned(), "sandboxd-local/redis:8".to_owned()),
        ("mariadb".to_owned(), "sandboxd-local/mariadb:11".to_owned()),
    ])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Sandboxd,
    Floor,
    Testcontainers,
    /// testcontainers-rs on the standard image (Postgres runs initdb at start), what its users
    /// run; the other subjects use the baked image.
    TestcontainersStandard,
    /// Diagnostic: sandboxd's bring-up steps replayed on a plain container (single engines).
    Replay,
}

impl Who {
    fn label(self) -> &'static str {
        match self {
            Who::Sandboxd => "sandboxd",
            Who::Floor => "floor (docker run + loop)",
            Who::Testcontainers => "testcontainers-rs",
            Who::TestcontainersStandard => "testcontainers-rs, standard image",
            Who::Replay => "sandboxd's steps replayed (diagnostic)",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Who::Sandboxd => "d",
            Who::Floor => "f",
            Who::Testcontainers => "t",
            Who::TestcontainersStandard => "s",
            Who::Replay => "r",
        }
    }
}

/// What one subject measured: ready and teardown samples, timelines of single engines.
#[derive(Debug, Default)]
struct Samples {
    ready: Vec<Duration>,
    teardown: Vec<Duration>,
    /// Per engine of the subject.
    timelines: Vec<(EngineRef, Timeline)>,
    failures: Vec<String>,
}

struct Scenario<'a> {
    backend: DockerBackend,
    images: BTreeMap<String, String>,
    cleanup: &'a Cleanup,
    peer: Option<Peer>,
    counter: usize,
}

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
const SERVER_UP: &str = containers::SERVER_UP;
const READY: &str = containers::READY;

/// `postgres+redis`: how a subject (one engine or a set) is named in the report.
pub fn name_of(subject: &[EngineRef]) -> String {
    subject.iter().map(|e| e.name).collect::<Vec<_>>().join("+")
}

struct Outcome {
    ready: Duration,
    teardown: Duration,
    timeline: Vec<(EngineRef, Timeline)>,
}

/// Timelines of every container of a subject (when `timed`).
async fn timelines(
    subject: &[EngineRef],
    names: &[String],
    t0: SystemTime,
    extra: &[(String, Duration)],
    ready: Duration,
    timed: bool,
) -> Vec<(EngineRef, Timeline)> {
    let mut out = Vec::new();
    if !timed {
        return out;
    }
    for (&engine, name) in subject.iter().zip(names) {
        if let Ok(timeline) = containers::timeline(name, engine, t0, extra, ready).await {
            out.push((engine, timeline));
        }
    }
    out
}

impl Scenario<'_> {
    fn image(&self, engine: EngineRef) -> String {
        self.images
            .get(engine.name)
            .cloned()
            .unwrap_or_else(|| engine.default_image().to_owned())
    }

    /// `sandboxd-bench-<kind>-<pid>-<tag>-<engine>`, one per engine of `subject`.
    fn container_names(&self, kind: &str, tag: &str, subject: &[EngineRef]) -> Vec<String> {
        let pid = self.cleanup.pid();
        subject
            .iter()
            .map(|e| format!("sandboxd-bench-{kind}-{pid}-{tag}-{}", e.name))
            .collect()
    }

    /// One provision of `subject` by `who`, then its teardown.
    async fn once(&mut self, who: Who, subject: &[EngineRef], timed: bool) -> Result<Outcome> {
        self.counter += 1;
        let tag = format!("{}{}", who.short(), self.counter);
        let t0 = SystemTime::now();
        let single = subject.len() == 1;
        match who {
            Who::Sandboxd => {
                let owner = AgentSlug::parse(&self.cleanup.owner(&tag))?;
                let requests: Vec<InstanceRequest> = subject
                    .iter()
                    .map(|&engine| InstanceRequest {
                        major: None,
                        engine,
                        owner: owner.clone(),
                        maker: DaemonId::cli(),
                        features: Default::default(),
                        size: None,
                    })
                    .collect();
                let started = Instant::now();
                let instances = if single {
                    vec![self.backend.provision(&requests[0]).await?]
                } else {
                    provision_set(&self.backend, &requests).await?
                };
                let ready = started.elapsed();
                let names: Vec<String> = instances.iter().map(|i| i.name.clone()).collect();
                let engines: Vec<EngineRef> = instances.iter().map(|i| i.engine).collect();
                let timeline = timelines(&engines, &names, t0, &[], ready, timed).await;
                let handles: Vec<InstanceHandle> =
                    instances.iter().map(InstanceHandle::of).collect();
                let started = Instant::now();
                if single {
                    self.backend.teardown(&handles[0]).await?;
                } else {
                    teardown_all(&self.backend, handles).await;
                }
                Ok(Outcome {
                    ready,
                    teardown: started.elapsed(),
                    timeline,
                })
            }
            Who::Floor => {
                let names = self.container_names("floor", &tag, subject);
                let started = Instant::now();
                let outcomes =
                    futures::future::join_all(subject.iter().zip(&names).map(|(&engine, name)| {
                        let image = self.image(engine);
                        let pid = self.cleanup.pid();
                        async move { containers::floor_start(engine, &image, name, pid).await }
                    }))
                    .await;
                let ready = started.elapsed();
                let failed = outcomes.into_iter().find_map(Result::err);
                let timeline = timelines(subject, &names, t0, &[], ready, timed).await;
                let teardown = containers::docker_rm(&names).await;
                if let Some(err) = failed {
                    return Err(err);
                }
                Ok(Outcome {
                    ready,
                    teardown: teardown?,
                    timeline,
                })
            }
            Who::Testcontainers | Who::TestcontainersStandard => {
                let images: Vec<String> = subject
                    .iter()
                    .map(|&e| match (who, e.name) {
                        (Who::TestcontainersStandard, "postgres") => STANDARD_POSTGRES.to_owned(),
                        _ => self.image(e),
                    })
                    .collect();
                let names = self.container_names("tc", &tag, subject);
                let Some(peer) = self.peer.as_mut() else {
                    bail!("no testcontainers worker");
                };
                let started = peer.start(subject, &images, &names).await;
                let timeline = match &started {
                    Ok(ready) => timelines(subject, &names, t0, &[], *ready, timed).await,
                    Err(_) => Vec::new(),
                };
                let teardown = peer.rm().await;
                let ready = started?;
                Ok(Outcome {
                    ready,
                    teardown: teardown?,
                    timeline,
                })
            }
            Who::Replay => {
                let engine = subject[0];
                let names = self.container_names("floor", &tag, &[engine]);
                let image = self.image(engine);
                let started =
                    containers::replay_start(engine, &image, &names[0], self.cleanup.pid()).await;
                let timeline = match &started {
                    Ok((ready, marks)) => {
                        timelines(subject, &names, t0, marks, *ready, timed).await
                    }
                    Err(_) => Vec::new(),
                };
                let teardown = containers::docker_rm(&names).await;
                let (ready, _) = started?;
                Ok(Outcome {
                    ready,
                    teardown: teardown?,
                    timeline,
                })
            }
        }
    }
}

fn summarize(
    samples: &BTreeMap<(Who, String), Samples>,
    subjects: &[Vec<EngineRef>],
    report: &mut Report,
) {
    const SCENARIO: &str = "docker: cold provision to ready";
    let get = |who: Who, subject: &str| samples.get(&(who, subject.to_owned()));
    let mut ready_p50: BTreeMap<(Who, String), Series> = BTreeMap::new();
    for subject in subjects {
        let name = name_of(subject);
        let floor = get(Who::Floor, &name)
            .filter(|s| !s.ready.is_empty())
            .map(|s| Series::from_samples(SCENARIO, "", s.ready.clone()));
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
        ] {
            let Some(s) = get(who, &name) else { continue };
            if !s.failures.is_empty() {
                report.notes.push(format!(
                    "{} {name}: {} of {} runs failed; first error: {}",
                    who.label(),
                    s.failures.len(),
                    s.failures.len() + s.ready.len(),
                    s.failures[0]
                ));
            }
            if s.ready.is_empty() {
                continue;
            }
            let mut series = Series::from_samples(
                SCENARIO,
                &format!("{} {name}", who.label()),
                s.ready.clone(),
            );
            if let (Some(floor), true) = (&floor, who != Who::Floor) {
                series = series.with_ratio("floor", floor);
                if who == Who::Sandboxd {
                    series = series.with_target(floor.p50_ms * 1.10);
                }
            }
            ready_p50.insert((who, name.clone()), series.clone());
            report.series.push(series);
        }
    }
    for subject in subjects {
        let name = name_of(subject);
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
        ] {
            let Some(s) = get(who, &name).filter(|s| !s.teardown.is_empty()) else {
                continue;
            };
            let how = match who {
                Who::Sandboxd => "sandboxd (stop → kill → remove)",
                Who::Floor => "floor (docker rm -f)",
                Who::Testcontainers => "testcontainers-rs (rm)",
                Who::TestcontainersStandard => "testcontainers-rs, standard image (rm)",
                Who::Replay => continue,
            };
            report.series.push(Series::from_samples(
                "docker: teardown",
                &format!("{how} {name}"),
                s.teardown.clone(),
            ));
        }
    }

    // Targets (issue 3): overhead over the floor ≤ 10%; the set within max(pg, redis) + 10%.
    for subject in subjects {
        let name = name_of(subject);
        if let (Some(ours), Some(floor)) = (
            ready_p50.get(&(Who::Sandboxd, name.clone())),
            ready_p50.get(&(Who::Floor, name.clone())),
        ) {
            let ratio = ours.p50_ms / floor.p50_ms;
            report.checks.push(Check {
                target: format!("Docker {name}: sandboxd p50 ≤ floor p50 + 10%"),
                holds: ratio <= 1.10,
                measured: format!(
                    "{:.0} ms vs floor {:.0} ms: {ratio:.2}× ({:+.0}%, {:+.0} ms)",
                    ours.p50_ms,
                    floor.p50_ms,
                    (ratio - 1.0) * 100.0,
                    ours.p50_ms - floor.p50_ms
                ),
            });
        }
    }
    // Issue 15: from the baked image, at most half of what testcontainers-rs users wait for on
    // the standard one (Postgres subjects: only its image is baked).
    for subject in subjects
        .iter()
        .filter(|s| s.iter().any(|e| e.name == "postgres"))
    {
        let name = name_of(subject);
        if let (Some(ours), Some(standard)) = (
            ready_p50.get(&(Who::Sandboxd, name.clone())),
            ready_p50.get(&(Who::TestcontainersStandard, name.clone())),
        ) {
            let ratio = ours.p50_ms / standard.p50_ms;
            report.checks.push(Check {
                target: format!(
                    "Docker {name}: sandboxd p50 ≤ 0.5 × testcontainers-rs on the standard image"
                ),
                holds: ratio <= 0.5,
                measured: format!(
                    "{:.0} ms vs {:.0} ms: {ratio:.2}×",
                    ours.p50_ms, standard.p50_ms
                ),
            });
        }
    }
    if let [single_a, single_b, set] = subjects {
        let p50 = |subject: &Vec<EngineRef>| {
            ready_p50
                .get(&(Who::Sandboxd, name_of(subject)))
                .map(|s| s.p50_ms)
        };
        if let (Some(a), Some(b), Some(set_p50)) = (p50(single_a), p50(single_b), p50(set)) {
            let slowest = a.max(b);
            let ratio = set_p50 / slowest;
            report.checks.push(Check {
                target: format!(
                    "Docker {}: set p50 ≤ max({}, {}) p50 + 10%",
                    name_of(set),
                    name_of(single_a),
                    name_of(single_b)
                ),
                holds: ratio <= 1.10,
                measured: format!(
                    "{set_p50:.0} ms vs max({a:.0}, {b:.0}) = {slowest:.0} ms: {ratio:.2}×"
                ),
            });
        }
    }

    // Where the time goes: per engine, offsets of each phase from the call.
    for subject in subjects {
        let name = name_of(subject);
        let in_set = subject.len() > 1;
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
            Who::Replay,
        ] {
            let Some(s) = get(who, &name) else { continue };
            if who == Who::Replay && !s.failures.is_empty() {
                report.notes.push(format!(
                    "{} {name}: {} runs failed; first error: {}",
                    who.label(),
                    s.failures.len(),
                    s.failures[0]
                ));
            }
            for &engine in subject {
                let timelines: Vec<&Timeline> = s
                    .timelines
                    .iter()
                    .filter(|(e, _)| *e == engine)
                    .map(|(_, t)| t)
                    .collect();
                let Some(first) = timelines.first() else {
                    continue;
                };
                let scenario = if in_set {
                    format!("{} {engine} (in the {name} set)", who.label())
                } else {
                    format!("{} {engine}", who.label())
                };
                let at = |t: &Timeline, phase: &str| {
                    t.marks.iter().find(|(p, _)| p == phase).map(|m| m.1)
                };
                for (phase, _) in &first.marks {
                    let values: Vec<Duration> =
                        timelines.iter().filter_map(|t| at(t, phase)).collect();
                    report
                        .phases
                        .push(Series::from_samples(&scenario, phase, values));
                }
                // Per run, not a difference of percentiles: the time after the server is up.
                let after_up: Vec<Duration> = timelines
                    .iter()
                    .filter_map(|t| {
                        let up = at(t, SERVER_UP)?;
                        Some(at(t, READY)?.saturating_sub(up))
                    })
                    .collect();
                if !after_up.is_empty() && !in_set {
                    report.phases.push(Series::from_samples(
                        &scenario,
                        "Δ server logged ready → ready (per run)",
                        after_up,
                    ));
                }
            }
        }
    }
}
