//! Warm pools through the broker, on real backends: hand-outs give distinct, working
//! credentials and the pools refill; a member that dies while idle is replaced and never handed
//! out; a pool whose members fail backs off; a crash leaves members that the next start reaps
//! before it builds its pools again; the janitor leaves a pool's members alone.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_broker::{BrokerConfig, PoolConfig, PoolTuning, PoolView};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, evidence_of, ok, passwords, pg_query};

pub(crate) fn pool(engine: &str, min_idle: usize, max_total: usize) -> PoolConfig {
    PoolConfig {
        engine: sandboxd_domain::EngineRef::parse(engine).expect("registered"),
        clone_of: None,
        features: BTreeSet::new(),
        min_idle,
        max_total,
    }
}

pub(crate) fn quick_tuning(config: &mut BrokerConfig) {
    config.pool_tuning = PoolTuning {
        backoff_base: Duration::from_millis(200),
        backoff_max: Duration::from_secs(2),
        check_interval: Duration::from_millis(300),
        parallel_starts: 2,
    };
}

pub(crate) fn view<'a>(views: &'a [PoolView], engine: &str) -> &'a PoolView {
    views
        .iter()
        .find(|v| v.engine.name == engine)
        .unwrap_or_else(|| panic!("a {engine} pool in {views:?}"))
}

