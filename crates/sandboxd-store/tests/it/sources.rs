//! Clone sources: the DSN and the snapshot are sealed (neither is readable in the database),
//! only `source_dsn` opens the DSN, a snapshot round-trips whole, replacing a source drops its
//! snapshot, a failed attempt is recorded without losing the snapshot before it, and projects
//! record which engine is a clone of which source.

use sandboxd_domain::clone::{CloneChoice, PlannerSetting, Privacy, Snapshot};
use sandboxd_domain::{EngineRef, SourceName};
use sandboxd_store::{SecretCipher, StoreError};
use secrecy::{ExposeSecret, SecretString};
use sqlx::Row;

use crate::support::{on_both, project};

fn snapshot(source: &str) -> Snapshot {
    Snapshot {
        source: source.into(),
        taken_at_ms: 1_800_000_000_000,
        server_version: "PostgreSQL 18.6".into(),
        server_version_num: 180_006,
        database: "shop".into(),
        schema_sql: "CREATE TABLE public.orders (id bigint, status text);".into(),
        relations: Vec::new(),
        columns: Vec::new(),
        settings: vec![PlannerSetting {
            name: "random_page_cost".into(),
            value: "1.1".into(),
        }],
        extensions: Vec::new(),
        extended_statistics: vec!["public.s_status_day".into()],
        extended_statistics_data: None,
        columns_without_statistics: Vec::new(),
        foreign_tables: Vec::new(),
        privacy: Privacy::KeepValues,
    }
}

#[tokio::test]
async fn sources_keep_their_dsn_sealed_and_their_latest_snapshot() {
    on_both("sources", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let shop = SourceName::parse("shop-prod").expect("valid");
        let dsn = SecretString::from("host=db.internal user=ro password=pw-7f3a9c dbname=shop");
        assert_eq!(store.get_source(&shop).await.expect("get"), None);

        let put = store
            .put_source(&shop, &dsn, Privacy::NoValues, 3600)
            .await
            .expect("put");
        assert_eq!(put.privacy, Privacy::NoValues);
        assert_eq!(put.refresh_secs, 3600);
        assert_eq!(put.snapshot, None);
        assert_eq!(
            store
                .source_dsn(&shop)
                .await
                .expect("dsn")
                .expect("some")
                .expose_secret(),
            dsn.expose_secret()
        );

        let taken = snapshot("shop-prod");
        store
            .put_snapshot(&shop, &taken, 420)
            .await
            .expect("snapshot");
        assert_eq!(
            store.latest_snapshot(&shop).await.expect("latest"),
            Some(taken.clone())
        );
        let listed = store.list_sources().await.expect("list");
        assert_eq!(listed.len(), 1);
        let summary = listed[0].snapshot.as_ref().expect("a snapshot");
        assert_eq!(
            (summary.took_ms, summary.server_version.as_str()),
            (420, "PostgreSQL 18.6")
        );
        // What it holds is kept beside it, readable without opening the body.
        let contents = summary.contents.as_ref().expect("a summary is stored");
        assert_eq!((contents.settings, contents.tables), (1, 0));
        assert_eq!(contents.extended_statistics, 1);
        assert_eq!(contents.left_out.len(), 1, "{:?}", contents.left_out);
        assert!(contents.left_out[0].why.contains("public.s_status_day"));

        // Neither the DSN nor the snapshot's schema is readable in the database itself.
        let raw = db.raw().await;
        for (table, column) in [
            ("clone_sources", "sealed_dsn"),
            ("clone_snapshots", "sealed_body"),
        ] {
            let sql = format!("SELECT {column} FROM {table}");
            let stored: String = sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_one(&raw)
                .await
                .expect("raw read")
                .get(0);
            assert!(stored.starts_with("v1:"), "{table}.{column} is sealed");
            assert!(!stored.contains("pw-7f3a9c") && !stored.contains("orders"));
        }
        raw.close().await;

        // A failed attempt keeps the snapshot before it; a success clears the error.
        store
            .snapshot_failed(&shop, "connection refused")
            .await
            .expect("failed");
        let failed = store.get_source(&shop).await.expect("get").expect("some");
        assert_eq!(failed.last_error.as_deref(), Some("connection refused"));
        assert!(failed.snapshot.is_some());
        store.put_snapshot(&shop, &taken, 300).await.expect("again");
        assert_eq!(
            store
                .get_source(&shop)
                .await
                .expect("get")
                .expect("some")
                .last_error,
            None
        );

        // Replacing the DSN drops the snapshot: it may be another server's.
        let replaced = store
            .put_source(&shop, &dsn, Privacy::KeepValues, 0)
            .await
            .expect("replace");
        assert_eq!(
            (replaced.snapshot, replaced.created_at_ms),
            (None, put.created_at_ms)
        );
        assert_eq!(store.latest_snapshot(&shop).await.expect("latest"), None);

        // Projects record their clones.
        let web = project("web");
        store.put_project(&web, None, None).await.expect("project");
        let postgres = EngineRef::parse("postgres").expect("registered");
        let own = CloneChoice::of(shop.clone());
        let set = store
            .set_project_clones(&web, &[(postgres, own.clone())])
            .await
            .expect("clones");
        assert_eq!(set.sandbox_clones, vec![(postgres, own)]);
        // A project's own privacy mode over the source's is kept and read back.
        let strict = CloneChoice {
            source: shop.clone(),
            privacy: Some(Privacy::NoValues),
        };
        store
            .set_project_clones(&web, &[(postgres, strict.clone())])
            .await
            .expect("clones without values");
        let read = store.get_project(&web).await.expect("get").expect("some");
        assert_eq!(read.sandbox_clones, vec![(postgres, strict)]);
        let cleared = store.set_project_clones(&web, &[]).await.expect("cleared");
        assert!(cleared.sandbox_clones.is_empty());
        let missing = store
            .set_project_clones(&project("nope"), &[])
            .await
            .expect_err("no such project");
        assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");

        store
            .put_snapshot(&shop, &taken, 1)
            .await
            .expect("snapshot");
        assert!(store.delete_source(&shop).await.expect("delete"));
        assert!(!store.delete_source(&shop).await.expect("twice"));
        assert_eq!(store.latest_snapshot(&shop).await.expect("gone"), None);
        let gone = store
            .put_snapshot(&shop, &taken, 1)
            .await
            .expect_err("no source");
        assert!(matches!(gone, StoreError::NotFound { .. }), "{gone}");
    })
    .await;
}
