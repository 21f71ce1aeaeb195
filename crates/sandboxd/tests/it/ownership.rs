//! Ownership (SPEC §4.4): a daemon's janitor and reconciler act only on the instances it made.
//! Two daemons on one host (one process root, one Docker label namespace) and a `sandboxd
//! provision` sandbox beside them keep each other's sandboxes; a daemon killed in the middle of
//! a provision leaves nothing once it is back, and the agent's next call succeeds at once.

use std::panic::AssertUnwindSafe;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::support::{
    Home, TestDaemon, clean_up, entry, spawn_daemon, teardown_maker_on_docker, unique,
};

async fn pg(url: &str, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.simple_query(sql).await.map_err(|e| e.to_string())
}

async fn redis_cmd(url: &str, args: &[&str]) -> Result<redis::Value, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn).await.map_err(|e| e.to_string())
}

/// An agent with a fixed slug (the same in every daemon) holding a task of `project`, and its
/// token.
async fn working_agent(
    daemon: &TestDaemon,
    slug: &str,
    project: &str,
) -> (crate::support::Agent, String) {
    let (token, _) = daemon.spawn_agent_as(slug, "developer", project).await;
    daemon.task(project).await;
    let agent = daemon.client(&token).await;
    agent.ok("give_me_work", json!({})).await;
    (agent, token)
}

#[tokio::test]
async fn two_daemons_and_a_cli_sandbox_on_one_host_keep_each_others_sandboxes() {
    // Two daemons with their own state (so their own ids) and one process root, a 2 s grace
    // window and a janitor every second: before ownership, each reaped the other's sandboxes.
    let mut home_a = Home::new();
    let mut home_b = Home::beside(&home_a);
    for home in [&mut home_a, &mut home_b] {
        home.set("SANDBOXD_BROKER__GRACE_SECS", "2");
        home.set("SANDBOXD_BROKER__JANITOR_INTERVAL_SECS", "1");
    }
    let daemons = [spawn_daemon(&home_a), spawn_daemon(&home_b)];
    // The same agent slug in both daemons, and as the owner of a CLI sandbox.
    let twin = unique("twin");
    let outcome = AssertUnwindSafe(coexist(&home_a, &daemons, &twin))
        .catch_unwind()
        .await;
    drop(daemons);
    clean_up(&home_a, outcome);
}

async fn coexist(home_a: &Home, daemons: &[TestDaemon; 2], twin: &str) {
    let mut urls = Vec::new();
    let mut agents = Vec::new();
    for (n, daemon) in daemons.iter().enumerate() {
        let project = unique("p");
        daemon.project(&project, &["postgres", "redis"]).await;
        let (agent, _) = working_agent(daemon, twin, &project).await;
        let answer = agent.ok("request_sandbox", json!({})).await;
        let pg_url = entry(&answer, "postgres")["url"]
            .as_str()
            .expect("url")
            .to_owned();
        pg(
            &pg_url,
            &format!("CREATE TABLE kept (v int); INSERT INTO kept VALUES ({n})"),
        )
        .await
        .expect("write to the sandbox");
        urls.push(pg_url);
        agents.push(agent);
    }
    let provisioned = home_a
        .sandboxd()
        .args(["provision", "--owner", twin, "--engines", "redis", "--json"])
        .output()
        .expect("sandboxd provision");
    assert!(provisioned.status.success(), "{provisioned:?}");
    let cli: Value = serde_json::from_slice(&provisioned.stdout).expect("json");
    let cli_url = cli["services"][0]["url"].as_str().expect("url").to_owned();
    redis_cmd(&cli_url, &["SET", "kept", "cli"])
        .await
        .expect("write to the CLI sandbox");

    // Past the grace window, several janitor ticks of both daemons.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for daemon in daemons {
        let (status, report) = daemon
            .admin(reqwest::Method::POST, "/v1/janitor/run", None)
            .await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["reaped"], json!([]), "{report}");
        // The other's two and the CLI's (and whatever other tests run beside this one).
        assert!(report["foreign"].as_u64() >= Some(3), "{report}");
    }
    for (n, url) in urls.iter().enumerate() {
        let rows = pg(url, "SELECT v FROM kept").await.expect("still there");
        let value = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some(n.to_string().as_str()));
    }
    assert_eq!(
        redis_cmd(&cli_url, &["GET", "kept"])
            .await
            .expect("still there"),
        redis::Value::BulkString(b"cli".to_vec())
    );

    // Each daemon lists the other's sandbox and the CLI's as foreign, and will not touch them.
    let id_a = daemons[0].daemon_id().await;
    let (_, own) = daemons[1]
        .admin(reqwest::Method::GET, "/v1/sandboxes", None)
        .await;
    assert_eq!(own.as_array().expect("list").len(), 1, "{own}");
    let (_, all) = daemons[1]
        .admin(reqwest::Method::GET, "/v1/sandboxes?all=true", None)
        .await;
    let foreign: Vec<&Value> = all
        .as_array()
        .expect("list")
        .iter()
        .filter(|s| s["foreign"] == true && s["owner"] == twin)
        .collect();
    let mut makers: Vec<&str> = foreign.iter().filter_map(|s| s["maker"].as_str()).collect();
    makers.sort();
    let mut expected = vec!["cli", id_a.as_str()];
    expected.sort();
    assert_eq!(makers, expected, "{all}");
    let (status, refused) = daemons[1]
        .admin(
            reqwest::Method::DELETE,
            &format!("/v1/sandboxes/{twin}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "its own sandbox goes: {refused}");
    let (status, refused) = daemons[1]
        .admin(
            reqwest::Method::DELETE,
            &format!("/v1/sandboxes/{twin}"),
            None,
        )
        .await;
    assert_eq!(status, 409, "the rest is not its to remove: {refused}");
    assert_eq!(refused["error"], "foreign", "{refused}");
    assert!(
        pg(&urls[0], "SELECT 1").await.is_ok(),
        "daemon A's sandbox is untouched"
    );

    agents[0].ok("release_sandbox", json!({})).await;
    let removed = home_a
        .sandboxd()
        .args(["teardown", "--owner", twin])
        .output()
        .expect("sandboxd teardown");
    assert!(removed.status.success(), "{removed:?}");
}

/// Runs `docker args` until it prints a line containing `needle` (on stdout or stderr, where
/// `docker logs` relays a server's stderr); kills it either way.
async fn docker_until(args: &[&str], needle: &str) -> Result<(), String> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("exec docker \"$@\" 2>&1")
        .arg("docker")
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let found = loop {
        match lines.next_line().await {
            Ok(Some(line)) if line.contains(needle) => break Ok(()),
            Ok(Some(_)) => continue,
            Ok(None) => break Err(format!("docker {args:?} ended before printing {needle:?}")),
            Err(err) => break Err(err.to_string()),
        }
    };
    let _ = child.kill().await;
    found
}

