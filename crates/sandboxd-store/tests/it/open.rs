//! Opening, migrations, settings, and how `$N` placeholders bind through the `Any` driver.

use sandboxd_store::{SecretCipher, Store, StoreError, StoreKind};
use sqlx::Row;

use crate::support::on_both;

async fn applied_migrations(raw: &sqlx::AnyPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(raw)
        .await
        .expect("count migrations")
}

/// The `.sql` files on disk: a file missing from the compiled-in list fails the count too.
fn migration_files() -> i64 {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let count = std::fs::read_dir(&dir)
        .expect("read migrations/")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "sql"))
        .count();
    i64::try_from(count).expect("a small count")
}

#[tokio::test]
async fn migrations_run_on_a_fresh_database_and_reopening_keeps_the_data() {
    on_both("open", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        assert_eq!(store.kind(), db.kind);
        assert_eq!(
            store.get_setting("sandbox_db_enabled").await.expect("get"),
            None
        );
        store
            .set_setting("sandbox_db_enabled", "true")
            .await
            .expect("set");
        store.set_setting("other", "x").await.expect("set");
        store
            .set_setting("sandbox_db_enabled", "false")
            .await
            .expect("overwrite");
        store.close().await;

        let store = db.open(SecretCipher::generate()).await;
        assert_eq!(
            store
                .get_setting("sandbox_db_enabled")
                .await
                .expect("get")
                .as_deref(),
            Some("false")
        );
        let all = store.list_settings().await.expect("list");
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            [
                ("daemon_id".to_owned(), store.daemon_id().to_string()),
                ("other".to_owned(), "x".to_owned()),
                ("sandbox_db_enabled".to_owned(), "false".to_owned())
            ]
        );
        store.close().await;

        let raw = db.raw().await;
        assert_eq!(
            applied_migrations(&raw).await,
            migration_files(),
            "every migration file ran, and re-opening applies nothing twice"
        );
        if db.kind == StoreKind::Sqlite {
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&raw)
                .await
                .expect("journal mode");
            assert_eq!(mode, "wal");
            use std::os::unix::fs::PermissionsExt;
            let file = db.file.as_ref().expect("sqlite file");
            let mode = std::fs::metadata(file).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the store file is private");
        }
        raw.close().await;
    })
    .await;
}

#[tokio::test]
async fn placeholders_bind_by_number_when_repeated_or_out_of_order() {
    on_both("placeholders", |db| async move {
        // The store creates the schema; the checks below use a raw pool through `Any`.
        db.open(SecretCipher::generate()).await.close().await;
        let raw = db.raw().await;

        let repeated: String = sqlx::query_scalar("SELECT $2 || '-' || $1 || '-' || $2")
            .bind("a")
            .bind("b")
            .fetch_one(&raw)
            .await
            .expect("repeated placeholders");
        assert_eq!(repeated, "b-a-b");

        // Out of order, with mixed types.
        sqlx::query("INSERT INTO settings (key, value, updated_at_ms) VALUES ($3, $1, $2)")
            .bind("the value")
            .bind(42_i64)
            .bind("the key")
            .execute(&raw)
            .await
            .expect("insert out of order");
        let row = sqlx::query(
            "SELECT key, value, updated_at_ms FROM settings WHERE value = $2 AND key = $1",
        )
        .bind("the key")
        .bind("the value")
        .fetch_one(&raw)
        .await
        .expect("select out of order");
        assert_eq!(row.get::<String, _>("key"), "the key");
        assert_eq!(row.get::<String, _>("value"), "the value");
        assert_eq!(row.get::<i64, _>("updated_at_ms"), 42);

        // A NULL bound once and compared twice.
        let nulls: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM settings WHERE ($1 IS NULL OR key = $1)")
                .bind(None::<String>)
                .fetch_one(&raw)
                .await
                .expect("null placeholder");
        // Every row: the one inserted above and the store's daemon id.
        assert_eq!(nulls, 2);
        raw.close().await;
    })
    .await;
}

#[tokio::test]
async fn unusable_urls_are_refused_clearly_and_without_the_password() {
    for (url, expect) in [
        ("mysql://root:hunter2@localhost/db", "use sqlite:///"),
        ("sqlite::memory:", "must be a file"),
        ("sqlite://?mode=memory", "must be a file"),
    ] {
        let err = Store::open(url, SecretCipher::generate())
            .await
            .expect_err(url);
        let text = err.to_string();
        assert!(matches!(err, StoreError::Url { .. }), "{url}: {err:?}");
        assert!(text.contains(expect), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    // Nothing listens on port 1.
    let err = Store::open(
        "postgres://sandbox:hunter2@127.0.0.1:1/db",
        SecretCipher::generate(),
    )
    .await
    .expect_err("nothing listens");
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("sandbox:***@127.0.0.1:1"), "{text}");
}

#[tokio::test]
async fn sqlite_parent_directories_are_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("state/nested/store.db");
    let store = Store::open(
        &format!("sqlite://{}", file.display()),
        SecretCipher::generate(),
    )
    .await
    .expect("open in a new directory");
    store.set_setting("k", "v").await.expect("set");
    store.close().await;
    assert!(file.is_file());
}
