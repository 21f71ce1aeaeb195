//! What finds an instance again: the request that makes one, the handle `is_live` and
//! `teardown` take, and an instance as `list` reads it back from labels or metadata.

use std::collections::BTreeSet;

use sandboxd_domain::instance::{BackendKind, Instance};
use sandboxd_domain::{AgentSlug, DaemonId, DataSize, EngineRef, Feature};
use serde::{Deserialize, Serialize};

/// One instance to provision.
#[derive(Debug, Clone)]
pub struct InstanceRequest {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// Who makes it: recorded on the instance (label, metadata) so only its maker's janitor
    /// ever acts on it.
    pub maker: DaemonId,
    pub features: BTreeSet<Feature>,
    /// The server's major version, when it must be one (a clone runs its source's); None: the
    /// backend's own.
    pub major: Option<u32>,
    /// The size of its data space (its project's, `projects set … --size`); None: the
    /// backend's default ([`Backend::default_size`](crate::Backend::default_size)).
    pub size: Option<DataSize>,
}

/// Enough to find an instance again after any restart: what `list` returns and `is_live` /
/// `teardown` take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceHandle {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// The daemon (or the CLI) that made it; `unknown` when it was never recorded.
    pub maker: DaemonId,
    pub backend: BackendKind,
    /// Container id, or the instance directory of a process.
    pub backend_id: String,
    pub name: String,
}

impl InstanceHandle {
    pub fn of(instance: &Instance) -> Self {
        Self {
            engine: instance.engine,
            owner: instance.owner.clone(),
            maker: instance.maker.clone(),
            backend: instance.backend,
            backend_id: instance.backend_id.clone(),
            name: instance.name.clone(),
        }
    }
}

/// An instance as the backend sees it: from labels or metadata files, never from memory.
#[derive(Debug, Clone, Serialize)]
pub struct ListedInstance {
    #[serde(flatten)]
    pub handle: InstanceHandle,
    pub host: String,
    pub port: u16,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    pub live: bool,
    /// `running`, `exited`, `oom-killed`, …
    pub status: String,
    /// The image it runs, for backends with images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}
