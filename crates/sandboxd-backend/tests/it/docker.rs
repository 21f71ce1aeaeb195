//! Docker backend tests (a real Docker engine, locally built `sandboxd-local/*` images).
//!
//! Each test skips (printing why) when the engine or an image it needs is missing, unless
//! `SANDBOXD_REQUIRE_DOCKER=1` is set (CI sets it): then it fails. Every test removes what it
//! created, even when it fails, and checks that nothing of its owners is left.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, ListContainersOptions, ListNetworksOptions,
    LogsOptions, RemoveContainerOptions,
};
use futures::{FutureExt, StreamExt};
use mysql_async::prelude::Queryable;
use sandboxd_backend::docker::{DockerBackend, DockerConfig};
use sandboxd_backend::{Backend, BackendError, InstanceHandle, Sweep, provision_set};
use sandboxd_domain::instance::instance_name;
use sandboxd_domain::{AgentSlug, Instance};
use secrecy::ExposeSecret;

use crate::support::{self, WRONG_PASSWORD, engine, request};

/// The engine under test; `SANDBOXD_TEST_DOCKER_SOCKET` points the tests at another one
/// (Podman's socket, say).
fn socket() -> String {
    std::env::var("SANDBOXD_TEST_DOCKER_SOCKET")
        .unwrap_or_else(|_| "/var/run/docker.sock".to_owned())
}
pub(super) const POSTGRES: &str = "sandboxd-local/postgres:17";
pub(super) const POSTGRES18: &str = "sandboxd-local/postgres:18";
pub(super) const REDIS: &str = "sandboxd-local/redis:8";
pub(super) const MARIADB: &str = "sandboxd-local/mariadb:11";
const NEVER_READY: &str = "sandboxd-local/never-ready:1";
const NS: &str = "sandboxd";

fn local_config() -> DockerConfig {
    DockerConfig {
        images: sandboxd_testkit::local_image_lists(),
        socket: socket(),
        ..DockerConfig::default()
    }
}

use sandboxd_testkit::skip;

/// The engine, when it answers.
async fn engine_client() -> Result<Docker, String> {
    let socket = socket();
    let docker = Docker::connect_with_unix(&socket, 60, bollard::API_DEFAULT_VERSION)
        .map_err(|e| format!("no Docker engine at {socket}: {e}"))?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| format!("the Docker engine at {socket} does not answer: {e}"))?;
    docker
        .ping()
        .await
        .map_err(|e| format!("the Docker engine at {socket} does not answer: {e}"))?;
    Ok(docker)
}

/// Whether the engine under test is Podman (its compatible API), which keeps tenants apart with
/// a network per container instead of one network without inter-container traffic.
pub(super) async fn is_podman(docker: &Docker) -> bool {
    let version = docker.version().await.expect("the engine's version");
    version
        .components
        .iter()
        .flatten()
        .any(|c| c.name.starts_with("Podman"))
}

/// Rlimits for containers a test makes itself: the engine's defaults can exceed what it may
/// set here (Podman asks for 1048576 open files, above these machines' hard limit).
pub(super) fn test_ulimits() -> Vec<bollard::models::ResourcesUlimits> {
    ["nofile", "nproc"]
        .into_iter()
        .map(|name| bollard::models::ResourcesUlimits {
            name: Some(name.to_owned()),
            soft: Some(1024),
            hard: Some(1024),
        })
        .collect()
}

