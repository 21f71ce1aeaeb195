//! The owner metadata written beside every instance (`sandboxd.json`), so a later process can
//! list, check and reap instances after a crash. It never holds a credential.

use std::path::Path;

use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};
use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "sandboxd.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    pub format: u32,
    pub name: String,
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// The maker (a daemon's store id, or `cli`); `unknown` in metadata written before it was
    /// recorded.
    #[serde(rename = "daemon", default = "DaemonId::unknown")]
    pub maker: DaemonId,
    pub pid: i32,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so a
    /// recycled pid is never mistaken for the instance.
    pub pid_start_ticks: u64,
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub created_at_ms: i64,
    pub run_as: String,
    pub limits: super::limits::Applied,
    #[serde(default)]
    pub features: Vec<String>,
}

impl Metadata {
    pub const FORMAT: u32 = 1;

    pub fn read(instance_dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(instance_dir.join(FILE_NAME)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Written to a temporary file and renamed, so a reader never sees half of it.
    pub fn write(&self, instance_dir: &Path) -> std::io::Result<()> {
        let tmp = instance_dir.join(format!(".{FILE_NAME}.tmp"));
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(tmp, instance_dir.join(FILE_NAME))
    }
}
