//! Leases between replicas: one holder at a time, renewed by its holder, free once expired or
//! released; many replicas racing for one lease get exactly one winner; pool members belong to
//! a replica only while that replica is seen.

use futures::future::join_all;
use sandboxd_store::SecretCipher;

use crate::support::on_both;

#[tokio::test]
async fn a_lease_has_one_holder_until_it_expires_or_is_released() {
    on_both("leases", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        assert!(
            store
                .acquire_lease("agent:dev-1", "a", 60_000)
                .await
                .expect("a")
        );
        assert!(
            !store
                .acquire_lease("agent:dev-1", "b", 60_000)
                .await
                .expect("b")
        );
        assert!(
            store
                .acquire_lease("agent:dev-1", "a", 60_000)
                .await
                .expect("renewed")
        );
        assert_eq!(
            store
                .lease_holder("agent:dev-1")
                .await
                .expect("holder")
                .as_deref(),
            Some("a")
        );
        // Another name is another lease.
        assert!(
            store
                .acquire_lease("agent:dev-2", "b", 60_000)
                .await
                .expect("b")
        );
        // Released: anyone may take it; a release by a non-holder changes nothing.
        store
            .release_lease("agent:dev-1", "b")
            .await
            .expect("not b's");
        assert!(
            !store
                .acquire_lease("agent:dev-1", "b", 60_000)
                .await
                .expect("still a's")
        );
        store
            .release_lease("agent:dev-1", "a")
            .await
            .expect("release");
        assert_eq!(
            store.lease_holder("agent:dev-1").await.expect("holder"),
            None
        );
        assert!(
            store
                .acquire_lease("agent:dev-1", "b", 50)
                .await
                .expect("b now")
        );
        // Expired: a crashed holder's lease frees itself.
        tokio::time::sleep(std::time::Duration::from_millis(120)).await;
        assert_eq!(
            store.lease_holder("agent:dev-1").await.expect("holder"),
            None
        );
        assert!(
            store
                .acquire_lease("agent:dev-1", "c", 60_000)
                .await
                .expect("c")
        );

        // Eight replicas race for one lease: exactly one wins.
        let racers: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
        let won = join_all(
            racers
                .iter()
                .map(|r| store.acquire_lease("leader:janitor", r, 60_000)),
        )
        .await;
        let winners = won
            .into_iter()
            .filter(|w| *w.as_ref().expect("asked"))
            .count();
        assert_eq!(winners, 1);
    })
    .await;
}

#[tokio::test]
async fn a_pool_member_is_alive_only_while_its_replica_is_seen() {
    on_both("poolmembers", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let name = "sandboxd-redis-pool-0a1b2c3d-abc";
        assert!(
            !store
                .pool_member_alive(name, 60_000)
                .await
                .expect("unknown")
        );
        store
            .register_pool_member(name, "r1")
            .await
            .expect("register");
        assert!(
            !store
                .pool_member_alive(name, 60_000)
                .await
                .expect("r1 never seen"),
            "a replica never seen holds nothing"
        );
        store.replica_seen("r1").await.expect("seen");
        assert!(
            store
                .pool_member_alive(name, 60_000)
                .await
                .expect("r1 seen")
        );
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        assert!(
            !store.pool_member_alive(name, 30).await.expect("stale"),
            "a replica not seen within the window holds nothing"
        );
        store.forget_pool_member(name).await.expect("forget");
        assert!(
            !store
                .pool_member_alive(name, 60_000)
                .await
                .expect("forgotten")
        );
    })
    .await;
}
