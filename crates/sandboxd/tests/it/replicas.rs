//! Two `sandboxd serve` replicas on one PostgreSQL store (a real server: a Docker sandbox of
//! its own), provisioning on Docker: one fleet, served by both. Twenty concurrent
//! `request_sandbox` calls of one agent spread over both replicas get one sandbox and one
//! credential set; a replica killed in the middle of a provision leaves its agent's lease to
//! expire, after which the other replica finishes the job and nothing of the dead one's work
//! is left.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::join_all;
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest, Sweep};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::support::{Home, TestDaemon, entry, spawn_daemon, teardown_maker_on_docker, unique};

/// The agent's containers, as the engine lists them (labels, not any daemon's view).
fn containers_of(owner: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            &format!("label=sandboxd.owner={owner}"),
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn passwords(envelope: &Value) -> BTreeSet<String> {
    envelope["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .map(|e| e["password"].as_str().expect("password").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_one_store_serve_one_fleet() {
    let Some(docker) = sandboxd_testkit::docker_or_skip().await else {
        return;
    };
    // The shared store: PostgreSQL, an instance of a maker of its own (no replica touches it,
    // and its network goes with it below).
    let store_owner = AgentSlug::parse(&unique("store")).expect("slug");
    let store_maker = DaemonId::generate();
    let store = docker
        .provision(&InstanceRequest {
            major: None,
            engine: EngineRef::parse("postgres").expect("registered"),
            owner: store_owner,
            maker: store_maker.clone(),
            features: Default::default(),
            size: None,
        })
        .await
        .expect("a PostgreSQL store");
    let url = format!(
        "postgres://{}:{}@{}:{}/{}",
        store.agent.user,
        store.agent.password.expose_secret(),
        store.host,
        store.port,
        store.database
    );
    let mut home = Home::on_docker();
    home.set("SANDBOXD_STORE__URL", &url);
    home.set("SANDBOXD_BROKER__LEASE_TTL_SECS", "3");
    // Both replicas share the state directory: the store key and the admin token.
    let mut first = spawn_daemon(&home);
    let second = spawn_daemon(&home);
    let maker = first.daemon_id().await;
    let outcome = AssertUnwindSafe(serve_one_fleet(&mut first, &second, &maker))
        .catch_unwind()
        .await;
    drop(first);
    drop(second);
    teardown_maker_on_docker(&home, &maker);
    docker
        .teardown(&InstanceHandle::of(&store))
        .await
        .expect("remove the store");
    docker
        .sweep(&store_maker, Sweep::Now)
        .await
        .expect("remove the store's network");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn serve_one_fleet(first: &mut TestDaemon, second: &TestDaemon, maker: &str) {
    assert_eq!(second.daemon_id().await, maker, "one store, one daemon id");
    let project = unique("fleet");
    first.project(&project, &["postgres", "redis"]).await;

    // Twenty calls of one agent at once, ten through each replica.
    first.task(&project).await;
    let (token, spawned) = first.spawn_agent("developer", &project).await;
    let slug = spawned["agent"].as_str().expect("slug").to_owned();
    let (on_first, on_second) = (first.client(&token).await, second.client(&token).await);
    on_first.ok("give_me_work", json!({})).await;
    let calls = (0..20).map(|i| {
        let agent = if i % 2 == 0 { &on_first } else { &on_second };
        agent.ok("request_sandbox", json!({}))
    });
    let answers = join_all(calls).await;
    let sets: BTreeSet<BTreeSet<String>> = answers.iter().map(passwords).collect();
    assert_eq!(sets.len(), 1, "one credential set: {sets:?}");
    assert_eq!(containers_of(&slug).len(), 2, "one sandbox");
    for agent in [&on_first, &on_second] {
        let pg = agent.ok("request_sandbox", json!({})).await;
        assert_eq!(
            passwords(&pg),
            passwords(&answers[0]),
            "a cache hit on either"
        );
    }
    on_second.ok("release_sandbox", json!({})).await;
    assert!(
        containers_of(&slug).is_empty(),
        "released through the other replica"
    );

    // The replica provisioning for an agent dies mid-provision.
    first.task(&project).await;
    let (token, spawned) = first.spawn_agent("developer", &project).await;
    let victim = spawned["agent"].as_str().expect("slug").to_owned();
    let doomed = first.client(&token).await;
    let survivor = second.client(&token).await;
    doomed.ok("give_me_work", json!({})).await;
    let request = tokio::spawn(async move {
        let _ = doomed.call("request_sandbox", json!({})).await;
    });
    let started = Instant::now();
    while containers_of(&victim).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the provision never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.crash();
    request.abort();
    let left_by_the_dead = containers_of(&victim);
    assert!(!left_by_the_dead.is_empty(), "killed mid-provision");

    // The other replica waits out the dead one's lease, then provisions the whole set anew,
    // clearing what the dead one had begun.
    let asked = Instant::now();
    let answer = survivor.ok("request_sandbox", json!({})).await;
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(60), "{waited:?}");
    let pg = entry(&answer, "postgres");
    let (client, connection) =
        tokio_postgres::connect(pg["url"].as_str().expect("url"), tokio_postgres::NoTls)
            .await
            .expect("the new sandbox answers");
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE mine (x int)")
        .await
        .expect("as its agent");
    let now = containers_of(&victim);
    assert_eq!(
        now.len(),
        2,
        "one sandbox, nothing of the dead replica's: {now:?}"
    );
    let again = survivor.ok("request_sandbox", json!({})).await;
    assert_eq!(passwords(&again), passwords(&answer), "one credential set");
    survivor.ok("release_sandbox", json!({})).await;
    assert!(
        containers_of(&victim).is_empty(),
        "{:?}",
        containers_of(&victim)
    );
}