async fn image_present(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

/// A Docker backend for one test, and the cleanup of every container of the test's owners.
pub(super) struct Harness {
    tag: &'static str,
    docker: Docker,
    pub(super) backend: Arc<DockerBackend>,
}

impl Harness {
    /// None (after printing why) when the engine or one of `images` is missing.
    pub(super) async fn new(
        tag: &'static str,
        images: &[&str],
        tweak: impl FnOnce(&mut DockerConfig),
    ) -> Option<Self> {
        let docker = match engine_client().await {
            Ok(docker) => docker,
            Err(why) => {
                skip(tag, &why);
                return None;
            }
        };
        for image in images {
            if !image_present(&docker, image).await {
                skip(
                    tag,
                    &format!("image {image} is missing; build it with scripts/build-images.sh"),
                );
                return None;
            }
        }
        support::show_logs();
        let mut config = local_config();
        tweak(&mut config);
        let backend = DockerBackend::new(config).expect("valid config");
        Some(Self {
            tag,
            docker,
            backend: Arc::new(backend),
        })
    }

    /// Every container whose owner label is one of this test's owners, or that this test
    /// process made (pool members carry a pool slot as owner).
    async fn leftovers(docker: &Docker, tag: &str) -> Vec<String> {
        let prefix = support::owner_prefix(tag);
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{NS}.sandbox=1")],
            )])),
            ..ListContainersOptions::default()
        };
        // Podman can answer a listing with a container of another test in a state the API
        // lacks (`stopped`, for a moment, before its clean-up): ask again.
        let mut listed = docker.list_containers(Some(options.clone())).await;
        for _ in 0..50 {
            match &listed {
                Err(err) if err.to_string().contains("unknown variant `stopped`") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    listed = docker.list_containers(Some(options.clone())).await;
                }
                _ => break,
            }
        }
        listed
            .expect("list containers")
            .into_iter()
            .filter(|c| {
                let label = |name: &str| {
                    c.labels
                        .as_ref()
                        .and_then(|l| l.get(&format!("{NS}.{name}")))
                };
                label("owner").is_some_and(|o| o.starts_with(&prefix))
                    || label("daemon").is_some_and(|d| *d == support::maker().to_string())
            })
            .filter_map(|c| c.id)
            .collect()
    }

    /// Every network this test process's maker made.
    async fn leftover_networks(docker: &Docker) -> Vec<String> {
        let options = ListNetworksOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![
                    format!("{NS}.sandbox-network=1"),
                    format!("{NS}.daemon={}", support::maker()),
                ],
            )])),
        };
        docker
            .list_networks(Some(options))
            .await
            .expect("list networks")
            .into_iter()
            .filter_map(|n| n.id)
            .collect()
    }

    /// Runs `body`, then removes every container of this test's owners whatever happened,
    /// sweeps the maker's network the way a stopping daemon does, removes whatever is still
    /// left, asserts that nothing was left by the code under test, and re-raises a panic.
    pub(super) async fn run<F, Fut>(self, body: F)
    where
        F: FnOnce(Arc<DockerBackend>, Docker) -> Fut,
        Fut: Future<Output = ()>,
    {
        let outcome = AssertUnwindSafe(body(self.backend.clone(), self.docker.clone()))
            .catch_unwind()
            .await;
        let left = Self::leftovers(&self.docker, self.tag).await;
        for id in &left {
            let options = RemoveContainerOptions {
                force: true,
                v: true,
                ..RemoveContainerOptions::default()
            };
            let _ = self.docker.remove_container(id, Some(options)).await;
        }
        let swept = self.backend.sweep(&support::maker(), Sweep::Now).await;
        let left_networks = Self::leftover_networks(&self.docker).await;
        for id in &left_networks {
            let _ = self.docker.remove_network(id).await;
        }
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        swept.expect("sweeping the maker's network");
        assert!(
            left_networks.is_empty(),
            "{}: the sweep left networks behind: {left_networks:?}",
            self.tag
        );
        assert!(
            left.is_empty(),
            "{}: containers left behind: {left:?}",
            self.tag
        );
    }
}

pub(super) async fn provision(backend: &DockerBackend, name: &str, owner: &AgentSlug) -> Instance {
    let started = Instant::now();
    let instance = backend
        .provision(&request(name, owner, &[]))
        .await
        .unwrap_or_else(|err| panic!("provision {name} on docker: {err}"));
    eprintln!(
        "provisioned {name} on docker in {} ms",
        started.elapsed().as_millis()
    );
    instance
}

/// Everything the engine says about the container, as JSON.
pub(super) async fn inspect_json(docker: &Docker, id: &str) -> String {
    let found = docker.inspect_container(id, None).await.expect("inspect");
    serde_json::to_string(&found).expect("inspect serializes")
}

async fn logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: "all".to_owned(),
        ..LogsOptions::default()
    };
    let chunks: Vec<_> = docker.logs(id, Some(options)).collect().await;
    chunks
        .into_iter()
        .filter_map(Result::ok)
        .map(|c| c.to_string())
        .collect()
}

/// The hardening of SPEC §4.2, read back from the engine, and no secret of the handed-out
/// account in the container's config or logs.
async fn assert_hardened(docker: &Docker, instance: &Instance, config: &DockerConfig) {
    let found = docker
        .inspect_container(&instance.backend_id, None)
        .await
        .expect("inspect");
    let host = found.host_config.as_ref().expect("host config");
    // Docker reports the drop as asked; Podman as the list of its default capabilities.
    let dropped = host.cap_drop.clone().unwrap_or_default();
    assert!(
        dropped == ["ALL"]
            || [
                "CHOWN",
                "DAC_OVERRIDE",
                "FOWNER",
                "KILL",
                "SETUID",
                "NET_RAW"
            ]
            .iter()
            .all(|cap| dropped.iter().any(|d| d.trim_start_matches("CAP_") == *cap)),
        "every capability dropped: {dropped:?}"
    );
    // Whatever the engine reports, the server itself holds none: its bounding set is empty.
    let pid = found.state.as_ref().and_then(|s| s.pid).expect("a pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    for set in ["CapEff", "CapBnd"] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{set}:")))
            .map(str::trim);
        assert_eq!(value, Some("0000000000000000"), "{set} of the server");
    }
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("its limits");
    for (row, value) in [
        ("Max open files", config.nofile_limit),
        ("Max processes", config.nproc_limit),
    ] {
        let line = limits
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{row} in {limits}"));
        let numbers: Vec<&str> = line[row.len()..].split_whitespace().take(2).collect();
        assert_eq!(numbers, [value.to_string(), value.to_string()], "{line}");
    }
    assert!(
        host.cap_add.as_ref().is_none_or(|c| c.is_empty()),
        "no capability added: {:?}",
        host.cap_add
    );
    assert!(
        host.security_opt
            .iter()
            .flatten()
            .any(|o| o == "no-new-privileges:true" || o == "no-new-privileges"),
        "{:?}",
        host.security_opt
    );
    let memory = i64::try_from(config.memory_mb * 1024 * 1024).expect("fits");
    assert_eq!(host.memory, Some(memory));
    assert_eq!(
        host.memory_swap,
        Some(memory),
        "swap equals memory: no swap"
    );
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.pids_limit, Some(config.pids_limit));
    assert_eq!(host.privileged, Some(false));
    assert!(host.binds.as_ref().is_none_or(|b| b.is_empty()), "no binds");
    let tmpfs = host.tmpfs.as_ref().expect("tmpfs mounts");
    assert!(!tmpfs.is_empty());
    for options in tmpfs.values() {
        assert!(options.contains("size="), "{options}");
    }
    assert!(
        found.mounts.as_ref().is_none_or(|m| m.is_empty()),
        "no volume or bind mounted: {:?}",
        found.mounts
    );
    let ports = found
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
        .expect("published ports");
    let bindings: Vec<_> = ports.values().flatten().flatten().collect();
    assert!(!bindings.is_empty());
    for binding in bindings {
        assert_eq!(
            binding.host_ip.as_deref(),
            Some("127.0.0.1"),
            "published on loopback only"
        );
    }
    let user = found
        .config
        .as_ref()
        .and_then(|c| c.user.as_deref())
        .expect("a user");
    let (uid, gid) = user.split_once(':').expect("uid:gid");
    let uids = DockerConfig::default().uids().expect("a range by default");
    assert_eq!(uid, gid, "{user}");
    assert!(
        uid.parse().is_ok_and(|uid: u32| uids.contains(&uid)),
        "runs as a uid of sandboxd's range, not the image's user: {user}"
    );

    let secret = instance.agent.password.expose_secret();
    let inspected = inspect_json(docker, &instance.backend_id).await;
    assert!(
        !inspected.contains(secret),
        "the handed-out password is in docker inspect"
    );
    let logged = logs(docker, &instance.backend_id).await;
    assert!(
        !logged.contains(secret),
        "the handed-out password is in the container's logs"
    );
    if let sandboxd_domain::engine::AdminAccess::Password(admin) = &instance.admin {
        assert!(
            !logged.contains(admin.password.expose_secret()),
            "the superuser's password is in the container's logs"
        );
    }
}

