//! One settings tree: built-in defaults, then a TOML file (`--config`, or `SANDBOXD_CONFIG`), then
//! `SANDBOXD_*` environment variables with `__` for nesting (`SANDBOXD_PROCESS__RUN_AS=me`).
//! Every default is documented in README.md's configuration reference.
//!
//! A section is the configuration type of what it configures where there is one: `[process]` is
//! a `ProcessConfig`, `[docker]` a `DockerConfig`, `[kubernetes]` a `KubeConfig`. Durations are
//! whole seconds or milliseconds in the file (`grace_secs`) and `Duration`s in the types
//! (`sandboxd_backend::duration_serde`); a value that must be at least 1 is a `NonZero*`. The
//! binary's own sections, one file each:
//! - `server`: `[server]`, the HTTP listener and its bounds, and `[store]`.
//! - `broker`: `[broker]`, which becomes the broker's `BrokerConfig` and pools' tuning.
//! - `admin`: `[admin]`, the panel's logins, which becomes the `AdminConfig`.
//! - `backends`: `[engines]`, and each backend's configuration completed with it.
//! - `pools`: `[pools.<engine>]`, validated into `PoolConfig`s.
//! - `experiments`: `[experiments]`, `run_experiment`'s limits validated.
//! - `load`: the layering, and the refusals no type makes by itself.

mod admin;
mod backends;
mod broker;
mod experiments;
mod load;
mod pools;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;

use sandboxd_backend::docker::DockerConfig;
use sandboxd_backend::kube::KubeConfig;
use sandboxd_backend::process::ProcessConfig;
use sandboxd_domain::EnvPrefix;
use serde::{Deserialize, Serialize};

pub use admin::AdminSettings;
pub use backends::EngineSettings;
pub use broker::BrokerSettings;
pub use experiments::ExperimentSettings;
pub use pools::PoolSettings;
pub use server::{ServerSettings, StoreSettings};

/// Which backend runs instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// Docker when the engine answers and the images are present, else processes.
    Auto,
    Process,
    Docker,
    /// Pods on a Kubernetes cluster (`[kubernetes]`); never picked by `auto`.
    Kubernetes,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub backend: BackendChoice,
    /// Prefix of the rendered environment names.
    pub env_prefix: EnvPrefix,
    /// Where the daemon keeps its state: the SQLite store, the store key, the admin token.
    pub state_dir: PathBuf,
    pub server: ServerSettings,
    pub store: StoreSettings,
    pub broker: BrokerSettings,
    pub admin: AdminSettings,
    pub process: ProcessConfig,
    pub docker: DockerConfig,
    /// The Kubernetes backend (`backend = "kubernetes"`, or `enabled` beside another primary).
    pub kubernetes: KubeConfig,
    /// Per-engine overrides, keyed by engine name.
    pub engines: BTreeMap<String, EngineSettings>,
    /// Warm pools on the provisioning backend, keyed by engine name (none by default).
    pub pools: BTreeMap<String, PoolSettings>,
    pub experiments: ExperimentSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            env_prefix: EnvPrefix::default(),
            state_dir: default_state_dir(),
            server: ServerSettings::default(),
            store: StoreSettings::default(),
            broker: BrokerSettings::default(),
            admin: AdminSettings::default(),
            process: ProcessConfig::default(),
            docker: DockerConfig::default(),
            kubernetes: KubeConfig::default(),
            engines: BTreeMap::new(),
            pools: BTreeMap::new(),
            experiments: ExperimentSettings::default(),
        }
    }
}

fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/sandboxd")
    } else {
        std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(std::env::temp_dir)
            .join("sandboxd")
    }
}

impl Settings {
    pub fn store_url(&self) -> String {
        self.store
            .url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.state_dir.join("sandboxd.db").display()))
    }

    pub fn store_key_file(&self) -> PathBuf {
        self.store
            .key_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("store.key"))
    }

    pub fn admin_token_file(&self) -> PathBuf {
        self.server
            .admin_token_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("admin.token"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests;
