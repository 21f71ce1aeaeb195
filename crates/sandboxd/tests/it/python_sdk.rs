//! The official MCP Python SDK, the client many agents run, against the real daemon over
//! streamable HTTP and over stdio (`sandboxd mcp`, launched by the SDK as a configured command):
//! 2.x in its default `auto` mode, pinned to the stateless 2026-07-28 revision and in the
//! 2025-11-25 session revision, 1.x in its session revision, and fastmcp's client. Each lists
//! annotated tools whose answers validate against their output schemas, gets a working Postgres,
//! releases it, and closes without a warning; and every client, on both transports, reads the
//! same tools and the same envelopes (the same fields, texts and outcomes; only credentials,
//! ids and ports differ).
//!
//! The SDKs live in virtualenvs `scripts/python-sdks.sh` makes (the test command runs it).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::Command;

use futures::FutureExt;
use serde_json::Value;

use crate::support::{
    Home, TestDaemon, entry, python_venv, spawn_daemon, stop_and_clean_up, unique,
};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_agent.py");

/// Runs the agent flow script with a fresh developer of a fresh project holding a task.
async fn run_flow(daemon: &TestDaemon, python: &Path, mode: &str, transport: Transport) -> Value {
    let project = unique("py");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    let (token, _) = daemon.spawn_agent("developer", &project).await;
    let url = format!("{}/mcp", daemon.url);
    let python = python.to_owned();
    let mut args = vec![SCRIPT.to_owned(), url, mode.to_owned()];
    if transport == Transport::Stdio {
        args.push(env!("CARGO_BIN_EXE_sandboxd").to_owned());
    }
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(&args)
            .env("SANDBOXD_AGENT_TOKEN", &token)
            .env_remove("SANDBOXD_CONFIG")
            .output()
            .expect("python")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    Stdio,
}

fn call<'a>(report: &'a Value, index: usize, verb: &str) -> &'a Value {
    let call = &report["calls"][index];
    assert_eq!(call["verb"], verb, "{report}");
    call
}

/// What every SDK and revision must see.
fn judge(report: &Value, protocol: &str) {
    assert_eq!(report["protocol"], protocol, "{report}");
    let tools = report["tools"].as_array().expect("tools");
    assert!(tools.len() >= 8, "the developer's verbs: {report}");
    for tool in tools {
        let name = &tool["name"];
        assert!(
            tool["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{name}"
        );
        let hints = &tool["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(hints[hint].is_boolean(), "{name}: {hint} in {hints}");
        }
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
    }
    let request = tools
        .iter()
        .find(|t| t["name"] == "request_sandbox")
        .expect("request_sandbox");
    assert_eq!(
        request["inputSchema"]["properties"]["services"]["items"]["enum"],
        serde_json::json!(["postgres", "redis"])
    );

    for call in report["calls"].as_array().expect("calls") {
        assert!(call["invalid"].is_null(), "{call}");
        assert_eq!(call["text_is_the_json"], true, "{call}");
    }
    let first = call(report, 1, "request_sandbox");
    let again = call(report, 2, "request_sandbox");
    assert_eq!(first["is_error"], false, "{first}");
    let postgres = entry(&first["structured"], "postgres");
    assert_eq!(
        postgres["password"],
        entry(&again["structured"], "postgres")["password"],
        "the same credentials again"
    );
    for call in [first, again] {
        assert_eq!(
            call["postgres_answer"],
            serde_json::json!([postgres["user"], postgres["database"]]),
            "the handed-out Postgres answers its account: {call}"
        );
    }
    let refused = call(report, 3, "request_sandbox");
    assert_eq!(refused["is_error"], true);
    assert_eq!(refused["structured"]["error"], "service_not_allowed");
    assert_eq!(call(report, 4, "release_sandbox")["is_error"], false);
    assert!(
        report["warnings"].as_array().expect("warnings").is_empty(),
        "the SDK warned: {report}"
    );
}

/// What a report says that must not depend on the client: the tools as listed, and per call
/// its verb, outcome, `next`/`remediate` texts and the shape of its envelope (values that
/// differ per run, as credentials, ids and ports, reduced to their JSON type).
fn what_every_client_sees(report: &Value) -> Value {
    let calls: Vec<Value> = report["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|call| {
            let envelope = &call["structured"];
            serde_json::json!({
                "verb": call["verb"],
                "is_error": call["is_error"],
                "status": envelope["status"],
                "error": envelope["error"],
                "next": envelope["next"],
                "remediate": envelope["remediate"],
                "retryable": envelope["retryable"],
                "shape": shape(envelope),
            })
        })
        .collect();
    serde_json::json!({"tools": report["tools"], "calls": calls})
}

/// `value` with every string and number replaced by its type's name.
fn shape(value: &Value) -> Value {
    match value {
        Value::String(_) => Value::from("string"),
        Value::Number(_) => Value::from("number"),
        Value::Array(items) => items.iter().map(shape).collect(),
        Value::Object(fields) => fields
            .iter()
            .map(|(key, value)| (key.clone(), shape(value)))
            .collect(),
        other => other.clone(),
    }
}

/// Every SDK and revision the SDKs speak, and fastmcp, through `transport`.
async fn every_sdk_and_revision(transport: Transport) -> Vec<(String, Value)> {
    let (Some(two), Some(one), Some(fastmcp)) = (
        python_venv("mcp-2.3.0"),
        python_venv("mcp-1.30.0"),
        python_venv("fastmcp-4.2.3"),
    ) else {
        return Vec::new();
    };
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let mut seen = Vec::new();
    let outcome = AssertUnwindSafe(async {
        for (python, mode, protocol, sdk) in [
            (&two, "auto", "2026-07-28", "2."),
            (&two, "2026-07-28", "2026-07-28", "2."),
            (&two, "legacy", "2025-11-25", "2."),
            (&one, "legacy", "2025-11-25", "1."),
            (&fastmcp, "fastmcp", "2026-07-28", "fastmcp 4.2."),
        ] {
            let report = run_flow(&daemon, python, mode, transport).await;
            assert!(
                report["sdk"].as_str().is_some_and(|v| v.starts_with(sdk)),
                "{transport:?} {mode}: {report}"
            );
            judge(&report, protocol);
            seen.push((
                format!("{transport:?} {mode} {}", report["sdk"]),
                what_every_client_sees(&report),
            ));
        }
        assert!(
            daemon.sandboxes().await.is_empty(),
            "every flow released its sandbox"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
    seen
}

/// Every client saw what the first one saw.
fn all_alike(seen: &[(String, Value)]) {
    let Some((first, expected)) = seen.first() else {
        return;
    };
    for (client, saw) in seen {
        assert_eq!(saw, expected, "{client} differs from {first}");
    }
}

#[tokio::test]
async fn python_sdk_2_auto_stateless_and_with_a_session_python_sdk_1_and_fastmcp_over_http_and_stdio_alike()
 {
    let mut seen = every_sdk_and_revision(Transport::Http).await;
    seen.extend(every_sdk_and_revision(Transport::Stdio).await);
    all_alike(&seen);
}
