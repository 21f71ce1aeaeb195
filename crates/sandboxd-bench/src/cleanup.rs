//! What the harness starts, and how it is all removed again: after every run, on error, and
//! after Ctrl-C. Nothing here relies on Drop alone: the sweep finds leftovers by name and label,
//! the way sandboxd's own janitor does.
//!
//! - containers sandboxd provisioned for the bench: label `sandboxd.sandbox=1`, owner
//!   `bench-<pid>-…`;
//! - floor and testcontainers containers: label `sandboxd.bench=<pid>` (names
//!   `sandboxd-bench-floor-<pid>-…`, `sandboxd-bench-tc-<pid>-…`);
//! - process instances: every process root the bench made, listed and torn down through the
//!   process backend, then the temp directory removed;
//! - child processes (the daemon, the testcontainers worker) are `kill_on_drop`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use sandboxd_backend::process::{ProcessBackend, ProcessConfig};
use sandboxd_backend::{Backend, BackendError};
use tokio::process::Command;

/// The label every peer container carries, valued with the harness's pid.
pub const BENCH_LABEL: &str = "sandboxd.bench";

#[derive(Debug)]
pub struct Cleanup {
    pid: u32,
    /// Parent of every process root, socket and daemon home of this run.
    dir: tempfile::TempDir,
    /// Process roots handed out; a std mutex, held only to push or copy.
    roots: Mutex<Vec<PathBuf>>,
}

impl Cleanup {
    pub fn new() -> Result<Self> {
        let parent = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-bench-")
            .tempdir_in(parent)
            .context("temp dir")?;
        // Instances run as an unprivileged user when the bench runs as root: let it in.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            pid: std::process::id(),
            dir,
            roots: Mutex::new(Vec::new()),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `bench-<pid>-<tag>`: an owner slug the sweep recognizes.
    pub fn owner(&self, tag: &str) -> String {
        format!("bench-{}-{tag}", self.pid)
    }

    /// The label namespace of the daemons the bench starts on Docker (the pools scenario's) and
    /// of the clones scenario's pooled backend: the sweep finds what they left by it.
    pub fn label_namespace(&self) -> String {
        format!("sbxbench{}", self.pid)
    }

    /// A fresh directory under the run's temp dir.
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    /// A process root the sweep will empty. Kept short: an instance's socket path must stay
    /// within the 107 bytes a unix socket allows.
    pub fn process_root(&self, name: &str) -> Result<PathBuf> {
        let root = self.path(name)?.join("i");
        self.roots
            .lock()
            .map_err(|_| anyhow::anyhow!("cleanup lock poisoned"))?
            .push(root.clone());
        Ok(root)
    }

    /// A process backend whose instances live under a root the sweep knows.
    pub fn process_backend(&self, name: &str) -> Result<ProcessBackend> {
        backend_at(self.process_root(name)?).context("process backend")
    }

    /// Removes everything the run left. Returns how many things it had to remove.
    pub async fn sweep(&self) -> usize {
        let mut removed = self.sweep_containers().await;
        let roots = self.roots.lock().map(|r| r.clone()).unwrap_or_default();
        for root in roots {
            if !root.exists() {
                continue;
            }
            let Ok(backend) = backend_at(root) else {
                continue;
            };
            for listed in backend.list().await.unwrap_or_default() {
                if let Err(err) = backend.teardown(&listed.handle).await {
                    eprintln!("sweep: tearing down {}: {err}", listed.handle.name);
                }
                removed += 1;
            }
        }
        removed
    }

    async fn sweep_containers(&self) -> usize {
        let mut ids = docker_ids(&["--filter", &format!("label={BENCH_LABEL}={}", self.pid)]).await;
        let prefix = self.owner("");
        let sandboxes = docker_lines(&[
            "ps",
            "-a",
            "--filter",
            "label=sandboxd.sandbox=1",
            "--format",
            "{{.ID}} {{.Label \"sandboxd.owner\"}}",
        ])
        .await;
        for line in sandboxes {
            if let Some((id, owner)) = line.split_once(' ')
                && owner.starts_with(&prefix)
            {
                ids.push(id.to_owned());
            }
        }
        // What daemons of the pools scenario made, under their own label namespace.
        let namespace = self.label_namespace();
        ids.extend(docker_ids(&["--filter", &format!("label={namespace}.sandbox=1")]).await);
        let networks = docker_lines(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label={namespace}.sandbox-network=1"),
        ])
        .await;
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output().await;
        }
        if !networks.is_empty() {
            let mut args = vec!["network", "rm"];
            args.extend(networks.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output().await;
        }
        ids.len() + networks.len()
    }
}

/// The process backend over instances under `root`, stopping them without a grace period.
fn backend_at(root: PathBuf) -> Result<ProcessBackend, BackendError> {
    ProcessBackend::new(ProcessConfig {
        root,
        grace: Duration::ZERO,
        ..ProcessConfig::default()
    })
}

async fn docker_lines(args: &[&str]) -> Vec<String> {
    match Command::new("docker").args(args).output().await {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

async fn docker_ids(filters: &[&str]) -> Vec<String> {
    let mut args = vec!["ps", "-aq"];
    args.extend_from_slice(filters);
    docker_lines(&args).await
}
