//! Tasks: claim-locking under concurrency, compare-and-set transitions, notes.

use std::collections::BTreeSet;
use std::sync::Arc;

use sandboxd_domain::AgentSlug;
use sandboxd_domain::NoteKind;
use sandboxd_domain::lifecycle::{Handed, TaskState};
use sandboxd_domain::roles::Verb;
use sandboxd_store::{SecretCipher, Store, StoreError};
use tokio::sync::Barrier;

use crate::support::{agent, on_both, project, seed_agent};

const CONTENDERS: usize = 20;

/// `CONTENDERS` agents call `claim_next` at the same moment; answers what each got.
async fn race(store: &Store, agents: &[AgentSlug]) -> Vec<(AgentSlug, Option<String>)> {
    let barrier = Arc::new(Barrier::new(agents.len()));
    let mut handles = Vec::new();
    for slug in agents {
        let (store, barrier, slug) = (store.clone(), barrier.clone(), slug.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let got = store
                .claim_next(
                    &project("web"),
                    TaskState::Open,
                    TaskState::InProgress,
                    &slug,
                )
                .await
                .expect("claim_next never fails under contention");
            (slug, got.map(|t| t.id))
        }));
    }
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("task"));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_have_exactly_one_winner_per_task() {
    on_both("claims", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let agents: Vec<AgentSlug> = (0..CONTENDERS)
            .map(|i| agent(&format!("dev-{i}")))
            .collect();
        for slug in &agents {
            seed_agent(&store, &web, slug).await;
        }

        // One open task, twenty contenders: one winner.
        let task = store
            .create_task(&web, "the only task", "")
            .await
            .expect("create");
        let results = race(&store, &agents).await;
        let winners: Vec<_> = results.iter().filter(|(_, got)| got.is_some()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        let (winner, got) = winners[0];
        assert_eq!(got.as_deref(), Some(task.id.as_str()));
        let stored = store
            .get_task(&task.id)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(stored.state, TaskState::InProgress);
        assert_eq!(stored.claimed_by.as_ref(), Some(winner));

        // Five more open tasks, the same twenty: five winners, five distinct tasks.
        let mut created = BTreeSet::new();
        for i in 0..5 {
            let t = store
                .create_task(&web, &format!("task {i}"), "")
                .await
                .expect("create");
            created.insert(t.id);
        }
        let results = race(&store, &agents).await;
        let won: Vec<_> = results
            .iter()
            .filter_map(|(slug, got)| got.as_ref().map(|id| (slug, id)))
            .collect();
        assert_eq!(won.len(), 5, "{results:?}");
        let ids: BTreeSet<String> = won.iter().map(|(_, id)| (*id).clone()).collect();
        assert_eq!(ids, created, "each task claimed exactly once");
        for (slug, id) in won {
            let t = store.get_task(id).await.expect("get").expect("exists");
            assert_eq!(t.claimed_by.as_ref(), Some(slug));
        }
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn claims_take_the_oldest_task_of_the_project() {
    on_both("claim-order", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let (web, api) = (project("web"), project("api"));
        let dev = agent("dev-1");
        seed_agent(&store, &web, &dev).await;
        store.put_project(&api, None, None).await.expect("project");
        let other = store
            .create_task(&api, "elsewhere", "")
            .await
            .expect("create");
        let first = store
            .create_task(&web, "first", "do it")
            .await
            .expect("create");
        let second = store.create_task(&web, "second", "").await.expect("create");
        assert!(first.id.starts_with("t-"), "{}", first.id);
        assert_eq!(first.state, TaskState::Open);
        assert_eq!(first.claimed_by, None);

        let got = store
            .claim_next(&web, TaskState::Open, TaskState::InProgress, &dev)
            .await
            .expect("claim")
            .expect("a task");
        assert_eq!(got.id, first.id);
        assert_eq!(got.description, "do it");
        assert_eq!(
            store
                .active_task_of(&dev)
                .await
                .expect("active")
                .map(|t| t.id),
            Some(first.id.clone())
        );

        let open: Vec<String> = store
            .list_tasks(Some(&web), Some(TaskState::Open))
            .await
            .expect("list")
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(open, [second.id]);
        assert_eq!(store.list_tasks(None, None).await.expect("all").len(), 3);
        assert_eq!(
            store
                .get_task(&other.id)
                .await
                .expect("get")
                .expect("exists")
                .state,
            TaskState::Open
        );

        // Nothing in review: no claim.
        assert_eq!(
            store
                .claim_next(&web, TaskState::Review, TaskState::InReview, &dev)
                .await
                .expect("claim"),
            None
        );
        let err = store
            .create_task(&project("nowhere"), "x", "")
            .await
            .expect_err("no project");
        assert!(err.is_not_found(), "{err:?}");
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn transitions_are_compare_and_set() {
    on_both("transitions", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let (dev, qa) = (agent("dev-1"), agent("qa-1"));
        seed_agent(&store, &web, &dev).await;
        seed_agent(&store, &web, &qa).await;
        let task = store.create_task(&web, "t", "").await.expect("create");
        let id = task.id.as_str();
        use TaskState::*;

        // i_will_work_on: claim a named open task.
        assert!(
            store
                .transition(id, Open, None, InProgress, Some(&dev))
                .await
                .expect("claim")
        );
        // Claiming it again (by anyone) fails the expectation.
        assert!(
            !store
                .transition(id, Open, None, InProgress, Some(&qa))
                .await
                .expect("cas")
        );
        // Only the holder can hand it on.
        assert!(
            !store
                .transition(id, InProgress, Some(&qa), Review, None)
                .await
                .expect("cas")
        );
        assert!(
            !store
                .transition(id, InReview, Some(&dev), Review, None)
                .await
                .expect("cas")
        );
        assert_eq!(
            store
                .active_task_of(&dev)
                .await
                .expect("active")
                .map(|t| t.id),
            Some(task.id.clone())
        );
        assert_eq!(store.active_task_of(&qa).await.expect("active"), None);

        // The holder cannot be deleted while it holds the task.
        let err = store.delete_agent(&dev).await.expect_err("holds a task");
        assert!(matches!(err, StoreError::InUse { .. }), "{err:?}");

        // i_am_done → review, then claim_review / pass_review.
        assert!(
            store
                .transition(id, InProgress, Some(&dev), Review, None)
                .await
                .expect("done")
        );
        assert_eq!(store.active_task_of(&dev).await.expect("active"), None);
        let reviewing = store
            .claim_next(&web, Review, InReview, &qa)
            .await
            .expect("claim review")
            .expect("the task");
        assert_eq!(reviewing.claimed_by.as_ref(), Some(&qa));
        assert_eq!(
            store
                .active_task_of(&qa)
                .await
                .expect("active")
                .map(|t| t.state),
            Some(InReview)
        );
        assert!(
            store
                .transition(id, InReview, Some(&qa), Done, None)
                .await
                .expect("pass")
        );
        let done = store.get_task(id).await.expect("get").expect("exists");
        assert_eq!((done.state, done.claimed_by), (Done, None));
        assert!(done.updated_at_ms >= task.updated_at_ms);

        // Unknown task and unknown new claimant are NotFound, not a silent false.
        let err = store
            .transition("t-999999", Open, None, InProgress, Some(&dev))
            .await
            .expect_err("no such task");
        assert!(err.is_not_found(), "{err:?}");
        let other = store.create_task(&web, "u", "").await.expect("create");
        let err = store
            .transition(&other.id, Open, None, InProgress, Some(&agent("ghost")))
            .await
            .expect_err("no such agent");
        assert!(
            err.is_not_found() && err.to_string().contains("ghost"),
            "{err}"
        );
        let err = store
            .claim_next(&web, Open, InProgress, &agent("ghost"))
            .await
            .expect_err("no such agent");
        assert!(err.is_not_found(), "{err:?}");
        assert!(store.delete_agent(&dev).await.expect("free now"));
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn notes_keep_their_order_and_privacy() {
    on_both("notes", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let (dev, auditor) = (agent("dev-1"), agent("auditor-1"));
        seed_agent(&store, &web, &dev).await;
        seed_agent(&store, &web, &auditor).await;
        let task = store.create_task(&web, "t", "").await.expect("create");

        let first = store
            .record_task_note(&task.id, &dev, NoteKind::Note, false, "started")
            .await
            .expect("note");
        store
            .record_task_note(&task.id, &auditor, NoteKind::Note, true, "looks odd")
            .await
            .expect("private note");
        store
            .record_task_note(
                &task.id,
                &dev,
                NoteKind::Evidence,
                false,
                "tests pass: 42/42",
            )
            .await
            .expect("evidence");
        assert_eq!(first.task_id, task.id);
        assert_eq!(first.kind, NoteKind::Note);

        let public = store.list_task_notes(&task.id, false).await.expect("list");
        let texts: Vec<&str> = public.iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts, ["started", "tests pass: 42/42"]);
        let all = store.list_task_notes(&task.id, true).await.expect("list");
        assert_eq!(all.len(), 3);
        assert!(all[1].private && all[1].agent == auditor);
        assert_eq!(all[2].kind, NoteKind::Evidence);

        let err = store
            .record_task_note("t-404", &dev, NoteKind::Note, false, "x")
            .await
            .expect_err("no such task");
        assert!(err.is_not_found(), "{err:?}");
        store.close().await;
    })
    .await;
}

/// A hand-over moves the task and records it as the agent's last, in one transaction; one that
/// does not hold is refused and records nothing; removing the agent removes its record.
#[tokio::test]
async fn a_hand_over_is_recorded_with_the_move_and_only_then() {
    on_both("hand-over", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let (dev, other) = (agent("dev-1"), agent("dev-2"));
        seed_agent(&store, &web, &dev).await;
        seed_agent(&store, &web, &other).await;
        let task = store.create_task(&web, "t", "").await.expect("create");
        store
            .claim_next(&web, TaskState::Open, TaskState::InProgress, &dev)
            .await
            .expect("claim")
            .expect("a task");
        let handed = Handed {
            verb: Verb::IAmDone,
            task: task.id.clone(),
            from: TaskState::InProgress,
            to: TaskState::Review,
        };
        assert!(!store.hand_over(&other, &handed).await.expect("refused"));
        assert_eq!(store.last_hand_over(&other).await.expect("read"), None);
        assert_eq!(store.last_hand_over(&dev).await.expect("read"), None);

        assert!(store.hand_over(&dev, &handed).await.expect("moved"));
        let moved = store.get_task(&task.id).await.expect("get").expect("task");
        assert_eq!((moved.state, moved.claimed_by), (TaskState::Review, None));
        let last = store
            .last_hand_over(&dev)
            .await
            .expect("read")
            .expect("recorded");
        assert_eq!(last.handed, handed);
        assert!(last.at_ms > 0);
        // Not twice: the task is no longer the agent's.
        assert!(!store.hand_over(&dev, &handed).await.expect("refused"));

        assert!(store.delete_agent(&dev).await.expect("delete"));
        assert_eq!(store.last_hand_over(&dev).await.expect("read"), None);
        store.close().await;
    })
    .await;
}
