//! `ProcessConfig`: the process backend's settings, every default documented. It is the `[process]`
//! section of the binary's settings tree as it stands: durations are whole seconds there
//! (`stop_timeout_secs`, `grace_secs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration_serde;

/// Settings of the process backend; every field has a documented default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessConfig {
    /// Where instance directories live: a tmpfs-backed directory.
    pub root: PathBuf,
    /// Where template data directories are cached.
    pub template_dir: PathBuf,
    /// No longer used: instances and template builds run under leased pool accounts (root) or
    /// the daemon's own user. Kept so existing configuration files still load.
    pub run_as: String,
    /// Instance accounts are `<prefix>000`, `<prefix>001`, … (scripts/install-deps.sh creates
    /// them); used when sandboxd runs as root.
    pub uid_pool_prefix: String,
    /// How many pool accounts to look for; at most this many instances live at once per host.
    pub uid_pool_size: u32,
    /// Host-wide directory of uid leases (one O_EXCL file per leased account), shared by every
    /// sandboxd on the host whatever its `root`.
    pub lease_dir: PathBuf,
    /// Memory cap per instance.
    pub memory_limit_mb: u64,
    /// Size cap of an instance's directory (its data, sockets, logs): a tmpfs mount of this size
    /// when sandboxd runs as root.
    pub data_limit_mb: u64,
    /// Size cap of a write-ahead log kept on its own mount (Postgres `pg_wal`), so a full data
    /// directory fails a statement instead of the server.
    pub wal_limit_mb: u64,
    /// Process cap per instance (cgroup `pids.max`).
    pub pids_limit: u64,
    /// How long a graceful stop may take before the instance is killed.
    #[serde(rename = "stop_timeout_secs", with = "duration_serde::secs")]
    pub stop_timeout: Duration,
    /// A same-named instance younger than this is never replaced.
    #[serde(rename = "grace_secs", with = "duration_serde::secs")]
    pub grace: Duration,
    /// Readiness deadlines per engine name, overriding the engine's own (the binary fills them
    /// from `[engines]`; not a key of `[process]`).
    #[serde(skip)]
    pub deadlines: BTreeMap<String, Duration>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        let is_root = nix::unistd::geteuid().is_root();
        let root = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm/sandboxd")
        } else {
            std::env::temp_dir().join("sandboxd")
        };
        let template_dir = if is_root {
            PathBuf::from("/var/cache/sandboxd/templates")
        } else {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir)
                .join("sandboxd/templates")
        };
        Self {
            root,
            template_dir,
            run_as: "sandboxd".to_owned(),
            uid_pool_prefix: "sandboxd-i".to_owned(),
            uid_pool_size: 128,
            lease_dir: PathBuf::from("/run/sandboxd/uid-leases"),
            memory_limit_mb: 2048,
            data_limit_mb: 512,
            wal_limit_mb: 128,
            pids_limit: 512,
            stop_timeout: Duration::from_secs(5),
            grace: Duration::from_secs(180),
            deadlines: BTreeMap::new(),
        }
    }
}
