//! Projects: the JSON columns round-trip through the domain types, and a corrupted row is an
//! error naming the row, never a panic or a silently widened opt-in.

use std::collections::BTreeMap;

use sandboxd_domain::{EngineRef, FeatureRequest, ProjectSizes};
use sandboxd_store::{SecretCipher, StoreError};

use crate::support::{agent, on_both, project, seed_agent};

fn engines(names: &[&str]) -> Vec<EngineRef> {
    names
        .iter()
        .map(|n| EngineRef::parse(n).expect("registered"))
        .collect()
}

#[tokio::test]
async fn sandbox_settings_round_trip() {
    on_both("projects", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        assert_eq!(store.get_project(&web).await.expect("get"), None);

        let bare = store.put_project(&web, None, None).await.expect("create");
        assert_eq!(bare.sandbox_services, None);
        assert_eq!(bare.sandbox_extensions, None);

        let services = engines(&["redis", "postgres"]);
        let extensions =
            FeatureRequest::parse_cli(["postgres=vector,pg_trgm", "redis=json"]).expect("valid");
        let put = store
            .put_project(&web, Some(&services), Some(&extensions))
            .await
            .expect("update");
        let got = store.get_project(&web).await.expect("get").expect("exists");
        assert_eq!(got, put);
        assert_eq!(got.sandbox_services.as_deref(), Some(services.as_slice()));
        assert_eq!(got.sandbox_extensions.as_ref(), Some(&extensions));
        assert_eq!(
            got.created_at_ms, bare.created_at_ms,
            "an update keeps the creation time"
        );

        // An empty list is stored as given: the broker decides it means "not opted in".
        store
            .put_project(&project("api"), Some(&[]), None)
            .await
            .expect("empty list");
        let listed = store.list_projects().await.expect("list");
        let slugs: Vec<&str> = listed.iter().map(|p| p.slug.as_str()).collect();
        assert_eq!(slugs, ["api", "web"]);
        assert_eq!(listed[0].sandbox_services, Some(vec![]));

        assert!(store.delete_project(&project("api")).await.expect("delete"));
        assert!(!store.delete_project(&project("api")).await.expect("again"));
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_corrupted_row_is_refused_with_a_clear_error() {
    on_both("corrupt", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        store
            .put_project(&web, Some(&engines(&["postgres"])), None)
            .await
            .expect("create");
        let raw = db.raw().await;

        for (column, value, expect) in [
            (
                "sandbox_services",
                r#"["postgres","oracle"]"#,
                "unknown engine",
            ),
            (
                "sandbox_services",
                "not json",
                "sandbox_services of project web",
            ),
            (
                "sandbox_extensions",
                r#"{"postgres":["plpython3u"]}"#,
                "not allowed",
            ),
            (
                "sandbox_extensions",
                r#"["vector"]"#,
                "sandbox_extensions of project web",
            ),
            ("sandbox_sizes", r#"{"redis":1024}"#, "memory cap"),
            (
                "sandbox_sizes",
                r#"{"postgres":-1}"#,
                "sandbox_sizes of project web",
            ),
        ] {
            let sql = format!("UPDATE projects SET {column} = $1 WHERE slug = 'web'");
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(value)
                .execute(&raw)
                .await
                .expect("corrupt the row");
            let err = store.get_project(&web).await.expect_err(value);
            assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
            assert!(err.to_string().contains(expect), "{value}: {err}");
            assert!(store.list_projects().await.is_err(), "list refuses too");
            // Put it right again for the next case.
            sqlx::query(
                "UPDATE projects SET sandbox_services = '[\"postgres\"]', \
                 sandbox_extensions = NULL, sandbox_sizes = NULL WHERE slug = 'web'",
            )
            .execute(&raw)
            .await
            .expect("repair");
        }
        assert!(store.get_project(&web).await.expect("repaired").is_some());
        raw.close().await;
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn sizes_are_stored_per_engine_and_survive_an_opt_in_change() {
    on_both("project-sizes", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        let services = engines(&["postgres", "mariadb"]);
        store
            .put_project(&web, Some(&services), None)
            .await
            .expect("create");
        let sizes = ProjectSizes::parse_map(&BTreeMap::from([
            ("postgres".to_owned(), "2G".to_owned()),
            ("mariadb".to_owned(), "1536M".to_owned()),
        ]))
        .expect("valid");
        let set = store.set_project_sizes(&web, &sizes).await.expect("sizes");
        assert_eq!(set.sandbox_sizes, sizes);
        let raw = db.raw().await;
        let stored: String = sqlx::query_scalar("SELECT sandbox_sizes FROM projects")
            .fetch_one(&raw)
            .await
            .expect("raw");
        assert_eq!(stored, r#"{"mariadb":1536,"postgres":2048}"#);
        raw.close().await;
        // Replacing the opt-in keeps the sizes; clearing them is its own call.
        let put = store
            .put_project(&web, Some(&services), None)
            .await
            .expect("update");
        assert_eq!(put.sandbox_sizes, sizes);
        let cleared = store
            .set_project_sizes(&web, &ProjectSizes::default())
            .await
            .expect("cleared");
        assert!(cleared.sandbox_sizes.is_empty());
        let err = store
            .set_project_sizes(&project("nope"), &sizes)
            .await
            .expect_err("no such project");
        assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_project_with_agents_cannot_be_deleted() {
    on_both("project-in-use", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let web = project("web");
        seed_agent(&store, &web, &agent("dev-1")).await;
        let err = store.delete_project(&web).await.expect_err("in use");
        assert!(matches!(err, StoreError::InUse { .. }), "{err:?}");
        assert!(
            store
                .delete_agent(&agent("dev-1"))
                .await
                .expect("delete agent")
        );
        assert!(store.delete_project(&web).await.expect("now free"));
        store.close().await;
    })
    .await;
}
