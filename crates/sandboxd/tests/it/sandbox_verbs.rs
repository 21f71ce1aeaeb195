//! `sandbox_info`, `reset_sandbox` and `sandbox_sql` end to end: the real daemon, a real MCP client, real
//! Postgres and Redis on the process backend.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use serde_json::{Value, json};

use crate::support::{Home, TestDaemon, entry, spawn_daemon, stop_and_clean_up, unique};

async fn pg(url: &str, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    client.simple_query(sql).await.map_err(|e| {
        e.as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_owned())
    })
}

fn first_value(rows: &[tokio_postgres::SimpleQueryMessage]) -> Option<String> {
    rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}

async fn redis(url: &str, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(url).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn).await.expect("redis command")
}

#[tokio::test]
async fn an_agent_describes_and_resets_its_sandbox_in_place() {
    let mut home = Home::new();
    home.set("SANDBOXD_BROKER__IDLE_TTL_SECS", "3600");
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(describe_and_reset(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn describe_and_reset(daemon: &TestDaemon) {
    let project = unique("proj");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;
    dev.ok("give_me_work", json!({})).await;

    // Before any sandbox: both say what to call first, and create nothing.
    for verb in ["sandbox_info", "reset_sandbox"] {
        let refused = dev.refused(verb, json!({})).await;
        assert_eq!(refused["error"], "out_of_order", "{refused}");
        assert!(
            refused["remediate"]
                .as_str()
                .is_some_and(|r| r.contains("request_sandbox")),
            "{refused}"
        );
    }
    assert!(daemon.sandboxes().await.is_empty());

    let sandbox = dev.ok("request_sandbox", json!({})).await;
    let pg_url = entry(&sandbox, "postgres")["url"]
        .as_str()
        .expect("url")
        .to_owned();
    let redis_url = entry(&sandbox, "redis")["url"]
        .as_str()
        .expect("url")
        .to_owned();
    pg(
        &pg_url,
        "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)",
    )
    .await
    .expect("the suite's work");
    pg(&pg_url, "CREATE DATABASE test_extra")
        .await
        .expect("a database of its own");
    redis(&redis_url, &["SET", "key", "value"]).await;

    // sandbox_info: what it is, never a password.
    let info = dev.ok("sandbox_info", json!({})).await;
    for service in ["postgres", "redis"] {
        let described = entry(&info, service);
        let handed = entry(&sandbox, service);
        for field in ["host", "port", "user"] {
            assert_eq!(described[field], handed[field], "{service} {field}");
        }
        assert_eq!(described["live"], true, "{described}");
        let version = described["version"].as_str().expect("version");
        assert!(
            version.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{service}: {version}"
        );
        assert_eq!(described["idle_timeout_secs"], 3600, "{described}");
        assert!(
            described["released_if_idle_at_ms"].as_i64() > described["last_used_at_ms"].as_i64(),
            "{described}"
        );
        let password = handed["password"].as_str().expect("password");
        assert!(!info.to_string().contains(password), "a password in {info}");
    }

    // A service the sandbox does not have is refused, naming the ones it has.
    let refused = dev
        .refused("reset_sandbox", json!({"services": ["mongo"]}))
        .await;
    assert_eq!(refused["error"], "invalid_argument", "{refused}");
    let message = refused["message"].as_str().expect("message");
    assert!(
        message.contains("postgres") && message.contains("redis"),
        "{message}"
    );

    // Redis alone: its keys go, Postgres keeps its data.
    let reset = dev
        .ok("reset_sandbox", json!({"services": ["redis"]}))
        .await;
    assert!(
        entry(&reset, "redis")["reset_ms"].as_f64().is_some(),
        "{reset}"
    );
    assert_eq!(
        redis(&redis_url, &["EXISTS", "key"]).await,
        redis::Value::Int(0)
    );
    let kept = pg(&pg_url, "SELECT v FROM kept")
        .await
        .expect("postgres untouched");
    assert_eq!(first_value(&kept).as_deref(), Some("7"));

    // Everything: the table and the extra database go, the same URL works.
    dev.ok("reset_sandbox", json!({})).await;
    let gone = pg(&pg_url, "SELECT v FROM kept").await;
    assert!(
        gone.as_ref().is_err_and(|e| e.contains("does not exist")),
        "{gone:?}"
    );
    let extra = pg(
        &pg_url,
        "SELECT count(*) FROM pg_database WHERE datname = 'test_extra'",
    )
    .await
    .expect("the same credentials");
    assert_eq!(first_value(&extra).as_deref(), Some("0"));
    let again = dev.ok("request_sandbox", json!({})).await;
    assert_eq!(
        entry(&again, "postgres")["password"],
        entry(&sandbox, "postgres")["password"],
        "the same sandbox and credentials after the reset"
    );
    let audit: Value = daemon
        .admin(reqwest::Method::GET, "/v1/audit?limit=50", None)
        .await
        .1;
    let text = audit.to_string();
    assert!(text.contains("reset_sandbox"), "{audit}");
    for service in ["postgres", "redis"] {
        let password = entry(&sandbox, service)["password"]
            .as_str()
            .expect("password");
        assert!(!text.contains(password), "a password in the audit");
    }
    dev.ok("release_sandbox", json!({})).await;
}

#[tokio::test]
async fn sandbox_sql_runs_one_statement_as_the_agent_under_its_limits() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(one_statement(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

fn rows(envelope: &Value) -> &Vec<Value> {
    envelope["evidence"]["rows"].as_array().expect("rows")
}

async fn one_statement(daemon: &TestDaemon) {
    let project = unique("proj");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    daemon.task(&project).await;
    let (dev, other) = (
        daemon.agent("developer", &project).await,
        daemon.agent("developer", &project).await,
    );
    for agent in [&dev, &other] {
        agent.ok("give_me_work", json!({})).await;
    }
    let refused = dev
        .refused(
            "sandbox_sql",
            json!({"service": "postgres", "statement": "SELECT 1"}),
        )
        .await;
    assert_eq!(refused["error"], "out_of_order", "{refused}");
    let mine = dev.ok("request_sandbox", json!({})).await;
    other.ok("request_sandbox", json!({})).await;
    let sql = |statement: &str| json!({"service": "postgres", "statement": statement});

    // As the agent's own account, never the superuser.
    let who = dev
        .ok(
            "sandbox_sql",
            sql("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"),
        )
        .await;
    assert_eq!(
        who["evidence"]["columns"],
        json!(["current_user", "rolsuper"])
    );
    assert_eq!(
        rows(&who)[0],
        json!([entry(&mine, "postgres")["user"], "f"]),
        "{who}"
    );
    for escape in [
        "SELECT 1; DROP TABLE IF EXISTS nothing",
        "SET ROLE sandboxd_admin",
        "ALTER SYSTEM SET work_mem = '1GB'",
        "COPY (SELECT 1) TO PROGRAM 'id'",
    ] {
        let refused = dev.refused("sandbox_sql", sql(escape)).await;
        assert_eq!(refused["error"], "invalid_argument", "{escape}: {refused}");
    }
    let refused = dev.refused("sandbox_sql", sql("SELECT 1; SELECT 2")).await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("multiple commands")),
        "{refused}"
    );

    // Writes, reads, EXPLAIN; the other tenant's sandbox is not in reach.
    let made = dev
        .ok(
            "sandbox_sql",
            sql("CREATE TABLE big AS SELECT g FROM generate_series(1, 5000) g"),
        )
        .await;
    assert_eq!(made["evidence"]["affected"], 5000, "{made}");
    let all = dev
        .ok("sandbox_sql", sql("SELECT g FROM big ORDER BY g"))
        .await;
    assert_eq!(rows(&all).len(), 1000);
    assert_eq!(all["evidence"]["truncated"], true);
    assert_eq!(all["evidence"]["limits"]["max_rows"], 1000);
    assert_eq!(all["evidence"]["limits"]["timeout_ms"], 10_000);
    let few = dev
        .ok(
            "sandbox_sql",
            json!({"service": "postgres", "statement": "SELECT g FROM big ORDER BY g", "max_rows": 3}),
        )
        .await;
    assert_eq!(rows(&few), &vec![json!(["1"]), json!(["2"]), json!(["3"])]);
    let plan = dev
        .ok("sandbox_sql", sql("EXPLAIN SELECT * FROM big WHERE g = 7"))
        .await;
    assert!(
        rows(&plan)[0][0]
            .as_str()
            .is_some_and(|line| line.contains("Scan")),
        "{plan}"
    );
    let refused = other
        .refused("sandbox_sql", sql("SELECT count(*) FROM big"))
        .await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not exist")),
        "{refused}"
    );
    for bad in [
        json!({"service": "postgres", "statement": "SELECT 1", "max_rows": 0}),
        json!({"service": "mongo", "statement": "SELECT 1"}),
        json!({"service": "postgres", "statement": "  "}),
        json!({"service": "redis", "statement": "SET 'unclosed v"}),
    ] {
        let refused = dev.refused("sandbox_sql", bad.clone()).await;
        assert_eq!(refused["error"], "invalid_argument", "{bad}: {refused}");
    }

    // Redis: one command, quoted words kept whole, the agent's ACL in force.
    let redis = |statement: &str| json!({"service": "redis", "statement": statement});
    dev.ok("sandbox_sql", redis("SET 'my key' \"a value\""))
        .await;
    let got = dev.ok("sandbox_sql", redis("GET 'my key'")).await;
    assert_eq!(rows(&got), &vec![json!(["a value"])]);
    let refused = dev
        .refused("sandbox_sql", redis("CONFIG SET dir /tmp"))
        .await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.to_lowercase().contains("noperm")),
        "{refused}"
    );
    for agent in [&dev, &other] {
        agent.ok("release_sandbox", json!({})).await;
    }
}
