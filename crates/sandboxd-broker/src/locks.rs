//! Per-agent serialization: concurrent calls for one agent queue behind one async mutex, so they
//! can never race each other's provision or teardown, while different agents proceed in
//! parallel. With replicas (`replicas.rs`) a [`Turn`] also holds the agent's lease in the
//! store, so calls of one agent on different replicas queue too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sandboxd_domain::AgentSlug;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::replicas::Lease;

/// One agent's turn: this replica's mutex and, with replicas, the agent's lease in the store.
#[derive(Debug)]
pub(crate) struct Turn {
    _local: OwnedMutexGuard<()>,
    _lease: Option<Lease>,
}

impl Turn {
    pub fn new(local: OwnedMutexGuard<()>, lease: Option<Lease>) -> Self {
        Self {
            _local: local,
            _lease: lease,
        }
    }
}

/// The lease name of an agent's turn.
pub(crate) fn lease_name(agent: &AgentSlug) -> String {
    format!("agent:{agent}")
}

#[derive(Debug, Default)]
pub struct AgentLocks {
    /// A std mutex guards only the map lookup (never held across an await); the per-agent
    /// tokio mutex is what callers hold across provisioning.
    locks: Mutex<HashMap<AgentSlug, Arc<AsyncMutex<()>>>>,
}

impl AgentLocks {
    fn of(&self, agent: &AgentSlug) -> Arc<AsyncMutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .expect("the lock map is never poisoned: nothing panics while holding it");
        locks.entry(agent.clone()).or_default().clone()
    }

    pub async fn lock(&self, agent: &AgentSlug) -> OwnedMutexGuard<()> {
        self.of(agent).lock_owned().await
    }

    /// The agent's lock if nobody holds it now; None while a call of the agent (a provision,
    /// a release) is under way.
    pub fn try_lock(&self, agent: &AgentSlug) -> Option<OwnedMutexGuard<()>> {
        self.of(agent).try_lock_owned().ok()
    }

    /// Forgets an agent's lock once the agent is removed.
    pub fn forget(&self, agent: &AgentSlug) {
        if let Ok(mut locks) = self.locks.lock() {
            locks.remove(agent);
        }
    }
}
