//! One run of the Docker scenario: a subject (one engine or the set) provisioned to ready by one
//! contender (sandboxd, the floor, testcontainers-rs, the replay), then torn down, with the
//! timeline of each of its containers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, bail};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest, provision_set, teardown_all};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

use crate::cleanup::Cleanup;
use crate::containers::{self, Timeline};
use crate::peer::Peer;

/// What a testcontainers-rs user runs: the standard image, which runs initdb at every start
/// (`scripts/build-images.sh` tags the local image with baking switched off that way; the
/// official `postgres` image has no baked cluster).
pub(super) const STANDARD_POSTGRES: &str = "sandboxd-local/postgres:17-unbaked";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Who {
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
    pub(super) fn label(self) -> &'static str {
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
pub(super) struct Samples {
    pub(super) ready: Vec<Duration>,
    pub(super) teardown: Vec<Duration>,
    /// Per engine of the subject.
    pub(super) timelines: Vec<(EngineRef, Timeline)>,
    pub(super) failures: Vec<String>,
}

pub(super) struct Scenario<'a> {
    pub(super) backend: DockerBackend,
    pub(super) images: BTreeMap<String, String>,
    pub(super) cleanup: &'a Cleanup,
    pub(super) peer: Option<Peer>,
    pub(super) counter: usize,
}

/// `postgres+redis`: how a subject (one engine or a set) is named in the report.
pub fn name_of(subject: &[EngineRef]) -> String {
    subject.iter().map(|e| e.name).collect::<Vec<_>>().join("+")
}

pub(super) struct Outcome {
    pub(super) ready: Duration,
    pub(super) teardown: Duration,
    pub(super) timeline: Vec<(EngineRef, Timeline)>,
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
    pub(super) async fn once(
        &mut self,
        who: Who,
        subject: &[EngineRef],
        timed: bool,
    ) -> Result<Outcome> {
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