/// Listed from labels with its owner, engine and address.
async fn assert_listed(backend: &DockerBackend, instance: &Instance) {
    let listed = backend.list().await.expect("list");
    let mine = listed
        .iter()
        .find(|l| l.handle.owner == instance.owner && l.handle.engine == instance.engine)
        .unwrap_or_else(|| panic!("{} not listed: {listed:?}", instance.name));
    assert_eq!(mine.handle.backend_id, instance.backend_id);
    assert_eq!(mine.handle.name, instance.name);
    assert_eq!(
        (mine.host.as_str(), mine.port),
        ("127.0.0.1", instance.port)
    );
    assert!(mine.live);
    assert_eq!(mine.created_at_ms, instance.created_at_ms);
}

/// Teardown removes it, a second teardown is fine, and the engine knows no such container.
async fn teardown_twice(backend: &DockerBackend, docker: &Docker, instance: &Instance) {
    let handle = InstanceHandle::of(instance);
    backend.teardown(&handle).await.expect("teardown");
    backend.teardown(&handle).await.expect("second teardown");
    assert!(!backend.is_live(&handle).await.expect("is_live"));
    let err = docker
        .inspect_container(&instance.backend_id, None)
        .await
        .expect_err("the container is gone");
    assert!(
        err.to_string().contains("404") || err.to_string().contains("No such"),
        "{err}"
    );
}

#[tokio::test]
async fn postgres_on_docker_is_hardened_and_hands_out_a_non_superuser() {
    let Some(harness) = Harness::new("dpg", &[POSTGRES], |_| {}).await else {
        return;
    };
    let config = harness.backend.config().clone();
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "postgres", &harness_owner("dpg")).await;
            assert_eq!(instance.host, "127.0.0.1");
            assert!(
                backend
                    .is_live(&InstanceHandle::of(&instance))
                    .await
                    .expect("live")
            );
            let client = support::pg(&instance).await;
            client
                .batch_execute(
                    "CREATE TABLE t(id int primary key, v text); INSERT INTO t VALUES (1, 'a')",
                )
                .await
                .expect("the owner creates tables");
            client
                .batch_execute("CREATE DATABASE test_sandbox_suite")
                .await
                .expect("CREATEDB lets test runners create their databases");
            let superuser: bool = client
                .query_one(
                    "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                    &[],
                )
                .await
                .expect("role")
                .get(0);
            assert!(!superuser);
            for escape in [
                "COPY (SELECT 1) TO PROGRAM 'id'",
                "SELECT pg_read_file('/etc/passwd')",
                "ALTER ROLE sandbox SUPERUSER",
            ] {
                let err = client
                    .batch_execute(escape)
                    .await
                    .expect_err("an escape hatch is closed");
                assert!(
                    err.as_db_error()
                        .is_some_and(|e| e.code().code() == "42501"),
                    "{escape}: {err:?}"
                );
            }
            assert!(
                support::pg_connect(&instance, WRONG_PASSWORD)
                    .await
                    .is_err(),
                "a wrong password is refused"
            );
            assert_hardened(&docker, &instance, &config).await;
            assert_listed(&backend, &instance).await;
            drop(client);
            teardown_twice(&backend, &docker, &instance).await;
        })
        .await;
}

