//! Sandbox instances: the credentials come back exactly, never rest in plaintext, and a wrong
//! key is a clear error.

use std::path::PathBuf;

use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::instance::instance_name;
use sandboxd_domain::{
    AgentSlug, BackendKind, Credentials, DataSize, EngineRef, Feature, Instance,
};
use sandboxd_store::{SecretCipher, Store, StoreError, StoreKind};
use secrecy::ExposeSecret;
use sqlx::Row;

use crate::support::{TestDb, agent, on_both};

/// An instance `store`'s daemon made.
fn instance(
    store: &Store,
    engine: &str,
    owner: &AgentSlug,
    features: &[&str],
    socket_admin: bool,
) -> Instance {
    let engine = EngineRef::parse(engine).expect("registered");
    let maker = store.daemon_id().clone();
    Instance {
        engine,
        owner: owner.clone(),
        name: instance_name(engine, owner, &maker),
        maker,
        backend: if socket_admin {
            BackendKind::Process
        } else {
            BackendKind::Docker
        },
        backend_id: format!("id-{}-{owner}", engine.name),
        host: "127.0.0.1".into(),
        port: 40_000 + engine.name.len() as u16,
        database: "sandbox".into(),
        agent: Credentials::generate("sandbox"),
        admin: if socket_admin {
            AdminAccess::Socket {
                directory: PathBuf::from(format!("/dev/shm/sandboxd/{owner}/run")),
                user: "postgres".into(),
            }
        } else {
            AdminAccess::Password(Credentials::generate("admin"))
        },
        features: features
            .iter()
            .map(|f| Feature::parse(engine, f).expect("allowlisted"))
            .collect(),
        created_at_ms: 1_700_000_000_123,
        clone: None,
        size: engine.data_on_disk.then(|| DataSize::from_mb(1536)),
    }
}

/// Every secret an instance carries.
fn secrets(instance: &Instance) -> Vec<String> {
    let mut all = vec![instance.agent.password.expose_secret().to_owned()];
    if let AdminAccess::Password(admin) = &instance.admin {
        all.push(admin.password.expose_secret().to_owned());
    }
    all
}

fn assert_same(got: &Instance, want: &Instance) {
    assert_eq!(got.name, want.name);
    assert_eq!(got.engine, want.engine);
    assert_eq!(got.owner, want.owner);
    assert_eq!(got.backend, want.backend);
    assert_eq!(got.backend_id, want.backend_id);
    assert_eq!(
        (got.host.as_str(), got.port),
        (want.host.as_str(), want.port)
    );
    assert_eq!(got.database, want.database);
    assert_eq!(got.features, want.features);
    assert_eq!(got.created_at_ms, want.created_at_ms);
    assert_eq!(got.size, want.size);
    assert_eq!(got.agent.user, want.agent.user);
    assert_eq!(
        got.agent.password.expose_secret(),
        want.agent.password.expose_secret()
    );
    match (&got.admin, &want.admin) {
        (AdminAccess::Password(a), AdminAccess::Password(b)) => {
            assert_eq!(a.user, b.user);
            assert_eq!(a.password.expose_secret(), b.password.expose_secret());
        }
        (
            AdminAccess::Socket {
                directory: da,
                user: ua,
            },
            AdminAccess::Socket {
                directory: db,
                user: ub,
            },
        ) => assert_eq!((da, ua), (db, ub)),
        (a, b) => panic!("admin access changed kind: {a:?} vs {b:?}"),
    }
}

