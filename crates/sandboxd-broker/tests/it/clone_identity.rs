//! A clone is recognisably production's (issue 32, item 4), on Docker with a real PostgreSQL 18
//! "production" whose database has an awkward name (spaces, quotes, capitals): the clone's
//! database takes that name (URL, env and `current_database()` as the agent say so, a reset
//! keeps it); what the project is offered is what the image of the clone's major version has;
//! `reset_sandbox` says which snapshot of which source it rebuilt from and carries the clone
//! block; one registered source serves a project that keeps its sample values and one that must
//! not (whose `pg_stats` then has none, also after a reset and also beside a warm pool of the
//! source's clones); a source database named like the server's own keeps the sandbox's name,
//! with a note.

use std::time::Duration;

use sandboxd_backend::{Backend, InstanceRequest};
use sandboxd_broker::{BrokerConfig, PoolConfig, PoolKey, PoolTuning, PoolView};
use sandboxd_domain::clone::{CloneChoice, Privacy};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{
    Actor, Agent, AgentSlug, EngineRef, FeatureRequest, Instance, ProjectSlug, SourceName,
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, engines, evidence_of, ok, pg_query, refused};

/// The production database's name: everything an identifier can make awkward.
const PROD_DB: &str = "Shop \"Prod\" DB";
/// [`PROD_DB`] in a URL's path.
const PROD_DB_IN_URL: &str = "Shop%20%22Prod%22%20DB";

fn postgres() -> EngineRef {
    EngineRef::parse("postgres").expect("registered")
}

/// A PostgreSQL 18 production of `world` with a database named [`PROD_DB`] holding `orders`
/// (100 000 rows, skewed status: sample values for `pg_stats`), and the DSN of that database.
async fn production(world: &World, tag: &str) -> (Instance, SecretString) {
    let owner = AgentSlug::parse(&sandboxd_testkit::unique(tag)).expect("slug");
    world.track(&owner);
    let production = world
        .backend
        .provision(&InstanceRequest {
            engine: postgres(),
            owner,
            maker: world.broker.daemon_id().clone(),
            features: Default::default(),
            major: Some(18),
            size: None,
        })
        .await
        .expect("a PostgreSQL 18 production");
    let password = production.agent.password.expose_secret().to_owned();
    let base = format!(
        "postgresql://{}:{password}@{}:{}",
        production.agent.user, production.host, production.port
    );
    pg_query(
        &json!({"url": format!("{base}/{}", production.database)}),
        "CREATE DATABASE \"Shop \"\"Prod\"\" DB\"",
    )
    .await
    .expect("production's database");
    pg_query(
        &json!({"url": format!("{base}/{PROD_DB_IN_URL}")}),
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL); \
         INSERT INTO orders SELECT g, CASE WHEN g % 100 = 0 THEN 'refunded' \
           WHEN g % 10 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 100000) g; \
         ANALYZE orders",
    )
    .await
    .expect("load production");
    let dsn = SecretString::from(format!(
        "host={} port={} user={} password={password} dbname='{PROD_DB}'",
        production.host, production.port, production.agent.user
    ));
    (production, dsn)
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

/// How many of `orders`' column statistics carry sample values, and how many carry a
/// distinct count, as the agent sees them.
async fn sample_values(pg: &serde_json::Value) -> (String, String) {
    (
        pg_text(
            pg,
            "SELECT count(*) FROM pg_stats WHERE tablename = 'orders' \
             AND (most_common_vals IS NOT NULL OR histogram_bounds IS NOT NULL)",
        )
        .await,
        pg_text(
            pg,
            "SELECT count(*) FROM pg_stats WHERE tablename = 'orders' AND n_distinct IS NOT NULL",
        )
        .await,
    )
}

/// The clone's database is production's, by every name the agent has for it.
async fn assert_named_after_production(pg: &serde_json::Value) {
    assert_eq!(pg["database"], PROD_DB, "{pg}");
    assert_eq!(pg["env"]["ROBOCO_TEST_DB_NAME"], PROD_DB, "{pg}");
    let url = pg["url"].as_str().expect("url");
    assert!(url.ends_with(&format!("/{PROD_DB_IN_URL}")), "{url}");
    assert_eq!(pg["env"]["DATABASE_URL"], url, "{pg}");
    assert_eq!(pg_text(pg, "SELECT current_database()").await, PROD_DB);
}

