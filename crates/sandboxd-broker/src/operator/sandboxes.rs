//! Sandboxes as an operator sees them (never a credential), torn down on demand; the warm
//! pools and their sizes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sandboxd_domain::Actor;
use sandboxd_domain::{AgentSlug, BackendKind, DaemonId, EngineRef};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::BrokerError;
use crate::pools::PoolView;

/// One instance of a sandbox as the operator sees it.
#[derive(Debug, Clone)]
pub struct InstanceView {
    pub name: String,
    pub engine: EngineRef,
    pub backend: BackendKind,
    pub host: String,
    pub port: u16,
    pub created_at_ms: i64,
    pub live: bool,
    pub status: String,
    /// The image it runs from (Docker), or None (processes).
    pub image: Option<String>,
    /// False for an instance no agent's sandbox record knows: one this daemon made that a
    /// crash left (the janitor reaps it), or a foreign one.
    pub tracked: bool,
    /// When its owner last got it; None when untracked.
    pub last_used_at_ms: Option<i64>,
}

/// A sandbox: every instance of one owner made by one maker.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub owner: AgentSlug,
    /// The daemon (this one or another) or the CLI that made it.
    pub maker: DaemonId,
    /// Made by another daemon or the CLI: listed, never touched by this one.
    pub foreign: bool,
    pub engines: Vec<EngineRef>,
    pub backends: Vec<BackendKind>,
    pub created_at_ms: i64,
    /// When its owner last got it (provisioned or a cache hit); None when the broker does not
    /// track it. The idle TTL counts from here.
    pub last_used_at_ms: Option<i64>,
    /// `live`, `degraded` (some member not live), `dead`.
    pub status: &'static str,
    pub instances: Vec<InstanceView>,
}

impl Broker {
    /// Every sandbox: what the backends list, joined with what the broker tracks.
    pub async fn sandboxes(&self) -> Result<Vec<SandboxView>, BrokerError> {
        let tracked: BTreeMap<String, i64> = self
            .store()
            .instance_summaries()
            .await?
            .into_iter()
            .map(|s| (s.name, s.last_used_at_ms))
            .collect();
        // This daemon's sandboxes first, then foreign ones, each by owner.
        let mut by_owner: BTreeMap<(bool, AgentSlug, DaemonId), Vec<InstanceView>> =
            BTreeMap::new();
        for instance in self.inner.backends.list_all().await {
            let last_used_at_ms = tracked.get(&instance.handle.name).copied();
            let foreign = instance.handle.maker != self.inner.daemon;
            if !foreign && instance.handle.owner.is_pool_slot() {
                // A warm pool's member, not anyone's sandbox: the pools' view shows it.
                continue;
            }
            by_owner
                .entry((
                    foreign,
                    instance.handle.owner.clone(),
                    instance.handle.maker.clone(),
                ))
                .or_default()
                .push(InstanceView {
                    last_used_at_ms,
                    tracked: last_used_at_ms.is_some(),
                    name: instance.handle.name,
                    engine: instance.handle.engine,
                    backend: instance.handle.backend,
                    host: instance.host,
                    port: instance.port,
                    created_at_ms: instance.created_at_ms,
                    live: instance.live,
                    status: instance.status,
                    image: instance.image,
                });
        }
        Ok(by_owner
            .into_iter()
            .map(|((foreign, owner, maker), instances)| {
                let live = instances.iter().filter(|i| i.live).count();
                SandboxView {
                    maker,
                    foreign,
                    engines: instances.iter().map(|i| i.engine).collect(),
                    backends: instances
                        .iter()
                        .map(|i| i.backend)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    created_at_ms: instances.iter().map(|i| i.created_at_ms).min().unwrap_or(0),
                    last_used_at_ms: instances.iter().filter_map(|i| i.last_used_at_ms).max(),
                    status: if live == instances.len() {
                        "live"
                    } else if live == 0 {
                        "dead"
                    } else {
                        "degraded"
                    },
                    owner,
                    instances,
                }
            })
            .collect())
    }

    /// Tears down one owner's sandbox. Returns how many instances went.
    pub async fn teardown_sandbox(&self, owner: &AgentSlug) -> Result<usize, BrokerError> {
        let started = Instant::now();
        let removed = self.release(owner).await.map_err(BrokerError::from)?;
        if removed == 0 {
            let foreign = self
                .inner
                .backends
                .list_all()
                .await
                .into_iter()
                .find(|i| &i.handle.owner == owner && i.handle.maker != self.inner.daemon);
            if let Some(foreign) = foreign {
                return Err(BrokerError::Foreign {
                    name: foreign.handle.name,
                    maker: foreign.handle.maker,
                });
            }
        }
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::TeardownSandbox,
            subject: owner.as_str(),
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("{removed} instance(s)"),
        })
        .await;
        Ok(removed)
    }

    /// The warm pools and what they hold now.
    pub fn pools(&self) -> Vec<PoolView> {
        self.inner.pools.views()
    }
}
