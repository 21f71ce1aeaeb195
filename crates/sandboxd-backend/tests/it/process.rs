//! Process backend tests (real postgres, redis-server, mariadbd from Debian's packages).

use std::collections::BTreeSet;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use sandboxd_backend::{Backend, BackendError, InstanceHandle, provision_set};
use sandboxd_domain::{EnvPrefix, Feature};
use secrecy::ExposeSecret;

use crate::support::{self, ProcessHarness, WRONG_PASSWORD, engine, provision, request};

#[tokio::test]
async fn postgres_hands_out_a_working_non_superuser() {
    ProcessHarness::new(|_| {}).run(|backend| async move {
        let owner = support::owner("pg");
        let instance = provision(&backend, "postgres", &owner).await;
        let client = support::pg(&instance).await;

        // Real test-suite work: tables, and databases of its own.
        client
            .batch_execute("CREATE TABLE t(id int primary key, v text); INSERT INTO t VALUES (1,'a')")
            .await
            .expect("owner can create tables");
        let v: String = client.query_one("SELECT v FROM t", &[]).await.expect("select").get(0);
        assert_eq!(v, "a");
        client
            .batch_execute("CREATE DATABASE test_sandbox_suite")
            .await
            .expect("CREATEDB lets test runners create their databases");

        let row = client
            .query_one(
                "SELECT rolsuper, rolreplication, rolbypassrls, rolcreatedb FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .await
            .expect("role attributes");
        assert!(!row.get::<_, bool>(0) && !row.get::<_, bool>(1) && !row.get::<_, bool>(2));
        assert!(row.get::<_, bool>(3));
        let server_roles: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid \
                 WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = current_user) \
                 AND r.rolname LIKE 'pg\\_%'",
                &[],
            )
            .await
            .expect("memberships")
            .get(0);
        assert_eq!(server_roles, 0, "no pg_* server roles");

        for escape in [
            "COPY (SELECT 1) TO PROGRAM 'id'",
            "SELECT pg_read_file('/etc/passwd')",
            "ALTER ROLE sandbox SUPERUSER",
            "CREATE EXTENSION plpython3u",
        ] {
            let err = client.batch_execute(escape).await.expect_err(escape);
            let code = err.code().map(|c| c.code().to_owned()).unwrap_or_default();
            assert!(
                code == "42501" || code == "58P01" || code == "0A000",
                "{escape}: expected a permission error, got {err:?}"
            );
        }

        let wrong = support::pg_connect(&instance, WRONG_PASSWORD).await;
        let err = wrong.expect_err("a wrong password is refused");
        assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err:?}");

        backend.teardown(&InstanceHandle::of(&instance)).await.expect("teardown");
        support::assert_no_process_mentions(&instance.name).await;
    })
    .await;
}

#[tokio::test]
async fn redis_hands_out_an_acl_user_without_escape_hatches() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("redis");
            let instance = provision(&backend, "redis", &owner).await;
            let mut conn = support::redis(&instance).await;

            let () = redis::cmd("SET")
                .arg("k")
                .arg("v")
                .query_async(&mut conn)
                .await
                .expect("SET");
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut conn)
                .await
                .expect("KEYS");
            assert_eq!(keys, ["k"]);
            let () = redis::cmd("FLUSHDB")
                .query_async(&mut conn)
                .await
                .expect("FLUSHDB is allowed");
            let who: String = redis::cmd("ACL")
                .arg("WHOAMI")
                .query_async(&mut conn)
                .await
                .expect("WHOAMI");
            assert_eq!(who, "sandbox");

            for (cmd, args) in [
                ("CONFIG", vec!["SET", "dir", "/tmp"]),
                ("MODULE", vec!["LOAD", "/tmp/x.so"]),
                ("DEBUG", vec!["SLEEP", "0"]),
                ("ACL", vec!["SETUSER", "sandbox", "+@all"]),
                ("REPLICAOF", vec!["127.0.0.1", "1"]),
                ("SHUTDOWN", vec![]),
                ("SAVE", vec![]),
            ] {
                let mut c = redis::cmd(cmd);
                for a in &args {
                    c.arg(*a);
                }
                let err = support::redis_denied(c.query_async::<redis::Value>(&mut conn).await);
                assert!(
                    err.contains("no permissions") || err.contains("not allowed"),
                    "{cmd}: {err}"
                );
            }

            // The default user is off: a password alone does not authenticate.
            let mut raw =
                redis::Client::open(format!("redis://{}:{}/", instance.host, instance.port))
                    .expect("client")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("tcp connect");
            let err = support::redis_denied(
                redis::cmd("AUTH")
                    .arg(instance.agent.password.expose_secret())
                    .query_async::<String>(&mut raw)
                    .await,
            );
            assert!(
                err.contains("WRONGPASS") || err.contains("invalid"),
                "{err}"
            );

            let wrong = support::redis_connect(&instance, WRONG_PASSWORD).await;
            assert!(wrong.is_err(), "a wrong password is refused");
        })
        .await;
}

