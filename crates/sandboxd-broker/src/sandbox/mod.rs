//! Sandboxes: the whole opted-in set of instances of one agent. Provisioned whole on the first
//! request, answered from the (persisted) cache afterwards once every member is re-verified
//! live, evicted and re-provisioned with new credentials when a member died, released when the
//! agent's engagement ends.
//!
//! Parts: `provision.rs` makes a sandbox (each engine from its warm pool or cold, all or
//! nothing) and completes a live one in place; `release.rs` tears sandboxes down and reconciles
//! what the backends run with what the store holds after a restart; `failure.rs` is why a
//! sandbox could not be had, and what the agent is told.

use std::sync::Arc;

use futures::future::join_all;
use sandboxd_backend::InstanceHandle;
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::{AgentSlug, EngineRef, FeatureRequest, Instance, ProjectSizes};

use crate::Broker;

mod failure;
mod provision;
mod release;

pub(crate) use failure::SandboxFailure;
use provision::Leftovers;

/// What one cloned engine of a sandbox is made from.
#[derive(Debug, Clone)]
pub(crate) struct CloneOf {
    pub engine: EngineRef,
    /// The source's latest snapshot under the project's privacy mode.
    pub snapshot: Arc<Snapshot>,
    /// False when the project's mode stripped values from the snapshot as stored: the pool's
    /// members, made from the stored one, never serve it.
    pub as_stored: bool,
}

/// The snapshot each cloned engine of a sandbox is made from.
pub(crate) type Clones = [CloneOf];

pub(super) fn clone_of(clones: &Clones, engine: EngineRef) -> Option<&Arc<Snapshot>> {
    clones
        .iter()
        .find(|c| c.engine == engine)
        .map(|c| &c.snapshot)
}

/// The snapshot a pool of clones may serve `engine` from: the stored one only.
pub(super) fn pooled_clone_of(clones: &Clones, engine: EngineRef) -> Option<&Arc<Snapshot>> {
    clones
        .iter()
        .find(|c| c.engine == engine && c.as_stored)
        .map(|c| &c.snapshot)
}

/// Whether a cached member is what the project asks for now: a clone of the same source under
/// the same privacy mode when it must be one, an ordinary instance when not.
fn clone_matches(instance: &Instance, clones: &Clones) -> bool {
    match (clone_of(clones, instance.engine), &instance.clone) {
        (None, None) => true,
        (Some(snapshot), Some(origin)) => {
            origin.source == snapshot.source && origin.privacy == snapshot.privacy
        }
        _ => false,
    }
}

/// How `ensure_sandbox` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cache {
    Hit,
    Miss,
}

impl Broker {
    /// The agent's whole sandbox, ready: from the cache when every member is live (and is a
    /// clone exactly where the project asks for one, of the size it asks for), else freshly
    /// provisioned. Serialized per agent.
    pub(crate) async fn ensure_sandbox(
        &self,
        agent: &AgentSlug,
        services: &[EngineRef],
        features: &FeatureRequest,
        clones: &Clones,
        sizes: &ProjectSizes,
    ) -> Result<(Vec<Instance>, Cache), SandboxFailure> {
        let _turn = self.turn(agent).await.map_err(SandboxFailure::Turn)?;
        let store = self.store();
        let mut cached = store
            .instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        let unchanged = cached
            .iter()
            .all(|i| clone_matches(i, clones) && self.size_matches(i, sizes));
        if !cached.is_empty() {
            if unchanged && self.all_live(&cached).await {
                let added = self
                    .complete_in_place(agent, &mut cached, services, features, clones, sizes)
                    .await
                    .map_err(|failure| SandboxFailure::Kept(Box::new(failure)))?;
                if let Some(added) = added {
                    if let Err(err) = self.put_instances(agent, &cached).await {
                        // What is stored still describes the sandbox as it was: take away
                        // what was added, so no instance is left that nothing tracks.
                        self.teardown_instances(&added).await;
                        tracing::warn!(%agent, error = %err, "recording a completed sandbox failed; kept it as it was");
                        return Err(SandboxFailure::Kept(Box::new(SandboxFailure::Store(err))));
                    }
                    self.spawn_live_gauge_refresh();
                } else if let Err(err) = store.touch_instances_of(agent).await {
                    // Only the idle clock is stale: the sandbox itself is fine to hand out.
                    tracing::warn!(%agent, error = %err, "recording the sandbox's use failed");
                }
                return Ok((cached, Cache::Hit));
            }
            if unchanged {
                tracing::info!(%agent, "a sandbox member died: evicting the whole sandbox");
            } else {
                tracing::info!(%agent, "the project's clones or sizes changed: replacing the whole sandbox");
            }
            self.teardown_instances(&cached).await;
            store
                .delete_instances_of(agent)
                .await
                .map_err(SandboxFailure::Store)?;
        }
        let instances = self
            .provision(agent, services, features, clones, sizes, Leftovers::Clear)
            .await?;
        if let Err(err) = self.put_instances(agent, &instances).await {
            self.teardown_instances(&instances).await;
            return Err(SandboxFailure::Store(err));
        }
        self.spawn_live_gauge_refresh();
        Ok((instances, Cache::Miss))
    }

    /// Records `agent`'s sandbox in the store, in a span of its own: on a warm hand-out the
    /// store's write is one of the few steps left on the request path.
    #[tracing::instrument(name = "store_put", skip_all, fields(%agent, instances = instances.len()))]
    async fn put_instances(
        &self,
        agent: &AgentSlug,
        instances: &[Instance],
    ) -> Result<(), sandboxd_store::StoreError> {
        self.store().put_instances(agent, instances).await
    }

    /// Every member answers `is_live` on its own backend. A backend that is gone or errs
    /// counts as dead: a sandbox is trusted only when proven live.
    pub(crate) async fn all_live(&self, instances: &[Instance]) -> bool {
        let checks = instances.iter().map(|instance| async move {
            match self.inner.backends.for_kind(instance.backend) {
                Some(backend) => backend
                    .is_live(&InstanceHandle::of(instance))
                    .await
                    .unwrap_or(false),
                None => false,
            }
        });
        join_all(checks).await.into_iter().all(|live| live)
    }
}
