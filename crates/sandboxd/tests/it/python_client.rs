//! Our Python package (`clients/python`, installed from its wheel by `scripts/python-sdks.sh`):
//! its own pytest suite against the real daemon (verbs, admin API, one-line errors for a refused
//! token and an unreachable daemon, the plugin claiming a task itself), then the example
//! project's suite (`examples/shop`) getting its databases through the pytest plugin as an agent
//! that holds no task: the plugin claims one and gives it back.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Command, Output};

use futures::FutureExt;
use serde_json::{Value, json};

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

/// The wheel `scripts/python-wheel.sh` builds (run by `run.sh` and the test command) is where
/// README and the example's pyproject install it from, named with the client's version.
#[test]
fn readme_and_the_example_install_the_wheel_the_scripts_build() {
    let read = |path: &str| {
        std::fs::read_to_string(Path::new(REPO).join(path))
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let client = read("clients/python/pyproject.toml");
    let version = client
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("the client's version");
    let wheel = format!("target/wheels/sandboxd-{version}-py3-none-any.whl");
    assert!(
        read("examples/shop/pyproject.toml")
            .contains(&format!("{{root:parent:parent:uri}}/{wheel}")),
        "examples/shop/pyproject.toml installs {wheel}"
    );
    assert!(
        read("README.md").contains(&format!("pip install {wheel}")),
        "README installs {wheel}"
    );
    assert!(
        read("scripts/run.sh").contains("./scripts/python-wheel.sh"),
        "run.sh builds it"
    );
    if python_venv("client").is_some() {
        assert!(
            Path::new(REPO).join(&wheel).exists(),
            "{wheel} is built (scripts/python-wheel.sh)"
        );
    }
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
        passed(&own, 18);

        let project = unique("shop");
        daemon.project(&project, &["postgres", "redis"]).await;
        let task = daemon.task(&project).await;
        let (token, _) = daemon.spawn_agent("developer", &project).await;
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
        let (status, tasks) = daemon
            .admin(
                reqwest::Method::GET,
                &format!("/v1/tasks?project={project}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{tasks}");
        let after = tasks
            .as_array()
            .and_then(|all| all.iter().find(|t| t["id"] == task.as_str()))
            .expect("the task");
        assert_eq!(
            (&after["state"], &after["claimed_by"]),
            (&json!("open"), &Value::Null),
            "the plugin claimed the task for the session and gave it back: {after}"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