/// The owners a test makes inside `run` share its tag, so cleanup finds them.
pub(super) fn harness_owner(tag: &str) -> AgentSlug {
    support::owner(tag)
}

#[tokio::test]
async fn redis_on_docker_is_hardened_and_denies_the_escape_hatches() {
    let Some(harness) = Harness::new("dredis", &[REDIS], |_| {}).await else {
        return;
    };
    let config = harness.backend.config().clone();
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "redis", &harness_owner("dredis")).await;
            let mut conn = support::redis(&instance).await;
            let _: () = redis::cmd("SET")
                .arg("k")
                .arg("v")
                .query_async(&mut conn)
                .await
                .expect("SET");
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut conn)
                .await
                .expect("KEYS is allowed");
            assert_eq!(keys, ["k"]);
            let _: () = redis::cmd("FLUSHDB")
                .query_async(&mut conn)
                .await
                .expect("FLUSHDB is allowed");
            for (cmd, args) in [
                ("CONFIG", vec!["SET", "dir", "/tmp"]),
                ("MODULE", vec!["LOAD", "/tmp/x.so"]),
                ("DEBUG", vec!["SLEEP", "0"]),
            ] {
                let mut c = redis::cmd(cmd);
                for a in &args {
                    c.arg(*a);
                }
                let err = support::redis_denied(c.query_async::<redis::Value>(&mut conn).await)
                    .to_ascii_lowercase();
                assert!(
                    err.contains("noperm")
                        || err.contains("no permissions")
                        || err.contains("not allowed"),
                    "{cmd}: {err}"
                );
            }
            assert!(
                support::redis_connect(&instance, WRONG_PASSWORD)
                    .await
                    .is_err(),
                "a wrong password is refused"
            );
            assert_hardened(&docker, &instance, &config).await;
            assert_listed(&backend, &instance).await;
            drop(conn);
            teardown_twice(&backend, &docker, &instance).await;
        })
        .await;
}

#[tokio::test]
async fn mariadb_on_docker_is_hardened_and_confines_its_user() {
    let Some(harness) = Harness::new("dmaria", &[MARIADB], |_| {}).await else {
        return;
    };
    let config = harness.backend.config().clone();
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "mariadb", &harness_owner("dmaria")).await;
            let mut conn = support::mysql(&instance).await;
            conn.query_drop("CREATE TABLE t(id INT PRIMARY KEY); INSERT INTO t VALUES (1)")
                .await
                .expect("tables in its own database");
            conn.query_drop("CREATE DATABASE test_x")
                .await
                .expect("test_* databases");
            let databases: Vec<String> =
                conn.query("SHOW DATABASES").await.expect("show databases");
            let visible: BTreeSet<&str> = databases.iter().map(String::as_str).collect();
            for hidden in ["mysql", "performance_schema", "sys"] {
                assert!(!visible.contains(hidden), "{hidden} visible: {visible:?}");
            }
            assert!(visible.contains("sandbox") && visible.contains("test_x"));
            let grants: Vec<String> = conn.query("SHOW GRANTS").await.expect("grants");
            assert!(
                grants
                    .iter()
                    .all(|g| !g.contains("FILE") && !g.contains("SUPER")),
                "{grants:?}"
            );
            let err = conn
                .query_drop("SELECT 1 INTO OUTFILE '/tmp/sandboxd-x'")
                .await
                .expect_err("no FILE privilege");
            assert!(err.to_string().contains("denied"), "{err}");
            drop(conn.disconnect().await);
            assert!(
                support::mysql_connect(&instance, WRONG_PASSWORD)
                    .await
                    .is_err(),
                "a wrong password is refused"
            );
            assert_hardened(&docker, &instance, &config).await;
            assert_listed(&backend, &instance).await;
            teardown_twice(&backend, &docker, &instance).await;
        })
        .await;
}

#[tokio::test]
async fn postgres_features_are_activated_in_the_agents_database() {
    let Some(harness) = Harness::new("dpgfeat", &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dpgfeat");
            let instance = backend
                .provision(&request("postgres", &owner, &["vector", "pg_trgm"]))
                .await
                .unwrap_or_else(|err| panic!("provision with features: {err}"));
            let names: BTreeSet<&str> = instance.features.iter().map(|f| f.name()).collect();
            assert_eq!(names, BTreeSet::from(["pg_trgm", "vector"]));
            let client = support::pg(&instance).await;
            let rows = client
                .query("SELECT extname FROM pg_extension ORDER BY extname", &[])
                .await
                .expect("extensions");
            let installed: BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
            assert!(installed.contains("vector"), "{installed:?}");
            assert!(installed.contains("pg_trgm"), "{installed:?}");
            client
                .batch_execute(
                    "CREATE TABLE items(id int, embedding vector(3)); \
                     INSERT INTO items VALUES (1, '[1,2,3]'); \
                     SELECT similarity('word', 'words')",
                )
                .await
                .expect("the agent uses both extensions");
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn a_feature_missing_from_the_image_is_an_error_naming_the_image() {
    let Some(harness) = Harness::new("dpgmissing", &[POSTGRES18], |c| {
        c.images.insert("postgres".into(), vec![POSTGRES18.into()]);
    })
    .await
    else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dpgmissing");
            let err = backend
                .provision(&request("postgres", &owner, &["postgis"]))
                .await
                .expect_err("the local postgres:18 image has no PostGIS");
            assert!(
                matches!(err, BackendError::FeatureUnavailable { .. }),
                "{err}"
            );
            let text = err.to_string();
            assert!(text.contains(&format!("image {POSTGRES18}")), "{text}");
            // Nothing is left: `run` asserts it.
        })
        .await;
}

