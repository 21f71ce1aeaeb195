//! `/mcp` as a client without an SDK sees it (raw HTTP): a single answer comes as JSON where
//! the client accepts it (in a session too, when it is quick), and resuming an answer stream the
//! daemon no longer has answers an error instead of an empty stream.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use serde_json::{Value, json};

use crate::mcp::{open_session, post_mcp};
use crate::support::{Home, TestDaemon, spawn_daemon, stop_and_clean_up, unique};

const ACCEPT: &str = "application/json, text/event-stream";

/// The `_meta` every 2026-07-28 request carries.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

async fn developer(daemon: &TestDaemon) -> String {
    let project = unique("raw");
    daemon.project(&project, &["postgres"]).await;
    daemon.task(&project).await;
    daemon.spawn_agent("developer", &project).await.0
}

#[tokio::test]
async fn a_stateless_tool_call_is_answered_as_json_and_a_lost_stream_as_an_error() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let token = developer(&daemon).await;
        let http = reqwest::Client::new();
        let url = format!("{}/mcp", daemon.url);

        let response = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "give_me_work")
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "give_me_work", "arguments": {}, "_meta": meta()},
            }))
            .send()
            .await
            .expect("tools/call");
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"].to_str().expect("ascii");
        assert!(
            content_type.starts_with("application/json"),
            "a single answer as JSON, not {content_type}"
        );
        let text = response.text().await.expect("body");
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("one JSON-RPC answer, no event ({e}): {text:?}"));
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "ok",
            "{answer}"
        );

        // A session's answer stream the daemon does not have (it died with a previous process,
        // or never was): resuming it brings the error of the call, not an empty stream.
        let initialized = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", ACCEPT)
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }))
            .send()
            .await
            .expect("initialize");
        assert_eq!(initialized.status(), 200);
        let session = initialized.headers()["mcp-session-id"]
            .to_str()
            .expect("ascii")
            .to_owned();
        let resumed = http
            .get(&url)
            .bearer_auth(&token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .header("last-event-id", "0/41")
            .send()
            .await
            .expect("resume");
        assert_eq!(resumed.status(), 200);
        let events = tokio::time::timeout(std::time::Duration::from_secs(10), resumed.text())
            .await
            .expect("the resumed stream ends")
            .expect("body");
        let data = events
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .unwrap_or_else(|| panic!("an event: {events:?}"));
        let error: Value = serde_json::from_str(data).expect("JSON-RPC");
        assert_eq!(error["error"]["code"], sandboxd_mcp::LOST_ANSWER_CODE);
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("call it again")),
            "{error}"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

/// Opens a 2025-11-25 session as `token` and calls `give_me_work` in it (request id 2): the
/// answer's content type and body.
async fn session_call(daemon: &TestDaemon, token: &str) -> (String, String) {
    let http = reqwest::Client::new();
    let session = open_session(&http, daemon, token).await;
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "give_me_work", "arguments": {}},
    });
    let response = post_mcp(&http, daemon, token, Some(&session), call).await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let body = tokio::time::timeout(std::time::Duration::from_secs(30), response.text())
        .await
        .expect("the answer ends")
        .expect("body");
    (content_type, body)
}

#[tokio::test]
async fn a_session_tool_call_is_answered_as_json() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let token = developer(&daemon).await;
        let (content_type, body) = session_call(&daemon, &token).await;
        assert!(
            content_type.starts_with("application/json"),
            "a quick answer in a session as JSON, not {content_type}: {body:?}"
        );
        let answer: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("exactly one JSON-RPC answer ({e}): {body:?}"));
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], 2, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "ok",
            "{answer}"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

#[tokio::test]
async fn with_no_json_budget_a_session_answer_is_a_resumable_stream() {
    let mut home = Home::new();
    home.set("SANDBOXD_BROKER__MCP_SESSION_JSON_BUDGET_MS", "0");
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let token = developer(&daemon).await;
        let (content_type, body) = session_call(&daemon, &token).await;
        assert!(
            content_type.starts_with("text/event-stream"),
            "a stream, not {content_type}: {body:?}"
        );
        let mut events = body.split("\n\n").filter(|e| !e.trim().is_empty());
        let priming = events.next().expect("a priming event");
        assert!(
            priming.lines().any(|l| l.starts_with("id: ")) && !priming.contains("jsonrpc"),
            "the first event lets the client resume, and carries no message: {body:?}"
        );
        let data = events
            .find_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .unwrap_or_else(|| panic!("the answer's event: {body:?}"));
        let answer: Value = serde_json::from_str(data).expect("JSON-RPC");
        assert_eq!(answer["id"], 2, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "ok",
            "{answer}"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
