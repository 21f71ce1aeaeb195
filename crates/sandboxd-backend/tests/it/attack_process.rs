//! The process backend under attack (issue 14): what a tenant who escaped its database server
//! (code running as its instance's uid) or who only holds the handed-out account can reach of
//! another tenant, of the templates and of the host. Every case asserts the refusal *and* that
//! the victim still answers with its data. Real servers; the harness tears everything down and
//! each test checks that no process, mount, cgroup or uid lease of its instances is left.
//!
//! These cases need what CI has: sandboxd running as root and the instance account pool of
//! scripts/install-deps.sh. As another user they are skipped with a message.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use nix::unistd::{User, geteuid};
use sandboxd_backend::process::{MOUNT_SOURCE, ProcessBackend};
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::{AgentSlug, Instance};
use secrecy::ExposeSecret;

use crate::support::{self, ProcessHarness, provision};

/// The uid an instance runs as, from its metadata file.
struct Tenant {
    user: String,
    uid: u32,
    gid: u32,
    pid: i32,
    dir: PathBuf,
}

fn tenant(instance: &Instance) -> Tenant {
    let dir = PathBuf::from(&instance.backend_id);
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandboxd_backend::process::metadata_path(&dir).expect("a metadata path"))
            .expect("instance metadata"),
    )
    .expect("metadata json");
    let user = meta["run_as"].as_str().expect("run_as").to_owned();
    let account = User::from_name(&user)
        .expect("passwd lookup")
        .expect("the instance account exists");
    Tenant {
        user,
        uid: account.uid.as_raw(),
        gid: account.gid.as_raw(),
        pid: i32::try_from(meta["pid"].as_i64().expect("pid")).expect("pid fits"),
        dir,
    }
}

/// Only meaningful where instances get their own uids.
pub(super) fn isolated_host() -> bool {
    let pool = User::from_name("sandboxd-i000").ok().flatten().is_some();
    if !(geteuid().is_root() && pool) {
        eprintln!("skipped: needs root and the instance account pool (scripts/install-deps.sh)");
        return false;
    }
    true
}

/// Output of a program run as `as_tenant`'s uid (or as root when None), with a clean
/// environment, from `/`.
struct Ran {
    ok: bool,
    text: String,
}

