//! Warm pools: per engine on the primary backend, members started, proven ready and prepared
//! ahead of any request, held with a superuser connection and no agent account
//! (`Backend::provision_idle`). `request_sandbox` takes one when its engine and features match
//! and hands it out (`Backend::hand_out`: the agent's account minted, its owner recorded), and
//! the pool refills in the background. A member is handed out once, never returned: a released
//! sandbox is torn down like any other.
//!
//! What keeps a pool honest:
//! - an idle member that stops answering is quarantined (torn down, counted) and replaced;
//! - a pool whose members keep failing to start backs off exponentially (`PoolTuning`), says so
//!   in its status and metrics, and tries again after the wait instead of recreating forever;
//! - the janitor never touches a member this daemon's pools made in this run, and reaps every
//!   other member of this daemon at once (a previous run's: pools are rebuilt after a restart);
//! - when requests find the pool empty it holds more, up to `max_total`, and shrinks back to
//!   `min_idle` when hand-outs stop.
//!
//! Pools come from the config file and from an operator (`sandboxd pools set`, the admin API,
//! the panel), which may add one while the daemon runs; sizes an operator set are stored and
//! win over the file's at the next start (`stored`).
//!
//! A pool of clones (`[pools."postgres@shop"]`: a [`PoolKey`] naming a source) holds members
//! that are already clones of the source's latest snapshot (`provision_idle_clone`), their
//! schema handed to the account minted at hand-out. It starts nothing until the source has a
//! snapshot, and a newer snapshot (taken here, or met in a request that read it from the
//! store) replaces every idle member made from an older one.

mod key;
mod refill;
mod state;
mod stored;
mod take;
mod view;

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use sandboxd_backend::{Backend, IdleMember};
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::{DaemonId, SourceName};
use tokio::sync::Notify;

pub use key::{PoolConfig, PoolKey};
use state::Pool;
pub use state::PoolTuning;
pub(crate) use take::Taken;
pub use view::PoolView;

/// The pools of a daemon, which an operator may add to while the refill loop runs. Iterating
/// goes over the list as it is when the loop begins; pools are never removed while the daemon
/// runs.
#[derive(Debug, Default)]
struct PoolList(RwLock<Vec<Arc<Pool>>>);

impl PoolList {
    pub fn iter(&self) -> std::vec::IntoIter<Arc<Pool>> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .into_iter()
    }

    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a pool for `config` unless one of its key is there; returns the pool of that key.
    fn add(&self, config: &PoolConfig) -> (Arc<Pool>, bool) {
        let mut pools = self.0.write().unwrap_or_else(|p| p.into_inner());
        if let Some(pool) = pools.iter().find(|p| p.config().key() == config.key()) {
            return (pool.clone(), false);
        }
        let pool = Arc::new(Pool::new(config));
        pools.push(pool.clone());
        (pool, true)
    }
}

impl IntoIterator for &PoolList {
    type Item = Arc<Pool>;
    type IntoIter = std::vec::IntoIter<Arc<Pool>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Every pool of one daemon, and what they share.
#[derive(Debug)]
pub(crate) struct Pools {
    pools: PoolList,
    backend: Arc<dyn Backend>,
    maker: DaemonId,
    tuning: PoolTuning,
    metrics_backend: &'static str,
    /// Wakes the refill loop: a hand-out ended, a start failed, or the sizes changed.
    wake: Arc<Notify>,
    /// Names of every member this run's pools made, until the janitor sees them gone.
    issued: Mutex<HashSet<String>>,
    /// With replicas: members are registered in the store as this replica's while it holds
    /// them, so a janitor on another replica leaves them alone.
    replication: Option<crate::replicas::Replication>,
}

impl Pools {
    pub fn new(
        configs: &[PoolConfig],
        backend: Arc<dyn Backend>,
        maker: DaemonId,
        tuning: PoolTuning,
        replication: Option<crate::replicas::Replication>,
    ) -> Self {
        let pools = PoolList::default();
        for config in configs {
            pools.add(config);
        }
        Self {
            pools,
            metrics_backend: backend.kind().as_str(),
            backend,
            maker,
            tuning,
            wake: Arc::new(Notify::new()),
            issued: Mutex::new(HashSet::new()),
            replication,
        }
    }

    async fn register(&self, name: &str) {
        if let Some(replication) = &self.replication {
            replication.register_pool_member(name).await;
        }
    }

    async fn unregister(&self, name: &str) {
        if let Some(replication) = &self.replication {
            replication.forget_pool_member(name).await;
        }
    }

    fn issued(&self) -> MutexGuard<'_, HashSet<String>> {
        self.issued.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pool_of(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.pools.iter().find(|p| p.config().key() == *key)
    }

    /// The sources whose clones a pool holds.
    pub fn clone_sources(&self) -> BTreeSet<SourceName> {
        self.pools
            .iter()
            .filter_map(|p| p.config().clone_of)
            .collect()
    }

    /// Makes `snapshot` (None: there is none any more) the one the pools of `source`'s clones
    /// make members from; idle members of an older one are removed and replaced.
    pub fn offer_snapshot(&self, source: &SourceName, snapshot: Option<Arc<Snapshot>>) {
        for pool in &self.pools {
            if pool.config().clone_of.as_ref() != Some(source) {
                continue;
            }
            if let Some(stale) = pool.offer(snapshot.clone()) {
                if !stale.is_empty() {
                    tracing::info!(%source, count = stale.len(), "a new snapshot: replacing the pool's idle clones");
                    let backend = self.backend.clone();
                    let replication = self.replication.clone();
                    let handles: Vec<_> = stale.iter().map(IdleMember::handle).collect();
                    drop(stale);
                    tokio::spawn(async move {
                        let names: Vec<String> = handles.iter().map(|h| h.name.clone()).collect();
                        sandboxd_backend::teardown_all(backend.as_ref(), handles).await;
                        if let Some(replication) = replication {
                            for name in names {
                                replication.forget_pool_member(&name).await;
                            }
                        }
                    });
                }
                self.wake.notify_one();
            }
        }
    }

    /// True when `name` is a member this run's pools made and the janitor must leave alone:
    /// held now, or handed out since the janitor listed it.
    pub fn owns(&self, name: &str) -> bool {
        self.issued().contains(name)
    }

    /// Forgets issued names that are neither held nor among `listed` (the pool-slot instances
    /// the janitor just listed): they were handed out or torn down.
    pub fn forget_gone(&self, listed: &HashSet<String>) {
        let held: HashSet<String> = self
            .pools
            .iter()
            .flat_map(|p| p.state().held.iter().cloned().collect::<Vec<_>>())
            .collect();
        self.issued()
            .retain(|name| held.contains(name) || listed.contains(name));
    }
}
