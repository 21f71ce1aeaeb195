//! Whole-set sandboxes: one provision per service under concurrency, cache hits for subsets and
//! supersets, eviction of a dead sandbox, all-or-nothing failures, features, release hooks.

use std::collections::BTreeSet;
use std::time::Duration;

use sandboxd_backend::Backend;

use futures::future::join_all;
use sandboxd_broker::ReapReason;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, evidence_of, ok, passwords, pg_query, refused};

async fn twenty_concurrent_requests_provision_once(kind: Kind) {
    let Some(world) = World::new(WorldSpec {
        kind,
        ..WorldSpec::default()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let calls = (0..20).map(|i| {
                let services = match i % 3 {
                    0 => json!({}),
                    1 => json!({"services": ["postgres"]}),
                    _ => json!({"services": ["redis", "postgres"]}),
                };
                w.call(&dev, Verb::RequestSandbox, services)
            });
            let answers: Vec<_> = join_all(calls).await.into_iter().map(ok).collect();
            assert_eq!(
                w.backend.provisions_of("postgres"),
                1,
                "one postgres provision"
            );
            assert_eq!(w.backend.provisions_of("redis"), 1, "one redis provision");
            let postgres: BTreeSet<String> = answers
                .iter()
                .map(|a| passwords(a)["postgres"].clone())
                .collect();
            assert_eq!(postgres.len(), 1, "identical credentials in all 20 answers");
            // Filtered to what each call asked.
            let only_pg = answers
                .iter()
                .find(|a| passwords(a).len() == 1)
                .expect("a postgres-only answer");
            assert!(passwords(only_pg).contains_key("postgres"));
            pg_query(
                evidence_of(&answers[0], "postgres"),
                "CREATE TABLE t(x int)",
            )
            .await
            .expect("the handed-out credentials work");
        })
        .await;
}

#[tokio::test]
async fn twenty_concurrent_requests_provision_once_on_processes() {
    twenty_concurrent_requests_provision_once(Kind::Process).await;
}

#[tokio::test]
async fn twenty_concurrent_requests_provision_once_on_docker() {
    twenty_concurrent_requests_provision_once(Kind::Docker).await;
}

#[tokio::test]
async fn a_subset_then_a_superset_are_cache_hits() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let first = ok(w
                .call(&dev, Verb::RequestSandbox, json!({"services": ["redis"]}))
                .await);
            assert_eq!(passwords(&first).keys().collect::<Vec<_>>(), ["redis"]);
            assert_eq!(
                w.backend.total(),
                2,
                "the whole opted-in set on the first call"
            );
            let second = ok(w
                .call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"services": ["postgres", "redis"]}),
                )
                .await);
            assert_eq!(w.backend.total(), 2, "no backend create for the superset");
            assert_eq!(passwords(&first)["redis"], passwords(&second)["redis"]);
            let text = w.broker.metrics().render();
            assert!(
                text.contains("sandboxd_sandbox_cache_requests_total{result=\"hit\"} 1"),
                "{text}"
            );
            assert!(
                text.contains("sandboxd_sandbox_cache_requests_total{result=\"miss\"} 1"),
                "{text}"
            );
        })
        .await;
}

