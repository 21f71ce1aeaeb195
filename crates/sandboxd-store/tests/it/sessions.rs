//! MCP sessions: a session reads as live only while its last use is recent enough, a use moves
//! that clock forward, and the sweep deletes exactly the expired ones. A session answers to the
//! agent bound to it alone, and an agent's sessions past a count are evicted least recent first.

use sandboxd_domain::clock::now_ms;
use sandboxd_store::SecretCipher;

use crate::support::on_both;

const HOUR: i64 = 3_600_000;
const AGENT: &str = "dev-1";

#[tokio::test]
async fn sessions_expire_from_their_last_use_and_are_swept() {
    on_both("sessions", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let start = now_ms();
        store.put_mcp_session("busy", "{}").await.expect("put");
        store.put_mcp_session("idle", "{}").await.expect("put");
        for id in ["busy", "idle"] {
            assert!(store.bind_mcp_session(id, AGENT).await.expect("bind"));
        }
        assert_eq!(store.count_mcp_sessions().await.expect("count"), 2);
        // Live while the cut-off is at or before its last use, not after.
        let live = store.get_mcp_session("idle", start - HOUR).await;
        assert_eq!(live.expect("get").as_deref(), Some("{}"));
        let expired = store.get_mcp_session("idle", start + HOUR).await;
        assert_eq!(expired.expect("get"), None);

        // Two hours later (a one-hour TTL), "busy" is used: live, and its clock moves on.
        let later = start + 2 * HOUR;
        assert!(
            store
                .touch_mcp_session("busy", AGENT, later, start - HOUR, later)
                .await
                .expect("touch")
        );
        let moved = store.get_mcp_session("busy", later - 1).await.expect("get");
        assert_eq!(moved.as_deref(), Some("{}"), "used at `later`");
        // A use within the refresh window reads but does not write.
        assert!(
            store
                .touch_mcp_session("busy", AGENT, later + 10, later - HOUR, later - 1)
                .await
                .expect("touch")
        );
        let unchanged = store.get_mcp_session("busy", later + 1).await.expect("get");
        assert_eq!(unchanged, None, "the recorded use stayed at `later`");
        // An expired or unknown session is refused and not revived.
        let cutoff = later - HOUR;
        for id in ["idle", "never"] {
            let touched = store
                .touch_mcp_session(id, AGENT, later, cutoff, later)
                .await;
            assert!(!touched.expect("touch"), "{id}");
        }
        let revived = store.get_mcp_session("idle", cutoff).await.expect("get");
        assert_eq!(revived, None, "a refused touch writes nothing");

        // The sweep deletes what is older than the cut-off, and only that.
        assert_eq!(store.sweep_mcp_sessions(cutoff).await.expect("sweep"), 1);
        assert_eq!(store.count_mcp_sessions().await.expect("count"), 1);
        let busy = store.get_mcp_session("busy", cutoff).await.expect("get");
        assert_eq!(busy.as_deref(), Some("{}"));
        assert_eq!(store.sweep_mcp_sessions(later + 1).await.expect("sweep"), 1);
        assert_eq!(store.count_mcp_sessions().await.expect("count"), 0);
    })
    .await;
}

#[tokio::test]
async fn a_session_answers_to_its_agent_alone_and_an_agent_keeps_its_most_recent() {
    on_both("session-owners", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let start = now_ms();
        store.put_mcp_session("mine", "{}").await.expect("put");
        // Unbound (as rows stored before owners existed): nobody's.
        let unbound = store
            .touch_mcp_session("mine", AGENT, start, 0, start)
            .await;
        assert!(!unbound.expect("touch"), "an unbound session is nobody's");
        assert!(store.bind_mcp_session("mine", AGENT).await.expect("bind"));
        // Bound once: another agent cannot take it over, nor bind what does not exist.
        assert!(!store.bind_mcp_session("mine", "dev-2").await.expect("bind"));
        assert!(!store.bind_mcp_session("none", AGENT).await.expect("bind"));
        let theirs = store
            .touch_mcp_session("mine", "dev-2", start, 0, start)
            .await;
        assert!(
            !theirs.expect("touch"),
            "another agent's session reads as unknown"
        );
        let own = store
            .touch_mcp_session("mine", AGENT, start, 0, start)
            .await;
        assert!(own.expect("touch"));

        // Three more of one agent, one of another; "mine" is used last.
        for id in ["s1", "s2", "s3"] {
            store.put_mcp_session(id, "{}").await.expect("put");
            assert!(store.bind_mcp_session(id, AGENT).await.expect("bind"));
        }
        store.put_mcp_session("other", "{}").await.expect("put");
        assert!(
            store
                .bind_mcp_session("other", "dev-2")
                .await
                .expect("bind")
        );
        let later = now_ms() + 1000;
        let used = store
            .touch_mcp_session("mine", AGENT, later, 0, later)
            .await;
        assert!(used.expect("touch"));
        let mut evicted = store.evict_mcp_sessions(AGENT, 2).await.expect("evict");
        evicted.sort();
        assert_eq!(evicted, ["s1", "s2"], "the least recently used go");
        assert_eq!(store.count_mcp_sessions().await.expect("count"), 3);
        for id in ["mine", "s3"] {
            let kept = store.touch_mcp_session(id, AGENT, later, 0, 0).await;
            assert!(kept.expect("touch"), "{id} kept");
        }
        let other = store.touch_mcp_session("other", "dev-2", later, 0, 0).await;
        assert!(
            other.expect("touch"),
            "another agent's sessions are not counted"
        );
        assert!(
            store
                .evict_mcp_sessions(AGENT, 2)
                .await
                .expect("evict")
                .is_empty()
        );
    })
    .await;
}
