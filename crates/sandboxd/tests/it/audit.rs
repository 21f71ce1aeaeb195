//! Audit rows are written after the answer, and an operator's restart loses none: a burst of
//! agents' calls over MCP, then `sandboxd restart` (the same process re-executes), then every
//! call's row is in the log, in each agent's order.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::{ADMIN_TOKEN, Home, spawn_daemon, stop_and_clean_up, unique};

const AGENTS: usize = 10;
const CALLS_EACH: usize = 10;

/// Two cheap verbs in turn, so an agent's rows show whether their order is the calls'.
fn nth_verb(n: usize) -> &'static str {
    if n.is_multiple_of(2) {
        "sandbox_info"
    } else {
        "unclaim"
    }
}

#[tokio::test]
async fn a_restart_after_a_burst_of_calls_loses_no_audit_row() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let project = unique("audit");
        daemon.project(&project, &["postgres"]).await;
        let mut agents = Vec::new();
        for _ in 0..AGENTS {
            let (token, spawned) = daemon.spawn_agent("developer", &project).await;
            let slug = spawned["agent"].as_str().expect("agent slug").to_owned();
            agents.push((slug, daemon.client(&token).await));
        }
        join_all(agents.iter().map(|(_, agent)| async move {
            for n in 0..CALLS_EACH {
                agent.call(nth_verb(n), json!({})).await;
            }
        }))
        .await;
        let restarted = home
            .sandboxd()
            .env("SANDBOXD_URL", &daemon.url)
            .arg("restart")
            .output()
            .expect("sandboxd restart");
        assert!(restarted.status.success(), "{restarted:?}");
        // A connection of its own: pooled ones went with the image the restart replaced.
        let http = reqwest::Client::new();
        for (slug, _) in &agents {
            let page: Value = http
                .get(format!("{}/v1/audit?agent={slug}&limit=100", daemon.url))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .expect("the restarted daemon answers")
                .json()
                .await
                .expect("JSON");
            let mut rows = page["entries"].as_array().expect("entries").clone();
            rows.reverse();
            let actions: Vec<&str> = rows
                .iter()
                .map(|r| r["action"].as_str().expect("action"))
                .collect();
            let expected: Vec<&str> = (0..CALLS_EACH).map(nth_verb).collect();
            assert_eq!(actions, expected, "{slug}'s rows: {page}");
            let times: Vec<i64> = rows
                .iter()
                .map(|r| r["at_ms"].as_i64().expect("at_ms"))
                .collect();
            assert!(times.is_sorted(), "times follow the calls: {times:?}");
        }
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
