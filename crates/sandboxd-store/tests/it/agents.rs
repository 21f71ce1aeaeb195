//! Agents: creation, conflicts, lookup by token hash.

use sandboxd_store::{NewAgent, SecretCipher, StoreError, token_hash};
use secrecy::SecretString;

use crate::support::{agent, on_both, project, seed_agent};

#[tokio::test]
async fn create_conflict_and_token_lookup() {
    on_both("agents", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let api = project("api");
        let token = seed_agent(&store, &web, &agent("dev-1")).await;
        seed_agent(&store, &api, &agent("qa-1")).await;

        let found = store
            .agent_by_token_hash(&token_hash(&token))
            .await
            .expect("lookup")
            .expect("known token");
        assert_eq!(found.slug, agent("dev-1"));
        assert_eq!(found.project, web);
        assert_eq!(found.role, "developer");
        assert_eq!(
            Some(&found),
            store
                .get_agent(&agent("dev-1"))
                .await
                .expect("get")
                .as_ref()
        );

        let stranger = SecretString::from("not a token we issued");
        assert_eq!(
            store
                .agent_by_token_hash(&token_hash(&stranger))
                .await
                .expect("lookup"),
            None
        );

        // Same slug, another token: a conflict, and the first agent is untouched.
        let other = token_hash(&SecretString::from("another token"));
        let err = store
            .create_agent(&NewAgent {
                slug: &agent("dev-1"),
                role: "qa",
                project: &api,
                token_hash: &other,
            })
            .await
            .expect_err("slug taken");
        assert!(err.is_conflict(), "{err:?}");
        assert!(err.to_string().contains("dev-1"), "{err}");
        assert_eq!(
            store.agent_by_token_hash(&other).await.expect("lookup"),
            None
        );

        // A missing project is not found, which also proves foreign keys are enforced.
        let err = store
            .create_agent(&NewAgent {
                slug: &agent("dev-2"),
                role: "developer",
                project: &project("nowhere"),
                token_hash: &other,
            })
            .await
            .expect_err("no such project");
        assert!(err.is_not_found(), "{err:?}");
        assert!(err.to_string().contains("nowhere"), "{err}");

        // The token itself is refused where a hash belongs.
        let err = store
            .create_agent(&NewAgent {
                slug: &agent("dev-3"),
                role: "developer",
                project: &web,
                token_hash: "plaintext-token",
            })
            .await
            .expect_err("not a hash");
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");

        let all: Vec<String> = store
            .list_agents(None)
            .await
            .expect("list")
            .into_iter()
            .map(|a| a.slug.to_string())
            .collect();
        assert_eq!(all, ["dev-1", "qa-1"]);
        let of_api = store.list_agents(Some(&api)).await.expect("list");
        assert_eq!(of_api.len(), 1);
        assert_eq!(of_api[0].slug, agent("qa-1"));

        assert!(store.delete_agent(&agent("qa-1")).await.expect("delete"));
        assert!(!store.delete_agent(&agent("qa-1")).await.expect("again"));
        assert_eq!(store.get_agent(&agent("qa-1")).await.expect("get"), None);
        store.close().await;
    })
    .await;
}