/// A second project of `world`, opted into postgres, with `choice` as its clone, and a
/// developer of it holding a task.
async fn other_project(world: &World, choice: CloneChoice) -> Agent {
    let broker = &world.broker;
    let project = ProjectSlug::parse(&sandboxd_testkit::unique("q")).expect("slug");
    broker
        .set_project(&project, Some(engines(&["postgres"])), None)
        .await
        .expect("project");
    broker
        .set_project_clones(&project, vec![(postgres(), choice)])
        .await
        .expect("its clone");
    let slug = AgentSlug::parse(&sandboxd_testkit::unique("dev")).expect("slug");
    world.track(&slug);
    broker
        .spawn_agent(&slug, "developer", &project)
        .await
        .expect("spawn");
    broker
        .add_task(&project, &sandboxd_testkit::unique("task"), "a task")
        .await
        .expect("task");
    let agent = broker.agent(&slug).await.expect("read").expect("agent");
    ok(world.call(&agent, Verb::GiveMeWork, json!({})).await);
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_has_productions_database_name_offer_and_privacy_and_a_reset_says_so() {
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
            let (production, dsn) = production(&world, "prodname").await;
            let shop = SourceName::parse("shop").expect("valid");
            broker
                .put_source(&shop, &dsn, Privacy::KeepValues, 0)
                .await
                .expect("register keep-values");
            let first = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot")
                .snapshot
                .expect("taken");
            broker
                .set_project_clones(
                    &world.project,
                    vec![(postgres(), CloneChoice::of(shop.clone()))],
                )
                .await
                .expect("clone of shop");

            // The offer is the PostgreSQL 18 image's (no postgis there), not the default
            // image's (which has it); the briefing of a new agent says the same.
            let project = broker
                .project(&world.project)
                .await
                .expect("read")
                .expect("project");
            let patience = Duration::from_secs(120);
            let offered = broker
                .offered_names_in(&project, postgres(), patience)
                .await;
            let default = broker.offered_names(postgres(), patience).await;
            assert!(default.contains(&"postgis"), "the 17 image: {default:?}");
            assert!(
                !offered.contains(&"postgis") && offered.contains(&"vector"),
                "the 18 image: {offered:?}"
            );
            let probe = broker
                .offered_at(postgres(), Some(18), patience)
                .await
                .expect("probed");
            assert!(probe.source.contains(":18"), "{}", probe.source);
            let briefed = broker
                .spawn_agent(
                    &AgentSlug::parse(&sandboxd_testkit::unique("brief")).expect("slug"),
                    "developer",
                    &world.project,
                )
                .await
                .expect("spawn");
            world.track(&briefed.agent);
            let features_line = briefed
                .briefing
                .iter()
                .find(|line| line.starts_with("Features you may add"))
                .cloned()
                .unwrap_or_default();
            assert!(
                features_line.contains("vector") && !features_line.contains("postgis"),
                "{:?}",
                briefed.briefing
            );

            // The panel's card shows the same image, and a standing feature it lacks is refused
            // naming it (the default image has it, so this refusal is the clone's).
            let card = broker
                .offered_in(&project, postgres(), patience)
                .await
                .expect("probed");
            assert!(
                !card.names().contains(&"postgis") && card.names().contains(&"vector"),
                "{:?}",
                card.names()
            );
            let standing = broker
                .set_project(
                    &world.project,
                    Some(vec![postgres()]),
                    Some(FeatureRequest::parse_cli(["postgres=postgis"]).expect("allowlisted")),
                )
                .await
                .expect_err("postgis is not in the 18 image");
            assert!(
                standing.to_string().contains("PostgreSQL 18")
                    && standing.to_string().contains("vector"),
                "{standing}"
            );

            // A feature the clone's image lacks is refused for what it is; one it has is given.
            let dev = world.working_agent("developer").await;
            let lacking = refused(
                world
                    .call(
                        &dev,
                        Verb::RequestSandbox,
                        json!({"extensions": {"postgres": ["postgis"]}}),
                    )
                    .await,
            );
            assert!(lacking.message.contains("postgis"), "{lacking:?}");
            let answer = ok(world
                .call(
                    &dev,
                    Verb::RequestSandbox,
                    json!({"extensions": {"postgres": ["vector"]}}),
                )
                .await);
            let pg = evidence_of(&answer, "postgres").clone();
            assert_eq!(pg["available_extensions"], json!(["vector"]), "{pg}");
            assert_named_after_production(&pg).await;
            assert_eq!(pg["clone"]["privacy"], "keep-values", "{pg}");
            let (with_values, counted) = sample_values(&pg).await;
            assert_ne!(with_values, "0", "production's sample values");
            assert_eq!(counted, "2");
            let whole = serde_json::to_string(&answer).expect("json");
            assert!(!whole.contains(production.agent.password.expose_secret()));

            // The same source, no values for another project: none reach its pg_statistic.
            let strict = other_project(
                &world,
                CloneChoice {
                    source: shop.clone(),
                    privacy: Some(Privacy::NoValues),
                },
            )
            .await;
            let answer = ok(world.call(&strict, Verb::RequestSandbox, json!({})).await);
            let strict_pg = evidence_of(&answer, "postgres").clone();
            assert_named_after_production(&strict_pg).await;
            assert_eq!(strict_pg["clone"]["privacy"], "no-values", "{strict_pg}");
            assert_eq!(
                strict_pg["clone"]["snapshot_taken_at_ms"], first.taken_at_ms,
                "from the one stored snapshot"
            );
            assert_eq!(
                sample_values(&strict_pg).await,
                ("0".to_owned(), "2".to_owned()),
                "counts without a single value"
            );
            let summary = strict_pg["clone"]["summary"].to_string();
            assert!(
                !summary.contains("refunded") && !summary.contains("paid"),
                "{summary}"
            );

            // A reset rebuilds from the newest snapshot, says which, keeps the name.
            let second = broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot")
                .snapshot
                .expect("taken");
            assert!(second.taken_at_ms > first.taken_at_ms);
            pg_query(&pg, "CREATE TABLE scratch (x int)")
                .await
                .expect("the agent's table");
            let reset = ok(world.call(&dev, Verb::ResetSandbox, json!({})).await);
            let rebuilt = evidence_of(&reset, "postgres").clone();
            assert_eq!(rebuilt["clone"]["source"], "shop", "{rebuilt}");
            assert_eq!(
                rebuilt["clone"]["snapshot_taken_at_ms"], second.taken_at_ms,
                "{rebuilt}"
            );
            assert_eq!(rebuilt["clone"]["privacy"], "keep-values");
            assert!(
                rebuilt["clone"]["summary"]["tables"].as_u64() == Some(1),
                "{rebuilt}"
            );
            assert!(
                reset.context_briefing.contains(&format!(
                    "postgres was rebuilt as a clone of source shop from its snapshot {}",
                    second.taken_at_ms
                )),
                "{}",
                reset.context_briefing
            );
            assert_named_after_production(&pg).await;
            assert_eq!(
                pg_text(
                    &pg,
                    "SELECT count(*) FROM pg_tables WHERE tablename = 'scratch'"
                )
                .await,
                "0"
            );
            assert_ne!(sample_values(&pg).await.0, "0");
            let info = ok(world.call(&dev, Verb::SandboxInfo, json!({})).await);
            let info_pg = evidence_of(&info, "postgres");
            assert_eq!(
                info_pg["clone"]["snapshot_taken_at_ms"], second.taken_at_ms,
                "sandbox_info knows the new snapshot: {info_pg}"
            );
            // The strict project's reset stays without values.
            let reset = ok(world.call(&strict, Verb::ResetSandbox, json!({})).await);
            assert_eq!(
                evidence_of(&reset, "postgres")["clone"]["privacy"],
                "no-values"
            );
            assert_named_after_production(&strict_pg).await;
            assert_eq!(sample_values(&strict_pg).await.0, "0");

            // Values are never asked of a source registered without them.
            let bare = SourceName::parse("bare").expect("valid");
            broker
                .put_source(&bare, &dsn, Privacy::NoValues, 0)
                .await
                .expect("register no-values");
            let more = broker
                .set_project_clones(
                    &world.project,
                    vec![(
                        postgres(),
                        CloneChoice {
                            source: bare.clone(),
                            privacy: Some(Privacy::KeepValues),
                        },
                    )],
                )
                .await
                .expect_err("keep-values of a no-values source");
            assert!(more.to_string().contains("registered no-values"), "{more}");

            // A source database named like the server's own: the clone keeps its name, and
            // says why.
            let own = SourceName::parse("own").expect("valid");
            let own_dsn = SecretString::from(format!(
                "host={} port={} user={} password={} dbname=postgres",
                production.host,
                production.port,
                production.agent.user,
                production.agent.password.expose_secret()
            ));
            broker
                .put_source(&own, &own_dsn, Privacy::KeepValues, 0)
                .await
                .expect("register");
            broker
                .snapshot_source(&own, Actor::Operator)
                .await
                .expect("snapshot");
            broker
                .set_project_clones(
                    &world.project,
                    vec![(postgres(), CloneChoice::of(own.clone()))],
                )
                .await
                .expect("clone of own");
            let answer = ok(world.call(&dev, Verb::RequestSandbox, json!({})).await);
            let kept = evidence_of(&answer, "postgres").clone();
            assert_eq!(kept["clone"]["source"], "own", "{kept}");
            assert_eq!(kept["database"], "sandbox", "{kept}");
            assert_eq!(pg_text(&kept, "SELECT current_database()").await, "sandbox");
            let notes = kept["clone"]["notes"].to_string();
            assert!(
                notes.contains("\\\"postgres\\\"") && notes.contains("keeps for sandboxd"),
                "{notes}"
            );

            for agent in [&dev, &strict] {
                ok(world.call(agent, Verb::ReleaseSandbox, json!({})).await);
            }
            for project in [world.project.clone(), strict.project.clone()] {
                broker
                    .set_project_clones(&project, Vec::new())
                    .await
                    .expect("no clone");
            }
            for source in [&shop, &bare, &own] {
                assert!(broker.remove_source(source).await.expect("remove"));
            }
        })
        .await;
}

