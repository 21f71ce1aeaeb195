//! Several `sandboxd serve` replicas serving one fleet from one PostgreSQL store. Nothing a
//! replica keeps in memory is trusted by another: what they must agree on goes through the
//! store, as leases that expire (a crashed replica's frees itself):
//! - `agent:<slug>`: held across a call that provisions, completes, resets or releases the
//!   agent's sandbox (beside the replica's own per-agent mutex), so two replicas never race one
//!   agent's sandbox; renewed while held, given up when the call ends;
//! - `leader:<task>`: the replica that runs a fleet-wide task this tick (the janitor, the
//!   snapshot refresher); the others skip it;
//! - the replicas' heartbeats and which replica's warm pools hold a member, so the janitor
//!   (wherever it runs) leaves a live replica's pool members alone.
//!
//! A single daemon on SQLite has none of this (`Replication` is None): one process, one lock.

use std::time::Duration;

use sandboxd_domain::credentials::generate_secret;
use sandboxd_store::Store;
use secrecy::ExposeSecret;
use tokio::task::JoinHandle;

use crate::error::BrokerError;

/// How long a call waits for another replica to finish with the same agent before it gives up
/// (retryable): a provision takes seconds; a crashed holder's lease expires in `ttl`.
const LEASE_WAIT: Duration = Duration::from_secs(120);
/// How often a waiting call asks again.
const LEASE_POLL: Duration = Duration::from_millis(100);

/// Settings of replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// How long a lease lasts without renewal: how soon another replica may take over from a
    /// crashed one. Held leases are renewed every third of it.
    pub lease_ttl: Duration,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(15),
        }
    }
}

/// This replica's identity and its way to the others.
#[derive(Debug, Clone)]
pub(crate) struct Replication {
    store: Store,
    /// Random per start: a restarted replica is a new holder (its old leases expire).
    pub replica: String,
    ttl: Duration,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A lease held by this replica: renewed in the background until dropped, then given up.
#[derive(Debug)]
pub(crate) struct Lease {
    store: Store,
    name: String,
    holder: String,
    /// The renewal task; aborted when the lease is dropped.
    renewer: JoinHandle<()>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
        let (store, name, holder) = (self.store.clone(), self.name.clone(), self.holder.clone());
        // Given up at once rather than left to expire, so the next call does not wait.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = store.release_lease(&name, &holder).await {
                    tracing::warn!(lease = %name, error = %err, "giving a lease up failed; it expires");
                }
            });
        }
    }
}

impl Replication {
    pub fn new(store: Store, config: ReplicationConfig) -> Self {
        Self {
            store,
            replica: generate_secret().expose_secret()[..12].to_owned(),
            ttl: config.lease_ttl,
        }
    }

    fn keep(&self, name: String) -> Lease {
        let (store, holder, ttl) = (self.store.clone(), self.replica.clone(), self.ttl);
        let renewed = name.clone();
        let renewer = tokio::spawn(async move {
            let mut every = tokio::time::interval(ttl / 3);
            every.tick().await;
            loop {
                every.tick().await;
                match store.acquire_lease(&renewed, &holder, millis(ttl)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(lease = %renewed, "a held lease was taken over (this replica stalled past its expiry)");
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(lease = %renewed, error = %err, "renewing a lease failed");
                    }
                }
            }
        });
        Lease {
            store: self.store.clone(),
            name,
            holder: self.replica.clone(),
            renewer,
        }
    }

    /// The lease `name`, waiting while another replica holds it (up to [`LEASE_WAIT`]).
    pub async fn lease(&self, name: String) -> Result<Lease, BrokerError> {
        let started = tokio::time::Instant::now();
        loop {
            if self
                .store
                .acquire_lease(&name, &self.replica, millis(self.ttl))
                .await?
            {
                return Ok(self.keep(name));
            }
            if started.elapsed() >= LEASE_WAIT {
                return Err(BrokerError::Busy {
                    what: name,
                    waited: LEASE_WAIT,
                });
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
    }

    /// The lease `name` if nobody holds it now.
    pub async fn try_lease(&self, name: String) -> Option<Lease> {
        match self
            .store
            .acquire_lease(&name, &self.replica, millis(self.ttl))
            .await
        {
            Ok(true) => Some(self.keep(name)),
            Ok(false) => None,
            Err(err) => {
                tracing::warn!(lease = %name, error = %err, "asking for a lease failed");
                None
            }
        }
    }

    /// Whether this replica leads `task` for the next `term` (taking the lead when it is free
    /// or renewing it when this replica has it); says it is alive on the way.
    pub async fn leads(&self, task: &str, term: Duration) -> bool {
        if let Err(err) = self.store.replica_seen(&self.replica).await {
            tracing::warn!(error = %err, "recording this replica's heartbeat failed");
        }
        match self
            .store
            .acquire_lease(&format!("leader:{task}"), &self.replica, millis(term))
            .await
        {
            Ok(leads) => leads,
            Err(err) => {
                tracing::warn!(%task, error = %err, "asking for the lead failed; skipping");
                false
            }
        }
    }

    /// How long a replica may go unseen before its pool members are another's to reap.
    pub fn alive_within(janitor_interval: Duration) -> Duration {
        janitor_interval * 3
    }

    pub async fn register_pool_member(&self, name: &str) {
        if let Err(err) = self.store.register_pool_member(name, &self.replica).await {
            tracing::warn!(instance = %name, error = %err, "registering a pool member failed");
        }
    }

    pub async fn forget_pool_member(&self, name: &str) {
        if let Err(err) = self.store.forget_pool_member(name).await {
            tracing::warn!(instance = %name, error = %err, "forgetting a pool member failed");
        }
    }

    /// Whether `name` is a member of a live replica's pools.
    pub async fn pool_member_alive(&self, name: &str, within: Duration) -> bool {
        self.store
            .pool_member_alive(name, millis(within))
            .await
            .unwrap_or(false)
    }
}
