//! Our Python package (`clients/python`, installed from its wheel by `scripts/python-sdks.sh`):
//! its own pytest suite against the real daemon, then the example project's suite
//! (`examples/shop`) getting its databases through the pytest plugin as an agent holding a task.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Command, Output};

use futures::FutureExt;
use serde_json::json;

use crate::support::{ADMIN_TOKEN, Home, python_venv, spawn_daemon, stop_and_clean_up, unique};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `pytest` in `dir` with `env`; its temporary files under `scratch`, no bytecode or cache left
/// in the source tree.
async fn pytest(python: &Path, dir: &str, scratch: &Path, env: Vec<(&str, String)>) -> Output {
    let mut command = Command::new(python);
    command
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .arg(format!("--basetemp={}", scratch.display()))
        .current_dir(Path::new(REPO).join(dir))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("SANDBOXD_AGENT_TOKEN")
        .envs(env);
    tokio::task::spawn_blocking(move || command.output().expect("pytest"))
        .await
        .expect("join")
}

fn passed(output: &Output, at_least: usize) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary = stdout.lines().last().unwrap_or_default();
    let count: usize = summary
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        summary.contains(" passed") && !summary.contains("failed") && count >= at_least,
        "{at_least} tests should pass: {stdout}"
    );
}

#[tokio::test]
async fn the_python_client_suite_and_the_example_project_through_the_pytest_plugin() {
    let Some(python) = python_venv("client") else {
        return;
    };
    let home = Home::new();
    let scratch = sandboxd_testkit::test_dir("sandboxd-test-pytest-");
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let own = pytest(
            &python,
            "clients/python",
            &scratch.path().join("client"),
            vec![
                ("SANDBOXD_URL", daemon.url.clone()),
                ("SANDBOXD_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ],
        )
        .await;
        passed(&own, 12);

        let project = unique("shop");
        daemon.project(&project, &["postgres", "redis"]).await;
        daemon.task(&project).await;
        let (token, _) = daemon.spawn_agent("developer", &project).await;
        let agent = daemon.client(&token).await;
        agent.ok("give_me_work", json!({})).await;
        let example = pytest(
            &python,
            "examples/shop",
            &scratch.path().join("shop"),
            vec![
                ("SANDBOXD_URL", daemon.url.clone()),
                ("SANDBOXD_AGENT_TOKEN", token.clone()),
            ],
        )
        .await;
        passed(&example, 5);
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&example.stdout),
            String::from_utf8_lossy(&example.stderr)
        );
        assert!(!shown.contains(&token), "the token is never printed");
        assert!(
            daemon.sandboxes().await.is_empty(),
            "the plugin released the sandbox at the end of the session"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
