//! The task verbs' refusals point each role to a call that works for it.

use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::lifecycle::{Handed, TaskState};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{World, WorldSpec, ok, refused};

#[tokio::test]
async fn a_taken_task_points_to_a_claim_the_verb_can_make() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let holder = w.working_agent("developer").await;
            let task = w
                .broker
                .tasks(Some(&w.project), None)
                .await
                .expect("tasks")
                .into_iter()
                .find(|t| t.claimed_by.as_ref() == Some(&holder.slug))
                .expect("the holder's task");

            // i_will_work_on needs a task id: it is pointed to another one, or give_me_work.
            let other = w.agent("developer").await;
            let err = refused(
                w.call(&other, Verb::IWillWorkOn, json!({"task": task.id}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::TaskTaken, "{err:?}");
            assert!(err.remediate.contains("give_me_work"), "{err:?}");
            assert!(!err.remediate.contains("without a task id"), "{err:?}");

            // claim_review takes the next one without a task id.
            let qa = w.agent("qa").await;
            let err = refused(
                w.call(&qa, Verb::ClaimReview, json!({"task": task.id}))
                    .await,
            );
            assert_eq!(err.error, ErrorCode::TaskTaken, "{err:?}");
            assert!(
                err.remediate.contains("claim_review without a task id"),
                "{err:?}"
            );
        })
        .await;
}

/// A crash between a hand-over's task move and its audit row (the daemon SIGKILLed mid-call):
/// the store shows the task moved and the trail says nothing of it. The agent's retry still
/// answers the first call's success, because the store recorded the hand-over with the move;
/// after the agent moved a task since, the same call is out of order again.
#[tokio::test]
async fn a_hand_over_whose_audit_row_a_crash_lost_answers_its_retry_as_done() {
    World::new(WorldSpec::default())
        .await
        .expect("process world")
        .run(|w| async move {
            let agent = w.working_agent("developer").await;
            let task = w
                .broker
                .tasks(Some(&w.project), None)
                .await
                .expect("tasks")
                .into_iter()
                .find(|t| t.claimed_by.as_ref() == Some(&agent.slug))
                .expect("the agent's task");
            let audit_rows = || async {
                w.broker
                    .audit_log(&Default::default())
                    .await
                    .expect("audit")
                    .total
            };
            let before = audit_rows().await;
            // What the first i_am_done did before the crash: the move, and nothing else.
            let moved = w
                .store()
                .await
                .hand_over(
                    &agent.slug,
                    &Handed {
                        verb: Verb::IAmDone,
                        task: task.id.clone(),
                        from: TaskState::InProgress,
                        to: TaskState::Review,
                    },
                )
                .await
                .expect("hand_over");
            assert!(moved);
            assert_eq!(audit_rows().await, before, "no audit row was written");

            let answer = ok(w.call(&agent, Verb::IAmDone, json!({})).await);
            assert_eq!(answer.task_id.as_deref(), Some(task.id.as_str()));
            assert!(
                answer
                    .context_briefing
                    .contains("your earlier i_am_done did it"),
                "{answer:?}"
            );
            // Not another verb's repeat.
            let err = refused(w.call(&agent, Verb::Unclaim, json!({})).await);
            assert_eq!(err.error, ErrorCode::OutOfOrder, "{err:?}");

            // The agent moves on (a claim), hands that over, then idles: an old i_am_done is
            // no repeat of anything now.
            w.broker
                .add_task(&w.project, "next", "the next task")
                .await
                .expect("a task");
            ok(w.call(&agent, Verb::GiveMeWork, json!({})).await);
            ok(w.call(&agent, Verb::Unclaim, json!({})).await);
            ok(w.call(&agent, Verb::GiveMeWork, json!({})).await);
            ok(w.call(&agent, Verb::Unclaim, json!({})).await);
            let err = refused(w.call(&agent, Verb::IAmDone, json!({})).await);
            assert_eq!(err.error, ErrorCode::OutOfOrder, "{err:?}");
        })
        .await;
}
