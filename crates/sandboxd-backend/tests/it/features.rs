//! `probe_features` on both backends: what a backend really provides of an engine's allowlist,
//! found on a throwaway instance that is gone when the probe returns.

use std::collections::BTreeSet;

use sandboxd_backend::{Backend, FeatureProbe};
use sandboxd_domain::{AgentSlug, EngineRef};

use crate::docker::{Harness, POSTGRES, REDIS};
use crate::support::{self, ProcessHarness};

fn engine(name: &str) -> EngineRef {
    EngineRef::parse(name).expect("registered")
}

async fn probe(backend: &dyn Backend, name: &str) -> FeatureProbe {
    backend
        .probe_features(engine(name), &AgentSlug::pool_slot(), &support::maker())
        .await
        .unwrap_or_else(|err| panic!("probing {name}: {err}"))
}

/// Every allowlisted name is either available or missing with a reason, never both.
fn accounted_for(probe: &FeatureProbe, name: &str) {
    let available: BTreeSet<&str> = probe.names().into_iter().collect();
    let missing: BTreeSet<&str> = probe.missing.keys().copied().collect();
    let allowlist: BTreeSet<&str> = engine(name).features.iter().map(|f| f.name).collect();
    assert!(available.is_disjoint(&missing), "{probe:?}");
    assert_eq!(
        available.union(&missing).copied().collect::<BTreeSet<_>>(),
        allowlist
    );
    for (feature, why) in &probe.missing {
        assert!(why.contains("it comes with"), "{feature}: {why}");
    }
}

/// The extensions this host's PostgreSQL installations carry: what the process backend can
/// activate.
fn host_extensions() -> BTreeSet<&'static str> {
    let installed = |extension: &str| {
        std::fs::read_dir("/usr/share/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .any(|dir| {
                dir.path()
                    .join(format!("extension/{extension}.control"))
                    .exists()
            })
    };
    engine("postgres")
        .features
        .iter()
        .filter(|f| {
            let extension = match f.activation {
                sandboxd_domain::engine::Activation::PgExtension { extension, .. } => extension,
                sandboxd_domain::engine::Activation::RedisModule { .. } => f.name,
            };
            installed(extension)
        })
        .map(|f| f.name)
        .collect()
}

#[tokio::test]
async fn the_process_backend_offers_what_the_hosts_packages_provide() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let (postgres, redis) = tokio::join!(
                probe(backend.as_ref(), "postgres"),
                probe(backend.as_ref(), "redis")
            );
            accounted_for(&postgres, "postgres");
            accounted_for(&redis, "redis");
            let expected = host_extensions();
            assert_eq!(
                postgres.names().into_iter().collect::<BTreeSet<_>>(),
                expected,
                "{postgres:?}"
            );
            assert!(
                postgres.source.contains("this host's"),
                "{}",
                postgres.source
            );
            if !expected.contains("vector") {
                let why = &postgres.missing["vector"];
                assert!(why.contains("pgvector"), "names the package: {why}");
            }
            // What runs the engine is named the same way until it changes.
            let first = backend
                .provider(engine("postgres"))
                .await
                .expect("provider");
            let again = backend
                .provider(engine("postgres"))
                .await
                .expect("provider");
            assert_eq!(first, again);
            assert!(first.contains("postgres"), "{first}");
            assert_ne!(
                first,
                backend.provider(engine("redis")).await.expect("provider")
            );
            // The probes' instances are gone: `run` asserts nothing is left under the root.
            assert!(backend.list().await.expect("list").is_empty());
        })
        .await;
}

#[tokio::test]
async fn the_docker_backend_offers_what_the_image_provides() {
    let Some(harness) = Harness::new("dfeat", &[POSTGRES, REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let (postgres, redis) = tokio::join!(
                probe(backend.as_ref(), "postgres"),
                probe(backend.as_ref(), "redis")
            );
            accounted_for(&postgres, "postgres");
            accounted_for(&redis, "redis");
            // The local image carries every allowlisted extension (scripts/build-images.sh).
            assert_eq!(
                postgres.names(),
                ["citext", "pg_trgm", "postgis", "uuid-ossp", "vector"],
                "{postgres:?}"
            );
            assert_eq!(postgres.source, format!("image {POSTGRES}"));
            // …and no RedisJSON or RedisBloom: missing, naming the image.
            for absent in ["json", "bloom"] {
                assert!(redis.missing.contains_key(absent), "{redis:?}");
            }
            assert_eq!(redis.source, format!("image {REDIS}"));
            let provider = backend
                .provider(engine("postgres"))
                .await
                .expect("provider");
            assert!(
                provider.starts_with(&format!("{POSTGRES}@sha256:")),
                "{provider}"
            );
            // The probes' containers are gone: `run` asserts none of this maker's is left.
        })
        .await;
}
