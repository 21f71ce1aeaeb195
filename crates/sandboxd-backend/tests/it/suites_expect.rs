//! The servers as test suites expect them, on both backends, as the handed-out accounts: MariaDB
//! with its time-zone tables and utf8mb4, PostgreSQL with two-phase commit (a prepared
//! transaction left behind is gone after a reset) and the `en_US` and `C.UTF-8` collations,
//! Redis's read-only `CONFIG GET` / `CONFIG RESETSTAT`; the settings a suite can see the same on
//! both backends; and the server version `doctor` reports is the one the server says.

use std::collections::BTreeMap;

use mysql_async::prelude::Queryable;
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::Instance;
use secrecy::ExposeSecret;

use crate::docker::{Harness, MARIADB, POSTGRES, REDIS, harness_owner};
use crate::support::{self, ProcessHarness, request};

/// What a suite can see of a server's configuration, by name.
type Settings = BTreeMap<String, String>;

/// PostgreSQL settings a test suite can observe, and that must not depend on the backend.
const PG_SETTINGS: &[&str] = &[
    "max_prepared_transactions",
    "max_connections",
    "server_encoding",
    "client_encoding",
    "standard_conforming_strings",
    "DateStyle",
    "IntervalStyle",
    "default_transaction_isolation",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
];

/// MariaDB variables a test suite can observe (Django's and SQLAlchemy's check most of them),
/// and that must not depend on the backend. `collation_connection` among them: 11.8 would map a
/// client's utf8mb4 to `utf8mb4_uca1400_ai_ci` where the host's 10.11 gives `utf8mb4_general_ci`.
const MARIADB_SETTINGS: &[&str] = &[
    "collation_connection",
    "character_set_server",
    "collation_server",
    "character_set_database",
    "collation_database",
    "sql_mode",
    "time_zone",
    "lower_case_table_names",
    "tx_isolation",
    "default_storage_engine",
    "max_allowed_packet",
    "wait_timeout",
    "max_connections",
    "group_concat_max_len",
    "innodb_strict_mode",
    "default_week_format",
    "div_precision_increment",
    "character_set_client",
    "autocommit",
    "explicit_defaults_for_timestamp",
    "innodb_flush_log_at_trx_commit",
    "log_bin",
];

/// Redis settings a test suite can read (now that `CONFIG GET` is allowed).
const REDIS_SETTINGS: &[&str] = &["maxmemory-policy", "appendonly", "save", "databases"];