/// Polls the pools until `ready` holds, or fails after `within`.
pub(crate) async fn until(
    w: &World,
    within: Duration,
    what: &str,
    ready: impl Fn(&[PoolView]) -> bool,
) {
    let started = Instant::now();
    loop {
        let views = w.broker.pools();
        if ready(&views) {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{what} within {within:?}: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn redis_ping(entry: &serde_json::Value) -> redis::RedisResult<String> {
    let client = redis::Client::open(entry["url"].as_str().expect("url"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("PING").query_async(&mut conn).await
}

async fn ten_agents_get_distinct_working_sandboxes(kind: Kind) {
    let Some(world) = World::new(WorldSpec {
        kind,
        tweak_config: |config| {
            quick_tuning(config);
            config.pools = vec![pool("postgres", 2, 4), pool("redis", 2, 4)];
        },
        ..WorldSpec::default()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            w.spawn_pools();
            until(&w, Duration::from_secs(60), "both pools filled", |v| {
                view(v, "postgres").idle == 2 && view(v, "redis").idle == 2
            })
            .await;
            // The janitor leaves idle members alone.
            let report = w.broker.janitor_pass().await;
            assert!(report.reaped.is_empty(), "{report:?}");
            assert_eq!(report.pooled, 4, "{report:?}");

            let mut agents = Vec::new();
            for _ in 0..10 {
                agents.push(w.working_agent("developer").await);
            }
            let answers = join_all(
                agents
                    .iter()
                    .map(|agent| w.call(agent, Verb::RequestSandbox, json!({}))),
            )
            .await;
            let mut seen = BTreeSet::new();
            for answer in answers {
                let answer = ok(answer);
                for (service, password) in passwords(&answer) {
                    assert!(
                        seen.insert(password),
                        "{service}: a password handed out twice"
                    );
                }
                pg_query(
                    evidence_of(&answer, "postgres"),
                    "CREATE TABLE mine (id int)",
                )
                .await
                .expect("the agent's own postgres");
                assert_eq!(
                    redis_ping(evidence_of(&answer, "redis"))
                        .await
                        .expect("ping"),
                    "PONG"
                );
            }
            let views = w.broker.pools();
            for engine in ["postgres", "redis"] {
                let pool = view(&views, engine);
                assert!(pool.handed_out >= 2, "{pool:?}");
                assert_eq!(pool.handed_out + pool.misses, 10, "{pool:?}");
            }
            // Every member handed out is an agent's now: listed under its owner.
            for agent in &agents {
                assert_eq!(w.listed(&agent.slug).await.len(), 2, "{}", agent.slug);
            }
            until(&w, Duration::from_secs(60), "the pools refilled", |v| {
                view(v, "postgres").idle >= 2 && view(v, "redis").idle >= 2
            })
            .await;
            // Released sandboxes go; pool members are never returned to a pool.
            for agent in &agents {
                ok(w.call(agent, Verb::IAmDone, json!({})).await);
                assert!(w.listed(&agent.slug).await.is_empty(), "{}", agent.slug);
            }
        })
        .await;
}

#[tokio::test]
async fn ten_agents_get_distinct_working_sandboxes_from_process_pools() {
    ten_agents_get_distinct_working_sandboxes(Kind::Process).await;
}

#[tokio::test]
async fn ten_agents_get_distinct_working_sandboxes_from_docker_pools() {
    ten_agents_get_distinct_working_sandboxes(Kind::Docker).await;
}

/// A member is out of its pool for its health check's round trip; a request in that moment
/// waits for it instead of missing it and starting cold. With checks back to back, every
/// request of a pool of one still gets the member.
#[tokio::test]
async fn a_member_under_its_health_check_is_waited_for_not_missed() {
    World::new(WorldSpec {
        services: vec!["redis"],
        tweak_config: |config| {
            quick_tuning(config);
            config.pool_tuning.check_interval = Duration::from_millis(2);
            config.pools = vec![pool("redis", 1, 1)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.spawn_pools();
        const ROUNDS: u64 = 8;
        for round in 0..ROUNDS {
            until(&w, Duration::from_secs(30), "the member is ready", |v| {
                view(v, "redis").idle == 1
            })
            .await;
            let agent = w.working_agent("developer").await;
            let answer = ok(w.call(&agent, Verb::RequestSandbox, json!({})).await);
            assert_eq!(
                redis_ping(evidence_of(&answer, "redis"))
                    .await
                    .expect("ping"),
                "PONG"
            );
            let redis = view(&w.broker.pools(), "redis").clone();
            assert_eq!(redis.misses, 0, "round {round}: {redis:?}");
            assert_eq!(redis.handed_out, round + 1, "{redis:?}");
        }
        until(&w, Duration::from_secs(30), "the pool refilled", |v| {
            view(v, "redis").idle == 1
        })
        .await;
        assert_eq!(
            w.backend.total(),
            ROUNDS as usize + 1,
            "every instance was a pool member: no cold start"
        );
    })
    .await;
}

#[tokio::test]
async fn a_member_that_dies_while_idle_is_replaced_and_never_handed_out() {
    World::new(WorldSpec {
        services: vec!["postgres"],
        tweak_config: |config| {
            quick_tuning(config);
            config.pools = vec![pool("postgres", 1, 1)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.spawn_pools();
        until(&w, Duration::from_secs(30), "the pool filled", |v| {
            view(v, "postgres").idle == 1
        })
        .await;
        let members = w.made_here().await;
        assert_eq!(members.len(), 1, "{members:?}");
        let dead = members[0].handle.clone();
        assert!(dead.owner.is_pool_slot());
        // Killed behind the pool's back.
        w.backend.inner.teardown(&dead).await.expect("kill");
        until(
            &w,
            Duration::from_secs(30),
            "the dead member replaced",
            |v| {
                let pool = view(v, "postgres");
                pool.quarantined == 1 && pool.idle == 1
            },
        )
        .await;
        let dev = w.working_agent("developer").await;
        let answer = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        pg_query(evidence_of(&answer, "postgres"), "SELECT 1")
            .await
            .expect("a working sandbox");
        let handed = w.listed(&dev.slug).await;
        assert_eq!(handed.len(), 1);
        assert_ne!(
            handed[0].handle.name, dead.name,
            "the dead member was handed out"
        );
        assert_eq!(view(&w.broker.pools(), "postgres").handed_out, 1);
    })
    .await;
}

#[tokio::test]
async fn a_pool_whose_members_fail_backs_off_and_recovers() {
    World::new(WorldSpec {
        services: vec!["redis"],
        tweak_config: |config| {
            quick_tuning(config);
            config.pools = vec![pool("redis", 2, 2)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.backend.fail_provisions_of(Some("redis"));
        w.spawn_pools();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let attempts = w.backend.provisions_of("redis");
        // 200 ms doubling to 2 s: two starts at a time, then waits of 0.2, 0.4, 0.8, 1.6 s and
        // 2 s. Without the backoff a failing start (no I/O at all here) repeats thousands of
        // times in 4 s.
        assert!((2..=14).contains(&attempts), "{attempts} attempts in 4 s");
        // Between two attempts (most of the time) the pool says it waits.
        until(
            &w,
            Duration::from_secs(3),
            "the pool says it backs off",
            |v| view(v, "redis").backing_off_for.is_some(),
        )
        .await;
        let views = w.broker.pools();
        let pool = view(&views, "redis");
        assert!(pool.failures >= 3, "{pool:?}");
        assert!(
            pool.last_error
                .as_deref()
                .is_some_and(|e| e.contains("fault the test injected")),
            "{pool:?}"
        );
        let metrics = w.broker.metrics().render();
        assert!(
            metrics.contains(
                "sandboxd_pool_backing_off{engine=\"redis\",backend=\"process\",clone_of=\"\"} 1"
            ),
            "{metrics}"
        );
        // A request meanwhile is served cold, and works.
        w.backend.fail_provisions_of(None);
        let dev = w.working_agent("developer").await;
        ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        until(&w, Duration::from_secs(10), "the pool recovered", |v| {
            let pool = view(v, "redis");
            pool.idle == 2 && pool.failures == 0 && pool.backing_off_for.is_none()
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn members_left_by_a_crash_are_reaped_at_the_next_start_and_the_pool_rebuilt() {
    World::new(WorldSpec {
        services: vec!["redis"],
        tweak_config: |config| {
            quick_tuning(config);
            config.pools = vec![pool("redis", 2, 2)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.spawn_pools();
        until(&w, Duration::from_secs(30), "the pool filled", |v| {
            view(v, "redis").idle == 2
        })
        .await;
        let before: BTreeSet<String> = w
            .made_here()
            .await
            .into_iter()
            .map(|i| i.handle.name)
            .collect();
        assert_eq!(before.len(), 2);
        w.crash_pools().await;
        assert_eq!(w.made_here().await.len(), 2, "a crash leaves the members");

        // The next start on the same store: its janitor reaps the old members at once.
        let restarted = w.restarted().await;
        let left: Vec<String> = w
            .made_here()
            .await
            .into_iter()
            .map(|i| i.handle.name)
            .collect();
        assert!(left.is_empty(), "the previous run's members: {left:?}");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = restarted.spawn_pools(shutdown.clone());
        let started = Instant::now();
        loop {
            let views = restarted.pools();
            if view(&views, "redis").idle == 2 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{views:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after: BTreeSet<String> = w
            .made_here()
            .await
            .into_iter()
            .map(|i| i.handle.name)
            .collect();
        assert_eq!(after.len(), 2);
        assert!(
            after.is_disjoint(&before),
            "rebuilt, not adopted: {after:?}"
        );
        // A clean stop removes the idle members.
        shutdown.cancel();
        task.await.expect("the pools stop");
        assert!(w.made_here().await.is_empty());
    })
    .await;
}
