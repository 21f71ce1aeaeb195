//! Features only where they exist: what agents may ask for is the allowlist ∩ what the primary
//! backend really provides (probed on a throwaway instance, cached); a standing feature no
//! backend provides is refused when it is set, naming where it exists.

use std::collections::BTreeSet;

use sandboxd_backend::{Backend, FeatureProbe};
use sandboxd_broker::BrokerError;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{AgentSlug, EngineRef, FeatureRequest, ProjectSlug};
use serde_json::json;

use crate::support::{World, WorldSpec, refused, unique};

fn engine(name: &str) -> EngineRef {
    EngineRef::parse(name).expect("registered")
}

/// What the world's own backend provides, asked directly (the expectation).
async fn provided(w: &World, name: &str) -> FeatureProbe {
    w.backend
        .probe_features(engine(name), &AgentSlug::pool_slot(), w.broker.daemon_id())
        .await
        .expect("probe")
}

fn features(items: &[&str]) -> FeatureRequest {
    FeatureRequest::parse_cli(items.iter().copied()).expect("allowlisted")
}

#[tokio::test]
async fn a_standing_feature_the_backend_lacks_is_refused_naming_where_it_exists() {
    let Some(world) = World::new(WorldSpec {
        docker_beside: true,
        ..WorldSpec::default()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            let postgres = provided(&w, "postgres").await;
            // This host's PostgreSQL has no pgvector package; the local image has it.
            assert!(
                postgres.missing.contains_key("vector"),
                "the process backend here lacks pgvector: {postgres:?}"
            );
            let slug = ProjectSlug::parse(&unique("feat")).expect("slug");
            let err = w
                .broker
                .set_project(
                    &slug,
                    Some(vec![engine("postgres")]),
                    Some(features(&["postgres=vector"])),
                )
                .await
                .expect_err("vector is not provided by the process backend");
            assert!(matches!(err, BrokerError::FeatureUnavailable(_)), "{err}");
            assert!(err.is_client_error());
            let text = err.to_string();
            for expected in [
                "feature vector of postgres is not available",
                "process backend",
                "pgvector",
                "it exists on the docker backend (image sandboxd-local/postgres:17)",
                "backend = \"docker\"",
            ] {
                assert!(text.contains(expected), "{expected:?} in {text}");
            }
            let available = postgres.names().join(", ");
            assert!(text.ends_with(&format!("available here for postgres: {available}")));
            assert!(
                w.broker.project(&slug).await.expect("read").is_none(),
                "nothing was stored"
            );

            // A Redis module this host's Redis cannot load (RediSearch 2 needs Redis 7.2 or newer)
            // is in the local image.
            let redis = provided(&w, "redis").await;
            if let Some(lacking) = redis.missing.keys().next() {
                let err = w
                    .broker
                    .set_project(
                        &slug,
                        Some(vec![engine("redis")]),
                        Some(features(&[&format!("redis={lacking}")])),
                    )
                    .await
                    .expect_err("not provided by the process backend here");
                assert!(
                    err.to_string()
                        .contains("it exists on the docker backend (image sandboxd-local/redis:8)"),
                    "{err}"
                );
            }

            // What the backend provides is accepted.
            let fine = postgres.names()[0];
            let project = w
                .broker
                .set_project(
                    &slug,
                    Some(vec![engine("postgres")]),
                    Some(features(&[&format!("postgres={fine}")])),
                )
                .await
                .expect("a provided feature");
            assert_eq!(
                project.sandbox_extensions.expect("stored").to_map()["postgres"],
                [fine]
            );
        })
        .await;
}

#[tokio::test]
async fn agents_are_offered_and_given_only_what_the_backend_provides() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let postgres = provided(&w, "postgres").await;
            let available: BTreeSet<&str> = postgres.names().into_iter().collect();
            assert!(!available.contains("vector"), "{postgres:?}");

            // The briefing names what may be added, and nothing the backend lacks.
            let slug = AgentSlug::parse(&unique("brief")).expect("slug");
            w.track(&slug);
            let spawned = w
                .broker
                .spawn_agent(&slug, "developer", &w.project)
                .await
                .expect("spawn");
            let line = spawned
                .briefing
                .iter()
                .find(|l| l.starts_with("Features you may add"))
                .unwrap_or_else(|| panic!("a features line: {:?}", spawned.briefing));
            for name in &available {
                assert!(line.contains(name), "{name} in {line}");
            }
            assert!(!line.contains("vector"), "{line}");

            // A call asking for a feature the backend lacks is refused before anything starts.
            let dev = w.working_agent("developer").await;
            let err = refused(
                w.call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"postgres": ["vector"]}}),
                )
                .await,
            );
            assert_eq!(err.error, ErrorCode::FeatureNotAllowed);
            assert!(!err.retryable);
            assert!(
                err.message
                    .contains("postgres feature \"vector\" is not available"),
                "{err:?}"
            );
            assert!(err.message.contains("pgvector"), "{err:?}");
            assert!(
                err.remediate
                    .contains(&format!("features from: {}", postgres.names().join(", "))),
                "{err:?}"
            );
            assert_eq!(w.backend.total(), 0, "nothing was provisioned");

            // A feature it provides is given.
            let ok = crate::support::ok(
                w.call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"postgres": ["pg_trgm"]}}),
                )
                .await,
            );
            assert_eq!(
                crate::support::evidence_of(&ok, "postgres")["available_extensions"],
                json!(["pg_trgm"])
            );
        })
        .await;
}

#[tokio::test]
async fn a_standing_feature_lost_with_a_backend_change_is_the_operators_to_fix() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            // Set while another backend served the project: the store holds it as it was.
            w.store()
                .await
                .put_project(
                    &w.project,
                    Some(&[engine("postgres")]),
                    Some(&features(&["postgres=vector"])),
                )
                .await
                .expect("stored");
            let dev = w.working_agent("developer").await;
            let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::FeatureNotAllowed);
            assert!(!err.retryable);
            assert!(
                err.message
                    .contains("standing postgres feature \"vector\" is not available"),
                "{err:?}"
            );
            assert!(err.remediate.contains("an operator must"), "{err:?}");
            assert!(
                !err.remediate.contains("call request_sandbox again"),
                "{err:?}"
            );
            assert_eq!(w.backend.total(), 0, "nothing was provisioned");
        })
        .await;
}

#[tokio::test]
async fn redis_evidence_lists_each_module_with_the_version_its_server_reports() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let redis = provided(&w, "redis").await;
            let Some(module) = redis.names().first().copied() else {
                eprintln!("no Redis module loads on this host: {:?}", redis.missing);
                return;
            };
            let dev = w.working_agent("developer").await;
            let ok = crate::support::ok(
                w.call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"redis": [module]}}),
                )
                .await,
            );
            let evidence = crate::support::evidence_of(&ok, "redis");
            assert_eq!(evidence["available_modules"], json!([module]));
            let listed = &evidence["modules"];
            assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
            assert_eq!(listed[0]["name"], module);
            assert_eq!(
                listed[0]["version"],
                json!(redis.versions[module]),
                "{listed}"
            );
            // The logical database the URL names, not a name Redis does not have.
            assert_eq!(evidence["database"], "0");
            let url = evidence["url"].as_str().expect("url");
            assert!(url.ends_with("/0"), "{url}");
        })
        .await;
}
