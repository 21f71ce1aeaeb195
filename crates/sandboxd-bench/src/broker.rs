//! Scenarios through one in-process broker on the process backend, with a real SQLite store:
//! `request_sandbox` cold and as a cache hit (answered from a live sandbox, re-verified), its
//! release, and N agents requesting postgres+redis at once.

use sandboxd_domain::call::Call;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::future::join_all;
use sandboxd_broker::Evidence;
use sandboxd_broker::{Backends, Broker, BrokerConfig};
use sandboxd_domain::Agent;
use sandboxd_domain::envelope::Envelope;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{AgentSlug, EngineRef, ProjectSlug};
use sandboxd_store::{SecretCipher, Store};
use serde_json::json;

use crate::cleanup::Cleanup;
use crate::docker::name_of;
use crate::stats::{Report, Series};

struct World {
    broker: Broker,
    project: ProjectSlug,
    /// `postgres+redis`: the set every agent asks for, as the report names it.
    set: String,
    cleanup_tag: String,
    counter: usize,
}

impl World {
    /// A broker with one project asking for `services`, warmed up: the first provision of each
    /// engine builds or checks the process template, so one request and release run untimed.
    async fn new(cleanup: &Cleanup, name: &str, services: &[EngineRef]) -> Result<Self> {
        let backend = Arc::new(cleanup.process_backend(name)?);
        let dir = cleanup.path(&format!("{name}-store"))?;
        let cipher = SecretCipher::load_or_create(&dir.join("secret.key")).context("key")?;
        let store = Store::open(
            &format!("sqlite://{}", dir.join("sandboxd.db").display()),
            cipher,
        )
        .await
        .context("store")?;
        let config = BrokerConfig {
            enabled_override: Some(true),
            grace: Duration::from_secs(600),
            ..BrokerConfig::default()
        };
        let broker = Broker::start(config, store, Backends::new(backend, vec![]))
            .await
            .context("broker")?;
        let project = ProjectSlug::parse(&cleanup.owner(name))?;
        broker
            .set_project(&project, Some(services.to_vec()), None)
            .await
            .context("project")?;
        let mut world = Self {
            broker,
            project,
            set: name_of(services),
            cleanup_tag: cleanup.owner(name),
            counter: 0,
        };
        let warm = world.working_agent().await?;
        world.timed(&warm, Verb::RequestSandbox).await?;
        world.timed(&warm, Verb::ReleaseSandbox).await?;
        Ok(world)
    }

    /// A developer holding a fresh task, ready to ask for a sandbox.
    async fn working_agent(&mut self) -> Result<Agent> {
        self.counter += 1;
        let slug = AgentSlug::parse(&format!("{}-a{}", self.cleanup_tag, self.counter))?;
        self.broker
            .spawn_agent(&slug, "developer", &self.project)
            .await?;
        let agent = self
            .broker
            .agent(&slug)
            .await?
            .context("the agent just spawned")?;
        self.broker
            .add_task(&self.project, &format!("task {}", self.counter), "bench")
            .await?;
        ok(self
            .broker
            .call(&agent, Call::parse(Verb::GiveMeWork, json!({})))
            .await)?;
        Ok(agent)
    }

    async fn timed(&self, agent: &Agent, verb: Verb) -> Result<Duration> {
        let started = Instant::now();
        let envelope = self.broker.call(agent, Call::parse(verb, json!({}))).await;
        let elapsed = started.elapsed();
        ok(envelope)?;
        Ok(elapsed)
    }
}

fn ok(envelope: Envelope<Evidence>) -> Result<()> {
    match envelope {
        Envelope::Ok(_) => Ok(()),
        Envelope::Error(err) => bail!("{:?}: {}", err.error, err.message),
    }
}

/// `request_sandbox` cold, then `hits` cache hits, then `release_sandbox`, for `agents` agents.
pub async fn cache_hit(
    agents: usize,
    hits: usize,
    services: &[EngineRef],
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let mut world = World::new(cleanup, "cache", services).await?;
    let (mut cold, mut hit, mut release) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..agents {
        let agent = world.working_agent().await?;
        cold.push(world.timed(&agent, Verb::RequestSandbox).await?);
        for _ in 0..hits {
            hit.push(world.timed(&agent, Verb::RequestSandbox).await?);
        }
        release.push(world.timed(&agent, Verb::ReleaseSandbox).await?);
    }
    let subject = format!("{} (process backend)", world.set);
    report.series.push(Series::from_samples(
        "broker: request_sandbox, cold",
        &subject,
        cold,
    ));
    report.series.push(Series::from_samples(
        "broker: request_sandbox, cache hit",
        &subject,
        hit,
    ));
    report.series.push(Series::from_samples(
        "broker: release_sandbox (teardown)",
        &subject,
        release,
    ));
    Ok(())
}

/// `n` agents each ask for the set at once, `rounds` times: the wall time until all are
/// answered, and each agent's own latency.
pub async fn concurrent_agents(
    n: usize,
    rounds: usize,
    services: &[EngineRef],
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let mut world = World::new(cleanup, "agents", services).await?;
    let (mut walls, mut each) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        eprintln!("broker: {n} agents, round {}/{rounds}", round + 1);
        let mut agents = Vec::with_capacity(n);
        for _ in 0..n {
            agents.push(world.working_agent().await?);
        }
        let started = Instant::now();
        let outcomes = join_all(
            agents
                .iter()
                .map(|agent| world.timed(agent, Verb::RequestSandbox)),
        )
        .await;
        walls.push(started.elapsed());
        let mut failed = None;
        for outcome in outcomes {
            match outcome {
                Ok(latency) => each.push(latency),
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
        }
        join_all(
            agents
                .iter()
                .map(|agent| world.timed(agent, Verb::ReleaseSandbox)),
        )
        .await;
        if let Some(err) = failed {
            return Err(err.context(format!("{n} concurrent agents")));
        }
    }
    let subject = format!("{n} agents × {} (process backend)", world.set);
    report.series.push(Series::from_samples(
        "broker: N agents at once, all answered (wall)",
        &subject,
        walls,
    ));
    report.series.push(Series::from_samples(
        "broker: N agents at once, each agent's latency",
        &subject,
        each,
    ));
    Ok(())
}