#[tokio::test]
async fn out_of_band_kill_or_removal_is_not_live_and_teardown_is_idempotent() {
    let Some(harness) = Harness::new("doob", &[REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let killed = provision(&backend, "redis", &harness_owner("doob")).await;
            let removed = provision(&backend, "redis", &harness_owner("doob")).await;
            let (k, r) = (InstanceHandle::of(&killed), InstanceHandle::of(&removed));
            assert!(backend.is_live(&k).await.expect("live"));
            assert!(backend.is_live(&r).await.expect("live"));

            docker
                .kill_container(&killed.backend_id, None::<KillContainerOptions>)
                .await
                .expect("docker kill");
            let options = RemoveContainerOptions {
                force: true,
                ..RemoveContainerOptions::default()
            };
            docker
                .remove_container(&removed.backend_id, Some(options))
                .await
                .expect("docker rm -f");

            assert!(!backend.is_live(&k).await.expect("is_live"), "killed");
            assert!(!backend.is_live(&r).await.expect("is_live"), "removed");
            let listed = backend.list().await.expect("list");
            let mine = listed
                .iter()
                .find(|l| l.handle.backend_id == killed.backend_id)
                .expect("a killed container is still listed");
            assert!(!mine.live);
            assert_eq!(mine.status, "exited");
            teardown_twice(&backend, &docker, &killed).await;
            teardown_twice(&backend, &docker, &removed).await;
        })
        .await;
}

