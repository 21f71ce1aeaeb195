//! What the integration tests of every sandboxd crate share, so no test support copies another's:
//! - [`unique`]: names no other test or test process uses;
//! - [`test_dir`]: a private directory on tmpfs that an unprivileged instance user can traverse;
//! - [`show_logs`]: the test-log switch (`SANDBOXD_LOG`, the same the daemon reads);
//! - [`local_images`], [`docker_required`], [`skip`], [`docker_or_skip`]: Docker on the locally
//!   built images, skipped where no engine answers unless CI requires it
//!   (`SANDBOXD_REQUIRE_DOCKER=1`).
//! - [`experiment_guest`], [`experiment_cache`]: the experiment guest `scripts/build-guest.sh`
//!   built, and the cache its compiled form is shared through (compiled once, not per test).
//! - [`kube_or_skip`], [`KubeNamespace`]: the Kubernetes backend on the test cluster
//!   (`scripts/k8s-cluster.sh`, named by `SANDBOXD_TEST_KUBECONFIG`), in a namespace of the
//!   test's own that goes with everything in it when the test ends; skipped where no cluster is
//!   named unless CI requires it (`SANDBOXD_REQUIRE_KUBERNETES=1`).
//! - [`forbid_login`]: a pool member's account changed behind the pool's back, as superuser.
//! - [`clone_fixtures`]: the "productions" clone fidelity is measured on (the shop and the wide
//!   data set), their queries and known misses, and the comparison of plan shapes; the bench
//!   measures the same data sets.
//!
//! A dev-dependency of the tests and a dependency of the bench only: nothing here is linked into
//! the daemon, and it holds no logic of the daemon's own.
#![forbid(unsafe_code)]

pub mod clone_fixtures;
mod member_faults;

pub use member_faults::forbid_login;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sandboxd_backend::Backend;
use sandboxd_backend::docker::{DockerBackend, DockerConfig};
use sandboxd_backend::kube::{KubeBackend, KubeConfig};

/// A memory field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`, …) in bytes; `pid` may be
/// `"self"`.
pub fn proc_status_bytes(pid: impl std::fmt::Display, field: &str) -> u64 {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in {path}"))
        * 1024
}

/// `<tag>-<pid>-<n>`: unique within this test process and across concurrent ones.
pub fn unique(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{tag}-{}-{n}", std::process::id())
}

/// A directory for one test under `/dev/shm` (else the temp dir), named `<prefix>…` so the leak
/// check finds any that outlive their test, and mode 0755 so an instance user can traverse into
/// its own directory below it. Removed when dropped.
pub fn test_dir(prefix: &str) -> tempfile::TempDir {
    let parent = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .expect("a test directory");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the test directory");
    dir
}

/// `SANDBOXD_LOG=<filter>` shows a test's logs (the same switch the daemon reads); tests are
/// quiet without it. Safe to call from every test: only the first call installs a subscriber.
pub fn show_logs() {
    if let Ok(filter) = std::env::var("SANDBOXD_LOG") {
        let subscriber = tracing_subscriber::fmt().with_env_filter(filter);
        let _ = subscriber.with_test_writer().try_init();
    }
}

/// The guest `scripts/build-guest.sh` built (`SANDBOXD_EXPERIMENT_GUEST` overrides).
pub fn experiment_guest() -> std::path::PathBuf {
    std::env::var_os("SANDBOXD_EXPERIMENT_GUEST")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/cache/sandboxd-guest/current/experiment.wasm".into())
}

/// Where every test's runtime keeps the compiled guest (`SANDBOXD_EXPERIMENT_CACHE`
/// overrides): compiled once per guest and wasmtime, shared by tests and test daemons.
pub fn experiment_cache() -> std::path::PathBuf {
    std::env::var_os("SANDBOXD_EXPERIMENT_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/cache/sandboxd-guest/compiled".into())
}

/// The images `scripts/build-images.sh` builds, per engine name.
pub fn local_images() -> BTreeMap<String, String> {
    [
        ("postgres", "sandboxd-local/postgres:17"),
        ("redis", "sandboxd-local/redis:8"),
        ("mariadb", "sandboxd-local/mariadb:11"),
    ]
    .into_iter()
    .map(|(engine, image)| (engine.to_owned(), image.to_owned()))
    .collect()
}

/// [`local_images`] as the Docker backend's image lists: each engine runs its local image only.
pub fn local_image_lists() -> BTreeMap<String, Vec<String>> {
    local_images()
        .into_iter()
        .map(|(engine, image)| (engine, vec![image]))
        .collect()
}

