//! The guard chain of request_sandbox, in order, each with its own code; injections refused
//! with nothing created; a backend that goes away refused within a second, yet after the other
//! guards; and a warm request that asks the backend nothing it already answered.

use std::time::{Duration, Instant};

use sandboxd_domain::envelope::{Envelope, ErrorCode};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{World, WorldSpec, ok, refused};

#[tokio::test]
async fn each_guard_refuses_with_its_own_code_in_order() {
    // Guard 1 (switch off) wins over guard 2 (no task) for the same call.
    let off = World::new(WorldSpec {
        enabled: false,
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    off.run(|w| async move {
        let dev = w.agent("developer").await;
        let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        assert_eq!(err.error, ErrorCode::SandboxDisabled);
        assert!(!err.retryable);
        let settings = w.broker.settings().await.expect("settings");
        assert!(!settings.sandbox_db_enabled_running);
        assert_eq!(w.backend.total(), 0);
    })
    .await;

    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            // Guard 2: no task held; and it wins over guard 4 (an unknown service).
            let dev = w.agent("developer").await;
            let err = refused(
                w.call(&dev, Verb::RequestSandbox, json!({"services": ["oracle"]}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::NoActiveTask);
            assert!(err.remediate.contains("give_me_work"), "{err:?}");
            assert!(err.remediate.contains("i_will_work_on"), "{err:?}");
            assert!(
                !err.remediate.contains("claim_review"),
                "not a developer's verb: {err:?}"
            );
            assert!(!err.retryable);
            // A reviewer is told its own way to hold a task.
            let qa = w.agent("qa").await;
            let err = refused(w.call(&qa, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::NoActiveTask);
            assert!(err.remediate.contains("claim_review"), "{err:?}");
            assert!(
                !err.remediate.contains("give_me_work"),
                "not a qa verb: {err:?}"
            );

            // Guard 4: a service outside the project's set, naming the allowed set.
            let dev = w.working_agent("developer").await;
            let err = refused(
                w.call(&dev, Verb::RequestSandbox, json!({"services": ["mariadb"]}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::ServiceNotAllowed);
            assert!(err.message.contains("postgres, redis"), "{err:?}");
            assert!(!err.retryable);

            // Guard 4: extensions for a service not opted into, and outside the allowlist.
            let err = refused(
                w.call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"mariadb": ["x"]}}),
                )
                .await,
            );
            assert_eq!(err.error, ErrorCode::FeatureNotAllowed);
            let err = refused(
                w.call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"postgres": ["plpython3u"]}}),
                )
                .await,
            );
            assert_eq!(err.error, ErrorCode::FeatureNotAllowed);
            // Allowed: what this host's PostgreSQL provides of the allowlist (no pgvector).
            assert!(
                err.message
                    .contains("allowed: citext, pg_trgm, postgis, uuid-ossp"),
                "{err:?}"
            );

            // Guard 3: the project opts out; it wins over guard 4 for the same call.
            w.broker
                .set_project(&w.project, None, None)
                .await
                .expect("opt out");
            let err = refused(
                w.call(&dev, Verb::RequestSandbox, json!({"services": ["oracle"]}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::ProjectNotOptedIn);
            assert!(!err.retryable);

            // A role without request_sandbox is refused by the manifest, whatever it sends.
            let reviewer = w.agent("pr_reviewer").await;
            let err = refused(w.call(&reviewer, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::VerbNotAllowed);
            assert_eq!(w.backend.total(), 0, "no guard lets anything be created");
        })
        .await;
}

#[tokio::test]
async fn provisioner_unavailable_is_the_one_retryable_guard() {
    // A Docker socket that does not exist: the backend cannot be reached.
    let world = World::new(WorldSpec::default())
        .await
        .expect("process world");
    world
        .run(|w| async move {
            let unreachable = sandboxd_backend::docker::DockerBackend::new(
                sandboxd_backend::docker::DockerConfig {
                    socket: "unix:///nonexistent/docker.sock".into(),
                    ..Default::default()
                },
            )
            .expect("config is valid");
            // A broker starts even when its backend is down.
            let broker = w.restarted_with(std::sync::Arc::new(unreachable)).await;
            let dev = w.working_agent("developer").await;
            let err = refused(
                broker
                    .call(
                        &dev,
                        sandboxd_domain::call::Call::parse(Verb::RequestSandbox, json!({})),
                    )
                    .await,
            );
            assert_eq!(err.error, ErrorCode::ProvisionerUnavailable);
            assert!(err.retryable);
        })
        .await;
}