async fn a_dead_member_evicts_the_whole_sandbox(kind: Kind) {
    let Some(world) = World::new(WorldSpec {
        kind,
        ..WorldSpec::default()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let before = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            let listed = w.listed(&dev.slug).await;
            assert_eq!(listed.len(), 2);
            let redis = listed
                .iter()
                .find(|i| i.handle.engine.name == "redis")
                .expect("redis listed");
            kill_out_of_band(kind, redis);
            let mut dead = false;
            // A kubelet notices a dead container on its next relist (about a second).
            for _ in 0..300 {
                if !w.backend.is_live(&redis.handle).await.unwrap_or(true) {
                    dead = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(dead, "the killed instance is seen dead");

            let after = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            let (old, new) = (passwords(&before), passwords(&after));
            assert_ne!(
                old["postgres"], new["postgres"],
                "new credentials for the whole set"
            );
            assert_ne!(old["redis"], new["redis"]);
            assert_eq!(w.backend.total(), 4, "a fresh full-set provision");
            // The old postgres is gone: its credentials no longer open anything.
            assert!(
                pg_query(evidence_of(&before, "postgres"), "SELECT 1")
                    .await
                    .is_err(),
                "the old instance was torn down"
            );
            pg_query(evidence_of(&after, "postgres"), "SELECT 1")
                .await
                .expect("the new one answers");
            assert_eq!(w.listed(&dev.slug).await.len(), 2);
        })
        .await;
}

fn kill_out_of_band(kind: Kind, instance: &sandboxd_backend::ListedInstance) {
    match kind {
        Kind::Process => {
            let meta = std::fs::read_to_string(
                sandboxd_backend::process::metadata_path(std::path::Path::new(
                    &instance.handle.backend_id,
                ))
                .expect("a metadata path"),
            )
            .expect("metadata");
            let meta: serde_json::Value = serde_json::from_str(&meta).expect("json");
            let pid = i32::try_from(meta["pid"].as_i64().expect("pid")).expect("pid fits");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill");
        }
        Kind::Docker => {
            let status = std::process::Command::new("docker")
                .args(["kill", &instance.handle.name])
                .output()
                .expect("docker kill");
            assert!(status.status.success(), "{status:?}");
        }
        Kind::Kubernetes => {
            // The Pod's server container, on the node's Docker Engine.
            let found = std::process::Command::new("docker")
                .args([
                    "ps",
                    "-q",
                    "--filter",
                    &format!("label=io.kubernetes.pod.name={}", instance.handle.name),
                    "--filter",
                    "label=io.kubernetes.container.name=server",
                ])
                .output()
                .expect("docker ps");
            let id = String::from_utf8_lossy(&found.stdout).trim().to_owned();
            assert!(
                !id.is_empty(),
                "the server container of {}",
                instance.handle.name
            );
            let status = std::process::Command::new("docker")
                .args(["kill", &id])
                .output()
                .expect("docker kill");
            assert!(status.status.success(), "{status:?}");
        }
    }
}

#[tokio::test]
async fn a_dead_member_evicts_the_whole_sandbox_on_processes() {
    a_dead_member_evicts_the_whole_sandbox(Kind::Process).await;
}

#[tokio::test]
async fn a_dead_member_evicts_the_whole_sandbox_on_docker() {
    a_dead_member_evicts_the_whole_sandbox(Kind::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_evicts_the_whole_sandbox_on_kubernetes() {
    a_dead_member_evicts_the_whole_sandbox(Kind::Kubernetes).await;
}

#[tokio::test]
async fn a_partial_failure_leaves_nothing_and_is_retryable() {
    World::new(WorldSpec {
        services: vec!["postgres", "redis", "mariadb"],
        tweak_process: |config| {
            config
                .deadlines
                .insert("mariadb".into(), Duration::from_millis(1));
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        let dev = w.working_agent("developer").await;
        let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        assert_eq!(err.error, ErrorCode::InvalidState);
        assert!(err.retryable);
        assert!(err.message.contains("mariadb"), "{err:?}");
        assert!(w.listed(&dev.slug).await.is_empty(), "nothing left behind");
        let sandboxes = w.broker.sandboxes().await.expect("sandboxes");
        assert!(sandboxes.iter().all(|s| s.owner != dev.slug));
    })
    .await;
}

#[tokio::test]
async fn standing_and_per_call_features_are_activated_in_place() {
    World::new(WorldSpec {
        services: vec!["postgres"],
        extensions: vec!["postgres=citext"],
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        let dev = w.working_agent("developer").await;
        let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        assert_eq!(
            evidence_of(&first, "postgres")["available_extensions"],
            json!(["citext"])
        );
        let second = ok(w
            .call(
                &dev,
                Verb::RequestSandbox,
                json!({"extensions": {"postgres": ["pg_trgm"]}}),
            )
            .await);
        assert_eq!(w.backend.total(), 1, "activated in place, no teardown");
        assert_eq!(passwords(&first), passwords(&second));
        assert_eq!(
            evidence_of(&second, "postgres")["available_extensions"],
            json!(["citext", "pg_trgm"])
        );
        pg_query(
            evidence_of(&second, "postgres"),
            "SELECT similarity('a'::citext::text, 'a')",
        )
        .await
        .expect("both extensions usable by the agent");
    })
    .await;
}

#[tokio::test]
async fn lifecycle_exits_release_the_sandbox_and_never_fail() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(w.listed(&dev.slug).await.len(), 2);
            let done = ok(w
                .call(&dev, Verb::IAmDone, json!({"summary": "tests pass"}))
                .await);
            assert!(done.next.contains("give_me_work"), "{done:?}");
            assert!(
                w.listed(&dev.slug).await.is_empty(),
                "released on i_am_done"
            );

            // A qa takes the review, asks for its own sandbox, fails the review: released too.
            let qa = w.agent("qa").await;
            ok(w.call(&qa, Verb::ClaimReview, json!({})).await);
            let handed = ok(w.call(&qa, Verb::RequestSandbox, json!({})).await);
            // `next` names only verbs of the qa's own manifest.
            assert!(handed.next.contains("pass_review"), "{handed:?}");
            assert!(!handed.next.contains("i_am_done"), "{handed:?}");
            ok(w.call(&qa, Verb::FailReview, json!({"comment": "flaky"}))
                .await);
            assert!(
                w.listed(&qa.slug).await.is_empty(),
                "released on fail_review"
            );

            // Explicit release, then a removed agent's sandbox goes too.
            let dev2 = w.working_agent("developer").await;
            ok(w.call(&dev2, Verb::RequestSandbox, json!({})).await);
            ok(w.call(&dev2, Verb::ReleaseSandbox, json!({})).await);
            assert!(w.listed(&dev2.slug).await.is_empty());
            ok(w.call(&dev2, Verb::RequestSandbox, json!({})).await);
            w.broker.remove_agent(&dev2.slug).await.expect("remove");
            assert!(w.listed(&dev2.slug).await.is_empty(), "released on removal");
        })
        .await;
}

#[tokio::test]
async fn own_orphans_are_reaped_at_once_and_foreign_instances_never() {
    use sandboxd_backend::InstanceRequest;
    use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

    // Whatever the grace window, an instance this daemon made that its store does not know is
    // an orphan, and one another daemon or the CLI made is not this daemon's to touch.
    for grace in [Duration::from_secs(600), Duration::ZERO] {
        let world = World::new(WorldSpec {
            tweak_config: if grace.is_zero() {
                |c| c.grace = Duration::ZERO
            } else {
                |c| c.grace = Duration::from_secs(600)
            },
            ..WorldSpec::default()
        })
        .await
        .expect("process world");
        world
            .run(|w| async move {
                let make = |owner: &AgentSlug, maker: DaemonId| InstanceRequest {
                    major: None,
                    engine: EngineRef::parse("redis").expect("registered"),
                    owner: owner.clone(),
                    maker,
                    features: Default::default(),
                    size: None,
                };
                // A provision a crash cut short: made by this daemon, never stored.
                let ghost = AgentSlug::parse(&crate::support::unique("ghost")).expect("slug");
                w.track(&ghost);
                let own = make(&ghost, w.broker.daemon_id().clone());
                w.backend.inner.provision(&own).await.expect("orphan");
                // Another maker's instances, one of an owner this daemon has never heard of.
                let stranger = AgentSlug::parse(&crate::support::unique("stranger")).expect("slug");
                w.track(&stranger);
                let other = DaemonId::parse("0ther0000").expect("valid");
                for maker in [DaemonId::cli(), other] {
                    let foreign = make(&stranger, maker);
                    w.backend.inner.provision(&foreign).await.expect("foreign");
                }
                // A live agent's sandbox is never reaped.
                let dev = w.working_agent("developer").await;
                ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);

                for pass in 0..2 {
                    let report = w.broker.run_janitor().await;
                    assert!(w.listed(&ghost).await.is_empty(), "{report:?}");
                    assert_eq!(w.listed(&stranger).await.len(), 2, "{report:?}");
                    assert!(w.listed(&stranger).await.iter().all(|i| i.live));
                    assert_eq!(report.foreign, 2, "{report:?}");
                    let reaped: Vec<_> = report.reaped.iter().map(|(_, r)| *r).collect();
                    let expected = if pass == 0 {
                        vec![ReapReason::Orphan]
                    } else {
                        vec![]
                    };
                    assert_eq!(reaped, expected, "{report:?}");
                    assert_eq!(
                        w.listed(&dev.slug).await.len(),
                        2,
                        "the agent's sandbox stays"
                    );
                }
                let text = w.broker.metrics().render();
                assert!(
                    text.contains("sandboxd_janitor_reaps_total{reason=\"orphan\"} 1"),
                    "{text}"
                );
                // The operator sees the foreign sandboxes, flagged, and cannot tear them down.
                let views = w.broker.sandboxes().await.expect("views");
                let theirs: Vec<_> = views.iter().filter(|v| v.owner == stranger).collect();
                assert_eq!(theirs.len(), 2);
                assert!(theirs.iter().all(|v| v.foreign));
                let err = w
                    .broker
                    .teardown_sandbox(&stranger)
                    .await
                    .expect_err("foreign");
                assert!(err.is_client_error(), "{err}");
                assert!(err.to_string().contains("not by this sandboxd"), "{err}");
                assert_eq!(w.listed(&stranger).await.len(), 2);
            })
            .await;
    }
}

#[tokio::test]
async fn idle_sandboxes_are_reaped_and_each_request_restarts_the_clock() {
    let world = World::new(WorldSpec {
        tweak_config: |c| {
            c.grace = Duration::ZERO;
            c.idle_ttl = Some(Duration::from_secs(3));
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            tokio::time::sleep(Duration::from_secs(2)).await;
            let hit = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&first), passwords(&hit), "a cache hit");

            // Older than the TTL, but asked for 1.6 s ago: kept.
            tokio::time::sleep(Duration::from_millis(1600)).await;
            let report = w.broker.run_janitor().await;
            assert!(report.reaped.is_empty(), "{report:?}");
            assert_eq!(w.listed(&dev.slug).await.len(), 2);

            // Left alone past the TTL: the whole sandbox goes.
            tokio::time::sleep(Duration::from_millis(1800)).await;
            let report = w.broker.run_janitor().await;
            let reasons: Vec<&str> = report.reaped.iter().map(|(_, r)| r.as_str()).collect();
            assert_eq!(reasons, ["idle", "idle"], "{report:?}");
            assert!(w.listed(&dev.slug).await.is_empty());
            assert!(
                pg_query(evidence_of(&first, "postgres"), "SELECT 1")
                    .await
                    .is_err(),
                "the reaped instance no longer answers"
            );
            let text = w.broker.metrics().render();
            assert!(
                text.contains("sandboxd_janitor_reaps_total{reason=\"idle\"} 2"),
                "{text}"
            );

            // The agent's next request gets a fresh sandbox.
            let fresh = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_ne!(passwords(&first)["postgres"], passwords(&fresh)["postgres"]);
            assert_eq!(w.backend.total(), 4);
        })
        .await;
}