/// Two-phase commit as the agent, a prepared transaction left behind and removed by a reset, and
/// the common collations. Answers the settings.
async fn postgres_round(backend: &dyn Backend, instance: &Instance) -> Settings {
    let client = support::pg(instance).await;
    // One statement a message: COMMIT PREPARED refuses to run in a multi-statement one.
    for statement in [
        "CREATE TABLE two_phase (id int)",
        "BEGIN",
        "INSERT INTO two_phase VALUES (1)",
        "PREPARE TRANSACTION 'suite-committed'",
        "COMMIT PREPARED 'suite-committed'",
        "BEGIN",
        "INSERT INTO two_phase VALUES (2)",
        "PREPARE TRANSACTION 'suite-left'",
    ] {
        client
            .batch_execute(statement)
            .await
            .unwrap_or_else(|err| panic!("{statement} as the agent: {err}"));
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM two_phase", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 1, "the committed one only");
    // The collations a suite names, and that they sort as their locale does.
    let collations: Vec<String> = client
        .query(
            "SELECT collname FROM pg_collation \
             WHERE collname IN ('en_US.utf8', 'en_US', 'C.utf8') ORDER BY collname",
            &[],
        )
        .await
        .expect("collations")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(collations, ["C.utf8", "en_US", "en_US.utf8"]);
    let (en_us, c): (bool, bool) = {
        let row = client
            .query_one(
                "SELECT 'a' < 'B' COLLATE \"en_US\", 'a' < 'B' COLLATE \"C.utf8\"",
                &[],
            )
            .await
            .expect("comparisons");
        (row.get(0), row.get(1))
    };
    assert!(en_us && !c, "en_US sorts a before B, C.UTF-8 by code point");
    client
        .batch_execute("CREATE TABLE named (name text COLLATE \"en_US.utf8\")")
        .await
        .expect("a column with the collation");
    let settings = pg_settings(&client).await;
    assert_eq!(settings.len(), PG_SETTINGS.len(), "every one: {settings:?}");
    assert_eq!(settings["max_prepared_transactions"], "10");
    let reported: String = client
        .query_one("SHOW server_version", &[])
        .await
        .expect("version")
        .get(0);
    assert_doctor_version(backend, instance, &reported).await;

    backend.reset(instance, None).await.expect("reset");
    let client = support::pg(instance).await;
    let prepared: i64 = client
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .await
        .expect("prepared transactions")
        .get(0);
    assert_eq!(
        prepared, 0,
        "the reset rolled the prepared transaction back"
    );
    settings
}

async fn pg_settings(client: &tokio_postgres::Client) -> Settings {
    let names: Vec<String> = PG_SETTINGS.iter().map(|s| (*s).to_owned()).collect();
    client
        .query(
            "SELECT name, setting FROM pg_settings WHERE name = ANY($1)",
            &[&names],
        )
        .await
        .expect("settings")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Named time zones and a 4-byte character in a table made without a charset clause, in the
/// agent's database and in a test database it makes. Answers the settings.
async fn mariadb_round(backend: &dyn Backend, instance: &Instance) -> Settings {
    let mut conn = support::mysql(instance).await;
    let converted: Option<String> = conn
        .query_first("SELECT CAST(CONVERT_TZ('2020-01-01 00:00', 'UTC', 'Europe/Paris') AS CHAR)")
        .await
        .expect("CONVERT_TZ");
    assert_eq!(converted.as_deref(), Some("2020-01-01 01:00:00"));
    let emoji = "snake 🐍 and \u{1F600}";
    for database in ["sandbox", "test_sandbox"] {
        conn.query_drop(format!(
            "CREATE DATABASE IF NOT EXISTS {database}; \
             CREATE TABLE {database}.words (w varchar(40))"
        ))
        .await
        .expect("a table without a charset clause");
        conn.exec_drop(format!("INSERT INTO {database}.words VALUES (?)"), (emoji,))
            .await
            .unwrap_or_else(|err| panic!("a 4-byte character in {database}: {err}"));
        let back: Option<String> = conn
            .query_first(format!("SELECT w FROM {database}.words"))
            .await
            .expect("read back");
        assert_eq!(back.as_deref(), Some(emoji), "in {database}");
    }
    // Django's `icontains` on a UUIDField: LIKE on a native UUID column ignores case.
    conn.query_drop(
        "CREATE TABLE sandbox.ids (id uuid); \
         INSERT INTO sandbox.ids VALUES ('550e8400-e29b-41d4-a716-446655440000')",
    )
    .await
    .expect("a UUID column");
    let found: Option<i64> = conn
        .query_first("SELECT count(*) FROM sandbox.ids WHERE id LIKE '%8400-E29B%'")
        .await
        .expect("LIKE on a UUID");
    assert_eq!(found, Some(1), "LIKE on a UUID column ignores case");
    let settings: Settings = conn
        .query::<(String, String), _>(format!(
            "SHOW VARIABLES WHERE Variable_name IN ({})",
            MARIADB_SETTINGS
                .iter()
                .map(|name| format!("'{name}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .await
        .expect("variables")
        .into_iter()
        .collect();
    assert_eq!(
        settings.len(),
        MARIADB_SETTINGS.len(),
        "every one: {settings:?}"
    );
    assert_eq!(settings["character_set_server"], "utf8mb4");
    let reported: Option<String> = conn.query_first("SELECT VERSION()").await.expect("version");
    assert_doctor_version(backend, instance, &reported.expect("a version")).await;
    // An XA transaction left prepared outlives its session and holds its locks (MariaDB 10.5+):
    // the reset must still drop the databases, and the transaction be gone after it.
    for statement in [
        "XA START 'suite-left', 'branch', 7",
        "INSERT INTO sandbox.words VALUES ('prepared')",
        "XA END 'suite-left', 'branch', 7",
        "XA PREPARE 'suite-left', 'branch', 7",
    ] {
        conn.query_drop(statement)
            .await
            .unwrap_or_else(|err| panic!("{statement} as the agent: {err}"));
    }
    conn.disconnect().await.expect("disconnect");
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        backend.reset(instance, None),
    )
    .await
    .expect("the reset ends though an XA transaction is prepared")
    .expect("reset");
    let mut conn = support::mysql(instance).await;
    let gone = conn
        .query_drop("XA COMMIT 'suite-left', 'branch', 7")
        .await
        .expect_err("no such XA transaction any more");
    assert!(gone.to_string().contains("XAER_NOTA"), "{gone}");
    settings
}

/// `CONFIG GET` and `CONFIG RESETSTAT` as the agent, no secret among the settings, and the rest
/// of `CONFIG` still refused. Answers the settings.
async fn redis_round(backend: &dyn Backend, instance: &Instance) -> Settings {
    let mut conn = support::redis(instance).await;
    let everything: BTreeMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("CONFIG GET as the agent");
    assert!(
        everything.len() > 100,
        "every setting: {}",
        everything.len()
    );
    let agent_password = instance.agent.password.expose_secret();
    let agent_hash = sandboxd_domain::credentials::sha256_hex(&instance.agent.password);
    for (name, value) in &everything {
        assert!(
            !value.contains(agent_password) && !value.contains(&agent_hash),
            "{name} holds the agent's password"
        );
        // Passwords are in the ACL rules as SHA-256 hashes (the superuser's too), and the ACL
        // users are no setting: no value carries such a hash.
        let longest_hex = value
            .split(|c: char| !c.is_ascii_hexdigit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_hex < 64, "{name} holds a hash: {value}");
    }
    for secret in ["requirepass", "masterauth"] {
        assert_eq!(
            everything.get(secret).map(String::as_str),
            Some(""),
            "{secret}"
        );
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("CONFIG RESETSTAT as the agent");
    for words in [
        &["SET", "maxmemory-policy", "allkeys-lru"][..],
        &["SET", "dir", "/tmp"],
        &["REWRITE"],
    ] {
        let refused = support::redis_denied(
            redis::cmd("CONFIG")
                .arg(words)
                .query_async::<redis::Value>(&mut conn)
                .await,
        );
        assert!(
            refused.to_lowercase().contains("noperm"),
            "{words:?}: {refused}"
        );
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    let reported = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .expect("redis_version")
        .to_owned();
    assert_doctor_version(backend, instance, &reported).await;
    REDIS_SETTINGS
        .iter()
        .map(|name| {
            let value = everything.get(*name).cloned();
            (
                (*name).to_owned(),
                value.unwrap_or_else(|| panic!("{name} is read")),
            )
        })
        .collect()
}

/// What `doctor` reports for the instance's engine on `backend` is the version the server
/// itself answers (`reported` starts with it).
async fn assert_doctor_version(backend: &dyn Backend, instance: &Instance, reported: &str) {
    let version = backend
        .offered_version(instance.engine)
        .await
        .unwrap_or_else(|| panic!("{} on {}: no version", instance.engine.name, backend.kind()));
    assert!(
        reported == version
            || reported.starts_with(&format!("{version} "))
            || reported.starts_with(&format!("{version}-")),
        "{} on {}: doctor says {version}, the server {reported}",
        instance.engine.name,
        backend.kind()
    );
}

/// Every engine's round, then the instances' teardown. Answers the settings per engine.
async fn every_round(
    backend: &dyn Backend,
    [pg, redis, mariadb]: [&Instance; 3],
) -> BTreeMap<&'static str, Settings> {
    let settings = BTreeMap::from([
        ("postgres", postgres_round(backend, pg).await),
        ("redis", redis_round(backend, redis).await),
        ("mariadb", mariadb_round(backend, mariadb).await),
    ]);
    for instance in [pg, redis, mariadb] {
        backend
            .teardown(&InstanceHandle::of(instance))
            .await
            .expect("teardown");
    }
    settings
}

async fn process_round(tag: &str) -> BTreeMap<&'static str, Settings> {
    let mut settings = BTreeMap::new();
    let tag = tag.to_owned();
    let out = &mut settings;
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner(&tag);
            let requests = ["postgres", "redis", "mariadb"].map(|e| request(e, &owner, &[]));
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
            *out = every_round(backend.as_ref(), [&pg, &redis, &mariadb]).await;
        })
        .await;
    settings
}

#[tokio::test]
async fn process_servers_are_as_test_suites_expect() {
    process_round("suites").await;
}

/// The same on Docker, and every setting a suite can see equal to the process backend's.
#[tokio::test]
async fn docker_servers_are_as_test_suites_expect_and_set_like_the_process_ones() {
    let Some(harness) = Harness::new("dsuites", &[POSTGRES, REDIS, MARIADB], |_| {}).await else {
        return;
    };
    let mut docker = BTreeMap::new();
    let out = &mut docker;
    harness
        .run(|backend, _| async move {
            let owner = harness_owner("dsuites");
            let requests = ["postgres", "redis", "mariadb"].map(|e| request(e, &owner, &[]));
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
            *out = every_round(backend.as_ref(), [&pg, &redis, &mariadb]).await;
        })
        .await;
    let process = process_round("dsuites-p").await;
    for engine in ["postgres", "redis", "mariadb"] {
        assert_eq!(
            process[engine], docker[engine],
            "{engine}: the process backend (left) and Docker (right) differ"
        );
    }
}