#[tokio::test]
async fn mariadb_hands_out_a_user_confined_to_its_databases() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("maria");
            let instance = provision(&backend, "mariadb", &owner).await;
            let mut conn = support::mysql(&instance).await;
            conn.query_drop("CREATE TABLE t(id INT PRIMARY KEY); INSERT INTO t VALUES (1)")
                .await
                .expect("tables in its own database");
            conn.query_drop("CREATE DATABASE test_suite_db")
                .await
                .expect("test_* databases");
            conn.query_drop("CREATE DATABASE sandbox_test")
                .await
                .expect("<db>_* databases");
            let err = conn
                .query_drop("CREATE DATABASE other")
                .await
                .expect_err("other names are refused");
            assert!(err.to_string().contains("denied"), "{err}");

            let databases: Vec<String> =
                conn.query("SHOW DATABASES").await.expect("show databases");
            let visible: BTreeSet<&str> = databases.iter().map(String::as_str).collect();
            assert!(!visible.contains("mysql"), "{visible:?}");
            assert!(visible.contains("sandbox"));

            let grants: Vec<String> = conn.query("SHOW GRANTS").await.expect("grants");
            let global = grants
                .iter()
                .find(|g| g.contains("ON *.*"))
                .expect("a global grant line");
            assert!(
                global.starts_with("GRANT USAGE ON *.*"),
                "no global privilege: {global}"
            );
            let err = conn
                .query_drop(
                    "SELECT LOAD_FILE('/etc/passwd') INTO @x; SELECT 1 INTO OUTFILE '/tmp/x'",
                )
                .await
                .expect_err("no FILE privilege");
            assert!(err.to_string().contains("denied"), "{err}");

            let wrong = support::mysql_connect(&instance, WRONG_PASSWORD).await;
            assert!(wrong.is_err(), "a wrong password is refused");
        })
        .await;
}

#[tokio::test]
async fn two_owners_get_different_credentials_and_cannot_read_each_other() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let (alice, bob) = (support::owner("alice"), support::owner("bob"));
            let a = provision(&backend, "postgres", &alice).await;
            let b = provision(&backend, "postgres", &bob).await;
            assert_ne!(
                a.agent.password.expose_secret(),
                b.agent.password.expose_secret()
            );
            assert_ne!(a.port, b.port);
            support::pg(&a)
                .await
                .batch_execute("CREATE TABLE secret(v text); INSERT INTO secret VALUES ('alice')")
                .await
                .expect("write");
            // Bob's password does not open Alice's server, and Bob's server has no such table.
            assert!(
                support::pg_connect(&a, b.agent.password.expose_secret())
                    .await
                    .is_err()
            );
            let err = support::pg(&b)
                .await
                .query("SELECT * FROM secret", &[])
                .await
                .expect_err("not there");
            assert_eq!(err.code().map(|c| c.code()), Some("42P01"));
        })
        .await;
}