async fn run_as(as_tenant: Option<&Tenant>, program: &str, args: &[&str]) -> Ran {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(t) = as_tenant {
        cmd.uid(t.uid).gid(t.gid);
    }
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish"))
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    Ran {
        ok: out.status.success(),
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// After teardown: no mount under the instance directory, no cgroup, no uid lease naming it.
fn assert_nothing_left_of(backend: &ProcessBackend, instance: &Instance) {
    let dir = &instance.backend_id;
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(
        !mounts.lines().any(|l| l.contains(dir.as_str())),
        "a mount is left under {dir}"
    );
    for controller in ["memory", "pids"] {
        let group = Path::new("/sys/fs/cgroup")
            .join(controller)
            .join("sandboxd")
            .join(&instance.name);
        assert!(!group.exists(), "cgroup left: {}", group.display());
    }
    let leases = &backend.config().lease_dir;
    for entry in std::fs::read_dir(leases).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(
            !text.contains(&format!("\"{dir}\"")),
            "lease {} still names {dir}",
            entry.path().display()
        );
    }
}

async fn pg_answers_with(instance: &Instance, expected: &str) {
    let v: String = support::pg(instance)
        .await
        .query_one("SELECT v FROM victim", &[])
        .await
        .expect("the victim answers")
        .get(0);
    assert_eq!(v, expected, "the victim's data is intact");
}

#[tokio::test]
async fn postgres_tenants_are_apart_below_the_database() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let victim = provision(&backend, "postgres", &support::owner("pgv")).await;
            let attacker = provision(&backend, "postgres", &support::owner("pga")).await;
            support::pg(&victim)
                .await
                .batch_execute("CREATE TABLE victim(v text); INSERT INTO victim VALUES ('mine')")
                .await
                .expect("victim data");
            let (v, a) = (tenant(&victim), tenant(&attacker));

            // One uid each, none of them root or the shared legacy account; files 0700.
            assert_ne!(v.uid, a.uid, "{} and {} share a uid", v.user, a.user);
            assert!(v.user.starts_with("sandboxd-i") && a.user.starts_with("sandboxd-i"));
            for t in [&v, &a] {
                let meta = std::fs::metadata(&t.dir).expect("instance dir");
                assert_eq!((meta.uid(), meta.mode() & 0o777), (t.uid, 0o700));
                let server = std::fs::metadata(format!("/proc/{}", t.pid)).expect("server");
                assert_eq!(server.uid(), t.uid, "the server runs as its own uid");
            }
            let socket_dir = v.dir.join("sock");
            let sock = socket_dir.display().to_string();
            let port = victim.port.to_string();
            let superuser = |sql: &'static str| {
                [
                    "-w",
                    "-X",
                    "-h",
                    &sock,
                    "-p",
                    &port,
                    "-U",
                    "sandboxd_admin",
                    "-d",
                    "postgres",
                    "-c",
                    sql,
                ]
                .map(str::to_owned)
            };

            // The daemon's own user is admitted (so the refusals below are about the uid).
            let daemon = run_as(None, "psql", &strs(&superuser("SELECT 1"))).await;
            assert!(
                daemon.ok,
                "the daemon's user is the superuser: {}",
                daemon.text
            );

            // Another tenant's uid cannot even reach the socket.
            let attack = superuser("COPY (SELECT 1) TO PROGRAM 'id'");
            let other = run_as(Some(&a), "psql", &strs(&attack)).await;
            assert!(!other.ok, "another instance's uid got in: {}", other.text);
            assert!(other.text.contains("ermission denied"), "{}", other.text);

            // The victim's own uid (its server compromised) is not the superuser either: the
            // socket is peer-authenticated for the daemon's user only, never `trust`.
            let own = run_as(Some(&v), "psql", &strs(&attack)).await;
            assert!(!own.ok, "the instance's own uid got in: {}", own.text);
            assert!(
                own.text.contains("authentication failed") || own.text.contains("pg_hba"),
                "{}",
                own.text
            );
            let hba = std::fs::read_to_string(v.dir.join("data/pg_hba.conf")).expect("hba");
            assert!(!hba.contains("trust"), "{hba}");

            // Signalling, tracing, reading the other's files: refused.
            let pid = v.pid.to_string();
            let signal = run_as(Some(&a), "kill", &["-0", &pid]).await;
            assert!(!signal.ok, "signalled another instance: {}", signal.text);
            let environ = format!("/proc/{}/environ", v.pid);
            let trace = run_as(Some(&a), "cat", &[&environ]).await;
            assert!(!trace.ok, "read another instance's process: {}", trace.text);
            let version = v.dir.join("data/PG_VERSION").display().to_string();
            let read = run_as(Some(&a), "cat", &[&version]).await;
            assert!(
                !read.ok && read.text.contains("ermission denied"),
                "{}",
                read.text
            );
            let listing = run_as(Some(&a), "ls", &[&v.dir.display().to_string()]).await;
            assert!(!listing.ok, "listed another instance: {}", listing.text);

            // Cross-tenant logins: the attacker's handed-out password does not open the victim.
            let err = support::pg_connect(&victim, attacker.agent.password.expose_secret())
                .await
                .expect_err("another tenant's password is refused");
            assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err:?}");

            pg_answers_with(&victim, "mine").await;
            for instance in [&victim, &attacker] {
                backend
                    .teardown(&InstanceHandle::of(instance))
                    .await
                    .expect("teardown");
                assert_nothing_left_of(&backend, instance);
            }
        })
        .await;
}

