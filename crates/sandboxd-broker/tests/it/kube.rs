//! The broker on the Kubernetes backend, on the test cluster: the same lifecycle the other
//! backends keep — a sandbox whose Pod dies is replaced with new credentials, a restart adopts
//! a live one with its credentials, the janitor reaps an orphan Pod of its own at once and never
//! touches another maker's — with nothing changed in the broker for it.

use sandboxd_domain::call::Call;
use std::time::Duration;

use sandboxd_backend::InstanceRequest;
use sandboxd_broker::ReapReason;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};
use serde_json::json;

use crate::support::{Kind, World, WorldSpec, evidence_of, ok, passwords, pg_query, unique};

fn kube_world() -> WorldSpec {
    WorldSpec {
        kind: Kind::Kubernetes,
        services: vec!["postgres", "redis"],
        ..WorldSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_pod_is_replaced_and_a_restart_keeps_a_live_sandbox() {
    let Some(world) = World::new(kube_world()).await else {
        return;
    };
    world
        .run(|w| async move {
            let dev = w.working_agent("developer").await;
            let first = ok(w.call(&dev, Verb::RequestSandbox, json!({})).await);
            pg_query(evidence_of(&first, "postgres"), "CREATE TABLE mine (x int)")
                .await
                .expect("the agent's own postgres, on the cluster");
            let provisioned = w.backend.total();

            // A restart: the same store and cluster, a new broker; the sandbox is adopted.
            let restarted = w.restarted().await;
            let adopted = ok(restarted
                .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                .await);
            assert_eq!(passwords(&first), passwords(&adopted), "same credentials");
            assert_eq!(
                w.backend.total(),
                provisioned,
                "adopted, not re-provisioned"
            );

            // Its postgres Pod is deleted behind sandboxd's back: the next request proves the
            // cache dead and hands out a whole new sandbox.
            let listed = w.listed(&dev.slug).await;
            let pg = listed
                .iter()
                .find(|l| l.handle.engine.name == "postgres")
                .expect("the postgres Pod");
            sandboxd_testkit::kubectl(&[
                "delete",
                "pod",
                &pg.handle.name,
                "--namespace",
                &namespace_of(&w),
                "--grace-period=0",
                "--force",
            ])
            .expect("delete the Pod out of band");
            let replaced = ok(restarted
                .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                .await);
            assert_ne!(
                passwords(&first).get("postgres"),
                passwords(&replaced).get("postgres"),
                "new credentials"
            );
            assert_eq!(w.backend.total(), provisioned + 2, "the whole set again");
            pg_query(evidence_of(&replaced, "postgres"), "SELECT 1")
                .await
                .expect("the replacement answers");
            ok(restarted
                .call(&dev, Call::parse(Verb::ReleaseSandbox, json!({})))
                .await);
            assert!(w.listed(&dev.slug).await.is_empty(), "released");
        })
        .await;
}

/// The namespace the world's backend works in.
fn namespace_of(w: &World) -> String {
    w.namespace().expect("a Kubernetes world").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_reaps_an_orphan_pod_of_its_own_and_never_a_foreign_one() {
    let Some(world) = World::new(WorldSpec {
        tweak_config: |c| c.grace = Duration::from_secs(600),
        ..kube_world()
    })
    .await
    else {
        return;
    };
    world
        .run(|w| async move {
            let make = |owner: &AgentSlug, maker: DaemonId| InstanceRequest {
                major: None,
                engine: EngineRef::parse("redis").expect("registered"),
                owner: owner.clone(),
                maker,
                features: Default::default(),
                size: None,
            };
            let ghost = AgentSlug::parse(&unique("ghost")).expect("slug");
            w.track(&ghost);
            w.backend
                .inner
                .provision(&make(&ghost, w.broker.daemon_id().clone()))
                .await
                .expect("an orphan: made by this daemon, never stored");
            let stranger = AgentSlug::parse(&unique("stranger")).expect("slug");
            w.track(&stranger);
            w.backend
                .inner
                .provision(&make(&stranger, DaemonId::cli()))
                .await
                .expect("a foreign Pod");
            let report = w.broker.run_janitor().await;
            let reaped: Vec<_> = report.reaped.iter().map(|(_, r)| *r).collect();
            assert_eq!(reaped, vec![ReapReason::Orphan], "{report:?}");
            assert_eq!(report.foreign, 1, "{report:?}");
            assert!(w.listed(&ghost).await.is_empty());
            let theirs = w.listed(&stranger).await;
            assert_eq!(theirs.len(), 1);
            assert!(theirs[0].live, "never touched");
        })
        .await;
}
