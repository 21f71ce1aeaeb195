//! The audit log: newest first, cursor paging, filters.

use sandboxd_domain::Actor;
use sandboxd_domain::audit::{AuditFilter, OutcomeFilter};
use sandboxd_store::{NewAuditEntry, SecretCipher};

use crate::support::{agent, on_both, project};

fn entry(n: usize) -> NewAuditEntry {
    let actor = match n % 3 {
        0 => Actor::Agent(agent("dev-1")),
        1 => Actor::Agent(agent("qa-1")),
        _ => Actor::Daemon,
    };
    NewAuditEntry {
        actor,
        action: if n % 3 == 2 {
            "reap"
        } else {
            "request_sandbox"
        }
        .to_owned(),
        subject: format!("subject-{n}"),
        project: n.is_multiple_of(2).then(|| project("web")),
        outcome: if n.is_multiple_of(5) {
            "invalid_state"
        } else {
            "ok"
        }
        .to_owned(),
        duration_ms: n as u64,
        detail: format!("entry {n}"),
    }
}

#[tokio::test]
async fn pages_walk_newest_first_and_filters_narrow() {
    on_both("audit", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let mut appended = Vec::new();
        for n in 0..25 {
            appended.push(store.append_audit(&entry(n)).await.expect("append"));
        }
        assert_eq!(appended[3].detail, "entry 3");
        assert_eq!(appended[3].duration_ms, 3);
        assert!(
            appended.windows(2).all(|w| w[0].id < w[1].id),
            "ids are time-ordered"
        );

        // Three pages of 10, 10, 5, newest first, no overlap.
        let mut seen = Vec::new();
        let mut before = None;
        let mut sizes = Vec::new();
        loop {
            let page = store
                .list_audit(&AuditFilter {
                    before: before.clone(),
                    limit: 10,
                    ..Default::default()
                })
                .await
                .expect("page");
            assert_eq!(page.total, 25);
            sizes.push(page.entries.len());
            seen.extend(page.entries.iter().map(|e| e.subject.clone()));
            match page.next_before {
                Some(cursor) => before = Some(cursor),
                None => break,
            }
        }
        assert_eq!(sizes, [10, 10, 5]);
        let expected: Vec<String> = (0..25).rev().map(|n| format!("subject-{n}")).collect();
        assert_eq!(seen, expected);

        // Exactly a page's worth left: no empty extra page.
        let page = store
            .list_audit(&AuditFilter {
                limit: 25,
                ..Default::default()
            })
            .await
            .expect("page");
        assert_eq!((page.entries.len(), page.next_before), (25, None));

        let count = |filter: AuditFilter| {
            let store = store.clone();
            async move {
                let page = store.list_audit(&filter).await.expect("filtered");
                assert_eq!(
                    page.total as usize,
                    page.entries.len(),
                    "one page holds them"
                );
                page.entries
            }
        };
        let dev = count(AuditFilter {
            actor: Some(Actor::Agent(agent("dev-1"))),
            ..Default::default()
        })
        .await;
        assert_eq!(dev.len(), 9);
        assert!(dev.iter().all(|e| e.actor == Actor::Agent(agent("dev-1"))));
        let daemon = count(AuditFilter {
            actor: Some(Actor::Daemon),
            ..Default::default()
        })
        .await;
        assert_eq!(daemon.len(), 8);
        assert!(daemon.iter().all(|e| e.action == "reap"));
        let web = count(AuditFilter {
            project: Some(project("web")),
            ..Default::default()
        })
        .await;
        assert_eq!(web.len(), 13);
        let failed = count(AuditFilter {
            outcome: Some(OutcomeFilter::Failed),
            ..Default::default()
        })
        .await;
        assert_eq!(failed.len(), 5);
        let ok = count(AuditFilter {
            outcome: Some(OutcomeFilter::Ok),
            ..Default::default()
        })
        .await;
        assert_eq!(ok.len(), 20);
        let code = count(AuditFilter {
            outcome: Some(OutcomeFilter::Is("invalid_state".into())),
            ..Default::default()
        })
        .await;
        assert_eq!(code.len(), 5);
        // Combined: dev-1 (n % 3 == 0), web (even), failed (n % 5 == 0): n = 0.
        let both = count(AuditFilter {
            actor: Some(Actor::Agent(agent("dev-1"))),
            project: Some(project("web")),
            outcome: Some(OutcomeFilter::Failed),
            ..Default::default()
        })
        .await;
        assert_eq!(
            both.iter().map(|e| e.subject.as_str()).collect::<Vec<_>>(),
            ["subject-0"]
        );
        // Filtered paging: 9 dev-1 entries in pages of 4.
        let page = store
            .list_audit(&AuditFilter {
                actor: Some(Actor::Agent(agent("dev-1"))),
                limit: 4,
                ..Default::default()
            })
            .await
            .expect("page");
        assert_eq!((page.entries.len(), page.total), (4, 9));
        let next = store
            .list_audit(&AuditFilter {
                actor: Some(Actor::Agent(agent("dev-1"))),
                limit: 4,
                before: page.next_before.clone(),
                ..Default::default()
            })
            .await
            .expect("next page");
        assert_eq!(next.entries.len(), 4);
        assert!(next.entries[0].id < page.entries[3].id);
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn long_details_are_cut() {
    on_both("audit-detail", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let mut long = entry(1);
        long.detail = "x".repeat(5000);
        let stored = store.append_audit(&long).await.expect("append");
        assert_eq!(
            stored.detail.chars().count(),
            sandboxd_store::audit::DETAIL_MAX_CHARS + 1
        );
        assert!(stored.detail.ends_with('…'));
        store.close().await;
    })
    .await;
}
