//! MCP sessions: a session reads as live only while its last use is recent enough, a use moves
//! that clock forward, and the sweep deletes exactly the expired ones.

use sandboxd_domain::clock::now_ms;
use sandboxd_store::SecretCipher;

use crate::support::on_both;

const HOUR: i64 = 3_600_000;

#[tokio::test]
async fn sessions_expire_from_their_last_use_and_are_swept() {
    on_both("sessions", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let start = now_ms();
        store.put_mcp_session("busy", "{}").await.expect("put");
        store.put_mcp_session("idle", "{}").await.expect("put");
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
                .touch_mcp_session("busy", later, start - HOUR, later)
                .await
                .expect("touch")
        );
        let moved = store.get_mcp_session("busy", later - 1).await.expect("get");
        assert_eq!(moved.as_deref(), Some("{}"), "used at `later`");
        // A use within the refresh window reads but does not write.
        assert!(
            store
                .touch_mcp_session("busy", later + 10, later - HOUR, later - 1)
                .await
                .expect("touch")
        );
        let unchanged = store.get_mcp_session("busy", later + 1).await.expect("get");
        assert_eq!(unchanged, None, "the recorded use stayed at `later`");
        // An expired or unknown session is refused and not revived.
        let cutoff = later - HOUR;
        for id in ["idle", "never"] {
            let touched = store.touch_mcp_session(id, later, cutoff, later).await;
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