#[tokio::test]
async fn postgres_sql_escapes_are_refused_and_the_victim_keeps_its_data() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let victim = provision(&backend, "postgres", &support::owner("pgsql")).await;
            let client = support::pg(&victim).await;
            client
                .batch_execute("CREATE TABLE victim(v text); INSERT INTO victim VALUES ('kept')")
                .await
                .expect("victim data");
            for escape in [
                "COPY (SELECT 1) TO PROGRAM 'id'",
                "COPY victim FROM PROGRAM 'id'",
                "COPY victim TO '/tmp/sandboxd-escape'",
                "SELECT pg_read_file('/etc/passwd')",
                "SELECT pg_ls_dir('/')",
                "SELECT lo_import('/etc/passwd')",
                "CREATE EXTENSION plpython3u",
                "CREATE LANGUAGE plperlu",
                "ALTER SYSTEM SET archive_command = 'id'",
                "SET ROLE sandboxd_admin",
                "SET SESSION AUTHORIZATION sandboxd_admin",
                "ALTER ROLE sandbox SUPERUSER",
                "GRANT pg_execute_server_program TO sandbox",
                "LOAD '/tmp/evil.so'",
            ] {
                let err = client.batch_execute(escape).await.expect_err(escape);
                let code = err.code().map(|c| c.code().to_owned()).unwrap_or_default();
                assert!(
                    ["42501", "58P01", "0A000", "42704"].contains(&code.as_str()),
                    "{escape}: expected a refusal, got {err:?}"
                );
            }
            pg_answers_with(&victim, "kept").await;
        })
        .await;
}

#[tokio::test]
async fn templates_are_root_owned_and_closed_to_instances() {
    if !isolated_host() {
        return;
    }
    // A template directory of its own, so the template checked is the one this build made
    // (the host's cache may hold templates of older formats).
    ProcessHarness::new(|config| config.template_dir = config.root.with_file_name("templates"))
        .run(|backend| async move {
            let victim = provision(&backend, "postgres", &support::owner("tpl")).await;
            support::pg(&victim)
                .await
                .batch_execute("CREATE TABLE victim(v text); INSERT INTO victim VALUES ('t')")
                .await
                .expect("victim data");
            let v = tenant(&victim);
            let templates = backend.config().template_dir.clone();
            let template = std::fs::read_dir(&templates)
                .expect("template dir")
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("postgres-"))
                })
                .expect("a postgres template");
            for path in walk(&template) {
                let meta = std::fs::symlink_metadata(&path).expect("meta");
                assert_eq!(meta.uid(), 0, "{} is not root's", path.display());
                if !meta.file_type().is_symlink() {
                    assert_eq!(meta.mode() & 0o022, 0, "{} is writable", path.display());
                }
            }
            let data = template.join("data");
            for (program, args) in [
                ("touch", vec![data.join("evil").display().to_string()]),
                ("ls", vec![data.display().to_string()]),
                (
                    "cp",
                    vec![
                        "/etc/hostname".into(),
                        data.join("pg_hba.conf").display().to_string(),
                    ],
                ),
            ] {
                let tampered = run_as(Some(&v), program, &strs(&args)).await;
                assert!(!tampered.ok, "{program} on the template: {}", tampered.text);
            }
            assert!(!data.join("evil").exists());
            // The instance's copy is its own.
            let own = std::fs::metadata(v.dir.join("data/pg_hba.conf")).expect("copy");
            assert_eq!(own.uid(), v.uid);
            pg_answers_with(&victim, "t").await;
        })
        .await;
}

