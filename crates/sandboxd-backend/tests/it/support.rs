//! Helpers shared by the backend tests: unique owners, isolated process roots, clients that
//! connect with handed-out credentials, and a harness that always cleans up.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use sandboxd_backend::process::{ProcessBackend, ProcessConfig};
use sandboxd_backend::{Backend, InstanceRequest};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Feature, Instance};
use secrecy::ExposeSecret;

/// A password no instance hands out, for the "a wrong password is refused" checks.
pub const WRONG_PASSWORD: &str = "0123456789abcdef0123456789abcdef";

pub use sandboxd_testkit::show_logs;

/// A slug no other test (or test process) uses.
pub fn owner(tag: &str) -> AgentSlug {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    AgentSlug::parse(&format!("{}{n}", owner_prefix(tag))).expect("valid slug")
}

/// What every [`owner`] slug of `tag` made by this test process starts with.
pub fn owner_prefix(tag: &str) -> String {
    format!("t-{tag}-{}-", std::process::id())
}

pub fn engine(name: &str) -> EngineRef {
    EngineRef::parse(name).expect("registered")
}

/// The maker every instance of this test process carries: one per process (nextest runs each
/// test in its own), so each test's Docker network is its own to sweep.
pub fn maker() -> DaemonId {
    DaemonId::parse(&format!("bt{}", std::process::id())).expect("valid")
}

/// A request for one `name` instance of `owner`, with allowlisted `features`.
pub fn request(name: &str, owner: &AgentSlug, features: &[&str]) -> InstanceRequest {
    let engine = engine(name);
    InstanceRequest {
        major: None,
        engine,
        owner: owner.clone(),
        maker: maker(),
        features: features
            .iter()
            .map(|f| Feature::parse(engine, f).expect("allowlisted"))
            .collect(),
        size: None,
    }
}

/// A process backend whose instances live in their own directory, so a test sees only its own.
pub struct ProcessHarness {
    pub backend: Arc<ProcessBackend>,
    _root: tempfile::TempDir,
}

impl ProcessHarness {
    pub fn new(tweak: impl FnOnce(&mut ProcessConfig)) -> Self {
        show_logs();
        let base = sandboxd_testkit::test_dir("sandboxd-test-");
        let mut config = ProcessConfig {
            root: base.path().join("instances"),
            ..ProcessConfig::default()
        };
        tweak(&mut config);
        let backend = ProcessBackend::new(config).expect("process backend");
        Self {
            backend: Arc::new(backend),
            _root: base,
        }
    }

    /// Runs `body`, then tears down every instance under this root whatever happened, asserts
    /// nothing is left, and re-raises a panic from `body`.
    pub async fn run<F, Fut>(self, body: F)
    where
        F: FnOnce(Arc<ProcessBackend>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let outcome = AssertUnwindSafe(body(self.backend.clone()))
            .catch_unwind()
            .await;
        let leftovers = self.backend.list().await.expect("list");
        for instance in &leftovers {
            self.backend
                .teardown(&instance.handle)
                .await
                .expect("cleanup teardown");
        }
        assert_no_instances(&self.backend).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Nothing listed, no directory left, no process of ours running.
pub async fn assert_no_instances(backend: &ProcessBackend) {
    let listed = backend.list().await.expect("list");
    assert!(listed.is_empty(), "instances left: {listed:?}");
    let root = &backend.config().root;
    // The metadata directory stays, empty.
    let metadata = root.join(sandboxd_backend::process::METADATA_DIR);
    let entries: Vec<_> = std::fs::read_dir(root)
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|path| *path != metadata)
        .chain(
            std::fs::read_dir(&metadata)
                .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
                .unwrap_or_default(),
        )
        .collect();
    assert!(
        entries.is_empty(),
        "directories left under {}: {entries:?}",
        root.display()
    );
    assert_no_host_leftovers(backend);
}

/// No tmpfs mount under the backend's root, no uid lease naming a directory under it, and no
/// cgroup of an instance of this test process (owners carry its pid) is left.
pub fn assert_no_host_leftovers(backend: &ProcessBackend) {
    let root = backend.config().root.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounted: Vec<&str> = mounts.lines().filter(|l| l.contains(&root)).collect();
    assert!(mounted.is_empty(), "mounts left: {mounted:?}");
    let leases = &backend.config().lease_dir;
    for entry in std::fs::read_dir(leases).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(
            !text.contains(&root),
            "uid lease {} left: {text}",
            entry.path().display()
        );
    }
    let mine = format!("-{}-", std::process::id());
    for hierarchy in ["memory", "pids"] {
        let parent = std::path::Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join("sandboxd");
        for entry in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !(entry.path().is_dir() && name.contains(&mine)),
                "cgroup left: {}",
                entry.path().display()
            );
        }
    }
}

/// Waits until no process has its command line mentioning `needle` (children of a stopped
/// server may take a moment to notice).
pub async fn assert_no_process_mentions(needle: &str) {
    let mut found = Vec::new();
    for _ in 0..100 {
        found = processes_mentioning(needle);
        if found.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("processes still running for {needle}: {found:?}");
}

pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if cmdline.contains(needle) && !zombie {
            found.push(cmdline);
        }
    }
    found
}

pub async fn pg_connect(
    instance: &Instance,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&instance.host)
        .port(instance.port)
        .user(&instance.agent.user)
        .password(password)
        .dbname(&instance.database);
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

pub async fn pg(instance: &Instance) -> tokio_postgres::Client {
    pg_connect(instance, instance.agent.password.expose_secret())
        .await
        .expect("connect with the handed-out credentials")
}

pub async fn redis_connect(
    instance: &Instance,
    password: &str,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    use redis::IntoConnectionInfo;
    let info = redis::ConnectionAddr::Tcp(instance.host.clone(), instance.port)
        .into_connection_info()?
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_username(&instance.agent.user)
                .set_password(password),
        );
    redis::Client::open(info)?
        .get_multiplexed_async_connection()
        .await
}

pub async fn redis(instance: &Instance) -> redis::aio::MultiplexedConnection {
    redis_connect(instance, instance.agent.password.expose_secret())
        .await
        .expect("connect with the handed-out credentials")
}

pub async fn mysql_connect(
    instance: &Instance,
    password: &str,
) -> Result<mysql_async::Conn, mysql_async::Error> {
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(instance.host.clone())
        .tcp_port(instance.port)
        .user(Some(instance.agent.user.clone()))
        .pass(Some(password.to_owned()))
        .db_name(Some(instance.database.clone()))
        .prefer_socket(false);
    mysql_async::Conn::new(opts).await
}

pub async fn mysql(instance: &Instance) -> mysql_async::Conn {
    mysql_connect(instance, instance.agent.password.expose_secret())
        .await
        .expect("connect with the handed-out credentials")
}

/// The text of the error a refused redis command answers (e.g. `NOPERM …`), for assertions.
pub fn redis_denied<T: std::fmt::Debug>(result: redis::RedisResult<T>) -> String {
    let err = result.expect_err("the command must be refused");
    err.to_string()
}

/// Provisions one instance of `engine` for `owner` without features, or fails the test.
pub async fn provision(backend: &ProcessBackend, engine: &str, owner: &AgentSlug) -> Instance {
    backend
        .provision(&request(engine, owner, &[]))
        .await
        .unwrap_or_else(|err| panic!("provision {engine}: {err}"))
}
