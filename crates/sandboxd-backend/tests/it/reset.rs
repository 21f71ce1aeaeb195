//! `Backend::reset` on both backends: what a test suite leaves in a sandbox (tables with rows,
//! extra databases, roles, keys, functions, scripts) is gone, the same credentials work at the
//! same endpoint, and the features the instance had are active again.

use mysql_async::prelude::Queryable;
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::Instance;

use crate::docker::{Harness, MARIADB, POSTGRES, REDIS, harness_owner};
use crate::support::{self, ProcessHarness, request};

/// Fills a Postgres sandbox the way a test suite would, with a session left open, resets it,
/// and checks that it is as handed out.
async fn postgres_round(backend: &dyn Backend, instance: &Instance) {
    let client = support::pg(instance).await;
    let mut ddl = String::new();
    for table in 0..10 {
        ddl.push_str(&format!(
            "CREATE TABLE t{table} (id int PRIMARY KEY, v text); \
             INSERT INTO t{table} SELECT g, md5(g::text) FROM generate_series(1, 1000) g; "
        ));
    }
    ddl.push_str("CREATE FUNCTION leftover() RETURNS int LANGUAGE sql AS 'SELECT 1'");
    client.batch_execute(&ddl).await.expect("the suite's work");
    client
        .batch_execute("CREATE DATABASE test_leftover")
        .await
        .expect("a database of its own");
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("version")
        .get(0);
    if version >= 160_000 {
        client
            .batch_execute("CREATE ROLE leftover_role")
            .await
            .expect("CREATEROLE from 16 on");
    }

    backend.reset(instance, None).await.expect("reset");
    // The open session was ended with its database; the same credentials connect again.
    assert!(client.simple_query("SELECT 1").await.is_err());
    let client = support::pg(instance).await;
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[])
                .await
                .unwrap_or_else(|err| panic!("{sql}: {err}"))
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").await,
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM pg_proc WHERE proname = 'leftover'").await,
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM pg_database WHERE datname = 'test_leftover'").await,
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM pg_roles WHERE rolname = 'leftover_role'").await,
        0
    );
    // As handed out: the agent owns its database and schema, the features are back.
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba \
             WHERE d.datname = current_database() AND r.rolname = current_user"
        )
        .await,
        1
    );
    for feature in &instance.features {
        let extension = feature.name();
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_extension WHERE extname = $1",
                &[&extension],
            )
            .await
            .expect("extensions")
            .get(0);
        assert_eq!(active, 1, "{extension} is active again");
    }
    client
        .batch_execute("CREATE TABLE again (id int); INSERT INTO again VALUES (1)")
        .await
        .expect("the agent works in it again");
    // A second reset of a nearly empty sandbox is fine too.
    backend.reset(instance, None).await.expect("reset again");
}

async fn redis_round(backend: &dyn Backend, instance: &Instance) {
    let mut conn = support::redis(instance).await;
    for db in [0, 3] {
        let _: () = redis::pipe()
            .cmd("SELECT")
            .arg(db)
            .cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut conn)
            .await
            .expect("keys");
    }
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query_async(&mut conn)
        .await
        .expect("a script");
    backend.reset(instance, None).await.expect("reset");
    let mut conn = support::redis(instance).await;
    for db in [0, 3] {
        let size: i64 = redis::pipe()
            .cmd("SELECT")
            .arg(db)
            .ignore()
            .cmd("DBSIZE")
            .query_async::<(i64,)>(&mut conn)
            .await
            .expect("dbsize")
            .0;
        assert_eq!(size, 0, "db {db} is empty");
    }
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut conn)
        .await
        .expect("script exists");
    assert_eq!(exists, [0], "the script cache is empty");
}

async fn mariadb_round(backend: &dyn Backend, instance: &Instance) {
    let mut conn = support::mysql(instance).await;
    conn.query_drop(
        "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2); \
         CREATE DATABASE test_leftover; CREATE TABLE test_leftover.x (id int)",
    )
    .await
    .expect("the suite's work");
    drop(conn);
    backend.reset(instance, None).await.expect("reset");
    let mut conn = support::mysql(instance).await;
    let tables: Vec<String> = conn.query("SHOW TABLES").await.expect("tables");
    assert!(tables.is_empty(), "{tables:?}");
    let databases: Vec<String> = conn.query("SHOW DATABASES").await.expect("databases");
    assert!(
        !databases.iter().any(|d| d == "test_leftover"),
        "{databases:?}"
    );
    assert!(databases.iter().any(|d| d == "sandbox"), "{databases:?}");
    conn.query_drop("CREATE TABLE again (id int)")
        .await
        .expect("the agent works in it again");
}

/// Each engine's round on its instance, then their teardown.
pub(crate) async fn every_round(backend: &dyn Backend, [pg, redis, mariadb]: [&Instance; 3]) {
    postgres_round(backend, pg).await;
    redis_round(backend, redis).await;
    mariadb_round(backend, mariadb).await;
    for instance in [pg, redis, mariadb] {
        backend
            .teardown(&InstanceHandle::of(instance))
            .await
            .expect("teardown");
    }
}

#[tokio::test]
async fn reset_empties_process_instances_and_keeps_their_credentials() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("reset");
            let pg = backend
                .provision(&request("postgres", &owner, &["pg_trgm"]))
                .await
                .expect("postgres with pg_trgm");
            let redis = support::provision(&backend, "redis", &owner).await;
            let mariadb = support::provision(&backend, "mariadb", &owner).await;
            every_round(backend.as_ref(), [&pg, &redis, &mariadb]).await;
        })
        .await;
}

#[tokio::test]
async fn reset_empties_docker_instances_and_keeps_their_credentials() {
    let Some(harness) = Harness::new("dreset", &[POSTGRES, REDIS, MARIADB], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _| async move {
            let owner = harness_owner("dreset");
            let requests = [
                request("postgres", &owner, &["pg_trgm"]),
                request("redis", &owner, &[]),
                request("mariadb", &owner, &[]),
            ];
            let (pg, redis, mariadb) = tokio::join!(
                backend.provision(&requests[0]),
                backend.provision(&requests[1]),
                backend.provision(&requests[2]),
            );
            let (pg, redis, mariadb) = (
                pg.expect("postgres"),
                redis.expect("redis"),
                mariadb.expect("mariadb"),
            );
            every_round(backend.as_ref(), [&pg, &redis, &mariadb]).await;
        })
        .await;
}