#[tokio::test]
async fn redis_superuser_needs_its_secret_and_escapes_are_refused() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let victim = provision(&backend, "redis", &support::owner("rv")).await;
            let attacker = provision(&backend, "redis", &support::owner("ra")).await;
            let mut conn = support::redis(&victim).await;
            let () = redis::cmd("SET")
                .arg("victim")
                .arg("kept")
                .query_async(&mut conn)
                .await
                .expect("victim data");
            let (v, a) = (tenant(&victim), tenant(&attacker));
            assert_ne!(v.uid, a.uid);
            let sock = v.dir.join("sock/redis.sock").display().to_string();

            let other = run_as(Some(&a), "redis-cli", &["-s", &sock, "ACL", "WHOAMI"]).await;
            assert!(
                !other.text.contains("sandboxd_admin") && other.text.contains("ermission denied"),
                "another uid reached the socket: {}",
                other.text
            );
            // The socket trusts nobody, the instance's own uid included.
            let own = run_as(
                Some(&v),
                "redis-cli",
                &["-s", &sock, "CONFIG", "GET", "dir"],
            )
            .await;
            assert!(
                own.text.contains("NOAUTH") || own.text.contains("Authentication required"),
                "the socket answered without a secret: {}",
                own.text
            );
            // The superuser's secret is on no command line, in no environment and in no file
            // the instance's uid can read (the config holds SHA-256 hashes only).
            let AdminAccess::Password(admin) = &victim.admin else {
                panic!("the redis superuser is reached with a per-instance secret");
            };
            let secret = admin.password.expose_secret();
            for path in walk(&v.dir) {
                let text =
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                assert!(
                    !text.contains(secret),
                    "{} holds the secret",
                    path.display()
                );
            }
            for file in ["cmdline", "environ"] {
                let bytes = std::fs::read(format!("/proc/{}/{file}", v.pid)).expect("proc");
                assert!(!String::from_utf8_lossy(&bytes).contains(secret), "{file}");
            }

            for (cmd, args) in [
                ("CONFIG", vec!["SET", "dir", "/tmp"]),
                ("CONFIG", vec!["SET", "maxmemory", "0"]),
                ("MODULE", vec!["LOAD", "/tmp/x.so"]),
                ("DEBUG", vec!["SEGFAULT"]),
                ("SHUTDOWN", vec![]),
                ("ACL", vec!["SETUSER", "sandbox", "+@all"]),
                ("REPLICAOF", vec!["127.0.0.1", "1"]),
                ("SAVE", vec![]),
            ] {
                let denied = support::redis_denied(
                    redis::cmd(cmd)
                        .arg(&args)
                        .query_async::<redis::Value>(&mut conn)
                        .await,
                );
                // DEBUG is also off in the server's configuration.
                assert!(
                    denied.to_uppercase().contains("NOPERM") || denied.contains("not allowed"),
                    "{cmd} {args:?}: {denied}"
                );
            }
            // Cross-tenant login.
            assert!(
                support::redis_connect(&victim, attacker.agent.password.expose_secret())
                    .await
                    .is_err()
            );
            let kept: String = redis::cmd("GET")
                .arg("victim")
                .query_async(&mut support::redis(&victim).await)
                .await
                .expect("the victim answers");
            assert_eq!(kept, "kept");
        })
        .await;
}

