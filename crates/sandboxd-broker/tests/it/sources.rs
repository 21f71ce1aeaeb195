//! Clone sources through the broker, on Docker: a real PostgreSQL 18 "production" (a sandbox of
//! its own, loaded through its account), registered with a DSN that is checked and sealed,
//! snapshotted through pg_dump (on demand and on its refresh interval), named by projects that
//! clone it; a source that refuses the login fails the snapshot without quoting its DSN
//! anywhere, and a source a project clones cannot be removed. A pool of clones waits for the
//! first snapshot, hands out members that are clones owned by the agent, and replaces its idle
//! members when a newer snapshot arrives.

use sandboxd_backend::{Backend, InstanceRequest};
use std::time::{Duration, Instant};

use sandboxd_broker::{
    BrokerConfig, BrokerError, PoolConfig, PoolKey, PoolTuning, PoolView, SslMode,
};
use sandboxd_domain::Actor;
use sandboxd_domain::audit::AuditFilter;
use sandboxd_domain::clone::{CloneChoice, Privacy};
use sandboxd_domain::{AgentSlug, EngineRef, Instance, SourceName};
use secrecy::{ExposeSecret, SecretString};

use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, evidence_of, ok, passwords, pg_query};

fn dsn(host: &str, port: u16, user: &str, password: &str, database: &str) -> SecretString {
    SecretString::from(format!(
        "host={host} port={port} user={user} password={password} dbname={database}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_is_sealed_snapshotted_and_kept_while_a_project_clones_it() {
    let spec = WorldSpec {
        kind: Kind::Docker,
        services: vec!["postgres", "redis"],
        ..WorldSpec::default()
    };
    let Some(world) = World::new(spec).await else {
        return;
    };
    world
        .run(|world| async move {
            let broker = &world.broker;
            let owner = AgentSlug::parse(&sandboxd_testkit::unique("prod")).expect("slug");
            world.track(&owner);
            let postgres = EngineRef::parse("postgres").expect("registered");
            let production = world
                .backend
                .provision(&InstanceRequest {
                    engine: postgres,
                    owner: owner.clone(),
                    maker: broker.daemon_id().clone(),
                    features: Default::default(),
                    major: Some(18),
                    size: None,
                })
                .await
                .expect("a PostgreSQL 18 production");
            let password = production.agent.password.expose_secret().to_owned();
            let good = dsn(
                &production.host,
                production.port,
                &production.agent.user,
                &password,
                &production.database,
            );
            pg_query(
                &serde_json::json!({"url": format!(
                    "postgresql://{}:{}@{}:{}/{}",
                    production.agent.user, password, production.host, production.port,
                    production.database
                )}),
                "CREATE TABLE readings (id int PRIMARY KEY, sensor int NOT NULL); \
                 CREATE INDEX readings_bucket ON readings ((sensor % 7)); \
                 CREATE STATISTICS readings_deps (dependencies) ON id, sensor FROM readings; \
                 INSERT INTO readings SELECT g, g % 50 FROM generate_series(1, 50000) g; \
                 ANALYZE readings",
            )
            .await
            .expect("load production");

            let shop = SourceName::parse("shop").expect("valid");
            let bad = broker
                .put_source(
                    &shop,
                    &SecretString::from("host= = nonsense"),
                    Privacy::KeepValues,
                    0,
                )
                .await
                .expect_err("a malformed DSN is refused");
            assert!(matches!(bad, BrokerError::Input(_)), "{bad}");
            assert!(bad.to_string().contains("dsn"), "{bad}");
            assert!(
                broker.sources().await.expect("list").is_empty(),
                "nothing was created"
            );

            let put = broker
                .put_source(&shop, &good, Privacy::NoValues, 0)
                .await
                .expect("register");
            assert_eq!(put.snapshot, None);
            let taken = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot");
            let summary = taken.snapshot.expect("a snapshot");
            assert!(
                summary.server_version.starts_with("PostgreSQL 18"),
                "{summary:?}"
            );
            // What it holds: one table, its key and expression index (whose one expression
            // row is among the statistics, beside the table's two columns), and extended
            // statistics the snapshot's role (the table's owner) reads and a clone rebuilds;
            // what a clone lacks: under no-values the sample values.
            let contents = summary.contents.clone().expect("a summary");
            assert_eq!(
                (
                    contents.tables,
                    contents.partitioned_tables,
                    contents.indexes,
                    contents.expression_indexes,
                    contents.materialized_views,
                    contents.column_statistics,
                    contents.extended_statistics,
                ),
                (1, 0, 2, 1, 0, 3, 1),
                "{contents:?}"
            );
            assert!(contents.settings > 10, "{contents:?}");
            let left_out: Vec<_> = contents.left_out.iter().map(|l| l.what.as_str()).collect();
            assert_eq!(left_out, ["sample values"]);
            let snapshot = world
                .store()
                .await
                .latest_snapshot(&shop)
                .await
                .expect("read")
                .expect("stored");
            assert!(snapshot.schema_sql.contains("CREATE TABLE public.readings"));
            assert_eq!(snapshot.privacy, Privacy::NoValues);
            assert!(
                snapshot
                    .columns
                    .iter()
                    .all(|c| c.most_common_vals.is_none())
            );

            // Projects name it; only clonable engines that are opted in, only known sources.
            let redis = EngineRef::parse("redis").expect("registered");
            let not_clonable = broker
                .set_project_clones(&world.project, vec![(redis, CloneChoice::of(shop.clone()))])
                .await
                .expect_err("redis cannot be a clone");
            assert!(
                not_clonable.to_string().contains("clonable: postgres"),
                "{not_clonable}"
            );
            let unknown = SourceName::parse("nowhere").expect("valid");
            let unknown = broker
                .set_project_clones(&world.project, vec![(postgres, CloneChoice::of(unknown))])
                .await
                .expect_err("an unknown source");
            assert!(
                unknown.to_string().contains("registered: shop"),
                "{unknown}"
            );
            let project = broker
                .set_project_clones(
                    &world.project,
                    vec![(postgres, CloneChoice::of(shop.clone()))],
                )
                .await
                .expect("clone of shop");
            assert_eq!(
                project.sandbox_clones,
                vec![(postgres, CloneChoice::of(shop.clone()))]
            );
            let in_use = broker.remove_source(&shop).await.expect_err("in use");
            assert!(
                in_use.to_string().contains(world.project.as_str()),
                "{in_use}"
            );

            // An agent of the project gets postgres as a clone of shop (redis as ever): the
            // schema is there, no rows, and the evidence says where it came from.
            let dev = world.working_agent("developer").await;
            let first = ok(world.call(&dev, Verb::RequestSandbox, json!({})).await);
            let whole = serde_json::to_string(&first).expect("json");
            assert!(!whole.contains(&password), "the source's password: {whole}");
            assert!(
                !whole.contains(&format!("\"port\":{}", production.port)),
                "the source's address: {whole}"
            );
            assert!(
                first
                    .context_briefing
                    .contains("postgres is a clone of source shop (PostgreSQL 18")
                    && first.context_briefing.contains("ANALYZE"),
                "{}",
                first.context_briefing
            );
            let pg = evidence_of(&first, "postgres").clone();
            assert_eq!(pg["clone"]["source"], "shop", "{pg}");
            assert!(
                pg["clone"]["server_version"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("PostgreSQL 18")),
                "{pg}"
            );
            assert_eq!(pg["clone"]["privacy"], "no-values");
            assert_eq!(
                pg["clone"]["summary"],
                serde_json::to_value(&contents).expect("json"),
                "the clone's evidence carries the snapshot's summary"
            );
            assert!(evidence_of(&first, "redis").get("clone").is_none());
            assert_ne!(pg["port"], production.port, "a clone, not production");
            pg_query(&pg, "INSERT INTO readings VALUES (1, 1)")
                .await
                .expect("the clone has production's table, empty");
            let again = ok(world.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&first), passwords(&again), "a cache hit");
            let info = ok(world.call(&dev, Verb::SandboxInfo, json!({})).await);
            let info_text = serde_json::to_string(&info.evidence).expect("json");
            assert!(info_text.contains("\"source\":\"shop\""), "{info_text}");
            assert!(!info_text.contains(&password), "{info_text}");
            ok(world.call(&dev, Verb::ResetSandbox, json!({})).await);
            pg_query(&pg, "INSERT INTO readings VALUES (1, 1)")
                .await
                .expect("after a reset the clone is a clone again, and empty");
            ok(world.call(&dev, Verb::ReleaseSandbox, json!({})).await);

            // A source that refuses the login: the snapshot fails, the one before it stays,
            // and the error names the cause without the DSN.
            let wrong = format!("{password}x");
            broker
                .put_source(
                    &shop,
                    &dsn(
                        &production.host,
                        production.port,
                        &production.agent.user,
                        &wrong,
                        &production.database,
                    ),
                    Privacy::KeepValues,
                    0,
                )
                .await
                .expect("replace the DSN");
            let failed = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect_err("a refused login");
            assert!(matches!(failed, BrokerError::Source(_)), "{failed}");
            assert!(
                failed
                    .to_string()
                    .contains("password authentication failed"),
                "{failed}"
            );
            let recorded = broker.source(&shop).await.expect("get").expect("some");
            let last_error = recorded.last_error.expect("the failure is recorded");
            for text in [failed.to_string(), last_error] {
                assert!(
                    !text.contains(&wrong) && !text.contains(&password),
                    "{text}"
                );
            }

            let audit = broker
                .audit_log(&AuditFilter {
                    limit: 1000,
                    ..AuditFilter::default()
                })
                .await
                .expect("audit");
            let actions: Vec<&str> = audit.entries.iter().map(|e| e.action.as_str()).collect();
            for action in ["put_source", "snapshot"] {
                assert!(actions.contains(&action), "{actions:?}");
            }
            let rows = format!("{:?}", audit.entries);
            assert!(
                !rows.contains(&password) && !rows.contains(&wrong),
                "{rows}"
            );

            broker
                .set_project_clones(&world.project, Vec::new())
                .await
                .expect("no clone");
            assert!(broker.remove_source(&shop).await.expect("remove"));
            assert!(broker.sources().await.expect("list").is_empty());
        })
        .await;
}

/// How a source is reached over TLS, as the broker tells it from the sealed DSN: libpq's
/// `sslmode` (`verify-full` by default for a host that is not loopback, `prefer` on loopback),
/// a warning for a mode that checks nothing off loopback, refusals naming what is wrong (an
/// unknown mode, a client certificate, a CA file that cannot be read), nothing stored on a
/// refusal, and audit rows that carry the mode but never the DSN. Nothing connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_tells_how_it_is_reached_over_tls_and_warns_when_that_checks_nothing() {
    let Some(world) = World::new(WorldSpec::default()).await else {
        return;
    };
    world
        .run(|world| async move {
            let broker = &world.broker;
            let password = "pw-tls-7c1e0b";
            let remote = "host=db.example.internal port=5432 user=ro dbname=shop";
            let with =
                |tls: &str| SecretString::from(format!("{remote} password={password} {tls}"));
            let name = |text: &str| SourceName::parse(text).expect("valid");

            let cases = [
                (
                    "weak",
                    with("sslmode=require"),
                    SslMode::Require,
                    true,
                    true,
                ),
                ("strict", with(""), SslMode::VerifyFull, false, false),
                (
                    "plain",
                    with("sslmode=disable"),
                    SslMode::Disable,
                    true,
                    true,
                ),
                (
                    "local",
                    SecretString::from(format!(
                        "postgresql://ro:{password}@127.0.0.1:5432/shop?sslmode=disable"
                    )),
                    SslMode::Disable,
                    true,
                    false,
                ),
            ];
            for (source, dsn, mode, explicit, warned) in &cases {
                broker
                    .put_source(&name(source), dsn, Privacy::KeepValues, 0)
                    .await
                    .unwrap_or_else(|e| panic!("register {source}: {e}"));
                let tls = broker
                    .source_tls(&name(source))
                    .await
                    .expect("read")
                    .expect("registered");
                assert_eq!((tls.mode, tls.explicit), (*mode, *explicit), "{source}");
                match tls.warning() {
                    Some(warning) => {
                        assert!(*warned, "{source}: {warning}");
                        assert!(
                            warning.contains("not loopback") && warning.contains("verify-full"),
                            "{warning}"
                        );
                    }
                    None => assert!(!warned, "{source} is warned of"),
                }
                assert!(!tls.summary().contains(password), "{}", tls.summary());
            }
            let strict = broker
                .source_tls(&name("strict"))
                .await
                .expect("read")
                .expect("registered");
            assert!(
                strict
                    .summary()
                    .contains("the default for a host that is not loopback"),
                "{}",
                strict.summary()
            );
            assert_eq!(
                broker.source_tls(&name("nowhere")).await.expect("read"),
                None
            );

            for (dsn, names) in [
                (with("sslmode=verify-everything"), "sslmode"),
                (with("sslcert=/etc/client.pem"), "sslcert"),
                (
                    with("sslmode=verify-full sslrootcert=/nonexistent/prod-ca.pem"),
                    "/nonexistent/prod-ca.pem",
                ),
            ] {
                let refused = broker
                    .put_source(&name("refused"), &dsn, Privacy::KeepValues, 0)
                    .await
                    .expect_err(names);
                let text = refused.to_string();
                assert!(matches!(refused, BrokerError::Input(_)), "{text}");
                assert!(text.contains(names) && !text.contains(password), "{text}");
            }
            assert_eq!(
                broker.source(&name("refused")).await.expect("read"),
                None,
                "a refusal stores nothing"
            );

            let audit = broker
                .audit_log(&AuditFilter {
                    limit: 100,
                    ..AuditFilter::default()
                })
                .await
                .expect("audit");
            let rows = format!("{:?}", audit.entries);
            assert!(
                rows.contains("tls require (unverified off loopback)"),
                "{rows}"
            );
            assert!(rows.contains("tls verify-full"), "{rows}");
            assert!(!rows.contains(password), "{rows}");
        })
        .await;
}

