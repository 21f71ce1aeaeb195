//! A project's data space per engine, through the broker on the real process backend: a size
//! above the operator's ceiling is refused naming it and stores nothing; a size reaches the
//! instance (its tmpfs, the evidence); a sized engine does not come from the warm pool (whose
//! members have the default size); a changed size replaces a cached member, an unchanged one
//! is a cache hit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sandboxd_broker::{BrokerConfig, PoolConfig, PoolTuning, PoolView};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{EngineRef, ProjectSizes};
use serde_json::json;

use crate::support::{World, WorldSpec, evidence_of, ok, passwords, pg_query};

fn sizes(items: &[(&str, &str)]) -> ProjectSizes {
    let map: BTreeMap<String, String> = items
        .iter()
        .map(|(engine, size)| ((*engine).to_owned(), (*size).to_owned()))
        .collect();
    ProjectSizes::parse_map(&map).expect("valid sizes")
}

fn postgres_pool(view: &[PoolView]) -> PoolView {
    view.iter()
        .find(|v| v.engine.name == "postgres")
        .cloned()
        .expect("a postgres pool")
}

/// The `size=` option of the tmpfs mounted at `dir`, when it is one (a root daemon).
fn mounted_size(dir: &str) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(dir))
        .and_then(|l| l.split(' ').nth(3))
        .and_then(|options| options.split(',').find_map(|o| o.strip_prefix("size=")))
        .map(str::to_owned)
}

/// Whether this test runs as root (its instances then get a tmpfs of their own).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[tokio::test]
async fn a_projects_size_reaches_its_instance_past_the_pool_and_a_new_size_replaces_it() {
    let world = World::new(WorldSpec {
        services: vec!["postgres"],
        tweak_config: |config: &mut BrokerConfig| {
            config.pool_tuning = PoolTuning {
                check_interval: Duration::from_millis(300),
                ..PoolTuning::default()
            };
            config.pools = vec![PoolConfig {
                engine: EngineRef::parse("postgres").expect("registered"),
                clone_of: None,
                features: BTreeSet::new(),
                min_idle: 1,
                max_total: 1,
            }];
        },
        ..WorldSpec::default()
    })
    .await
    .expect("process world");
    world
        .run(|w| async move {
            w.spawn_pools();
            let started = Instant::now();
            while postgres_pool(&w.broker.pools()).idle < 1 {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the pool filled"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }

            // Above the ceiling: refused, naming it; nothing stored.
            let err = w
                .broker
                .set_project_sizes(&w.project, sizes(&[("postgres", "4G")]))
                .await
                .expect_err("above the ceiling");
            assert!(err.is_client_error(), "{err}");
            assert!(
                err.to_string()
                    .contains("ceiling of 2G (broker.max_sandbox_size_mb = 2048)"),
                "{err}"
            );
            let stored = w.broker.project(&w.project).await.expect("read");
            assert!(stored.expect("project").sandbox_sizes.is_empty());

            w.broker
                .set_project_sizes(&w.project, sizes(&[("postgres", "768M")]))
                .await
                .expect("a size within the ceiling");
            let dev = w.working_agent("developer").await;
            let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            let pg = evidence_of(&first, "postgres");
            assert_eq!(pg["size_mb"], 768, "{pg}");
            pg_query(pg, "CREATE TABLE sized (id int)")
                .await
                .expect("the sized instance answers");
            let pool = postgres_pool(&w.broker.pools());
            assert_eq!(
                (pool.handed_out, pool.idle),
                (0, 1),
                "a default-sized member is not handed out for a sized engine: {pool:?}"
            );
            let listed = w.listed(&dev.slug).await;
            let dir = &listed.first().expect("listed").handle.backend_id;
            if is_root() {
                assert_eq!(mounted_size(dir).as_deref(), Some("786432k"), "{dir}");
            }

            // The same size: a cache hit, same credentials.
            let again = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&again), passwords(&first));

            // Back to the default: the member is replaced, from the pool this time.
            w.broker
                .set_project_sizes(&w.project, ProjectSizes::default())
                .await
                .expect("cleared");
            let third = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_ne!(passwords(&third), passwords(&first), "a new instance");
            assert_eq!(evidence_of(&third, "postgres")["size_mb"], 512);
            assert_eq!(postgres_pool(&w.broker.pools()).handed_out, 1);
            // The default size is the backend's own: the member is kept from now on.
            let fourth = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&fourth), passwords(&third), "a cache hit");
        })
        .await;
}