#[tokio::test]
async fn mariadb_root_is_the_daemon_only_and_escapes_are_refused() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let victim = provision(&backend, "mariadb", &support::owner("mv")).await;
            let attacker = provision(&backend, "mariadb", &support::owner("ma")).await;
            let mut conn = support::mysql(&victim).await;
            conn.query_drop("CREATE TABLE victim(v TEXT); INSERT INTO victim VALUES ('kept')")
                .await
                .expect("victim data");
            let (v, a) = (tenant(&victim), tenant(&attacker));
            assert_ne!(v.uid, a.uid);
            let sock = v.dir.join("sock/mysqld.sock").display().to_string();
            let root = ["-S", &sock, "-u", "root", "-e", "SELECT CURRENT_USER()"];

            let daemon = run_as(None, "mariadb", &root).await;
            assert!(daemon.ok, "the daemon's user is root: {}", daemon.text);
            let other = run_as(Some(&a), "mariadb", &root).await;
            assert!(!other.ok, "another uid got in: {}", other.text);
            let own = run_as(Some(&v), "mariadb", &root).await;
            assert!(!own.ok, "the instance's own uid got in: {}", own.text);
            assert!(own.text.contains("Access denied"), "{}", own.text);
            let own_name = ["-S", &sock, "-u", &v.user, "-e", "SELECT 1"];
            let own_account = run_as(Some(&v), "mariadb", &own_name).await;
            assert!(!own_account.ok, "{}", own_account.text);
            let anonymous = run_as(
                None,
                "mariadb",
                &["-S", &sock, "-u", "root", "-N", "-e",
                  "SELECT COUNT(*) FROM mysql.user WHERE user = '' OR plugin NOT IN \
                   ('mysql_native_password', 'unix_socket', 'mysql_old_password', '') \
                   OR (user = 'root' AND plugin <> 'unix_socket' AND authentication_string <> 'invalid')"],
            )
            .await;
            assert_eq!(anonymous.text.trim(), "0", "no anonymous or password root");

            // Without FILE, LOAD_FILE reads nothing (NULL) rather than failing.
            let read: Option<Option<String>> = conn
                .query_first("SELECT LOAD_FILE('/etc/passwd')")
                .await
                .expect("LOAD_FILE answers");
            assert_eq!(read, Some(None), "LOAD_FILE read a host file");
            for escape in [
                "SELECT 1 INTO OUTFILE '/tmp/sandboxd-escape'",
                "SELECT 1 INTO DUMPFILE '/tmp/sandboxd-escape'",
                "LOAD DATA INFILE '/etc/passwd' INTO TABLE victim",
                "CREATE FUNCTION sys_exec RETURNS INT SONAME 'lib_mysqludf_sys.so'",
                "INSTALL SONAME 'ha_connect'",
                "SET GLOBAL general_log_file = '/tmp/x'",
                "SET GLOBAL max_connections = 1",
                "CREATE USER evil IDENTIFIED BY 'x'",
                "SELECT * FROM mysql.user",
                "SHUTDOWN",
            ] {
                let err = conn.query_drop(escape).await.expect_err(escape);
                let text = err.to_string();
                assert!(
                    text.contains("denied") || text.contains("privilege"),
                    "{escape}: {text}"
                );
            }
            assert!(
                support::mysql_connect(&victim, attacker.agent.password.expose_secret())
                    .await
                    .is_err(),
                "cross-tenant login"
            );
            let kept: Option<String> = support::mysql(&victim)
                .await
                .query_first("SELECT v FROM victim")
                .await
                .expect("the victim answers");
            assert_eq!(kept.as_deref(), Some("kept"));
        })
        .await;
}

#[tokio::test]
async fn filling_the_space_fails_the_statement_and_the_server_answers() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|config| {
        config.data_limit_mb = 96;
        config.wal_limit_mb = 128;
    })
    .run(|backend| async move {
        let victim = provision(&backend, "postgres", &support::owner("fill")).await;
        let client = support::pg(&victim).await;
        client
            .batch_execute("CREATE TABLE victim(v text); INSERT INTO victim VALUES ('survives')")
            .await
            .expect("victim data");
        let err = client
            .batch_execute(
                "CREATE TABLE filler AS SELECT g, repeat(md5(g::text), 30) AS pad \
                 FROM generate_series(1, 400000) g",
            )
            .await
            .expect_err("~400 MB cannot fit in 96 MB");
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("53100"),
            "disk full, as an error: {err:?}"
        );
        // A temporary file beyond temp_file_limit is refused too.
        let err = client
            .batch_execute(
                "SET work_mem = '64kB'; SELECT count(*) FROM (SELECT g FROM \
                 generate_series(1, 3000000) g ORDER BY g DESC) s",
            )
            .await
            .expect_err("temp files are capped");
        assert!(
            matches!(err.code().map(|c| c.code()), Some("53400" | "53100")),
            "{err:?}"
        );
        // Same connection, next statement: the server is alive.
        let v: String = client
            .query_one("SELECT v FROM victim", &[])
            .await
            .expect("the next query answers")
            .get(0);
        assert_eq!(v, "survives");
        pg_answers_with(&victim, "survives").await;
        // The host's /dev/shm was never the one that filled.
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
        assert!(
            mounts
                .lines()
                .any(|l| l.starts_with(MOUNT_SOURCE) && l.contains(&victim.backend_id)),
            "the instance lives on its own tmpfs"
        );
    })
    .await;
}

