//! The attack suite for the Docker backend (issue 14): what one tenant — or a tenant that
//! escaped into its own container — tries against another's sandbox and against the host. Every
//! case asserts the refusal *and* that the victim sandbox still answers with its data. Every
//! test removes its containers and its daemon network through the `Harness`, even when it fails.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::NetworkCreateRequest;
use futures::StreamExt;
use mysql_async::prelude::Queryable;
use sandboxd_backend::{Backend, InstanceHandle, Sweep};
use sandboxd_domain::{DaemonId, Instance};
use secrecy::ExposeSecret;

use crate::docker::{
    Harness, MARIADB, POSTGRES, REDIS, harness_owner, inspect_json, is_podman, provision,
};
use crate::support;

const VICTIM_DATA: &str = "victim-data-42";

/// Runs `cmd` inside a container (as `user`, or the image's user); exit code and output.
pub(super) async fn exec(
    docker: &Docker,
    id: &str,
    user: Option<&str>,
    cmd: &[&str],
) -> (i64, String) {
    let created = docker
        .create_exec(
            id,
            CreateExecOptions {
                cmd: Some(cmd.iter().map(|c| (*c).to_owned()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: user.map(str::to_owned),
                ..CreateExecOptions::default()
            },
        )
        .await
        .expect("create exec");
    let mut output = String::new();
    if let StartExecResults::Attached {
        output: mut stream, ..
    } = docker
        .start_exec(&created.id, None)
        .await
        .expect("start exec")
    {
        while let Some(Ok(chunk)) = stream.next().await {
            output.push_str(&chunk.to_string());
        }
    }
    let code = docker
        .inspect_exec(&created.id)
        .await
        .expect("inspect exec")
        .exit_code
        .unwrap_or(-1);
    (code, output)
}

/// The container's network and its address on it.
async fn address(docker: &Docker, instance: &Instance) -> (String, String) {
    let found = docker
        .inspect_container(&instance.backend_id, None)
        .await
        .expect("inspect");
    let networks = found
        .network_settings
        .and_then(|n| n.networks)
        .expect("networks");
    assert_eq!(networks.len(), 1, "one network per container: {networks:?}");
    let (name, endpoint) = networks.into_iter().next().expect("one");
    (name, endpoint.ip_address.expect("an address"))
}

/// Neither the superuser's nor the handed-out password is anywhere in `docker inspect` (the
/// real secrets are searched for, not just variable names), and no variable carries one.
async fn assert_no_secret_in_config(docker: &Docker, instance: &Instance) {
    let inspected = inspect_json(docker, &instance.backend_id).await;
    assert!(
        !inspected.contains(instance.agent.password.expose_secret()),
        "{}: the handed-out password is in docker inspect",
        instance.name
    );
    let sandboxd_domain::engine::AdminAccess::Password(admin) = &instance.admin else {
        panic!("docker instances are reached with a superuser password");
    };
    assert!(
        !inspected.contains(admin.password.expose_secret()),
        "{}: the superuser's password is in docker inspect",
        instance.name
    );
    let found = docker
        .inspect_container(&instance.backend_id, None)
        .await
        .expect("inspect");
    for var in found.config.and_then(|c| c.env).unwrap_or_default() {
        let (key, value) = var.split_once('=').unwrap_or((var.as_str(), ""));
        if key.contains("PASSWORD") {
            assert!(
                key.ends_with("_FILE") && value == "/dev/stdin",
                "{}: {key} holds a value in the container's env",
                instance.name
            );
        }
    }
}

/// As the image's user and as root: the root filesystem refuses writes.
async fn assert_root_read_only(docker: &Docker, instance: &Instance) {
    for user in [None, Some("0")] {
        for path in [
            "/sandboxd-probe",
            "/etc/sandboxd-probe",
            "/usr/sandboxd-probe",
        ] {
            let (code, output) = exec(
                docker,
                &instance.backend_id,
                user,
                &["sh", "-c", &format!("echo x > {path}")],
            )
            .await;
            assert_ne!(code, 0, "{}: {path} written as {user:?}", instance.name);
            assert!(
                output.contains("Read-only file system"),
                "{}: {output}",
                instance.name
            );
        }
    }
}

/// The container's server runs as a uid of sandboxd's range that no host account has, not the
/// image's user (999 for redis and mysql, which `useradd --system` hands out first on a host).
async fn assert_runs_as_no_host_account(docker: &Docker, instance: &Instance) {
    let found = docker
        .inspect_container(&instance.backend_id, None)
        .await
        .expect("inspect");
    let pid = found.state.and_then(|s| s.pid).expect("a running pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
        .expect("a uid");
    let uids = sandboxd_backend::docker::DockerConfig::default()
        .uids()
        .expect("a uid range by default");
    assert!(uids.contains(&uid), "{}: runs as {uid}", instance.name);
    let passwd = std::fs::read_to_string("/etc/passwd").expect("passwd");
    assert!(
        !passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(uid.to_string().as_str())),
        "{}: uid {uid} is a host account's",
        instance.name
    );
}

async fn pg_victim_data(instance: &Instance) {
    let client = support::pg(instance).await;
    let row = client
        .query_one("SELECT v FROM secrets", &[])
        .await
        .expect("the victim answers");
    assert_eq!(row.get::<_, String>(0), VICTIM_DATA);
}

async fn redis_victim_data(instance: &Instance) {
    let mut conn = support::redis(instance).await;
    let value: String = redis::cmd("GET")
        .arg("secret")
        .query_async(&mut conn)
        .await
        .expect("the victim answers");
    assert_eq!(value, VICTIM_DATA);
}

#[tokio::test]
async fn one_tenant_reaches_nothing_of_anothers_on_docker() {
    let Some(harness) = Harness::new("atk-net", &[POSTGRES, REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let victim_owner = harness_owner("atk-net");
            let attacker_owner = harness_owner("atk-net");
            let (pg, victim_redis, attacker) = tokio::join!(
                provision(&backend, "postgres", &victim_owner),
                provision(&backend, "redis", &victim_owner),
                provision(&backend, "redis", &attacker_owner),
            );
            let client = support::pg(&pg).await;
            client
                .batch_execute(&format!(
                    "CREATE TABLE secrets (v text); INSERT INTO secrets VALUES ('{VICTIM_DATA}')"
                ))
                .await
                .expect("victim writes");
            let mut conn = support::redis(&victim_redis).await;
            let _: () = redis::cmd("SET")
                .arg("secret")
                .arg(VICTIM_DATA)
                .query_async(&mut conn)
                .await
                .expect("victim writes");

            let (pg_net, pg_ip) = address(&docker, &pg).await;
            let (redis_net, redis_ip) = address(&docker, &victim_redis).await;
            let (attacker_net, attacker_ip) = address(&docker, &attacker).await;
            let podman = is_podman(&docker).await;
            if podman {
                // A network per container: Podman's bridge networks let their containers
                // talk, but not containers of different networks.
                for net in [&pg_net, &redis_net, &attacker_net] {
                    assert!(
                        net.starts_with(&format!("sandboxd-inet-{}-", support::maker())),
                        "{net}"
                    );
                }
                let distinct: BTreeSet<_> = [&pg_net, &redis_net, &attacker_net].into();
                assert_eq!(distinct.len(), 3, "one network each: {distinct:?}");
            } else {
                // One network for the daemon's containers, with inter-container traffic off.
                assert_eq!(pg_net, format!("sandboxd-net-{}", support::maker()));
                assert_eq!((&redis_net, &attacker_net), (&pg_net, &pg_net));
                let options = docker
                    .inspect_network(&pg_net, None)
                    .await
                    .expect("inspect the network")
                    .options
                    .unwrap_or_default();
                assert_eq!(
                    options
                        .get("com.docker.network.bridge.enable_icc")
                        .map(String::as_str),
                    Some("false"),
                    "{options:?}"
                );
            }

            // The addresses are live: the host (through the bridge) reaches the victim's
            // servers, and from inside, the attacker reaches its own.
            for (ip, port) in [(&pg_ip, 5432), (&redis_ip, 6379)] {
                tokio::net::TcpStream::connect((ip.as_str(), port))
                    .await
                    .unwrap_or_else(|err| panic!("the host reaches {ip}:{port}: {err}"));
            }
            let probe = |ip: &str, port: u16| {
                format!("timeout 3 bash -c '</dev/tcp/{ip}/{port}' && echo OPEN")
            };
            let (code, out) = exec(
                &docker,
                &attacker.backend_id,
                None,
                &["bash", "-c", &probe(&attacker_ip, 6379)],
            )
            .await;
            assert_eq!((code, out.trim()), (0, "OPEN"), "the probe itself works");
            // …but none of the victim's, on any port it serves.
            for (ip, port) in [(&pg_ip, 5432), (&redis_ip, 6379)] {
                let (code, out) = exec(
                    &docker,
                    &attacker.backend_id,
                    None,
                    &["bash", "-c", &probe(ip, port)],
                )
                .await;
                assert_ne!(code, 0, "{ip}:{port} reachable from another tenant: {out}");
                assert!(!out.contains("OPEN"), "{out}");
            }
            // Not even within one tenant's set: the victim's Redis does not reach its Postgres
            // (agents reach their servers through the published ports, never container to
            // container).
            let (code, out) = exec(
                &docker,
                &victim_redis.backend_id,
                None,
                &["bash", "-c", &probe(&pg_ip, 5432)],
            )
            .await;
            assert_ne!(code, 0, "container-to-container traffic is on: {out}");

            // Cross-tenant logins: the attacker's password opens nothing of the victim's.
            let stolen = attacker.agent.password.expose_secret();
            assert!(support::redis_connect(&victim_redis, stolen).await.is_err());
            assert!(support::pg_connect(&pg, stolen).await.is_err());

            for instance in [&pg, &victim_redis, &attacker] {
                assert_no_secret_in_config(&docker, instance).await;
                assert_root_read_only(&docker, instance).await;
                assert_runs_as_no_host_account(&docker, instance).await;
            }
            pg_victim_data(&pg).await;
            redis_victim_data(&victim_redis).await;
            drop((client, conn));
            for instance in [&pg, &victim_redis, &attacker] {
                backend
                    .teardown(&InstanceHandle::of(instance))
                    .await
                    .expect("teardown");
            }
            if podman {
                for net in [&pg_net, &redis_net, &attacker_net] {
                    assert!(
                        docker.inspect_network(net, None).await.is_err(),
                        "teardown removes the container's own network {net}"
                    );
                }
            }
        })
        .await;
}

#[tokio::test]
async fn postgres_escapes_and_a_full_tmpfs_fail_the_statement_not_the_server() {
    let Some(harness) = Harness::new("atk-pg", &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let pg = provision(&backend, "postgres", &harness_owner("atk-pg")).await;
            let client = support::pg(&pg).await;
            client
                .batch_execute(&format!(
                    "CREATE TABLE secrets (v text); INSERT INTO secrets VALUES ('{VICTIM_DATA}')"
                ))
                .await
                .expect("writes");
            for escape in [
                "COPY (SELECT 1) TO PROGRAM 'id'",
                "COPY secrets FROM PROGRAM 'id'",
                "SELECT pg_read_file('/etc/passwd')",
                "SELECT lo_import('/etc/passwd')",
                "CREATE EXTENSION plpython3u",
                "CREATE LANGUAGE plperlu",
                "ALTER SYSTEM SET log_min_messages = debug5",
                "SET ROLE sandboxd_admin",
                "SET ROLE pg_execute_server_program",
                "GRANT pg_read_server_files TO sandbox",
                // The extension schema is the superuser's: nothing planted, nothing altered.
                "CREATE FUNCTION extensions.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                "DROP SCHEMA extensions",
                "ALTER SCHEMA extensions OWNER TO sandbox",
            ] {
                let err = client
                    .batch_execute(escape)
                    .await
                    .expect_err(&format!("{escape} must be refused"));
                let text = err
                    .as_db_error()
                    .map(|e| e.message().to_owned())
                    .unwrap_or_else(|| err.to_string());
                assert!(
                    text.contains("permission denied")
                        || text.contains("must be")
                        || text.contains("not allowed")
                        || text.contains("does not exist")
                        || text.contains("not available")
                        || text.contains("not supported"),
                    "{escape}: {text}"
                );
            }
            pg_victim_data(&pg).await;

            // Temporary files are capped below the data tmpfs: a huge sort fails on
            // `temp_file_limit` while there is room. (Once the data tmpfs is full, a sort's temp
            // files take its last pages, and a checkpoint landing in that window PANICs on its
            // own small files; the restart frees them, but the connections go: see README.)
            let err = client
                .batch_execute("SELECT g FROM generate_series(1, 5000000) g ORDER BY random()")
                .await
                .expect_err("a huge sort fails");
            let message = err
                .as_db_error()
                .map(|e| e.message().to_owned())
                .unwrap_or_else(|| panic!("a clean SQL error: {err}"));
            assert!(message.contains("temp_file_limit"), "{message}");

            // Fill the data tmpfs: the statement fails, the server lives on. The table is
            // unlogged so that filling it writes no WAL and so starts no checkpoint: one that
            // lands while the tmpfs is full PANICs on its own small files (the window README
            // states), which is not what this step is about.
            client
                .batch_execute("CREATE UNLOGGED TABLE fill (x text)")
                .await
                .expect("create");
            let mut refused = None;
            for _ in 0..40 {
                if let Err(err) = client
                    .batch_execute(
                        "INSERT INTO fill SELECT repeat('x', 1000) FROM generate_series(1, 20000)",
                    )
                    .await
                {
                    refused = Some(
                        err.as_db_error()
                            .map(|e| e.message().to_owned())
                            .unwrap_or_else(|| err.to_string()),
                    );
                    break;
                }
            }
            let refused = refused.expect("filling the tmpfs ends in an error");
            assert!(refused.contains("No space left on device"), "{refused}");
            // Same connection, next query; then a fresh connection.
            client
                .query_one("SELECT 1", &[])
                .await
                .expect("the next query answers");
            pg_victim_data(&pg).await;
            let found = docker
                .inspect_container(&pg.backend_id, None)
                .await
                .expect("inspect");
            assert_eq!(
                found.state.and_then(|s| s.running),
                Some(true),
                "the container still runs"
            );
            drop(client);
            backend
                .teardown(&InstanceHandle::of(&pg))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn redis_escapes_and_memory_exhaustion_are_refused() {
    let Some(harness) = Harness::new("atk-redis", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "redis", &harness_owner("atk-redis")).await;
            let mut conn = support::redis(&instance).await;
            let _: () = redis::cmd("SET")
                .arg("secret")
                .arg(VICTIM_DATA)
                .query_async(&mut conn)
                .await
                .expect("writes");
            for args in [
                &["CONFIG", "SET", "dir", "/tmp"][..],
                &["CONFIG", "REWRITE"],
                &["MODULE", "LOAD", "/tmp/x.so"],
                &["DEBUG", "SEGFAULT"],
                &["ACL", "SETUSER", "sandbox", "+@all"],
                &["SHUTDOWN", "NOSAVE"],
                &["REPLICAOF", "10.0.0.1", "6379"],
            ] {
                let mut cmd = redis::cmd(args[0]);
                for a in &args[1..] {
                    cmd.arg(*a);
                }
                let err = support::redis_denied(cmd.query_async::<redis::Value>(&mut conn).await)
                    .to_ascii_lowercase();
                assert!(
                    err.contains("noperm")
                        || err.contains("no permissions")
                        || err.contains("not allowed"),
                    "{args:?}: {err}"
                );
            }
            // Memory: writes past maxmemory are refused, nothing is evicted, nothing is killed.
            let mut refused = None;
            for i in 0..8 {
                let result: redis::RedisResult<i64> = redis::cmd("SETRANGE")
                    .arg(format!("big{i}"))
                    .arg(60_000_000)
                    .arg("x")
                    .query_async(&mut conn)
                    .await;
                if let Err(err) = result {
                    refused = Some(err.to_string());
                    break;
                }
            }
            let refused = refused.expect("filling memory ends in an error");
            assert!(refused.contains("OOM"), "{refused}");
            redis_victim_data(&instance).await;
            let found = docker
                .inspect_container(&instance.backend_id, None)
                .await
                .expect("inspect");
            let state = found.state.expect("state");
            assert_eq!(state.running, Some(true));
            assert_eq!(state.oom_killed, Some(false));
            drop(conn);
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn mariadb_escapes_secrets_and_a_full_tmpfs_are_refused() {
    let Some(harness) = Harness::new("atk-maria", &[MARIADB], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "mariadb", &harness_owner("atk-maria")).await;
            assert_no_secret_in_config(&docker, &instance).await;
            assert_root_read_only(&docker, &instance).await;
            assert_runs_as_no_host_account(&docker, &instance).await;
            let mut conn = support::mysql(&instance).await;
            conn.query_drop(format!(
                "CREATE TABLE secrets (v text); INSERT INTO secrets VALUES ('{VICTIM_DATA}')"
            ))
            .await
            .expect("writes");
            let read: Option<Option<String>> = conn
                .query_first("SELECT LOAD_FILE('/etc/passwd')")
                .await
                .expect("LOAD_FILE answers NULL without FILE");
            assert_eq!(read, Some(None), "LOAD_FILE read a file");
            for escape in [
                "SELECT 1 INTO OUTFILE '/tmp/sandboxd-x'",
                "CREATE FUNCTION sys_exec RETURNS INT SONAME 'lib_mysqludf_sys.so'",
                "SET GLOBAL max_connections = 1",
                "GRANT ALL ON *.* TO sandbox",
                "INSTALL SONAME 'ha_connect'",
            ] {
                let err = conn
                    .query_drop(escape)
                    .await
                    .expect_err(&format!("{escape} must be refused"));
                let text = err.to_string();
                assert!(
                    text.contains("denied") || text.contains("privilege"),
                    "{escape}: {text}"
                );
            }
            // Fill the data tmpfs: the statement fails, the server lives on.
            conn.query_drop("CREATE TABLE fill (x longtext)")
                .await
                .expect("create");
            let mut refused = None;
            for _ in 0..40 {
                if let Err(err) = conn
                    .query_drop("INSERT INTO fill SELECT REPEAT('x', 10000) FROM seq_1_to_2000")
                    .await
                {
                    refused = Some(err.to_string());
                    break;
                }
            }
            let refused = refused.expect("filling the tmpfs ends in an error");
            assert!(refused.contains("is full"), "{refused}");
            let answer: Option<String> = conn
                .query_first("SELECT v FROM secrets")
                .await
                .expect("the next query answers");
            assert_eq!(answer.as_deref(), Some(VICTIM_DATA));
            let found = docker
                .inspect_container(&instance.backend_id, None)
                .await
                .expect("inspect");
            assert_eq!(found.state.and_then(|s| s.running), Some(true));
            drop(conn);
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

/// 100 live sandbox sets of 100 owners, all on the daemon's one network (a /22 of sandboxd's
/// pool; Docker's default pools would stop at ~31 networks; on Podman, a /28 network each from
/// the same pool, and 40 sets: Podman 4.3's compatible API slows with every live container, to
/// ~12 s a provision at 100): while they come and go, and while
/// other daemons' networks are created and removed beside them, an attacker's container never
/// reaches the victim's server — the gap a network per set left open during such churn.
#[tokio::test]
async fn isolation_holds_for_a_hundred_sets_while_sets_and_networks_come_and_go() {
    let Some(harness) = Harness::new("atk-100", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let (victim_owner, attacker_owner) =
                (harness_owner("atk-100"), harness_owner("atk-100"));
            let (victim, attacker) = tokio::join!(
                provision(&backend, "redis", &victim_owner),
                provision(&backend, "redis", &attacker_owner),
            );
            let (_, victim_ip) = address(&docker, &victim).await;
            let sets = if is_podman(&docker).await { 40 } else { 100 };
            let done = AtomicBool::new(false);
            let churning = async {
                let live = churn(&backend, &docker, sets - 2).await;
                done.store(true, Ordering::SeqCst);
                live
            };
            let probing = async {
                let (mut probes, mut reached) = (0, Vec::new());
                while !done.load(Ordering::SeqCst) {
                    let (code, out) = exec(
                        &docker,
                        &attacker.backend_id,
                        None,
                        &[
                            "bash",
                            "-c",
                            &format!("timeout 1 bash -c '</dev/tcp/{victim_ip}/6379' && echo OPEN"),
                        ],
                    )
                    .await;
                    probes += 1;
                    if code == 0 || out.contains("OPEN") {
                        reached.push(probes);
                    }
                }
                (probes, reached)
            };
            let (live, (probes, reached)) = tokio::join!(churning, probing);
            assert_eq!(live, sets, "{sets} sets were live at once");
            assert!(probes >= 5, "only {probes} probes ran during the churn");
            assert!(
                reached.is_empty(),
                "the victim was reached by probes {reached:?} of {probes}"
            );
            let mut conn = support::redis(&victim).await;
            let pong: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .expect("the victim answers");
            assert_eq!(pong, "PONG");
            for instance in [&victim, &attacker] {
                backend
                    .teardown(&InstanceHandle::of(instance))
                    .await
                    .expect("teardown");
            }
        })
        .await;
}

/// Brings `more` sets up (100 live with the two of the test, on Docker), checks they share the one
/// network (on Podman: each its own) with distinct addresses, and tears them down, while a foreign daemon's network is
/// created and removed over and over. Returns how many sets were live at the peak.
async fn churn(
    backend: &std::sync::Arc<sandboxd_backend::docker::DockerBackend>,
    docker: &Docker,
    more: usize,
) -> usize {
    let networks = {
        let docker = docker.clone();
        tokio::spawn(async move {
            let name = format!("sandboxd-test-churn-{}", std::process::id());
            for _ in 0..20 {
                docker
                    .create_network(NetworkCreateRequest {
                        name: name.clone(),
                        labels: Some(HashMap::from([(
                            "sandboxd.test".to_owned(),
                            "1".to_owned(),
                        )])),
                        ..NetworkCreateRequest::default()
                    })
                    .await
                    .expect("a foreign network");
                docker.remove_network(&name).await.expect("removed again");
            }
        })
    };
    let owners: Vec<_> = (0..more).map(|_| harness_owner("atk-100")).collect();
    let instances: Vec<Instance> = futures::stream::iter(owners.iter())
        .map(|owner| {
            let backend = backend.clone();
            async move { provision(&backend, "redis", owner).await }
        })
        .buffer_unordered(6)
        .collect()
        .await;
    let (mut addresses, mut networks_used) = (BTreeSet::new(), BTreeSet::new());
    for instance in &instances {
        let (network, ip) = address(docker, instance).await;
        addresses.insert(ip);
        networks_used.insert(network);
    }
    assert_eq!(addresses.len(), instances.len(), "distinct addresses");
    if is_podman(docker).await {
        assert_eq!(networks_used.len(), instances.len(), "a network each");
    } else {
        assert_eq!(
            networks_used,
            BTreeSet::from([format!("sandboxd-net-{}", support::maker())]),
            "all on the daemon's network"
        );
    }
    futures::stream::iter(instances.iter())
        .map(|instance| {
            let backend = backend.clone();
            async move {
                backend
                    .teardown(&InstanceHandle::of(instance))
                    .await
                    .expect("teardown");
            }
        })
        .buffer_unordered(6)
        .for_each(|()| async {})
        .await;
    networks.await.expect("the network churn");
    instances.len() + 2
}

/// A crash leaves the daemon network (on Podman: the container's own) without containers: the
/// sweep removes this daemon's once it has settled, never a foreign daemon's, and a network
/// that is still used stays.
#[tokio::test]
async fn the_sweep_removes_the_unused_network_of_its_own_maker_only() {
    let Some(harness) = Harness::new("atk-sweep", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner("atk-sweep");
            let instance = provision(&backend, "redis", &owner).await;
            let (network, _) = address(&docker, &instance).await;
            let maker = support::maker();
            // In use: no sweep removes it.
            assert_eq!(backend.sweep(&maker, Sweep::Now).await.expect("sweep"), 0);
            // The crash: the container goes out of band, the network stays.
            docker
                .remove_container(
                    &instance.backend_id,
                    Some(bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await
                .expect("remove out of band");
            // A foreign daemon's network, labeled like ours but with another maker.
            let foreign = DaemonId::generate();
            let foreign_name = format!("sandboxd-net-{foreign}");
            docker
                .create_network(NetworkCreateRequest {
                    name: foreign_name.clone(),
                    labels: Some(HashMap::from([
                        ("sandboxd.sandbox-network".to_owned(), "1".to_owned()),
                        ("sandboxd.instance-network".to_owned(), "1".to_owned()),
                        ("sandboxd.daemon".to_owned(), foreign.to_string()),
                        ("sandboxd.created".to_owned(), "0".to_owned()),
                    ])),
                    ..NetworkCreateRequest::default()
                })
                .await
                .expect("a foreign network");
            // The janitor's pass leaves a network younger than the settle time (60 s)…
            assert_eq!(
                backend.sweep(&maker, Sweep::Settled).await.expect("sweep"),
                0
            );
            assert!(docker.inspect_network(&network, None).await.is_ok());
            // …a stop does not wait.
            assert_eq!(backend.sweep(&maker, Sweep::Now).await.expect("sweep"), 1);
            assert!(
                docker.inspect_network(&network, None).await.is_err(),
                "the unused network of our own maker is gone"
            );
            assert!(
                docker.inspect_network(&foreign_name, None).await.is_ok(),
                "a foreign daemon's network is never touched"
            );
            docker
                .remove_network(&foreign_name)
                .await
                .expect("remove the foreign network");
        })
        .await;
}

/// Two processes of one maker (two `sandboxd provision` CLIs started together) can both create
/// its network: the engine keeps both under one name, and looking it up by name then fails as
/// ambiguous. Every provision settles on the oldest, removes an unused duplicate, and attaches
/// by id; the sweep removes every one of the maker's.
#[tokio::test]
async fn duplicate_networks_of_one_maker_settle_on_the_oldest() {
    let Some(harness) = Harness::new("atk-dup", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            // A maker of its own: the other tests' network is not disturbed.
            let maker = DaemonId::generate();
            let name = format!("sandboxd-net-{maker}");
            let mut ids: Vec<String> = Vec::new();
            let podman = is_podman(&docker).await;
            for (created, subnet) in [("1000", "10.254.251.0/24"), ("2000", "10.254.252.0/24")] {
                let made = docker
                    .create_network(NetworkCreateRequest {
                        name: name.clone(),
                        driver: Some("bridge".to_owned()),
                        ipam: Some(bollard::models::Ipam {
                            config: Some(vec![bollard::models::IpamConfig {
                                subnet: Some(subnet.to_owned()),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }),
                        options: Some(HashMap::from([(
                            "com.docker.network.bridge.enable_icc".to_owned(),
                            "false".to_owned(),
                        )])),
                        labels: Some(HashMap::from([
                            ("sandboxd.sandbox-network".to_owned(), "1".to_owned()),
                            ("sandboxd.daemon".to_owned(), maker.to_string()),
                            ("sandboxd.created".to_owned(), created.to_owned()),
                        ])),
                        ..NetworkCreateRequest::default()
                    })
                    .await;
                if podman && !ids.is_empty() {
                    // Podman refuses a second network of one name, so the case cannot arise
                    // there (and it has no daemon network: a network per container).
                    docker.remove_network(&ids[0]).await.expect("removed");
                    if let Ok(second) = &made {
                        let _ = docker.remove_network(&second.id).await;
                    }
                    let refused = made.expect_err("a second network of one name is refused");
                    assert!(refused.to_string().contains("already"), "{refused}");
                    return;
                }
                ids.push(made.expect("a network of the maker's name").id);
            }
            let owner = harness_owner("atk-dup");
            let request = sandboxd_backend::InstanceRequest {
                major: None,
                maker: maker.clone(),
                ..support::request("redis", &owner, &[])
            };
            let instance = backend.provision(&request).await.expect("provisioned");
            let inspected: serde_json::Value =
                serde_json::from_str(&inspect_json(&docker, &instance.backend_id).await)
                    .expect("json");
            let joined = inspected["NetworkSettings"]["Networks"][&name]["NetworkID"]
                .as_str()
                .map(str::to_owned);
            assert_eq!(joined.as_deref(), Some(ids[0].as_str()), "the oldest");
            let left = |docker: Docker, name: String| async move {
                docker
                    .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
                    .await
                    .expect("networks")
                    .into_iter()
                    .filter(|n| n.name.as_deref() == Some(name.as_str()))
                    .filter_map(|n| n.id)
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                left(docker.clone(), name.clone()).await,
                [ids[0].clone()],
                "the unused duplicate is gone"
            );
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
            assert_eq!(backend.sweep(&maker, Sweep::Now).await.expect("sweep"), 1);
            assert!(left(docker.clone(), name.clone()).await.is_empty());
        })
        .await;
}
