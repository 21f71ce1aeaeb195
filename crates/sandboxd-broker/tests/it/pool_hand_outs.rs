//! A warm hand-out answers with an account made and proven while the member idled: the proof
//! is re-checked at hand-out, so a member whose account changed after it is discarded and the
//! next one handed out; and many agents taking from one pool at once never share a member.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use sandboxd_domain::Instance;
use sandboxd_domain::roles::Verb;
use sandboxd_testkit::forbid_login;
use serde_json::json;

use crate::pools::{pool, quick_tuning, redis_ping, until, view};
use crate::support::{World, WorldSpec, evidence_of, ok, passwords, pg_query};

#[tokio::test]
async fn a_member_whose_account_breaks_while_idle_is_discarded_not_handed_out() {
    World::new(WorldSpec {
        services: vec!["postgres"],
        tweak_config: |config| {
            quick_tuning(config);
            // No health check before the hand-out: the hand-out's own re-check must see it.
            config.pool_tuning.check_interval = Duration::from_secs(600);
            config.pools = vec![pool("postgres", 3, 3)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.spawn_pools();
        until(&w, Duration::from_secs(60), "the pool filled", |v| {
            view(v, "postgres").idle == 3
        })
        .await;
        let members = w.backend.idle_made();
        assert_eq!(members.len(), 3, "{members:?}");
        let (sound, broken) = members.split_first().expect("three");
        for member in broken {
            forbid_login(member).await;
        }
        let dev = w.working_agent("developer").await;
        let answer = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        pg_query(evidence_of(&answer, "postgres"), "SELECT 1")
            .await
            .expect("the handed-out account logs in");
        assert_eq!(w.listed(&dev.slug).await.len(), 1);
        // The process backend keeps a member's port when it is handed out.
        let url = evidence_of(&answer, "postgres")["url"]
            .as_str()
            .expect("url");
        let port = |member: &Instance| format!(":{}/", member.port);
        assert!(
            url.contains(&port(sound)),
            "the sound member ({}) is the one handed out, not {:?}",
            port(sound),
            broken.iter().map(port).collect::<Vec<_>>()
        );
        let pool = view(&w.broker.pools(), "postgres").clone();
        assert_eq!(pool.handed_out, 1, "{pool:?}");
        assert_eq!(pool.misses, 0, "{pool:?}");
        // The broken members in front of the sound one were tried and discarded.
        assert!(pool.quarantined <= 2, "{pool:?}");
    })
    .await;
}

#[tokio::test]
async fn fifty_concurrent_requests_on_a_pool_of_ten_hand_each_member_out_once() {
    World::new(WorldSpec {
        services: vec!["redis"],
        tweak_config: |config| {
            quick_tuning(config);
            config.pool_tuning.check_interval = Duration::from_secs(600);
            config.pools = vec![pool("redis", 10, 10)];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        w.spawn_pools();
        until(&w, Duration::from_secs(90), "the pool filled", |v| {
            view(v, "redis").idle == 10
        })
        .await;
        let mut agents = Vec::new();
        for _ in 0..50 {
            agents.push(w.working_agent("developer").await);
        }
        let answers = join_all(
            agents
                .iter()
                .map(|agent| w.call(agent, Verb::RequestSandbox, json!({}))),
        )
        .await;
        let mut seen_passwords = BTreeSet::new();
        for answer in answers {
            let answer = ok(answer);
            for (service, password) in passwords(&answer) {
                assert!(
                    seen_passwords.insert(password),
                    "{service}: a password handed out twice"
                );
            }
            assert_eq!(
                redis_ping(evidence_of(&answer, "redis"))
                    .await
                    .expect("ping"),
                "PONG"
            );
        }
        // Each instance has exactly one owner, and each agent exactly one instance.
        let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for agent in &agents {
            let listed = w.listed(&agent.slug).await;
            assert_eq!(listed.len(), 1, "{}: {listed:?}", agent.slug);
            owners
                .entry(listed[0].handle.name.clone())
                .or_default()
                .push(agent.slug.to_string());
        }
        assert_eq!(owners.len(), 50, "an instance shared: {owners:?}");
        let redis = view(&w.broker.pools(), "redis").clone();
        assert_eq!(redis.handed_out + redis.misses, 50, "{redis:?}");
        assert!(redis.handed_out >= 10, "{redis:?}");
        assert_eq!(redis.quarantined, 0, "{redis:?}");
        for agent in &agents {
            ok(w.call(agent, Verb::IAmDone, json!({})).await);
        }
    })
    .await;
}