#[tokio::test]
async fn redis_and_mariadb_refuse_writes_beyond_their_caps_and_keep_answering() {
    if !isolated_host() {
        return;
    }
    // MariaDB's template alone takes ~110 MB (its redo log is preallocated); the tmpfs pages
    // count against the memory cap too, so the cap stays above the data space.
    ProcessHarness::new(|config| {
        config.memory_limit_mb = 512;
        config.data_limit_mb = 256;
    })
    .run(|backend| async move {
        let owner = support::owner("caps");
        let redis_instance = provision(&backend, "redis", &owner).await;
        let mut conn = support::redis(&redis_instance).await;
        let () = redis::cmd("SET")
            .arg("victim")
            .arg("kept")
            .query_async(&mut conn)
            .await
            .expect("victim data");
        let chunk = "x".repeat(1024 * 1024);
        let mut refused = None;
        for i in 0..600 {
            let outcome: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("fill{i}"))
                .arg(&chunk)
                .query_async(&mut conn)
                .await;
            if let Err(err) = outcome {
                refused = Some(err.to_string());
                break;
            }
        }
        let refused = refused.expect("600 MB cannot fit under a 256 MB maxmemory");
        assert!(refused.contains("OOM"), "{refused}");
        let kept: String = redis::cmd("GET")
            .arg("victim")
            .query_async(&mut conn)
            .await
            .expect("answers");
        assert_eq!(
            kept, "kept",
            "noeviction: nothing of the tenant's was dropped"
        );

        let maria = provision(&backend, "mariadb", &owner).await;
        let mut my = support::mysql(&maria).await;
        my.query_drop("CREATE TABLE victim(v TEXT); INSERT INTO victim VALUES ('kept')")
            .await
            .expect("victim data");
        my.query_drop("CREATE TABLE filler(pad LONGTEXT) ENGINE=InnoDB")
            .await
            .expect("filler");
        let mut full = None;
        for _ in 0..400 {
            if let Err(err) = my
                .query_drop("INSERT INTO filler VALUES (REPEAT(MD5(RAND()), 32768))")
                .await
            {
                full = Some(err.to_string());
                break;
            }
        }
        let log = || server_log(&maria);
        let full = full.expect("400 MB cannot fit in 256 MB beside the template");
        assert!(full.to_lowercase().contains("full"), "{full}\n{}", log());
        let kept: Option<String> = support::mysql(&maria)
            .await
            .query_first("SELECT v FROM victim")
            .await
            .unwrap_or_else(|err| panic!("the server answers: {err}\n{}", log()));
        assert_eq!(kept.as_deref(), Some("kept"));
    })
    .await;
}