/// True where a skipped Docker test must fail instead (CI).
pub fn docker_required() -> bool {
    std::env::var("SANDBOXD_REQUIRE_DOCKER").is_ok_and(|v| v == "1")
}

/// Skips `test` saying `why`, or fails it when Docker is required.
pub fn skip(test: &str, why: &str) {
    assert!(
        !docker_required(),
        "{test}: {why} (SANDBOXD_REQUIRE_DOCKER=1)"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// A Docker backend on the local images with no grace window, or None (after [`skip`]) when no
/// engine answers.
pub async fn docker_or_skip() -> Option<DockerBackend> {
    let config = DockerConfig {
        images: local_image_lists(),
        grace: Duration::ZERO,
        ..DockerConfig::default()
    };
    let backend = DockerBackend::new(config).expect("the default Docker settings are valid");
    match backend.ping().await {
        Ok(()) => Some(backend),
        Err(err) => {
            skip("docker", &format!("no Docker engine answers: {err}"));
            None
        }
    }
}

/// Whether the Docker network of daemon `maker` outlived the test that made it; removes it if
/// so (a test asserts on the answer after cleaning up). False where Docker does not answer.
pub fn daemon_network_left(maker: &str) -> bool {
    let network = format!("sandboxd-net-{maker}");
    let left = std::process::Command::new("docker")
        .args(["network", "inspect", &network])
        .output()
        .is_ok_and(|out| out.status.success());
    if left {
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &network])
            .output();
    }
    left
}

/// The test cluster's kubeconfig (`SANDBOXD_TEST_KUBECONFIG`), or None (after a skip, or a
/// failure when `SANDBOXD_REQUIRE_KUBERNETES=1`).
pub fn test_kubeconfig(test: &str) -> Option<std::path::PathBuf> {
    match std::env::var_os("SANDBOXD_TEST_KUBECONFIG") {
        Some(path) if !path.is_empty() => Some(path.into()),
        _ => {
            assert!(
                !std::env::var("SANDBOXD_REQUIRE_KUBERNETES").is_ok_and(|v| v == "1"),
                "{test}: no test cluster (SANDBOXD_TEST_KUBECONFIG is unset; \
                 scripts/k8s-cluster.sh up starts one) and SANDBOXD_REQUIRE_KUBERNETES=1"
            );
            eprintln!("SKIPPED {test}: no test cluster (SANDBOXD_TEST_KUBECONFIG is unset)");
            None
        }
    }
}

/// `kubectl` of the test cluster (`scripts/k8s-cluster.sh kubectl`), with `args`; its stdout.
pub fn kubectl(args: &[&str]) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-cluster.sh");
    let out = std::process::Command::new(script)
        .arg("kubectl")
        .args(args)
        .output()
        .map_err(|e| format!("running kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A namespace of one test's own on the test cluster; dropping it deletes it and everything
/// in it, and waits until the cluster has.
#[derive(Debug)]
pub struct KubeNamespace {
    pub name: String,
}

impl KubeNamespace {
    pub fn create(tag: &str) -> Self {
        let name = format!("sbx-test-{}", unique(tag));
        kubectl(&["create", "namespace", &name]).expect("create the test namespace");
        Self { name }
    }
}

impl Drop for KubeNamespace {
    fn drop(&mut self) {
        if let Err(err) = kubectl(&[
            "delete",
            "namespace",
            &self.name,
            "--wait=true",
            "--timeout=120s",
        ]) {
            eprintln!("removing test namespace {}: {err}", self.name);
        }
    }
}

/// The Kubernetes backend on the test cluster, in a fresh namespace of its own, running the
/// local images (never pulled), with no grace window; None (after a skip) without a cluster.
pub fn kube_or_skip(
    test: &str,
    tweak: impl FnOnce(&mut KubeConfig),
) -> Option<(KubeBackend, KubeNamespace)> {
    let kubeconfig = test_kubeconfig(test)?;
    let namespace = KubeNamespace::create(test);
    let mut config = KubeConfig {
        kubeconfig: Some(kubeconfig),
        namespace: namespace.name.clone(),
        images: local_image_lists(),
        image_pull_policy: "Never".to_owned(),
        grace: Duration::ZERO,
        // sandboxd runs on the node's host, on the Docker bridge the Pods are on.
        daemon_cidrs: vec!["172.17.0.1/32".to_owned()],
        ..KubeConfig::default()
    };
    tweak(&mut config);
    let backend = KubeBackend::new(config).expect("valid test settings");
    Some((backend, namespace))
}
