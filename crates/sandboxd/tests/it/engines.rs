//! Engines are offered only where they run: `projects set` refuses one the backend cannot run
//! (exit 2, naming what runs here); a project that already has one keeps it, its agents are not
//! offered it (`tools/list`, the spawn marker) and a request for it is refused for good
//! (`engine_unavailable`), with the operator's fix in `remediate`, not in the agent's message,
//! while a request for the others gets those.

use std::panic::AssertUnwindSafe;
use std::process::Output;

use futures::FutureExt;
use serde_json::{Value, json};

use crate::support::{
    Home, TestDaemon, entry, spawn_daemon, teardown_everything, teardown_maker_on_docker, unique,
};

fn cli(home: &Home, daemon: &TestDaemon, args: &[&str]) -> Output {
    home.sandboxd()
        .env("SANDBOXD_URL", &daemon.url)
        .args(args)
        .output()
        .expect("run sandboxd")
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The Docker image with this tag cannot exist: the daemon that is told to run Redis from it
/// has no Redis.
const NO_REDIS_IMAGE: &str = "sandboxd-local/redis:no-such-tag-for-tests";

#[tokio::test]
async fn projects_set_refuses_an_engine_the_backend_cannot_run_naming_what_runs() {
    // This host has no mongod: the process backend runs PostgreSQL, Redis and MariaDB only.
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let project = unique("nosql");
        let refused = cli(
            &home,
            &daemon,
            &["projects", "set", &project, "--services", "mongo"],
        );
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        let message = stderr_of(&refused);
        for needle in [
            "the process backend cannot run mongo",
            "runnable here: postgres, redis, mariadb",
        ] {
            assert!(message.contains(needle), "{needle:?} in {message}");
        }
        // Nothing was stored, not even the runnable half of a mixed set.
        let mixed = cli(
            &home,
            &daemon,
            &["projects", "set", &project, "--services", "postgres,mongo"],
        );
        assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
        let (status, body) = daemon
            .admin(
                reqwest::Method::PUT,
                &format!("/v1/projects/{project}"),
                Some(json!({"sandbox_services": ["mongo"]})),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"], "engine_unavailable", "{body}");
        let (status, _) = daemon
            .admin(
                reqwest::Method::GET,
                &format!("/v1/projects/{project}"),
                None,
            )
            .await;
        assert_eq!(status, 404, "a refused set stores nothing");
        let fine = cli(
            &home,
            &daemon,
            &["projects", "set", &project, "--services", "postgres,redis"],
        );
        assert!(fine.status.success(), "{fine:?}");
    })
    .catch_unwind()
    .await;
    drop(daemon);
    teardown_everything(&home);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The local PostgreSQL image, when it is present on the Docker engine.
fn local_postgres_image() -> Option<String> {
    let image = sandboxd_testkit::local_images().remove("postgres")?;
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &image])
        .output()
        .is_ok_and(|out| out.status.success());
    present.then_some(image)
}

#[tokio::test]
async fn an_opted_in_engine_that_stopped_running_is_refused_for_good_and_not_offered() {
    if sandboxd_testkit::docker_or_skip().await.is_none() {
        return;
    }
    let Some(postgres_image) = local_postgres_image() else {
        sandboxd_testkit::skip(
            "engines",
            "no local PostgreSQL image (run scripts/build-images.sh)",
        );
        return;
    };
    let project = unique("shop");
    // Opted in while every engine runs (the process backend runs both here).
    let mut home = Home::new();
    {
        let first = spawn_daemon(&home);
        first.project(&project, &["postgres", "redis"]).await;
    }
    // The same store, now on Docker, where Redis's image is gone.
    home.set("SANDBOXD_BACKEND", "docker");
    home.set("SANDBOXD_ENGINES__POSTGRES__IMAGE", &postgres_image);
    home.set("SANDBOXD_ENGINES__REDIS__IMAGE", NO_REDIS_IMAGE);
    let daemon = spawn_daemon(&home);
    let maker = daemon.daemon_id().await;
    let outcome = AssertUnwindSafe(stopped_running(&home, &daemon, &project))
        .catch_unwind()
        .await;
    drop(daemon);
    teardown_maker_on_docker(&home, &maker);
    teardown_everything(&home);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn stopped_running(home: &Home, daemon: &TestDaemon, project: &str) {
    // The spawn marker and briefing offer only what runs.
    let (token, spawn) = daemon.spawn_agent("developer", project).await;
    assert_eq!(
        spawn["env"]["ROBOCO_SANDBOX_SERVICES_AVAILABLE"], "postgres",
        "{spawn}"
    );
    assert!(
        spawn["briefing"]
            .to_string()
            .contains("throwaway databases (postgres)"),
        "{spawn}"
    );
    let agent = daemon.client(&token).await;
    let tools = agent.service.list_all_tools().await.expect("tools/list");
    let request = tools
        .iter()
        .find(|t| t.name == "request_sandbox")
        .expect("request_sandbox");
    assert_eq!(
        request.input_schema["properties"]["services"]["items"]["enum"],
        json!(["postgres"])
    );

    daemon.task(project).await;
    agent.ok("give_me_work", json!({})).await;
    // All services (Redis among them): refused for good, the agent told what it can ask for.
    let refusal = agent.refused("request_sandbox", json!({})).await;
    assert_eq!(refusal["error"], "engine_unavailable", "{refusal}");
    assert_eq!(refusal["retryable"], false, "{refusal}");
    assert_eq!(refusal["missing"], json!(["redis"]), "{refusal}");
    let message = refusal["message"].as_str().expect("message");
    assert!(message.contains("run here: postgres"), "{message}");
    for operator_word in ["docker", "`", "build-images"] {
        assert!(
            !message.contains(operator_word),
            "{operator_word:?} in {message}"
        );
    }
    let remediate = refusal["remediate"].as_str().expect("remediate");
    assert!(
        remediate.contains(NO_REDIS_IMAGE) && remediate.contains("the docker backend"),
        "the operator's fix: {remediate}"
    );
    // The services that run are granted.
    let granted = agent
        .ok("request_sandbox", json!({"services": ["postgres"]}))
        .await;
    assert_eq!(
        granted["evidence"].as_array().map(Vec::len),
        Some(1),
        "{granted}"
    );
    assert!(entry(&granted, "postgres")["url"].is_string(), "{granted}");
    agent.ok("release_sandbox", json!({})).await;

    // The project keeps Redis through another save; a project cannot newly add it.
    let kept = cli(
        home,
        daemon,
        &["projects", "set", project, "--services", "postgres,redis"],
    );
    assert!(kept.status.success(), "{kept:?}");
    let other = unique("cache");
    let refused = cli(
        home,
        daemon,
        &["projects", "set", &other, "--services", "redis"],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let message = stderr_of(&refused);
    assert!(
        message.contains(NO_REDIS_IMAGE) && message.contains("runnable here: postgres"),
        "{message}"
    );
    let listed: Value =
        serde_json::from_slice(&cli(home, daemon, &["projects", "ls", "--json"]).stdout)
            .expect("projects ls --json");
    assert!(
        listed
            .as_array()
            .expect("projects")
            .iter()
            .all(|p| p["slug"] != other.as_str()),
        "{listed}"
    );
}