#[tokio::test]
async fn features_activate_and_unavailable_ones_name_the_package() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("feat");
            let instance = backend
                .provision(&request(
                    "postgres",
                    &owner,
                    &["pg_trgm", "citext", "uuid-ossp"],
                ))
                .await
                .expect("contrib extensions");
            let names: BTreeSet<&str> = instance.features.iter().map(|f| f.name()).collect();
            assert_eq!(names, BTreeSet::from(["pg_trgm", "citext", "uuid-ossp"]));
            let installed: Vec<String> = support::pg(&instance)
                .await
                .query("SELECT extname::text FROM pg_extension ORDER BY 1", &[])
                .await
                .expect("extensions")
                .iter()
                .map(|r| r.get(0))
                .collect();
            for ext in ["citext", "pg_trgm", "uuid-ossp"] {
                assert!(installed.iter().any(|e| e == ext), "{ext} in {installed:?}");
            }
            let evidence =
                serde_json::to_value(instance.evidence(&EnvPrefix::default())).expect("json");
            assert_eq!(
                evidence["available_extensions"].as_array().map(Vec::len),
                Some(3)
            );

            // In place on the live instance, as the broker does for a per-call ask.
            let mut live = instance.clone();
            let postgis = Feature::parse(engine("postgres"), "postgis").expect("allowlisted");
            match backend
                .activate(&mut live, &BTreeSet::from([postgis]))
                .await
            {
                Ok(()) => assert!(live.features.contains(&postgis)),
                Err(err) => panic!("postgis is installed by scripts/install-deps.sh: {err}"),
            }

            // pgvector has no package for this host's PostgreSQL: the error says what to install.
            let vector = Feature::parse(engine("postgres"), "vector").expect("allowlisted");
            let has_vector = std::path::Path::new("/usr/share/postgresql")
                .read_dir()
                .into_iter()
                .flatten()
                .flatten()
                .any(|d| d.path().join("extension/vector.control").exists());
            let outcome = backend.activate(&mut live, &BTreeSet::from([vector])).await;
            if has_vector {
                outcome.expect("vector is installed here");
            } else {
                let err = outcome.expect_err("vector is not installed here");
                let text = err.to_string();
                assert!(
                    matches!(err, BackendError::FeatureUnavailable { .. }),
                    "{text}"
                );
                assert!(
                    text.contains("pgvector") && text.contains("process backend"),
                    "{text}"
                );
            }
        })
        .await;
}

#[tokio::test]
async fn a_failing_engine_leaves_nothing_of_the_set_behind() {
    ProcessHarness::new(|config| {
        // MariaDB cannot be ready in a millisecond: its start fails after it was launched.
        config
            .deadlines
            .insert("mariadb".into(), Duration::from_millis(1));
    })
    .run(|backend| async move {
        let owner = support::owner("set");
        let requests = [
            request("postgres", &owner, &[]),
            request("redis", &owner, &[]),
            request("mariadb", &owner, &[]),
        ];
        let err = provision_set(backend.as_ref(), &requests)
            .await
            .expect_err("mariadb times out");
        assert!(
            matches!(err, BackendError::ReadinessTimeout { .. }),
            "{err}"
        );
        support::assert_no_instances(&backend).await;
        support::assert_no_process_mentions(&format!("-{owner}/")).await;
    })
    .await;
}

