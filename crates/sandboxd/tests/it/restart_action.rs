//! Arming without traps: `ROBOCO_SANDBOX_DB_ENABLED` shown as an override of the stored switch,
//! and `sandboxd restart` (`POST /v1/restart`) on a real daemon: the same process re-executes
//! itself on the same port, keeps an agent's live sandbox with its credentials, and applies the
//! switch the CLI stored; warm pools hold nothing while the switch is off.

use std::panic::AssertUnwindSafe;
use std::process::Output;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};

use crate::support::{
    ADMIN_TOKEN, Home, TestDaemon, entry, spawn_daemon, spawn_serve, stop_and_clean_up, unique,
};

fn cli(home: &Home, daemon: &TestDaemon, args: &[&str]) -> Output {
    home.sandboxd()
        .env("SANDBOXD_URL", &daemon.url)
        .args(args)
        .output()
        .expect("run sandboxd")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// When `pid` started (clock ticks since boot): the same value before and after means the same
/// process, not a new one that happens to get the pid again.
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the daemon runs");
    let after_name = stat.rsplit_once(')').expect("stat").1;
    after_name
        .split_whitespace()
        .nth(19)
        .and_then(|ticks| ticks.parse().ok())
        .expect("starttime")
}

/// A `GET` of the admin API on a connection of its own: a pooled connection to the image a
/// restart replaced is closed under the client (that is the restart, not what is tested).
async fn admin_get(daemon: &TestDaemon, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", daemon.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("the daemon answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

async fn settings(daemon: &TestDaemon) -> Value {
    let (status, settings) = admin_get(daemon, "/v1/settings").await;
    assert_eq!(status, 200, "{settings}");
    settings
}

async fn postgres_pool(daemon: &TestDaemon) -> Value {
    let (status, pools) = admin_get(daemon, "/v1/pools").await;
    assert_eq!(status, 200, "{pools}");
    pools
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["pool"] == "postgres").cloned())
        .unwrap_or_else(|| panic!("a postgres pool in {pools}"))
}

#[tokio::test]
async fn the_environment_override_is_shown_as_one_and_restart_is_documented_and_guarded() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        // The test daemon runs with ROBOCO_SANDBOX_DB_ENABLED=1 and nothing stored.
        let settings = settings(&daemon).await;
        assert_eq!(settings["override"], "ROBOCO_SANDBOX_DB_ENABLED=on", "{settings}");
        assert_eq!(settings["sandbox_db_enabled_stored"], false, "{settings}");
        assert_eq!(settings["sandbox_db_enabled_running"], true, "{settings}");
        assert_eq!(settings["restart_pending"], false, "{settings}");

        let out = stdout(&cli(&home, &daemon, &["settings"]));
        assert!(out.contains("override"), "{out}");
        assert!(
            out.contains(
                "ROBOCO_SANDBOX_DB_ENABLED=on in the daemon's environment overrides the stored value"
            ),
            "{out}"
        );

        // POST /v1/restart is in the OpenAPI document, and refused without the admin token.
        let (_, document) = admin_get(&daemon, "/v1/openapi.json").await;
        assert!(
            document["paths"]["/v1/restart"]["post"]["responses"]["202"].is_object(),
            "{}",
            document["paths"]["/v1/restart"]
        );
        let anonymous = reqwest::Client::new()
            .post(format!("{}/v1/restart", daemon.url))
            .send()
            .await
            .expect("answers");
        assert_eq!(anonymous.status(), 401);
        assert_eq!(
            settings["running_since_ms"],
            self::settings(&daemon).await["running_since_ms"],
            "a refused restart restarts nothing"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

#[tokio::test]
async fn sandboxd_restart_re_executes_in_place_keeps_live_sandboxes_and_applies_the_stored_switch()
{
    let mut home = Home::new();
    home.set("SANDBOXD_POOLS__POSTGRES__MIN_IDLE", "1");
    // No override: the stored switch rules, off until the CLI arms it.
    let mut serve = home.sandboxd();
    serve
        .env_remove("ROBOCO_SANDBOX_DB_ENABLED")
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let daemon = spawn_serve(serve);
    let pid = daemon.pid();
    let born = start_ticks(pid);
    let outcome = AssertUnwindSafe(async {
        let before = settings(&daemon).await;
        assert_eq!(before["override"], Value::Null, "{before}");
        assert_eq!(before["sandbox_db_enabled_running"], false, "{before}");

        // Off means nothing runs for agents: the configured pool starts no member.
        let watched = Instant::now();
        while watched.elapsed() < Duration::from_secs(5) {
            let pool = postgres_pool(&daemon).await;
            assert_eq!(
                (&pool["idle"], &pool["starting"]),
                (&json!(0), &json!(0)),
                "{pool}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // Armed from the CLI: stored, pending until the restart.
        let out = stdout(&cli(
            &home,
            &daemon,
            &["settings", "set", "sandbox_db_enabled=true"],
        ));
        assert!(out.contains("sandboxd restart"), "{out}");
        let out = stdout(&cli(&home, &daemon, &["restart"]));
        assert!(
            out.contains("sandboxd restarted; sandbox_db_enabled running = on (stored)"),
            "{out}"
        );
        assert_eq!(start_ticks(pid), born, "the same process runs on");
        let after = settings(&daemon).await;
        assert_eq!(after["sandbox_db_enabled_running"], true, "{after}");
        assert_eq!(after["restart_pending"], false, "{after}");
        assert_ne!(after["running_since_ms"], before["running_since_ms"]);

        // An agent's live sandbox, then another restart.
        let project = unique("proj");
        daemon.project(&project, &["postgres"]).await;
        daemon.task(&project).await;
        let (token, _) = daemon.spawn_agent("developer", &project).await;
        let dev = daemon.client(&token).await;
        dev.ok("give_me_work", json!({})).await;
        let granted = dev.ok("request_sandbox", json!({})).await;
        let url = entry(&granted, "postgres")["url"]
            .as_str()
            .expect("url")
            .to_owned();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("the agent logs in");
        let session = tokio::spawn(connection);
        client
            .batch_execute("CREATE TABLE kept (note text); INSERT INTO kept VALUES ('before')")
            .await
            .expect("the agent writes");
        drop(client);
        let _ = session.await;
        drop(dev);

        let out = stdout(&cli(&home, &daemon, &["restart"]));
        assert!(out.contains("sandboxd restarted"), "{out}");
        assert_eq!(start_ticks(pid), born, "the same process runs on");

        let dev = daemon.client(&token).await;
        let again = dev.ok("request_sandbox", json!({})).await;
        assert_eq!(
            entry(&again, "postgres")["url"].as_str(),
            Some(url.as_str()),
            "the same sandbox with the same credentials"
        );
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("the same credentials log in after the restart");
        tokio::spawn(connection);
        let row = client
            .query_one("SELECT note FROM kept", &[])
            .await
            .expect("the data is still there");
        assert_eq!(row.get::<_, String>(0), "before");

        // Armed now: the pool fills.
        let filling = Instant::now();
        loop {
            let pool = postgres_pool(&daemon).await;
            if pool["idle"] == 1 {
                break;
            }
            assert!(filling.elapsed() < Duration::from_secs(90), "{pool}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
