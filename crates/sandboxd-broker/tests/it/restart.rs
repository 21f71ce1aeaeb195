//! A restart, or a crash (the broker dropped without any teardown), keeps live sandboxes with
//! their credentials; dead ones are dropped and re-provisioned. Credentials are never stored,
//! logged or audited in plaintext.

use sandboxd_domain::call::Call;
use std::io::Write;
use std::sync::{Arc, Mutex};

use sandboxd_backend::Backend;
use sandboxd_domain::audit::AuditFilter;
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, evidence_of, ok, passwords, pg_query};

async fn a_crash_keeps_live_sandboxes(kind: Kind) {
    let Some(world) = World::new(WorldSpec {
        kind,
        ..WorldSpec::default()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let before = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            let provisioned = w.backend.total();

            // The crash: a second broker on the same store and backend; the first never tore
            // anything down (a restart does exactly the same).
            let restarted = w.restarted().await;
            let after = ok(restarted
                .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                .await);
            assert_eq!(passwords(&before), passwords(&after), "same credentials");
            assert_eq!(
                w.backend.total(),
                provisioned,
                "adopted, not re-provisioned"
            );
            pg_query(evidence_of(&after, "postgres"), "SELECT 1")
                .await
                .expect("still answering");
        })
        .await;
}

#[tokio::test]
async fn a_crash_keeps_live_sandboxes_on_processes() {
    a_crash_keeps_live_sandboxes(Kind::Process).await;
}

#[tokio::test]
async fn a_crash_keeps_live_sandboxes_on_docker() {
    a_crash_keeps_live_sandboxes(Kind::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_keeps_live_sandboxes_on_kubernetes() {
    a_crash_keeps_live_sandboxes(Kind::Kubernetes).await;
}

#[tokio::test]
async fn dead_sandboxes_are_dropped_at_restart_and_reprovisioned() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let before = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            for instance in w.listed(&dev.slug).await {
                w.backend
                    .teardown(&instance.handle)
                    .await
                    .expect("out of band");
            }
            let restarted = w.restarted().await;
            assert!(
                restarted
                    .sandboxes()
                    .await
                    .expect("list")
                    .iter()
                    .all(|s| s.owner != dev.slug)
            );
            let after = ok(restarted
                .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                .await);
            assert_ne!(
                passwords(&before)["postgres"],
                passwords(&after)["postgres"]
            );
            assert_eq!(w.backend.total(), 4);
        })
        .await;
}

/// Collects everything tracing writes, at every level.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_password_appears_nowhere_in_the_store_file_logs_or_audit() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    World::new(WorldSpec {
        services: vec!["postgres", "redis", "mariadb"],
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| {
        let logs = logs.clone();
        async move {
            let dev = w.working_agent("developer").await;
            let answer = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            ok(
                w.call(&dev, Verb::RequestSandbox, json!({"services": ["redis"]}))
                    .await,
            );
            let _ = w.restarted().await;
            let secrets: Vec<String> = passwords(&answer).into_values().collect();
            assert_eq!(secrets.len(), 3);

            let mut files = vec![w.store_path.clone()];
            for suffix in ["-wal", "-shm"] {
                let mut path = w.store_path.clone().into_os_string();
                path.push(suffix);
                files.push(path.into());
            }
            let audit = w
                .broker
                .audit_log(&AuditFilter {
                    limit: 1000,
                    ..AuditFilter::default()
                })
                .await
                .expect("audit");
            assert!(audit.entries.len() >= 4, "{audit:?}");
            let audit_text = format!("{audit:?}");
            let metrics = w.broker.metrics().render();
            let log_text = String::from_utf8_lossy(&logs.0.lock().expect("lock")).into_owned();
            for secret in &secrets {
                for file in &files {
                    let bytes = std::fs::read(file).unwrap_or_default();
                    assert!(
                        !String::from_utf8_lossy(&bytes).contains(secret.as_str()),
                        "{} holds a handed-out password",
                        file.display()
                    );
                }
                assert!(
                    !audit_text.contains(secret.as_str()),
                    "audit holds a password"
                );
                assert!(
                    !metrics.contains(secret.as_str()),
                    "metrics hold a password"
                );
                assert!(!log_text.contains(secret.as_str()), "logs hold a password");
            }
            assert!(
                log_text.len() > 100,
                "logs were captured: {}",
                log_text.len()
            );
            // Every verb, provision and teardown runs in a span naming who and what, and the
            // spans' fields were in the text searched above.
            for span in [
                format!("verb{{agent={} verb=\"request_sandbox\"", dev.slug),
                format!("provision{{agent={}", dev.slug),
                format!("provision_instance{{engine=\"postgres\" agent={}", dev.slug),
            ] {
                assert!(log_text.contains(&span), "no {span} span in the log");
            }
        }
    })
    .await;
}