fn clone_pool(views: &[PoolView]) -> PoolView {
    views
        .iter()
        .find(|v| v.key.to_string() == "postgres@shop")
        .cloned()
        .unwrap_or_else(|| panic!("the postgres@shop pool in {views:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_clone_is_named_after_production_and_never_serves_a_project_without_values() {
    let spec = WorldSpec {
        kind: Kind::Docker,
        services: vec!["postgres"],
        tweak_config: |config: &mut BrokerConfig| {
            config.pool_tuning = PoolTuning {
                backoff_base: Duration::from_millis(200),
                backoff_max: Duration::from_secs(2),
                check_interval: Duration::from_millis(500),
                parallel_starts: 1,
            };
            let key = PoolKey::parse("postgres@shop").expect("a clone pool");
            config.pools = vec![PoolConfig {
                engine: key.engine,
                clone_of: key.clone_of,
                features: Default::default(),
                min_idle: 1,
                max_total: 1,
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
            let (_production, dsn) = production(&world, "prodpooled").await;
            let shop = SourceName::parse("shop").expect("valid");
            broker
                .put_source(&shop, &dsn, Privacy::KeepValues, 0)
                .await
                .expect("register");
            broker
                .set_project_clones(
                    &world.project,
                    vec![(postgres(), CloneChoice::of(shop.clone()))],
                )
                .await
                .expect("clone of shop");
            world.spawn_pools();
            broker
                .snapshot_source(&shop, Actor::Operator)
                .await
                .expect("snapshot");
            let started = std::time::Instant::now();
            while clone_pool(&broker.pools()).idle < 1 {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "{:?}",
                    clone_pool(&broker.pools())
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }

            // A project without values asks first: the member (with values) is not its; it
            // gets a clone of its own, without values.
            let strict =
                other_project(&world, CloneChoice::parse("shop:no-values").expect("valid")).await;
            let answer = ok(world.call(&strict, Verb::RequestSandbox, json!({})).await);
            let strict_pg = evidence_of(&answer, "postgres").clone();
            assert_eq!(
                clone_pool(&broker.pools()).handed_out,
                0,
                "not from the pool"
            );
            assert_eq!(strict_pg["clone"]["privacy"], "no-values");
            assert_eq!(sample_values(&strict_pg).await.0, "0");
            assert_named_after_production(&strict_pg).await;

            // The keep-values project gets the member: renamed, handed to its account.
            let dev = world.working_agent("developer").await;
            let answer = ok(world.call(&dev, Verb::RequestSandbox, json!({})).await);
            let pg = evidence_of(&answer, "postgres").clone();
            assert_eq!(clone_pool(&broker.pools()).handed_out, 1, "from the pool");
            assert_named_after_production(&pg).await;
            assert_eq!(
                pg_text(
                    &pg,
                    "SELECT tableowner FROM pg_tables WHERE tablename = 'orders'"
                )
                .await,
                pg["user"].as_str().expect("user")
            );
            assert_eq!(
                pg_text(
                    &pg,
                    "SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_database \
                     WHERE datname = current_database()"
                )
                .await,
                pg["user"].as_str().expect("user"),
                "the renamed database is the agent's"
            );
            assert_ne!(sample_values(&pg).await.0, "0");
            pg_query(&pg, "INSERT INTO orders VALUES (1, 'paid')")
                .await
                .expect("production's table, empty, the agent's");

            for agent in [&dev, &strict] {
                ok(world.call(agent, Verb::ReleaseSandbox, json!({})).await);
            }
            world.stop_pools().await;
            for project in [world.project.clone(), strict.project.clone()] {
                broker
                    .set_project_clones(&project, Vec::new())
                    .await
                    .expect("no clone");
            }
            assert!(broker.remove_source(&shop).await.expect("remove"));
        })
        .await;
}