#[tokio::test]
async fn instances_round_trip_with_their_credentials() {
    on_both("instances", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let (dev, qa) = (agent("dev-1"), agent("qa-1"));
        let dev_set = vec![
            instance(&store, "postgres", &dev, &["vector", "citext"], true),
            instance(&store, "redis", &dev, &["json"], false),
        ];
        let qa_set = vec![instance(&store, "mariadb", &qa, &[], false)];
        store.put_instances(&dev, &dev_set).await.expect("put dev");
        store.put_instances(&qa, &qa_set).await.expect("put qa");

        let got = store.instances_of(&dev).await.expect("read dev");
        assert_eq!(got.len(), 2);
        assert_same(&got[0], &dev_set[0]);
        assert_same(&got[1], &dev_set[1]);
        let all = store.all_instances().await.expect("all");
        assert_eq!(all.len(), 3);
        assert_same(&all[2], &qa_set[0]);
        let summaries = store.instance_summaries().await.expect("summaries");
        assert_eq!(summaries.len(), 3);
        assert_eq!(store.count_instances().await.expect("count"), 3);
        assert_eq!(
            summaries[0].name,
            format!("sandboxd-postgres-dev-1-{}", store.daemon_id())
        );
        assert_eq!(summaries[0].user, "sandbox");

        // Replacing the owner's set is one swap: the redis row goes, the other owner stays.
        let fresh = vec![instance(&store, "postgres", &dev, &[], true)];
        store.put_instances(&dev, &fresh).await.expect("replace");
        let got = store.instances_of(&dev).await.expect("read");
        assert_eq!(got.len(), 1);
        assert_same(&got[0], &fresh[0]);
        assert_eq!(store.instances_of(&qa).await.expect("qa").len(), 1);

        // An instance of another owner is refused, and nothing changes.
        let err = store
            .put_instances(&dev, &[instance(&store, "redis", &qa, &[], false)])
            .await
            .expect_err("stray owner");
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
        // Only its own daemon's instances: one another daemon (or the CLI) made is refused.
        let mut foreign = instance(&store, "redis", &dev, &[], false);
        foreign.maker = sandboxd_domain::DaemonId::cli();
        let err = store
            .put_instances(&dev, &[foreign])
            .await
            .expect_err("foreign maker");
        assert!(err.to_string().contains("made by cli"), "{err}");
        assert_eq!(store.instances_of(&dev).await.expect("read").len(), 1);

        assert!(
            store
                .delete_instance(&qa_set[0].name)
                .await
                .expect("delete")
        );
        assert!(!store.delete_instance(&qa_set[0].name).await.expect("again"));
        assert_eq!(
            store.delete_instances_of(&dev).await.expect("delete all"),
            1
        );
        assert!(store.all_instances().await.expect("all").is_empty());
        store
            .put_instances(&dev, &dev_set)
            .await
            .expect("put again");
        store.put_instances(&dev, &[]).await.expect("forget");
        assert!(store.instances_of(&dev).await.expect("read").is_empty());
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn the_idle_clock_starts_at_writing_and_restarts_on_touch() {
    on_both("last-used", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let (dev, qa) = (agent("dev-1"), agent("qa-1"));
        let before = sandboxd_domain::clock::now_ms();
        let dev_pg = instance(&store, "postgres", &dev, &[], true);
        let qa_redis = instance(&store, "redis", &qa, &[], false);
        store
            .put_instances(&dev, std::slice::from_ref(&dev_pg))
            .await
            .expect("put dev");
        store
            .put_instances(&qa, std::slice::from_ref(&qa_redis))
            .await
            .expect("put qa");
        let written = store
            .last_used_of(&dev_pg.name)
            .await
            .expect("read")
            .expect("stored");
        // The instance was created long ago (its created_at is fixed); writing it counts as use.
        assert!(written >= before, "{written} < {before}");
        let qa_written = store
            .last_used_of(&qa_redis.name)
            .await
            .expect("read")
            .expect("stored");

        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        store.touch_instances_of(&dev).await.expect("touch");
        let touched = store
            .last_used_of(&dev_pg.name)
            .await
            .expect("read")
            .expect("stored");
        assert!(touched > written, "{touched} <= {written}");
        assert_eq!(
            store.last_used_of(&qa_redis.name).await.expect("read"),
            Some(qa_written),
            "another owner's clock is untouched"
        );
        let summaries = store.instance_summaries().await.expect("summaries");
        assert_eq!(summaries[0].last_used_at_ms, touched);
        assert_eq!(
            store.last_used_of("sandboxd-nope-x").await.expect("read"),
            None
        );
        store.close().await;
    })
    .await;
}

/// Every file of the SQLite database (main file, WAL, shared memory), concatenated.
fn sqlite_bytes(db: &TestDb) -> Vec<u8> {
    let file = db.file.as_ref().expect("sqlite file");
    let dir = file.parent().expect("parent");
    let stem = file
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let mut bytes = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        if entry.file_name().to_string_lossy().starts_with(&stem) {
            bytes.extend(std::fs::read(entry.path()).expect("read file"));
            seen += 1;
        }
    }
    assert!(seen >= 1);
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Every stored text of the instances table, as the database returns it.
async fn stored_text(db: &TestDb) -> String {
    let raw = db.raw().await;
    let rows = sqlx::query(
        "SELECT name, owner, engine, backend, backend_id, host, database_name, agent_user, \
         features, sealed_credentials FROM sandbox_instances",
    )
    .fetch_all(&raw)
    .await
    .expect("read rows");
    let mut text = String::new();
    for row in &rows {
        for i in 0..10 {
            text.push_str(&row.get::<String, _>(i));
            text.push('\n');
        }
    }
    raw.close().await;
    text
}

#[tokio::test]
async fn no_password_rests_in_plaintext() {
    on_both("at-rest", |db| async move {
        let store = db.open(SecretCipher::generate()).await;
        let dev = agent("dev-1");
        let set = vec![
            instance(&store, "postgres", &dev, &["vector"], true),
            instance(&store, "redis", &dev, &[], false),
        ];
        store.put_instances(&dev, &set).await.expect("put");
        let passwords: Vec<String> = set.iter().flat_map(secrets).collect();
        assert_eq!(passwords.len(), 3);

        let text = stored_text(&db).await;
        assert!(
            text.contains("sandboxd-postgres-dev-1"),
            "the rows are there"
        );
        for password in &passwords {
            assert!(
                !text.contains(password.as_str()),
                "a password is stored in a column"
            );
            // Not hex-encoded either (the sealed blob is hex).
            assert!(
                !text.contains(&hex::encode(password)),
                "a password is stored as hex"
            );
        }

        if db.kind == StoreKind::Sqlite {
            // While the store is open the rows live in the WAL; after close, in the main file.
            let live = sqlite_bytes(&db);
            store.close().await;
            let closed = sqlite_bytes(&db);
            for bytes in [&live, &closed] {
                assert!(
                    contains(bytes, "sandboxd-postgres-dev-1"),
                    "the grep can see rows"
                );
                for password in &passwords {
                    assert!(
                        !contains(bytes, password),
                        "a password is in the SQLite files"
                    );
                }
            }
        } else {
            store.close().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_wrong_key_or_a_moved_blob_fails_clearly() {
    on_both("wrong-key", |db| async move {
        let dev = agent("dev-1");
        let key = SecretCipher::generate();
        let store = db.open(key.clone()).await;
        let set = vec![
            instance(&store, "postgres", &dev, &[], true),
            instance(&store, "redis", &dev, &[], false),
        ];
        store.put_instances(&dev, &set).await.expect("put");
        store.close().await;

        let wrong = db.open(SecretCipher::generate()).await;
        for result in [wrong.instances_of(&dev).await, wrong.all_instances().await] {
            let err = result.expect_err("the wrong key opens nothing");
            let text = err.to_string();
            assert!(matches!(err, StoreError::Decrypt { .. }), "{err:?}");
            assert!(text.contains("sandboxd-postgres-dev-1"), "{text}");
            assert!(text.contains("secret key"), "{text}");
            for password in set.iter().flat_map(secrets) {
                assert!(!text.contains(&password));
            }
        }
        // What needs no secret still reads, so the janitor can still clean up.
        assert_eq!(
            wrong.instance_summaries().await.expect("summaries").len(),
            2
        );
        wrong.close().await;

        // The right key again, but one row carries the other's sealed blob.
        let raw = db.raw().await;
        sqlx::query(
            "UPDATE sandbox_instances SET sealed_credentials = \
             (SELECT sealed_credentials FROM sandbox_instances WHERE name = $1) WHERE name = $2",
        )
        .bind(&set[1].name)
        .bind(&set[0].name)
        .execute(&raw)
        .await
        .expect("swap blob");
        raw.close().await;
        let store = db.open(key).await;
        let err = store.instances_of(&dev).await.expect_err("a moved blob");
        assert!(
            matches!(err, StoreError::Decrypt { ref name, .. } if name == &set[0].name),
            "{err:?}"
        );
        store.close().await;
    })
    .await;
}

#[tokio::test]
async fn the_key_file_is_created_private_and_reused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keys/store.key");
    let first = SecretCipher::load_or_create(&path).expect("create");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(text.trim().len(), 64);

    // Same key on the next load: what one seals, the other opens.
    let db = dir.path().join("store.db");
    let url = format!("sqlite://{}", db.display());
    let dev = agent("dev-1");
    let store = Store::open(&url, first).await.expect("open");
    let set = vec![instance(&store, "redis", &dev, &[], false)];
    store.put_instances(&dev, &set).await.expect("put");
    store.close().await;
    let again = SecretCipher::load_or_create(&path).expect("load");
    let first_id = store.daemon_id().clone();
    let store = Store::open(&url, again).await.expect("reopen");
    assert_eq!(
        store.daemon_id(),
        &first_id,
        "the daemon id is kept with the store"
    );
    let other = Store::open(
        &format!("sqlite://{}", dir.path().join("other.db").display()),
        SecretCipher::generate(),
    )
    .await
    .expect("another store");
    assert_ne!(other.daemon_id(), &first_id, "each store gets its own id");
    other.close().await;
    assert_same(&store.instances_of(&dev).await.expect("read")[0], &set[0]);
    store.close().await;

    std::fs::write(&path, "not a key").expect("spoil");
    let err = SecretCipher::load_or_create(&path).expect_err("spoiled");
    assert!(err.to_string().contains("64 hex characters"), "{err}");
    assert!(err.to_string().contains("store.key"), "{err}");
}