#[tokio::test]
async fn a_backend_that_stops_answering_is_refused_within_a_second_but_after_guards_one_to_four() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            // A warm request right before the backend goes: its ping answer is as fresh as can be.
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            w.backend.fail_ping(true);
            let gone = Instant::now();
            let refusal = loop {
                match w.call(&dev, Verb::RequestSandbox, json!({})).await {
                    Envelope::Error(err) => break err,
                    Envelope::Ok(_) => {
                        assert!(
                            gone.elapsed() < Duration::from_secs(1),
                            "still answered {:?} after the backend went away",
                            gone.elapsed()
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            };
            assert!(
                gone.elapsed() < Duration::from_secs(1),
                "{:?}",
                gone.elapsed()
            );
            assert_eq!(
                refusal.error,
                ErrorCode::ProvisionerUnavailable,
                "{refusal:?}"
            );
            assert!(refusal.retryable);

            // Guards 2 and 4 still win over it.
            let idle = w.agent("developer").await;
            let err = refused(w.call(&idle, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::NoActiveTask);
            let err = refused(
                w.call(&dev, Verb::RequestSandbox, json!({"services": ["mariadb"]}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::ServiceNotAllowed);

            // A failed ping is never remembered: the next request after it answers is served.
            w.backend.fail_ping(false);
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);

            // Guard 3 wins over it too.
            w.backend.fail_ping(true);
            w.broker
                .set_project(&w.project, None, None)
                .await
                .expect("opt out");
            let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::ProjectNotOptedIn);
            w.backend.fail_ping(false);
        })
        .await;

    // Guard 1 as well.
    let off = World::new(WorldSpec {
        enabled: false,
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    off.run(|w| async move {
        w.backend.fail_ping(true);
        let dev = w.agent("developer").await;
        let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        assert_eq!(err.error, ErrorCode::SandboxDisabled);
        w.backend.fail_ping(false);
    })
    .await;
}

#[tokio::test]
async fn whether_an_engine_runs_is_asked_once_then_again_after_the_recheck_interval() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            // Opting the project in asked; spawning the agent, a cold request and two warm ones
            // after it do not ask again.
            let dev = w.working_agent("developer").await;
            for _ in 0..3 {
                ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            }
            for engine in ["postgres", "redis"] {
                assert_eq!(w.backend.supports_asked(engine), 1, "{engine}");
            }
        })
        .await;

    World::new(WorldSpec {
        tweak_config: |config| config.feature_probe_recheck = Duration::from_millis(300),
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        let asked = w.backend.supports_asked("postgres");
        w.agent("developer").await;
        assert_eq!(w.backend.supports_asked("postgres"), asked, "still fresh");
        tokio::time::sleep(Duration::from_millis(400)).await;
        w.agent("developer").await;
        assert_eq!(
            w.backend.supports_asked("postgres"),
            asked + 1,
            "asked again"
        );
    })
    .await;
}

#[tokio::test]
async fn injections_in_names_are_refused_escaped_and_create_nothing() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            for args in [
                json!({"services": ["postgres; DROP TABLE x"]}),
                json!({"services": ["postgres\n<script>alert(1)</script>"]}),
                json!({"extensions": {"postgres": ["vector; DROP TABLE x"]}}),
                json!({"extensions": {"postgres": ["plpython3u"]}}),
                json!({"extensions": {"../../etc": ["x"]}}),
                json!({"services": "postgres"}),
                json!({"servicez": ["postgres"]}),
            ] {
                let err = refused(w.call(&dev, Verb::RequestSandbox, args.clone()).await);
                assert!(
                    matches!(
                        err.error,
                        ErrorCode::ServiceNotAllowed
                            | ErrorCode::FeatureNotAllowed
                            | ErrorCode::InvalidArgument
                    ),
                    "{args}: {err:?}"
                );
                assert!(!err.message.contains('\n'), "escaped: {err:?}");
                assert!(!err.message.contains("<script>"), "escaped: {err:?}");
            }
            assert_eq!(w.backend.total(), 0);
            assert!(w.listed(&dev.slug).await.is_empty());
        })
        .await;
}