/// Containers of `owner` (any state), as `<name> <state>`.
fn containers_of(owner: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label=sandboxd.owner={owner}"),
            "--format",
            "{{.Names}} {{.State}}",
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn remove_containers_of(owner: &str) {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=sandboxd.owner={owner}"),
        ])
        .output()
        .expect("docker ps");
    for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
}

/// Until the provision of `slug`'s container reaches `point`: Docker's `create` or `start`
/// event, or (`ready`) the server inside logging that it accepts connections, when sandboxd
/// logs in and sets the account up. `since` replays events from before the watch began.
async fn reached(point: &str, slug: &str, since: &str) -> Result<(), String> {
    if point == "ready" {
        docker_until(
            &[
                "events",
                "--since",
                since,
                "--filter",
                "type=container",
                "--filter",
                &format!("label=sandboxd.owner={slug}"),
                "--filter",
                "event=start",
            ],
            "start",
        )
        .await?;
        let name = containers_of(slug)
            .first()
            .and_then(|c| c.split_whitespace().next().map(str::to_owned))
            .ok_or("no container after its start event")?;
        docker_until(&["logs", "-f", &name], "ready to accept connections").await
    } else {
        docker_until(
            &[
                "events",
                "--since",
                since,
                "--filter",
                "type=container",
                "--filter",
                &format!("label=sandboxd.owner={slug}"),
                "--filter",
                &format!("event={point}"),
            ],
            point,
        )
        .await
    }
}

#[tokio::test]
async fn a_daemon_killed_mid_provision_leaves_nothing_and_the_agent_goes_on_at_once() {
    let image_present = Command::new("docker")
        .args(["image", "inspect", "sandboxd-local/postgres:17"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !image_present {
        sandboxd_testkit::skip(
            "a_daemon_killed_mid_provision",
            "no Docker engine answers, or sandboxd-local/postgres:17 is not built",
        );
        return;
    }
    // A grace window far longer than the test: nothing may wait for it.
    let mut home = Home::on_docker();
    home.set("SANDBOXD_BROKER__GRACE_SECS", "600");
    let slugs: Vec<String> = ["create", "start", "ready"]
        .iter()
        .map(|point| unique(&format!("crash-{point}")))
        .collect();
    let outcome = AssertUnwindSafe(crash_at_each_point(&home, &slugs))
        .catch_unwind()
        .await;
    for slug in &slugs {
        remove_containers_of(slug);
    }
    clean_up(&home, outcome);
}

async fn crash_at_each_point(home: &Home, slugs: &[String]) {
    let mut maker = None;
    for (point, slug) in ["create", "start", "ready"].into_iter().zip(slugs) {
        let mut daemon = spawn_daemon(home);
        let project = unique("p");
        daemon.project(&project, &["postgres"]).await;
        let (agent, token) = working_agent(&daemon, slug, &project).await;
        let since = Command::new("date")
            .arg("+%s.%N")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .expect("date");
        let call = tokio::spawn(async move { agent.call_raw_result("request_sandbox").await });
        tokio::time::timeout(Duration::from_secs(60), reached(point, slug, &since))
            .await
            .unwrap_or_else(|_| panic!("{point}: the provision never got there"))
            .unwrap_or_else(|err| panic!("{point}: {err}"));
        daemon.crash();
        // The client would wait on a stream nobody will ever finish.
        call.abort();
        let left = containers_of(slug);
        assert!(
            !left.is_empty(),
            "{point}: the crash left the attempt behind"
        );

        // Back up: the first janitor pass finds the attempt's container its own and unknown to
        // its store, and reaps it without waiting for the grace window.
        let daemon = spawn_daemon(home);
        assert_eq!(
            containers_of(slug),
            Vec::<String>::new(),
            "{point}: nothing of the attempt is left (was {left:?})"
        );
        // The agent's next call gets a fresh sandbox at once (its token outlived the crash).
        let agent = daemon.client(&token).await;
        let answer = agent.ok("request_sandbox", json!({})).await;
        let url = entry(&answer, "postgres")["url"]
            .as_str()
            .expect("url")
            .to_owned();
        pg(&url, "SELECT 1")
            .await
            .expect("the fresh sandbox answers");
        agent.ok("release_sandbox", json!({})).await;
        assert_eq!(
            containers_of(slug),
            Vec::<String>::new(),
            "{point}: released"
        );
        maker = Some(daemon.daemon_id().await);
    }
    // The crashes left the daemon's network; an operator's teardown of the maker removes it.
    teardown_maker_on_docker(home, &maker.expect("a daemon ran"));
}