/// Creates a labeled, running container under the name an instance of `owner` would get, as a
/// crash-missed teardown would leave it, created `age` ago.
async fn leave_stale(docker: &Docker, owner: &AgentSlug, age: Duration) -> String {
    let engine = engine("redis");
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .saturating_sub(age)
        .as_millis()
        .to_string();
    let labels = HashMap::from([
        (format!("{NS}.sandbox"), "1".to_owned()),
        (format!("{NS}.owner"), owner.to_string()),
        (format!("{NS}.daemon"), support::maker().to_string()),
        (format!("{NS}.engine"), "redis".to_owned()),
        (format!("{NS}.created"), created),
    ]);
    let body = ContainerCreateBody {
        image: Some(NEVER_READY.to_owned()),
        labels: Some(labels),
        host_config: Some(bollard::models::HostConfig {
            ulimits: Some(test_ulimits()),
            ..Default::default()
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptions {
        name: Some(instance_name(engine, owner, &support::maker())),
        ..CreateContainerOptions::default()
    };
    let id = docker
        .create_container(Some(options), body)
        .await
        .expect("create the stale container")
        .id;
    docker
        .start_container(&id, None)
        .await
        .expect("start the stale container");
    id
}

#[tokio::test]
async fn a_stale_container_is_cleared_and_a_young_one_is_left_alone() {
    let Some(harness) = Harness::new("dstale", &[REDIS, NEVER_READY], |c| {
        c.grace = Duration::from_secs(180);
    })
    .await
    else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let old = harness_owner("dstale");
            let stale_id = leave_stale(&docker, &old, Duration::from_secs(3600)).await;
            let instance = provision(&backend, "redis", &old).await;
            assert_ne!(instance.backend_id, stale_id);
            assert!(
                docker.inspect_container(&stale_id, None).await.is_err(),
                "the stale container was removed"
            );
            support::redis(&instance).await;

            let young = harness_owner("dstale");
            let young_id = leave_stale(&docker, &young, Duration::from_secs(5)).await;
            let err = backend
                .provision(&request("redis", &young, &[]))
                .await
                .expect_err("a young same-named container is left alone");
            assert!(matches!(err, BackendError::YoungConflict { .. }), "{err}");
            let still = docker
                .inspect_container(&young_id, None)
                .await
                .expect("the young container is still there");
            assert_eq!(still.state.and_then(|s| s.running), Some(true));
            let options = RemoveContainerOptions {
                force: true,
                ..RemoveContainerOptions::default()
            };
            docker
                .remove_container(&young_id, Some(options))
                .await
                .expect("remove the young container this test made");

            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn a_server_that_never_becomes_ready_times_out_and_leaves_nothing() {
    let Some(harness) = Harness::new("dnever", &[NEVER_READY], |c| {
        c.images.insert("postgres".into(), vec![NEVER_READY.into()]);
        c.deadlines
            .insert("postgres".into(), Duration::from_secs(3));
    })
    .await
    else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dnever");
            let started = Instant::now();
            let err = backend
                .provision(&request("postgres", &owner, &[]))
                .await
                .expect_err("never ready");
            assert!(
                matches!(err, BackendError::ReadinessTimeout { .. }),
                "{err}"
            );
            assert!(started.elapsed() < Duration::from_secs(20));
            let listed = backend.list().await.expect("list");
            assert!(
                listed.iter().all(|l| l.handle.owner != owner),
                "nothing left: {listed:?}"
            );
        })
        .await;
}

#[tokio::test]
async fn a_server_that_dies_while_starting_fails_fast_with_its_exit_code_and_logs() {
    let Some(harness) = Harness::new("ddies", &[NEVER_READY], |c| {
        c.images.insert("postgres".into(), vec![NEVER_READY.into()]);
    })
    .await
    else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner("ddies");
            let name = instance_name(engine("postgres"), &owner, &support::maker());
            // Kill the server once it runs, long before the 60 s deadline.
            let killer = tokio::spawn(async move {
                for _ in 0..200 {
                    let running = docker
                        .inspect_container(&name, None)
                        .await
                        .ok()
                        .and_then(|c| c.state?.running)
                        .unwrap_or(false);
                    if running {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let _ = docker
                            .kill_container(&name, None::<KillContainerOptions>)
                            .await;
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
            let started = Instant::now();
            let err = backend
                .provision(&request("postgres", &owner, &[]))
                .await
                .expect_err("the server died");
            killer.await.expect("killer task");
            let BackendError::ExitedEarly { detail, .. } = &err else {
                panic!("ExitedEarly expected, got {err}");
            };
            assert!(detail.contains("exited with code 137"), "{detail}");
            assert!(detail.contains("last log lines: never-ready"), "{detail}");
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "fails fast, not at the 60 s deadline"
            );
        })
        .await;
}

#[tokio::test]
async fn a_missing_image_is_a_clear_error_and_creates_nothing() {
    let image = "sandboxd-local/does-not-exist:0";
    let Some(harness) = Harness::new("dmissing", &[], |c| {
        c.images.insert("postgres".into(), vec![image.into()]);
        c.images
            .insert("redis".into(), vec!["registry.invalid/redis:nope".into()]);
    })
    .await
    else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let err = backend
                .supports(engine("postgres"))
                .await
                .expect_err("missing");
            let BackendError::ImageMissing {
                image: named, hint, ..
            } = &err
            else {
                panic!("ImageMissing expected, got {err}");
            };
            assert_eq!(named, image);
            assert!(hint.contains("scripts/build-images.sh"), "{hint}");

            let owner = harness_owner("dmissing");
            let err = backend
                .provision(&request("postgres", &owner, &[]))
                .await
                .expect_err("missing image");
            assert!(matches!(err, BackendError::ImageMissing { .. }), "{err}");
            assert!(err.to_string().contains(image), "{err}");

            let err = backend
                .provision(&request("redis", &owner, &[]))
                .await
                .expect_err("missing image");
            assert!(
                err.to_string()
                    .contains("docker pull registry.invalid/redis:nope"),
                "{err}"
            );
        })
        .await;
}

/// With no image configured, an engine runs the first of its list that is really there: Podman
/// answers an inspect of `mariadb:11` with any local image whose name ends like it
/// (`localhost/sandboxd-local/mariadb:11`), which is not the official image.
#[tokio::test]
async fn the_image_list_skips_a_name_the_engine_only_resolves_by_its_suffix() {
    let Some(harness) = Harness::new("dimages", &[MARIADB], |_| {}).await else {
        return;
    };
    harness
        .run(|_, docker| async move {
            let official_there = docker
                .inspect_image("mariadb:11")
                .await
                .ok()
                .and_then(|i| i.repo_tags)
                .is_some_and(|tags| {
                    tags.iter()
                        .any(|t| t == "mariadb:11" || t == "docker.io/library/mariadb:11")
                });
            if official_there {
                eprintln!("the official mariadb:11 is present: nothing to tell apart");
                return;
            }
            let plain = DockerBackend::new(DockerConfig {
                socket: socket(),
                ..DockerConfig::default()
            })
            .expect("valid config");
            let image = plain.image_of(engine("mariadb")).await.expect("an image");
            assert_eq!(image.as_deref(), Some(MARIADB));
        })
        .await;
}

/// `doctor` names the engine (Docker or Podman) and how tenants are kept apart on it.
#[tokio::test]
async fn doctor_names_the_engine_and_how_it_keeps_tenants_apart() {
    let Some(harness) = Harness::new("ddoctor", &[], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let checks = backend.doctor().await;
            let detail = |subject: &str| {
                checks
                    .iter()
                    .find(|c| c.subject == subject && c.ok)
                    .map(|c| c.detail.clone())
                    .unwrap_or_else(|| panic!("no ok {subject} in {checks:?}"))
            };
            let (engine, isolation) = (detail("docker backend"), detail("docker tenant isolation"));
            if is_podman(&docker).await {
                assert!(engine.starts_with("Podman Engine "), "{engine}");
                assert!(isolation.contains("a network of its own"), "{isolation}");
            } else {
                assert!(engine.starts_with("Docker Engine "), "{engine}");
                assert!(
                    isolation.contains("inter-container traffic off"),
                    "{isolation}"
                );
            }
        })
        .await;
}

#[tokio::test]
async fn postgres_and_redis_provision_as_a_set_in_parallel() {
    let Some(harness) = Harness::new("dset", &[POSTGRES, REDIS], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dset");
            let started = Instant::now();
            let set = provision_set(
                backend.as_ref(),
                &[
                    request("postgres", &owner, &[]),
                    request("redis", &owner, &[]),
                ],
            )
            .await
            .expect("the set");
            eprintln!(
                "provisioned postgres+redis on docker in {} ms",
                started.elapsed().as_millis()
            );
            assert_eq!(set.len(), 2);
            support::pg(&set[0]).await;
            support::redis(&set[1]).await;
            sandboxd_backend::teardown_all(backend.as_ref(), set.iter().map(InstanceHandle::of))
                .await;
        })
        .await;
}

