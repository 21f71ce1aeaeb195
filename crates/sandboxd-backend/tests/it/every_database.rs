//! Every feature a Postgres sandbox has reaches every database its agent makes (issue 29): the
//! agent, as itself, makes a database the way Django's and Rails' test runners do (a copy of
//! `template1`) and the way SQLAlchemy's does (a copy of its own database), and uses PostGIS
//! there by its plain names, and `CREATE EXTENSION IF NOT EXISTS` of the feature and of the
//! pre-installed `bloom` finds them made. The same after a feature is activated in place,
//! after a reset, and on a warm-pool member handed out; on both backends, one cold instance and
//! one pool member each.

use std::collections::BTreeSet;
use std::time::Instant;

use sandboxd_backend::{Backend, IdleMember, InstanceHandle};
use sandboxd_domain::{AgentSlug, Feature, Instance};

use crate::docker::{Harness, POSTGRES, harness_owner};
use crate::support::{self, ProcessHarness, engine, request};

/// What the agent runs to use a feature by its plain names, and what it answers.
fn use_of(feature: &str) -> (&'static str, &'static str) {
    match feature {
        "postgis" => ("SELECT ST_AsText(ST_MakePoint(1, 2))", "POINT(1 2)"),
        "pg_trgm" => ("SELECT similarity('word', 'word')::text", "1"),
        other => panic!("no use written for {other}"),
    }
}

/// `instance` as seen from another of its databases.
fn in_database(instance: &Instance, database: &str) -> Instance {
    Instance {
        database: database.to_owned(),
        ..instance.clone()
    }
}

/// As the agent: makes `name` from `template1` and `<name>_copy` from its own database, and in
/// each uses every feature of `instance`, creates them again as a migration would (a no-op),
/// creates `bloom` (pre-installed) and a bloom index, and is still refused an extension outside
/// what the daemon made.
async fn every_database_has_them(instance: &Instance, name: &str) {
    let own = support::pg(instance).await;
    own.batch_execute("CREATE EXTENSION IF NOT EXISTS bloom")
        .await
        .expect("bloom in the agent's own database");
    own.batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|err| panic!("the agent makes {name}: {err:?}"));
    // SQLAlchemy's provisioning: `CREATE DATABASE … TEMPLATE <current_database()>`.
    own.batch_execute(&format!(
        "CREATE DATABASE {name}_copy TEMPLATE \"{}\"",
        instance.database
    ))
    .await
    .unwrap_or_else(|err| panic!("the agent copies its own database: {err:?}"));
    drop(own);
    for database in [name.to_owned(), format!("{name}_copy")] {
        let client = support::pg(&in_database(instance, &database)).await;
        for feature in &instance.features {
            let (sql, expected) = use_of(feature.name());
            let answer: String = client
                .query_one(sql, &[])
                .await
                .unwrap_or_else(|err| panic!("{database}: {sql}: {err:?}"))
                .get(0);
            assert_eq!(answer, expected, "{database}: {sql}");
            let extension = match feature.spec().activation {
                sandboxd_domain::engine::Activation::PgExtension { extension, .. } => extension,
                sandboxd_domain::engine::Activation::RedisModule { .. } => unreachable!(),
            };
            client
                .batch_execute(&format!("CREATE EXTENSION IF NOT EXISTS \"{extension}\""))
                .await
                .unwrap_or_else(|err| panic!("{database}: a migration's {extension}: {err:?}"));
        }
        if instance.features.iter().any(|f| f.name() == "postgis") {
            // GeoDjango's tests create PostGIS's rasters beside it: made with it where the
            // server has them.
            let raster: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_available_extensions \
                     WHERE name = 'postgis_raster')",
                    &[],
                )
                .await
                .expect("available extensions")
                .get(0);
            if raster {
                client
                    .batch_execute("CREATE EXTENSION IF NOT EXISTS postgis_raster")
                    .await
                    .unwrap_or_else(|err| panic!("{database}: postgis_raster: {err:?}"));
                rasters_stay_inside(instance, &database).await;
            }
        }
        client
            .batch_execute(
                "CREATE EXTENSION IF NOT EXISTS bloom; \
                 CREATE TABLE bloomed (a int, b int); \
                 CREATE INDEX bloomed_ab ON bloomed USING bloom (a, b)",
            )
            .await
            .unwrap_or_else(|err| panic!("{database}: bloom: {err:?}"));
        // Nothing beyond what the daemon made: an untrusted extension is still refused.
        let refused = client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
            .await
            .expect_err("pageinspect stays the superuser's");
        assert_eq!(
            refused.code().map(|c| c.code()),
            Some("42501"),
            "{database}: {refused:?}"
        );
    }
}