#[tokio::test]
async fn sandboxes_past_the_maximum_lifetime_are_reaped_even_when_used() {
    let world = World::new(WorldSpec {
        services: vec!["redis"],
        tweak_config: |c| {
            c.grace = Duration::ZERO;
            c.max_lifetime = Some(Duration::from_secs(1));
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            tokio::time::sleep(Duration::from_millis(1300)).await;
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            let report = w.broker.run_janitor().await;
            let reasons: Vec<&str> = report.reaped.iter().map(|(_, r)| r.as_str()).collect();
            assert_eq!(reasons, ["max_lifetime"], "{report:?}");
            assert!(w.listed(&dev.slug).await.is_empty());
            let fresh = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_ne!(passwords(&first)["redis"], passwords(&fresh)["redis"]);
        })
        .await;
}

#[tokio::test]
async fn a_backend_that_cannot_list_keeps_its_sandboxes() {
    let world = World::new(WorldSpec {
        tweak_config: |c| c.grace = Duration::ZERO,
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            w.backend.fail_listing(true);
            let report = w.broker.run_janitor().await;
            w.backend.fail_listing(false);
            assert_eq!(report.forgotten, 0, "unknown is not gone: {report:?}");
            assert!(report.reaped.is_empty(), "{report:?}");

            let again = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&first), passwords(&again), "still a cache hit");
            assert_eq!(w.backend.total(), 2, "nothing provisioned again");
        })
        .await;
}