#[tokio::test]
async fn a_process_killed_out_of_band_is_seen_and_teardown_is_idempotent() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("kill");
            let instance = provision(&backend, "redis", &owner).await;
            let handle = InstanceHandle::of(&instance);
            assert!(backend.is_live(&handle).await.expect("is_live"));
            let listed = backend.list().await.expect("list");
            assert_eq!(listed.len(), 1);
            assert!(listed[0].live);

            let pid = std::fs::read_to_string(
                sandboxd_backend::process::metadata_path(std::path::Path::new(
                    &instance.backend_id,
                ))
                .expect("a metadata path"),
            )
            .ok()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m).ok())
            .and_then(|m| m["pid"].as_i64())
            .expect("pid in metadata");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill");
            let mut live = true;
            for _ in 0..100 {
                live = backend.is_live(&handle).await.expect("is_live");
                if !live {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(!live, "a killed instance is not live");
            assert!(!backend.list().await.expect("list")[0].live);

            backend.teardown(&handle).await.expect("first teardown");
            backend
                .teardown(&handle)
                .await
                .expect("second teardown is fine");
            assert!(!std::path::Path::new(&instance.backend_id).exists());
        })
        .await;
}

#[tokio::test]
async fn a_stale_instance_is_replaced_but_a_young_live_one_is_kept() {
    ProcessHarness::new(|config| config.grace = Duration::from_secs(600))
        .run(|backend| async move {
            let owner = support::owner("stale");
            let first = provision(&backend, "redis", &owner).await;
            let err = backend
                .provision(&request("redis", &owner, &[]))
                .await
                .expect_err("a young live instance is never replaced");
            assert!(matches!(err, BackendError::YoungConflict { .. }), "{err}");
            assert!(
                backend
                    .is_live(&InstanceHandle::of(&first))
                    .await
                    .expect("still live")
            );
        })
        .await;
    ProcessHarness::new(|config| config.grace = Duration::ZERO)
        .run(|backend| async move {
            let owner = support::owner("stale");
            let first = provision(&backend, "redis", &owner).await;
            let second = provision(&backend, "redis", &owner).await;
            assert_ne!(
                first.agent.password.expose_secret(),
                second.agent.password.expose_secret()
            );
            assert_eq!(backend.list().await.expect("list").len(), 1);
        })
        .await;
}

#[tokio::test]
async fn mongo_without_mongod_is_a_clear_not_installed_error() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let mongo = engine("mongo");
            if backend.supports(mongo).await.is_ok() {
                eprintln!("mongod is installed here; the not-installed path is not exercised");
                return;
            }
            let err = backend
                .provision(&request("mongo", &support::owner("mongo"), &[]))
                .await
                .expect_err("no mongod");
            let text = err.to_string();
            assert!(matches!(err, BackendError::NotInstalled { .. }), "{text}");
            assert!(
                text.contains("mongod") && text.contains("docker backend"),
                "{text}"
            );
            support::assert_no_instances(&backend).await;
        })
        .await;
}

#[tokio::test]
async fn credentials_never_reach_logs_or_metadata() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let owner = support::owner("leak");
            let requests = [
                request("postgres", &owner, &[]),
                request("redis", &owner, &[]),
                request("mariadb", &owner, &[]),
            ];
            let instances = provision_set(backend.as_ref(), &requests)
                .await
                .expect("set");
            for instance in &instances {
                let secret = instance.agent.password.expose_secret();
                for entry in walk(std::path::Path::new(&instance.backend_id)) {
                    if entry.ends_with("redis.conf") {
                        continue; // holds only SHA-256 hashes, checked below
                    }
                    let bytes = std::fs::read(&entry).unwrap_or_default();
                    assert!(
                        !String::from_utf8_lossy(&bytes).contains(secret),
                        "{} holds the password",
                        entry.display()
                    );
                }
                assert!(!format!("{instance:?}").contains(secret));
                for cmdline in support::processes_mentioning(&instance.name) {
                    assert!(
                        !cmdline.contains(secret),
                        "password on a command line: {cmdline}"
                    );
                }
            }
            let redis = instances
                .iter()
                .find(|i| i.engine.name == "redis")
                .expect("redis");
            let conf =
                std::fs::read_to_string(std::path::Path::new(&redis.backend_id).join("redis.conf"))
                    .expect("conf");
            assert!(!conf.contains(redis.agent.password.expose_secret()));
        })
        .await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.is_file() {
            files.push(path);
        }
    }
    files
}
