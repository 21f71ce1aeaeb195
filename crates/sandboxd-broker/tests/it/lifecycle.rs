//! The task verbs' refusals point each role to a call that works for it.

use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{World, WorldSpec, refused};

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