#[tokio::test]
async fn mongo_on_docker_end_to_end() {
    let image = std::env::var("SANDBOXD_TEST_MONGO_IMAGE").unwrap_or_else(|_| "mongo:8".into());
    let docker = match engine_client().await {
        Ok(docker) => docker,
        Err(why) => return skip("dmongo", &why),
    };
    if !image_present(&docker, &image).await {
        // Not a failure even when Docker is required: no mongo image can be built from
        // Debian's packages, and this machine cannot pull.
        eprintln!(
            "SKIPPED dmongo: no MongoDB image ({image}) on this engine; Debian ships no mongod, \
             so scripts/build-images.sh cannot build one. `docker pull mongo:8` (or set \
             SANDBOXD_TEST_MONGO_IMAGE) to run this test. The container spec is unit-tested \
             in docker::spec."
        );
        return;
    }
    let Some(harness) = Harness::new("dmongo", &[], |c| {
        c.images.insert("mongo".into(), vec![image.clone()]);
    })
    .await
    else {
        return;
    };
    let config = harness.backend.config().clone();
    harness
        .run(|backend, docker| async move {
            let instance = provision(&backend, "mongo", &harness_owner("dmongo")).await;
            let uri = format!(
                "mongodb://{}:{}@{}:{}/?authSource=admin&directConnection=true",
                instance.agent.user,
                instance.agent.password.expose_secret(),
                instance.host,
                instance.port
            );
            let client = mongodb::Client::with_uri_str(&uri).await.expect("client");
            let db = client.database("test_suite");
            db.collection::<mongodb::bson::Document>("t")
                .insert_one(mongodb::bson::doc! { "x": 1 })
                .await
                .expect("the agent writes");
            db.drop().await.expect("the agent drops its databases");
            let denied = client
                .database("admin")
                .run_command(mongodb::bson::doc! { "shutdown": 1 })
                .await;
            assert!(denied.is_err(), "no cluster administration");
            assert_hardened(&docker, &instance, &config).await;
            teardown_twice(&backend, &docker, &instance).await;
        })
        .await;
}

#[tokio::test]
async fn an_engine_that_does_not_answer_is_unavailable() {
    let backend = DockerBackend::new(DockerConfig {
        socket: "unix:///nonexistent/docker.sock".into(),
        ..DockerConfig::default()
    })
    .expect("valid config");
    let err = backend.ping().await.expect_err("nothing answers");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/docker.sock"),
        "{err}"
    );
    let err = backend
        .supports(engine("postgres"))
        .await
        .expect_err("unavailable");
    assert!(err.is_unavailable(), "{err}");
    let err = backend
        .provision(&request("redis", &support::owner("dnone"), &[]))
        .await
        .expect_err("unavailable");
    assert!(err.is_unavailable(), "{err}");
    let checks = backend.doctor().await;
    assert!(!checks[0].ok && checks[0].fix.is_some(), "{checks:?}");
}

/// A Docker network for one test, removed on drop (also when the test panics). Labeled like
/// everything sandboxd-related, so the suite's leak check sees one left behind.
struct TestNetwork(String);

impl TestNetwork {
    /// The docker CLI, talking to the engine under test.
    fn cli() -> std::process::Command {
        let mut cli = std::process::Command::new("docker");
        let socket = socket();
        let host = if socket.starts_with("unix://") {
            socket
        } else {
            format!("unix://{socket}")
        };
        cli.env("DOCKER_HOST", host);
        cli
    }

    fn create(tag: &str) -> Self {
        let name = format!("sandboxd-test-{tag}-{}", std::process::id());
        let out = Self::cli()
            .args([
                "network",
                "create",
                "--label",
                &format!("{NS}.sandbox=1"),
                &name,
            ])
            .output()
            .expect("docker network create");
        assert!(out.status.success(), "{out:?}");
        Self(name)
    }

    /// Runs `command` in a throwaway container of `image` on this network; its stdout.
    /// Through the API rather than `docker run`: the CLI's attach can lose a short output on
    /// Podman.
    async fn run(
        &self,
        docker: &Docker,
        image: &str,
        env: &[(&str, &str)],
        command: &[&str],
    ) -> String {
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(vec![command[0].to_owned()]),
            cmd: Some(command[1..].iter().map(|c| (*c).to_owned()).collect()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            host_config: Some(bollard::models::HostConfig {
                network_mode: Some(self.0.clone()),
                ulimits: Some(test_ulimits()),
                ..Default::default()
            }),
            ..ContainerCreateBody::default()
        };
        let id = docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .expect("create the client container")
            .id;
        docker.start_container(&id, None).await.expect("start it");
        let waited: Vec<_> = docker
            .wait_container(&id, None::<bollard::query_parameters::WaitContainerOptions>)
            .collect()
            .await;
        let options = LogsOptions {
            stdout: true,
            tail: "all".to_owned(),
            ..LogsOptions::default()
        };
        let out: String = docker
            .logs(&id, Some(options))
            .filter_map(|chunk| async move { chunk.ok().map(|c| c.to_string()) })
            .collect()
            .await;
        let _ = docker
            .remove_container(
                &id,
                Some(RemoveContainerOptions {
                    force: true,
                    ..RemoveContainerOptions::default()
                }),
            )
            .await;
        assert!(
            waited
                .iter()
                .all(|w| w.as_ref().is_ok_and(|w| w.status_code == 0)),
            "{command:?}: {waited:?} {out}"
        );
        out.trim().to_owned()
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let _ = Self::cli().args(["network", "rm", &self.0]).output();
    }
}