/// PostGIS's rasters reach nothing outside the database for the agent: out-of-database
/// rasters and GDAL's drivers are off, and the agent turns them on neither in its session (a
/// value set before the raster library loads is dropped when it loads) nor as a setting of a
/// database or role it owns.
async fn rasters_stay_inside(instance: &Instance, database: &str) {
    const OUTSIDE: [(&str, &str); 2] = [
        ("postgis.enable_outdb_rasters", "on"),
        ("postgis.gdal_enabled_drivers", "ENABLE_ALL"),
    ];
    let here = in_database(instance, database);
    for attempt in ["before the library loads", "after it loaded"] {
        let client = support::pg(&here).await;
        if attempt == "after it loaded" {
            client
                .batch_execute("SELECT postgis_raster_lib_version()")
                .await
                .expect("the raster library loads");
        }
        for (setting, value) in OUTSIDE {
            let set = client
                .batch_execute(&format!("SET {setting} = '{value}'"))
                .await;
            if attempt == "after it loaded" {
                let refused = set.expect_err("a superuser's setting");
                assert_eq!(
                    refused.code().map(|c| c.code()),
                    Some("42501"),
                    "{database}: SET {setting}: {refused:?}"
                );
            }
            for owned in [
                format!("DATABASE \"{database}\""),
                format!("ROLE \"{}\"", instance.agent.user),
            ] {
                let refused = client
                    .batch_execute(&format!("ALTER {owned} SET {setting} = '{value}'"))
                    .await
                    .expect_err("a superuser's setting, also as a default");
                assert_eq!(
                    refused.code().map(|c| c.code()),
                    Some("42501"),
                    "{database}: ALTER {owned} SET {setting}: {refused:?}"
                );
            }
        }
        client
            .batch_execute("SELECT postgis_raster_lib_version()")
            .await
            .expect("the raster library loads");
        for (setting, value) in OUTSIDE {
            let now: String = client
                .query_one(&format!("SELECT current_setting('{setting}')"), &[])
                .await
                .unwrap_or_else(|err| panic!("{database}: {setting}: {err:?}"))
                .get(0);
            assert_ne!(
                now, value,
                "{database}: {setting} set by the agent {attempt}"
            );
        }
    }
}

fn features(names: &[&str]) -> BTreeSet<Feature> {
    names
        .iter()
        .map(|f| Feature::parse(engine("postgres"), f).expect("allowlisted"))
        .collect()
}

/// Large objects the agent's role owns in `template1` (anyone may make one there; a database
/// copied from it would carry it).
async fn agent_objects_in_template1(instance: &Instance) -> i64 {
    support::pg(&in_database(instance, "template1"))
        .await
        .query_one(
            "SELECT count(*) FROM pg_largeobject_metadata m \
             JOIN pg_roles r ON r.oid = m.lomowner WHERE r.rolname = current_user",
            &[],
        )
        .await
        .expect("large objects")
        .get(0)
}

/// A cold instance with PostGIS: every database has it; then pg_trgm in place; then a reset
/// (after the agent left a large object in `template1`); then `member`, handed out to `owner`.
async fn round(backend: &dyn Backend, mut cold: Instance, member: IdleMember, owner: &AgentSlug) {
    every_database_has_them(&cold, "test_cold").await;

    let started = Instant::now();
    backend
        .activate(&mut cold, &features(&["pg_trgm"]))
        .await
        .expect("pg_trgm in place");
    eprintln!("pg_trgm in place: {} ms", started.elapsed().as_millis());
    every_database_has_them(&cold, "test_in_place").await;

    support::pg(&in_database(&cold, "template1"))
        .await
        .batch_execute("SELECT lo_create(0)")
        .await
        .expect("anyone makes a large object");
    assert_eq!(agent_objects_in_template1(&cold).await, 1);
    let started = Instant::now();
    backend.reset(&cold, None).await.expect("the reset");
    eprintln!(
        "reset with postgis and pg_trgm: {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(
        agent_objects_in_template1(&cold).await,
        0,
        "the reset left template1 the daemon's"
    );
    // The reset dropped the agent's databases; the names are free again.
    every_database_has_them(&cold, "test_cold").await;

    let pooled = backend.hand_out(member, owner).await.expect("hand-out");
    assert_eq!(pooled.features, features(&["postgis"]));
    every_database_has_them(&pooled, "test_pooled").await;

    for instance in [&cold, &pooled] {
        backend
            .teardown(&InstanceHandle::of(instance))
            .await
            .expect("teardown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_database_the_agent_makes_has_its_features_on_processes() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let cold = request("postgres", &support::owner("everydb"), &["postgis"]);
            let idle = request("postgres", &AgentSlug::pool_slot(), &["postgis"]);
            let started = Instant::now();
            let (cold, member) =
                tokio::join!(backend.provision(&cold), backend.provision_idle(&idle));
            eprintln!(
                "a cold instance and a pool member with postgis, side by side: {} ms",
                started.elapsed().as_millis()
            );
            let cold = cold.expect("a cold instance with postgis (scripts/install-deps.sh)");
            let member = member.expect("a pool member with postgis");
            round(
                backend.as_ref(),
                cold,
                member,
                &support::owner("everydbpool"),
            )
            .await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_database_the_agent_makes_has_its_features_on_docker() {
    const TAG: &str = "deverydb";
    let Some(harness) = Harness::new(TAG, &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let cold = request("postgres", &harness_owner(TAG), &["postgis"]);
            let idle = request("postgres", &AgentSlug::pool_slot(), &["postgis"]);
            let started = Instant::now();
            let (cold, member) =
                tokio::join!(backend.provision(&cold), backend.provision_idle(&idle));
            eprintln!(
                "a cold instance and a pool member with postgis, side by side: {} ms",
                started.elapsed().as_millis()
            );
            let cold = cold.expect("a cold instance with postgis");
            let member = member.expect("a pool member with postgis");
            round(backend.as_ref(), cold, member, &harness_owner(TAG)).await;
        })
        .await;
}
