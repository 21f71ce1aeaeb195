//! `/v1/sandboxes`: every owner's instances, and their teardown.

use sandboxd_broker::{InstanceView, SandboxView};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InstanceOut {
    pub name: String,
    pub engine: String,
    pub backend: String,
    pub host: String,
    pub port: u16,
    pub created_at_ms: i64,
    pub live: bool,
    pub status: String,
    /// The image it runs from (Docker); null for a process.
    pub image: Option<String>,
    /// False for an instance no agent's sandbox record knows: one a crash left (the janitor
    /// reaps it), or a foreign one.
    pub tracked: bool,
}

impl From<InstanceView> for InstanceOut {
    fn from(i: InstanceView) -> Self {
        Self {
            name: i.name,
            engine: i.engine.name.to_owned(),
            backend: i.backend.as_str().to_owned(),
            host: i.host,
            port: i.port,
            created_at_ms: i.created_at_ms,
            live: i.live,
            status: i.status,
            image: i.image,
            tracked: i.tracked,
        }
    }
}

/// Every instance of one owner (an agent slug) made by one maker. No credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SandboxOut {
    pub owner: String,
    /// What made it: a daemon's id (this daemon's is in `GET /v1/settings`) or `cli`.
    pub maker: String,
    /// Made by another daemon or the CLI: this daemon lists it and never touches it.
    pub foreign: bool,
    pub engines: Vec<String>,
    pub backends: Vec<String>,
    pub created_at_ms: i64,
    /// When its owner last got it (provisioned or answered from the cache); `null` when no
    /// agent's sandbox record knows it. The janitor's idle TTL counts from here.
    pub last_used_at_ms: Option<i64>,
    /// `live`, `degraded` (some member not live) or `dead`.
    pub status: String,
    pub instances: Vec<InstanceOut>,
}

impl From<SandboxView> for SandboxOut {
    fn from(s: SandboxView) -> Self {
        Self {
            owner: s.owner.to_string(),
            maker: s.maker.to_string(),
            foreign: s.foreign,
            engines: s.engines.iter().map(|e| e.name.to_owned()).collect(),
            backends: s.backends.iter().map(|b| b.as_str().to_owned()).collect(),
            created_at_ms: s.created_at_ms,
            last_used_at_ms: s.last_used_at_ms,
            status: s.status.to_owned(),
            instances: s.instances.into_iter().map(InstanceOut::from).collect(),
        }
    }
}

/// Which sandboxes to list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SandboxesQuery {
    /// Also list foreign sandboxes: made by another daemon or the CLI (default false).
    pub all: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TeardownOut {
    pub owner: String,
    /// How many instances were removed.
    pub removed: usize,
}
