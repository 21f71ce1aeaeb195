//! All or nothing, with a fault injected at each step: a whole-set provision whose member
//! fails, a live sandbox completed in place whose added engine, feature activation or store
//! write fails, and a cold provision whose store write fails. Every failure leaves no instance
//! behind that nothing tracks, keeps a live sandbox (data and credentials) as it was, and says
//! so to the agent.

use sandboxd_domain::FeatureRequest;
use sandboxd_domain::envelope::{ErrorCode, OkEnvelope};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{World, WorldSpec, engines, evidence_of, ok, passwords, pg_query, refused};

/// Writes a row into the agent's Postgres, so "kept" can be checked by reading it back.
async fn write_marker(answer: &OkEnvelope) {
    let pg = evidence_of(answer, "postgres");
    pg_query(
        pg,
        "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)",
    )
    .await
    .expect("the agent writes");
}

async fn marker_is_there(answer: &OkEnvelope) -> bool {
    pg_query(evidence_of(answer, "postgres"), "SELECT v FROM kept")
        .await
        .is_ok()
}

/// Turns the fault of `step` on or off.
async fn set_fault(w: &World, step: &str, on: bool) {
    match step {
        "provision" => w.backend.fail_provisions_of(on.then_some("redis")),
        "activation" => w.backend.fail_activation(on),
        _ => w.fail_store_writes(on).await,
    }
}

#[tokio::test]
async fn a_member_that_fails_takes_the_whole_set_with_it() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            w.backend.fail_provisions_of(Some("redis"));
            let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::InvalidState);
            assert!(err.retryable, "{err:?}");
            assert!(err.remediate.contains("nothing was left behind"), "{err:?}");
            assert!(
                w.listed(&dev.slug).await.is_empty(),
                "the postgres member went too"
            );

            w.backend.fail_provisions_of(None);
            let answer = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(passwords(&answer).len(), 2);
            assert_eq!(w.listed(&dev.slug).await.len(), 2);
        })
        .await;
}

#[tokio::test]
async fn completing_a_live_sandbox_in_place_is_all_or_nothing_at_every_step() {
    World::new(WorldSpec {
        services: vec!["postgres"],
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        let dev = w.working_agent("developer").await;
        let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        write_marker(&first).await;
        let first_passwords = passwords(&first);
        // The project adds redis: the next request completes the live sandbox in place.
        w.broker
            .set_project(
                &w.project,
                Some(engines(&["postgres", "redis"])),
                Some(FeatureRequest::default()),
            )
            .await
            .expect("opt into redis");

        // Each fault in turn: the added engine, a feature activation after it was added, and
        // the store write after both.
        for step in ["provision", "activation", "store"] {
            set_fault(&w, step, true).await;
            let args = if step == "activation" {
                json!({"extensions": {"postgres": ["pg_trgm"]}})
            } else {
                json!({})
            };
            let err = refused(w.call(&dev, Verb::RequestSandbox, args).await);
            assert_eq!(err.error, ErrorCode::InvalidState, "{step}: {err:?}");
            assert!(
                err.message.contains("could not be completed in place"),
                "{step}: {err:?}"
            );
            assert!(
                err.remediate
                    .contains("your sandbox, its data and its credentials were kept"),
                "{step}: {err:?}"
            );
            let listed = w.listed(&dev.slug).await;
            assert_eq!(
                listed.len(),
                1,
                "{step}: only the postgres member: {listed:?}"
            );
            // The first answer's credentials still reach the first data.
            assert!(marker_is_there(&first).await, "{step}: the data is kept");
            set_fault(&w, step, false).await;
        }

        // With no fault, the completion goes through and keeps the data.
        let done = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
        assert_eq!(w.listed(&dev.slug).await.len(), 2);
        assert_eq!(passwords(&done)["postgres"], first_passwords["postgres"]);
        assert!(marker_is_there(&done).await);
    })
    .await;
}

#[tokio::test]
async fn a_store_that_cannot_record_a_new_sandbox_leaves_no_instance() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            w.fail_store_writes(true).await;
            let err = refused(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(err.error, ErrorCode::InvalidState);
            assert!(err.remediate.contains("nothing was left behind"), "{err:?}");
            assert_eq!(w.backend.total(), 2, "both members were made");
            assert!(w.listed(&dev.slug).await.is_empty(), "and both went again");
            w.fail_store_writes(false).await;
            ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            assert_eq!(w.listed(&dev.slug).await.len(), 2);
        })
        .await;
}