/// A PostgreSQL 18 "production" of `world`, its DSN, and its account's password: a table of
/// 50 000 rows, analyzed.
async fn production(world: &crate::support::World, tag: &str) -> (Instance, SecretString) {
    let owner = AgentSlug::parse(&sandboxd_testkit::unique(tag)).expect("slug");
    world.track(&owner);
    let production = world
        .backend
        .provision(&InstanceRequest {
            engine: EngineRef::parse("postgres").expect("registered"),
            owner,
            maker: world.broker.daemon_id().clone(),
            features: Default::default(),
            major: Some(18),
            size: None,
        })
        .await
        .expect("a PostgreSQL 18 production");
    let password = production.agent.password.expose_secret().to_owned();
    pg_query(
        &json!({"url": url_of(&production)}),
        "CREATE TABLE readings (id int PRIMARY KEY, sensor int NOT NULL); \
         INSERT INTO readings SELECT g, g % 50 FROM generate_series(1, 50000) g; \
         ANALYZE readings",
    )
    .await
    .expect("load production");
    let dsn = dsn(
        &production.host,
        production.port,
        &production.agent.user,
        &password,
        &production.database,
    );
    (production, dsn)
}

fn url_of(instance: &Instance) -> String {
    format!(
        "postgresql://{}:{}@{}:{}/{}",
        instance.agent.user,
        instance.agent.password.expose_secret(),
        instance.host,
        instance.port,
        instance.database
    )
}