#[tokio::test]
async fn on_a_named_network_agents_reach_instances_by_name_and_nothing_is_published() {
    let network = TestNetwork::create("dnet");
    let name = network.0.clone();
    let Some(harness) = Harness::new("dnet", &[POSTGRES, REDIS], |c| c.network = Some(name)).await
    else {
        return;
    };
    let network = &network;
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner("dnet");
            // A feature makes sandboxd dial the instance again after readiness, as in place.
            let set = provision_set(
                backend.as_ref(),
                &[
                    request("postgres", &owner, &["pg_trgm"]),
                    request("redis", &owner, &[]),
                ],
            )
            .await
            .expect("the set on the network");
            let (pg, redis) = (&set[0], &set[1]);
            for instance in &set {
                assert_eq!(instance.host, instance.name, "agents reach it by name");
                assert_eq!(instance.port, instance.engine.port);
                let found = docker
                    .inspect_container(&instance.backend_id, None)
                    .await
                    .expect("inspect");
                // Docker reports the network as the mode, Podman the mode as `bridge`: the
                // endpoints say which network it joined.
                let joined: Vec<String> = found
                    .network_settings
                    .as_ref()
                    .and_then(|n| n.networks.as_ref())
                    .map(|n| n.keys().cloned().collect())
                    .unwrap_or_default();
                assert_eq!(joined, std::slice::from_ref(&network.0));
                let host = found.host_config.expect("host config");
                // Podman lists the exposed port with no binding; Docker nothing at all.
                assert!(
                    host.port_bindings
                        .iter()
                        .flatten()
                        .all(|(_, bound)| bound.as_ref().is_none_or(|b| b.is_empty())),
                    "nothing published: {:?}",
                    host.port_bindings
                );
                let ports = found.network_settings.and_then(|n| n.ports);
                assert!(
                    ports
                        .iter()
                        .flatten()
                        .all(|(_, bindings)| bindings.as_ref().is_none_or(|b| b.is_empty())),
                    "{ports:?}"
                );
            }

            // An agent's container on the same network, with the handed-out credentials.
            let pong = network
                .run(
                    &docker,
                    REDIS,
                    &[("REDISCLI_AUTH", redis.agent.password.expose_secret())],
                    &[
                        "redis-cli",
                        "--no-auth-warning",
                        "-h",
                        &redis.host,
                        "-p",
                        &redis.port.to_string(),
                        "--user",
                        &redis.agent.user,
                        "PING",
                    ],
                )
                .await;
            assert_eq!(pong, "PONG");
            let extension = network
                .run(
                    &docker,
                    POSTGRES,
                    &[("PGPASSWORD", pg.agent.password.expose_secret())],
                    &[
                        "psql",
                        "-h",
                        &pg.host,
                        "-p",
                        &pg.port.to_string(),
                        "-U",
                        &pg.agent.user,
                        "-d",
                        &pg.database,
                        "-tAc",
                        "SELECT extname FROM pg_extension WHERE extname = 'pg_trgm'",
                    ],
                )
                .await;
            assert_eq!(extension, "pg_trgm", "activated in the agent's database");

            let checks = backend.doctor().await;
            assert!(
                checks
                    .iter()
                    .any(|c| c.subject == format!("docker network {}", network.0) && c.ok),
                "{checks:?}"
            );

            let listed = backend.list().await.expect("list");
            let mine: Vec<_> = listed.iter().filter(|l| l.handle.owner == owner).collect();
            assert_eq!(mine.len(), 2);
            assert!(mine.iter().all(|l| l.live));
            for instance in &set {
                teardown_twice(&backend, &docker, instance).await;
            }
        })
        .await;
}

#[tokio::test]
async fn a_missing_network_is_a_clear_error_and_creates_nothing() {
    let network = format!("sandboxd-test-absent-{}", std::process::id());
    let configured = network.clone();
    let Some(harness) = Harness::new("dnonet", &[REDIS], |c| c.network = Some(configured)).await
    else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let owner = harness_owner("dnonet");
            let err = backend
                .provision(&request("redis", &owner, &[]))
                .await
                .expect_err("no such network");
            let message = err.to_string();
            assert!(message.contains(&format!("network {network}")), "{message}");
            assert!(
                message.contains(&format!("docker network create {network}")),
                "{message}"
            );
            assert!(
                backend
                    .list()
                    .await
                    .expect("list")
                    .iter()
                    .all(|l| l.handle.owner != owner),
                "nothing was created"
            );
            let checks = backend.doctor().await;
            let check = checks
                .iter()
                .find(|c| c.subject == format!("docker network {network}"))
                .expect("doctor checks the network");
            assert!(!check.ok, "{check:?}");
            assert!(
                check
                    .fix
                    .as_deref()
                    .is_some_and(|f| f.contains("docker network create")),
                "{check:?}"
            );
        })
        .await;
}
