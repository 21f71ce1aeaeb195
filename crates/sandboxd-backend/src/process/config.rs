//! `ProcessConfig`: the process backend's settings, every default documented.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Settings of the process backend; every field has a documented default.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Where instance directories live: a tmpfs-backed directory.
    pub root: PathBuf,
    /// Where template data directories are cached.
    pub template_dir: PathBuf,
    /// The unprivileged user instances run as when sandboxd runs as root.
    pub run_as: String,
    /// Memory cap per instance.
    pub memory_limit_mb: u64,
    /// How long a graceful stop may take before the instance is killed.
    pub stop_timeout: Duration,
    /// A same-named instance younger than this is never replaced.
    pub grace: Duration,
    /// Readiness deadlines per engine name, overriding the engine's own.
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
            memory_limit_mb: 2048,
            stop_timeout: Duration::from_secs(5),
            grace: Duration::from_secs(180),
            deadlines: BTreeMap::new(),
        }
    }
}
