//! `sandbox_info` and `reset_sandbox` end to end: the real daemon, a real MCP client, real
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
    client.simple_query(sql).await.map_err(|e| e.to_string())
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
        "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7); CREATE DATABASE test_extra",
    )
    .await
    .expect("the suite's work");
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
