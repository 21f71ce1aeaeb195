//! The audit trail written after the answer: a burst of calls loses no row across a clean
//! restart and keeps each agent's order, and a row reaches the store within a second with
//! nobody flushing.

use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_domain::Actor;
use sandboxd_domain::audit::{AuditEntry, AuditFilter};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{World, WorldSpec};

const AGENTS: usize = 10;
const CALLS_EACH: usize = 10;

/// Two cheap verbs in turn, so an agent's rows show whether their order is the calls'.
fn nth_verb(n: usize) -> Verb {
    if n.is_multiple_of(2) {
        Verb::SandboxInfo
    } else {
        Verb::Unclaim
    }
}

fn rows_of(agent: &sandboxd_domain::Agent) -> AuditFilter {
    AuditFilter {
        actor: Some(Actor::Agent(agent.slug.clone())),
        limit: 100,
        ..Default::default()
    }
}

/// Oldest first: ids sort by the time each event happened.
fn oldest_first(mut entries: Vec<AuditEntry>) -> Vec<AuditEntry> {
    entries.reverse();
    entries
}

#[tokio::test]
async fn a_burst_of_calls_keeps_every_audit_row_in_order_across_a_clean_restart() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let mut agents = Vec::new();
            for _ in 0..AGENTS {
                agents.push(w.agent("developer").await);
            }
            join_all(agents.iter().map(|agent| {
                let w = w.clone();
                async move {
                    for n in 0..CALLS_EACH {
                        w.call(agent, nth_verb(n), json!({})).await;
                    }
                }
            }))
            .await;
            // A clean stop: the writer writes what is queued; then the next start reads.
            w.broker.stop_audit().await;
            let late = &agents[0];
            w.call(late, Verb::SandboxInfo, json!({})).await;
            let restarted = w.restarted().await;
            for (i, agent) in agents.iter().enumerate() {
                let page = restarted.audit_log(&rows_of(agent)).await.expect("audit");
                let rows = oldest_first(page.entries);
                let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
                let mut expected: Vec<&str> = (0..CALLS_EACH).map(|n| nth_verb(n).name()).collect();
                if i == 0 {
                    // After the writer stopped, the call wrote its own row.
                    expected.push(Verb::SandboxInfo.name());
                }
                assert_eq!(actions, expected, "{}'s rows", agent.slug);
                assert!(
                    rows.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
                    "times follow the calls: {rows:?}"
                );
            }
            restarted.stop_audit().await;
        })
        .await;
}

#[tokio::test]
async fn a_row_is_in_the_store_within_a_second_without_a_flush() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let agent = w.agent("developer").await;
            // Read beside the broker, as another process would: nothing flushes for it.
            let store = w.store().await;
            w.call(&agent, Verb::SandboxInfo, json!({})).await;
            let called = Instant::now();
            loop {
                let page = store.list_audit(&rows_of(&agent)).await.expect("audit");
                if page.total == 1 {
                    break;
                }
                assert!(
                    called.elapsed() < Duration::from_secs(1),
                    "no audit row a second after the call: {page:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(called.elapsed() < Duration::from_secs(1));
            store.close().await;
        })
        .await;
}