#[tokio::test]
async fn memory_is_capped_per_instance() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|config| config.memory_limit_mb = 192)
        .run(|backend| async move {
            let owner = support::owner("mem");
            let hog = provision(&backend, "postgres", &owner).await;
            let bystander = provision(&backend, "redis", &owner).await;
            let limit = Path::new("/sys/fs/cgroup/memory/sandboxd")
                .join(&hog.name)
                .join("memory.limit_in_bytes");
            let v2 = Path::new("/sys/fs/cgroup/sandboxd")
                .join(&hog.name)
                .join("memory.max");
            let cap = std::fs::read_to_string(&limit)
                .or_else(|_| std::fs::read_to_string(&v2))
                .expect("the instance has a memory cgroup");
            assert_eq!(cap.trim(), (192u64 * 1024 * 1024).to_string());
            let t = tenant(&hog);
            let cgroup =
                std::fs::read_to_string(format!("/proc/{}/cgroup", t.pid)).expect("server cgroup");
            assert!(
                cgroup.contains(&hog.name),
                "the server is in its group: {cgroup}"
            );

            // A query that wants far more than the cap: it fails (or its backend is killed
            // inside the group); it never takes the host's memory.
            let client = support::pg(&hog).await;
            let outcome = client
                .batch_execute(
                    "SET work_mem = '2GB'; SELECT count(*) FROM (SELECT DISTINCT \
                     g::text || repeat('x', 200) FROM generate_series(1, 3000000) g) s",
                )
                .await;
            let err = outcome.expect_err("a 600 MB hash in a 192 MB cap cannot succeed");
            // cgroup v1 counts the kills its OOM killer made inside the group.
            let oom = Path::new("/sys/fs/cgroup/memory/sandboxd")
                .join(&hog.name)
                .join("memory.oom_control");
            if let Ok(control) = std::fs::read_to_string(&oom) {
                let kills: u64 = control
                    .lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                assert!(
                    kills > 0,
                    "the cap did not stop the query; it failed otherwise: {err:?}\n{control}"
                );
            }
            let peak = std::fs::read_to_string(
                Path::new("/sys/fs/cgroup/memory/sandboxd")
                    .join(&hog.name)
                    .join("memory.max_usage_in_bytes"),
            )
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
            if let Some(peak) = peak {
                assert!(peak <= 192 * 1024 * 1024, "peak {peak} beyond the cap");
            }
            // The other tenant never noticed; the hog itself comes back.
            let mut conn = support::redis(&bystander).await;
            let pong: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .expect("ping");
            assert_eq!(pong, "PONG");
            let mut answered = false;
            for _ in 0..100 {
                if let Ok(c) = support::pg_connect(&hog, hog.agent.password.expose_secret()).await
                    && c.query_one("SELECT 1", &[]).await.is_ok()
                {
                    answered = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(answered, "the capped instance recovers");
        })
        .await;
}

#[tokio::test]
async fn concurrent_provisions_of_two_daemons_get_distinct_uids_and_give_them_back() {
    if !isolated_host() {
        return;
    }
    // Two backends with their own roots stand for two daemons on one host: the leases are
    // host-wide, so neither hands out a uid the other holds.
    let other = ProcessHarness::new(|_| {});
    ProcessHarness::new(|_| {})
        .run(|first| async move {
            other
                .run(|second| async move {
                    let owners: Vec<AgentSlug> = (0..8).map(|_| support::owner("uid")).collect();
                    let instances =
                        futures::future::join_all(owners.iter().enumerate().map(|(i, o)| {
                            let backend = if i % 2 == 0 { &first } else { &second };
                            async move { (backend, provision(backend, "redis", o).await) }
                        }))
                        .await;
                    let uids: std::collections::BTreeSet<u32> =
                        instances.iter().map(|(_, i)| tenant(i).uid).collect();
                    assert_eq!(uids.len(), instances.len(), "one uid per live instance");
                    for (backend, instance) in &instances {
                        backend
                            .teardown(&InstanceHandle::of(instance))
                            .await
                            .expect("teardown");
                        assert_nothing_left_of(backend, instance);
                        support::assert_no_process_mentions(&instance.name).await;
                    }
                })
                .await;
        })
        .await;
}

/// The last lines of an instance's server log, for failure messages.
pub(super) fn server_log(instance: &Instance) -> String {
    let text = std::fs::read_to_string(Path::new(&instance.backend_id).join("server.log"))
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        found.push(path.clone());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk(&path));
        }
    }
    found
}
