//! Warm pools through the real daemon: configured in its settings (`[pools.<engine>]`, here as
//! `SANDBOXD_POOLS__…`), filled at start, handed out to an agent over MCP, shown by
//! `sandboxd pools` and `doctor`, resized through the CLI, and drained by a clean stop.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};

use crate::support::{
    Home, TestDaemon, entry, instance_dirs, spawn_daemon, stop_and_clean_up, unique,
};

fn pools_json(home: &Home, daemon: &TestDaemon) -> Vec<Value> {
    let out = home
        .sandboxd()
        .args(["pools", "--json", "--url", &daemon.url])
        .output()
        .expect("sandboxd pools");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .expect("json")
        .as_array()
        .cloned()
        .expect("a list")
}

/// `sandboxd pools set ENGINE --min-idle N --max-total M` against `daemon`.
fn pools_set(
    home: &Home,
    daemon: &TestDaemon,
    engine: &str,
    min_idle: usize,
    max_total: usize,
) -> std::process::Output {
    home.sandboxd()
        .args(["pools", "set", engine, "--url", &daemon.url])
        .args(["--min-idle", &min_idle.to_string()])
        .args(["--max-total", &max_total.to_string()])
        .output()
        .expect("sandboxd pools set")
}

fn pool<'a>(pools: &'a [Value], engine: &str) -> &'a Value {
    pools
        .iter()
        .find(|p| p["engine"] == engine)
        .unwrap_or_else(|| panic!("{engine} in {pools:?}"))
}

async fn until_idle(home: &Home, daemon: &TestDaemon, wanted: u64) {
    let started = Instant::now();
    loop {
        let pools = pools_json(home, daemon);
        if ["postgres", "redis"]
            .iter()
            .all(|e| pool(&pools, e)["idle"] == wanted)
        {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{pools:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_daemon_fills_its_pools_hands_a_member_out_over_mcp_and_drains_them_at_stop() {
    let mut home = Home::new();
    for engine in ["POSTGRES", "REDIS"] {
        home.set(&format!("SANDBOXD_POOLS__{engine}__MIN_IDLE"), "1");
        home.set(&format!("SANDBOXD_POOLS__{engine}__MAX_TOTAL"), "2");
    }
    let mut daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        fill_hand_out_and_drain(&home, &daemon).await;
        // A clean stop removes the idle members; the agent's sandbox stays, as any does.
        daemon.stop();
        let owners: Vec<String> = instance_dirs(&home)
            .iter()
            .map(|dir| {
                let meta = std::fs::read_to_string(
                    sandboxd_backend::process::metadata_path(dir).unwrap_or_default(),
                )
                .unwrap_or_default();
                serde_json::from_str::<Value>(&meta).unwrap_or_default()["owner"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect();
        assert_eq!(owners.len(), 2, "{owners:?}");
        assert!(
            owners.iter().all(|o| o.starts_with("developer")),
            "{owners:?}"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn fill_hand_out_and_drain(home: &Home, daemon: &TestDaemon) {
    until_idle(home, daemon, 1).await;
    let doctor = home
        .sandboxd()
        .args(["doctor", "--json"])
        .env("SANDBOXD_SERVER__LISTEN", &daemon.addr)
        .output()
        .expect("doctor");
    let checks: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let line = checks
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["subject"] == "warm pool postgres")
        .unwrap_or_else(|| panic!("a warm pool line in {checks}"));
    assert_eq!(line["ok"], true, "{line}");
    assert!(
        line["detail"]
            .as_str()
            .expect("detail")
            .starts_with("ready"),
        "{line}"
    );

    let project = unique("proj");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;
    dev.ok("give_me_work", json!({})).await;
    let answer = dev.ok("request_sandbox", json!({})).await;
    let postgres = entry(&answer, "postgres");
    let (client, connection) = tokio_postgres::connect(
        postgres["url"].as_str().expect("url"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("the handed-out account logs in");
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE mine (id int); INSERT INTO mine VALUES (1)")
        .await
        .expect("the agent owns its database");
    let (_, audit) = daemon
        .admin(reqwest::Method::GET, "/v1/audit?limit=1000", None)
        .await;
    assert!(
        audit.to_string().contains("2 from the warm pool"),
        "{audit}"
    );

    let pools = pools_json(home, daemon);
    for engine in ["postgres", "redis"] {
        assert_eq!(pool(&pools, engine)["handed_out"], 1, "{pools:?}");
    }
    // The pools refill behind the hand-out.
    until_idle(home, daemon, 1).await;

    // Resized through the CLI; refused sizes change nothing.
    let refused = pools_set(home, daemon, "redis", 3, 2);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("must not exceed max_total"));
    let resized = pools_set(home, daemon, "redis", 0, 1);
    assert!(resized.status.success(), "{resized:?}");
    let started = Instant::now();
    while pool(&pools_json(home, daemon), "redis")["idle"] != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the redis pool shrinks to 0"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until_pool_idle(home: &Home, daemon: &TestDaemon, engine: &str, wanted: u64) {
    let started = Instant::now();
    loop {
        let pools = pools_json(home, daemon);
        if pools
            .iter()
            .any(|p| p["engine"] == engine && p["idle"] == wanted)
        {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{pools:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A pool no config file names, added from the CLI on a running daemon: stored, filled at
/// once (a `--min-idle` alone, the ceiling 4), refused for what is no pool, and there and
/// filled again after a restart.
#[tokio::test]
async fn a_pool_added_from_the_cli_fills_at_once_and_outlives_a_restart() {
    let home = Home::new();
    let mut daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        assert_eq!(pools_json(&home, &daemon), Vec::<Value>::new());
        let added = home
            .sandboxd()
            .args([
                "pools",
                "set",
                "redis",
                "--min-idle",
                "1",
                "--url",
                &daemon.url,
            ])
            .output()
            .expect("sandboxd pools set");
        assert!(added.status.success(), "{added:?}");
        assert!(
            String::from_utf8_lossy(&added.stdout).contains("added the warm pool redis"),
            "{added:?}"
        );
        let pools = pools_json(&home, &daemon);
        let redis = pool(&pools, "redis");
        assert_eq!(
            (&redis["min_idle"], &redis["max_total"]),
            (&json!(1), &json!(4))
        );
        until_pool_idle(&home, &daemon, "redis", 1).await;

        let refused = home
            .sandboxd()
            .args([
                "pools",
                "set",
                "nosuch",
                "--min-idle",
                "1",
                "--url",
                &daemon.url,
            ])
            .output()
            .expect("sandboxd pools set");
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("postgres"),
            "names the engines: {refused:?}"
        );

        daemon.stop();
        daemon = spawn_daemon(&home);
        let pools = pools_json(&home, &daemon);
        assert_eq!(pools.len(), 1, "{pools:?}");
        let redis = pool(&pools, "redis");
        assert_eq!(
            (&redis["min_idle"], &redis["max_total"]),
            (&json!(1), &json!(4))
        );
        until_pool_idle(&home, &daemon, "redis", 1).await;
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