/// One row, one column, as text, as the agent of `entry`.
async fn pg_text(entry: &serde_json::Value, sql: &str) -> String {
    let (client, connection) =
        tokio_postgres::connect(entry["url"].as_str().expect("url"), tokio_postgres::NoTls)
            .await
            .expect("connect as the agent");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let rows = client.simple_query(sql).await.expect(sql);
    rows.into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_default()
}

fn clone_pool(views: &[PoolView]) -> &PoolView {
    views
        .iter()
        .find(|v| v.key.to_string() == "postgres@shop")
        .unwrap_or_else(|| panic!("the postgres@shop pool in {views:?}"))
}

async fn until_pool(
    world: &crate::support::World,
    what: &str,
    ready: impl Fn(&PoolView) -> bool,
) -> PoolView {
    let started = Instant::now();
    loop {
        let views = world.broker.pools();
        let view = clone_pool(&views);
        if ready(view) {
            return view.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_clones_hands_out_clones_of_the_latest_snapshot() {
    let spec = WorldSpec {
        kind: Kind::Docker,
        services: vec!["postgres"],
        tweak_config: |config: &mut BrokerConfig| {
            config.pool_tuning = PoolTuning {
                backoff_base: Duration::from_millis(200),
                backoff_max: Duration::from_secs(2),
                check_interval: Duration::from_millis(500),
                parallel_starts: 2,
            };
            let key = PoolKey::parse("postgres@shop").expect("a clone pool");
            config.pools = vec![PoolConfig {
                engine: key.engine,
                clone_of: key.clone_of,
                features: Default::default(),
                min_idle: 1,
                max_total: 2,
            }];
        },
        ..WorldSpec::default()
    };
    let Some(world) = World::new(spec).await else {
        return;
    };
    world
        .run(|world| async move {
            let broker = &world.broker;
            let (production, dsn) = production(&world, "prodpool").await;
            let shop = SourceName::parse("shop").expect("valid");
            let postgres = EngineRef::parse("postgres").expect("registered");
            broker
                .put_source(&shop, &dsn, Privacy::KeepValues, 0)
                .await
                .expect("register");
            broker
                .set_project_clones(
                    &world.project,
                    vec![(postgres, CloneChoice::of(shop.clone()))],
                )
                .await
                .expect("clone of shop");
            world.spawn_pools();
            // No snapshot yet: the pool waits rather than failing or making plain members.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let waiting = clone_pool(&broker.pools()).clone();
            assert_eq!(waiting.snapshot_taken_at_ms, None, "{waiting:?}");
            assert_eq!((waiting.idle, waiting.failures), (0, 0), "{waiting:?}");

            let first = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot")
                .snapshot
                .expect("taken");
            until_pool(&world, "a clone member ready", |v| {
                v.idle == 1 && v.snapshot_taken_at_ms == Some(first.taken_at_ms)
            })
            .await;

            let dev = world.working_agent("developer").await;
            let answer = ok(world.call(&dev, Verb::RequestSandbox, json!({})).await);
            let pg = evidence_of(&answer, "postgres").clone();
            assert_eq!(pg["clone"]["source"], "shop", "{pg}");
            assert_eq!(
                pg["clone"]["snapshot_taken_at_ms"], first.taken_at_ms,
                "{pg}"
            );
            assert!(
                answer.context_briefing.contains("clone of source shop"),
                "{}",
                answer.context_briefing
            );
            let served = clone_pool(&broker.pools()).clone();
            assert_eq!(served.handed_out, 1, "from the pool: {served:?}");
            // The schema is the agent's, the statistics production's, and no row came along.
            assert_eq!(
                pg_text(
                    &pg,
                    "SELECT tableowner FROM pg_tables WHERE tablename = 'readings'"
                )
                .await,
                pg["user"].as_str().expect("user")
            );
            assert_eq!(
                pg_text(
                    &pg,
                    "SELECT reltuples::bigint FROM pg_class WHERE relname = 'readings'"
                )
                .await,
                "50000"
            );
            assert_eq!(pg_text(&pg, "SELECT count(*) FROM readings").await, "0");
            let explain = "EXPLAIN SELECT * FROM readings WHERE sensor = 7";
            assert_eq!(
                pg_text(&pg, explain).await,
                pg_text(&json!({"url": url_of(&production)}), explain).await,
                "production's plan and estimate"
            );
            pg_query(
                &pg,
                "INSERT INTO readings VALUES (1, 1); DROP TABLE readings",
            )
            .await
            .expect("the agent owns what it was handed");
            let whole = serde_json::to_string(&answer).expect("json");
            assert!(
                !whole.contains(production.agent.password.expose_secret()),
                "{whole}"
            );

            // A newer snapshot replaces the idle member made from the older one.
            pg_query(
                &json!({"url": url_of(&production)}),
                "CREATE TABLE later (id int)",
            )
            .await
            .expect("production changes");
            let second = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot")
                .snapshot
                .expect("taken");
            assert!(second.taken_at_ms > first.taken_at_ms);
            until_pool(
                &world,
                "the member replaced by one of the new snapshot",
                |v| v.idle == 1 && v.snapshot_taken_at_ms == Some(second.taken_at_ms),
            )
            .await;
            let qa = world.working_agent("qa").await;
            let answer = ok(world.call(&qa, Verb::RequestSandbox, json!({})).await);
            let pg = evidence_of(&answer, "postgres").clone();
            assert_eq!(
                pg["clone"]["snapshot_taken_at_ms"], second.taken_at_ms,
                "{pg}"
            );
            assert_eq!(clone_pool(&broker.pools()).handed_out, 2);
            pg_query(&pg, "INSERT INTO later VALUES (1)")
                .await
                .expect("the new snapshot's table");

            for agent in [&dev, &qa] {
                ok(world.call(agent, Verb::ReleaseSandbox, json!({})).await);
            }
            world.stop_pools().await;
            broker
                .set_project_clones(&world.project, Vec::new())
                .await
                .expect("no clone");
            assert!(broker.remove_source(&shop).await.expect("remove"));
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_is_snapshotted_again_on_its_refresh_interval() {
    let spec = WorldSpec {
        kind: Kind::Docker,
        services: vec!["postgres"],
        ..WorldSpec::default()
    };
    let Some(world) = World::new(spec).await else {
        return;
    };
    world
        .run(|world| async move {
            let broker = &world.broker;
            let (_production, dsn) = production(&world, "prodrefresh").await;
            let due = SourceName::parse("due").expect("valid");
            let manual = SourceName::parse("manual").expect("valid");
            broker
                .put_source(&due, &dsn, Privacy::KeepValues, 1)
                .await
                .expect("register, refreshed every second");
            broker
                .put_source(&manual, &dsn, Privacy::KeepValues, 0)
                .await
                .expect("register, on demand only");
            // Never snapshotted: the one with an interval is due at once.
            assert_eq!(broker.refresh_sources().await, 1);
            let first = broker
                .source(&due)
                .await
                .expect("get")
                .and_then(|s| s.snapshot)
                .expect("refreshed");
            assert!(
                broker
                    .source(&manual)
                    .await
                    .expect("get")
                    .expect("some")
                    .snapshot
                    .is_none(),
                "on demand only"
            );
            // Not yet due again; then due once the interval has passed.
            assert_eq!(broker.refresh_sources().await, 0);
            tokio::time::sleep(Duration::from_millis(1100)).await;
            assert_eq!(broker.refresh_sources().await, 1);
            let second = broker
                .source(&due)
                .await
                .expect("get")
                .and_then(|s| s.snapshot)
                .expect("refreshed");
            assert!(
                second.taken_at_ms > first.taken_at_ms,
                "{first:?} {second:?}"
            );
            let audit = broker
                .audit_log(&AuditFilter {
                    limit: 100,
                    ..AuditFilter::default()
                })
                .await
                .expect("audit");
            assert!(
                audit
                    .entries
                    .iter()
                    .any(|e| e.action == "snapshot" && matches!(e.actor, Actor::Daemon)),
                "{:?}",
                audit.entries
            );
            for name in [&due, &manual] {
                assert!(broker.remove_source(name).await.expect("remove"));
            }
        })
        .await;
}
