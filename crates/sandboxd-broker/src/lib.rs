//! The broker: everything sandboxd decides. The agent gateway and the operator surface call into
//! it; it has no network transport of its own.
//!
//! Parts:
//! - [`Broker::call`] (`verbs/`): one agent verb — manifest check, then one file per verb
//!   (`request_sandbox.rs` gathers the inputs of the pure guard chain
//!   `sandboxd_domain::guards::decide`; `lifecycle.rs` applies the task state machine) —
//!   answered as an envelope with typed evidence ([`Evidence`]) that only a gateway serializes.
//! - `sandbox.rs`: whole-set sandboxes per agent, serialized per agent (`locks.rs`), re-verified
//!   live on every cache hit, persisted with encrypted credentials so a restart keeps them;
//!   `experiments.rs`: the runtime behind `run_experiment`, whose `sql()` is the agent's own
//!   connection.
//! - `caps.rs`: per-agent caps on concurrent heavy calls (`sandbox_sql`, `run_experiment`,
//!   `reset_sandbox`) and experiments, refused past them with `limit_exceeded`, never queued.
//! - `feature_probes.rs`: which allowlisted features each backend really provides, probed on a
//!   throwaway instance and cached: what agents are offered and operators may make standing.
//! - `janitor.rs`: reaps instances whose owner is gone, from what the backends list.
//! - `replicas.rs`: several replicas on one PostgreSQL store: per-agent leases, one leader per
//!   fleet-wide task, whose pool members are whose.
//! - `operator.rs`: the operator's verbs (agents, projects, tasks, sandboxes, settings, audit);
//!   `sizes.rs`: a project's data space per engine, within the operator's ceiling.
//! - `metrics.rs`, and the audit trail written by every verb and action (`audit.rs`), after
//!   the answer by a writer task (`audit_queue.rs`).
//!
//! The broker never exposes a backend or the store to its callers, so no gateway can reach
//! around the guard chain; and it never puts a credential in a log, an audit row, a metric or
//! an error.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandboxd_domain::{AgentSlug, DaemonId};
use sandboxd_store::Store;

mod audit;
mod audit_queue;
mod backends;
mod caps;
mod config;
mod desks;
mod engine_support;
mod envelopes;
mod error;
mod experiments;
mod feature_probes;
mod janitor;
mod locks;
pub mod metrics;
mod operator;
mod pools;
mod replicas;
mod sandbox;
mod sessions;
mod sizes;
mod sources;
mod verbs;

pub use audit::{AuditAction, Outcome};
pub use backends::Backends;
pub use config::{BrokerConfig, ENABLED_OVERRIDE_ENV, SANDBOX_DB_ENABLED, parse_switch};
pub use desks::{AgentDesk, OperatorDesk};
pub use error::BrokerError;
pub use experiments::ExperimentsConfig;
pub use janitor::{JanitorReport, ReapReason};
pub use operator::{
    InstanceView, SERVICES_AVAILABLE_ENV, SandboxView, SettingsView, Spawned, parse_task_state,
};
pub use pools::{PoolConfig, PoolKey, PoolTuning, PoolView};
pub use replicas::ReplicationConfig;
pub use sandboxd_backend::FeatureProbe;
pub use sandboxd_backend::clone::{SourceTls, SslMode};
pub use sandboxd_domain::lifecycle::TaskState;
pub use sources::clonable;
pub use verbs::Evidence;

/// The broker handle: cheap to clone, shared by every gateway.
#[derive(Debug, Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    /// This daemon's identity (its store's id): the maker of every instance it provisions,
    /// and the only maker whose instances its janitor and reconciler touch.
    daemon: DaemonId,
    backends: Backends,
    config: BrokerConfig,
    /// The master switch as it was when this broker started: a stored change takes effect at
    /// the next start.
    enabled: bool,
    locks: locks::AgentLocks,
    /// With replicas on one store: this replica's identity and its leases; None for a single
    /// daemon.
    replication: Option<replicas::Replication>,
    metrics: Arc<metrics::Metrics>,
    pools: Arc<pools::Pools>,
    feature_probes: feature_probes::FeatureProbes,
    /// Which engines the backends said they run, so a warm request does not ask again.
    engine_support: engine_support::EngineSupport,
    /// When the primary backend last answered a ping, so back-to-back requests ping it once
    /// (`verbs/request_sandbox.rs`). A std mutex: never held across an await.
    answered_ping: std::sync::Mutex<Option<std::time::Instant>>,
    /// `run_experiment`'s runtime; None when experiments are turned off.
    experiments: Option<Arc<sandboxd_experiments::Runtime>>,
    /// Per-agent caps on concurrent heavy calls and experiments.
    caps: caps::Caps,
    /// False until startup reconciliation finished: until then `request_sandbox` answers
    /// "provisioner unavailable" (retryable).
    ready: AtomicBool,
    /// Cancelled when an operator asks for a restart: the binary's serve loop drains and
    /// re-executes on it. A token rather than a `Notify`: a request made before the loop
    /// listens is not lost, and a second request is the same request.
    restart: tokio_util::sync::CancellationToken,
    /// When this broker started (Unix ms): a restart shows as a new value.
    started_at_ms: i64,
    /// Audit rows on their way to the store, written after the answer.
    audit: audit_queue::AuditQueue,
}

impl Broker {
    /// Starts a broker: reads the master switch, adopts the live sandboxes of a previous run and
    /// drops the dead ones, and runs the janitor once.
    pub async fn start(
        config: BrokerConfig,
        store: Store,
        backends: Backends,
    ) -> Result<Self, BrokerError> {
        let stored = config::stored_switch(&store).await?;
        let enabled = config.enabled_override.unwrap_or(stored);
        let replication = config
            .replication
            .map(|r| replicas::Replication::new(store.clone(), r));
        let pools = Arc::new(pools::Pools::new(
            &config.pools,
            backends.primary().clone(),
            store.daemon_id().clone(),
            config.pool_tuning,
            replication.clone(),
        ));
        let config_recheck = config.feature_probe_recheck;
        let experiments = match &config.experiments {
            Some(experiments) => Some(
                sandboxd_experiments::Runtime::start_with(
                    experiments.files.clone(),
                    experiments.policy,
                    experiments.capacity,
                )
                .map_err(|err| BrokerError::Experiments(err.to_string()))?,
            ),
            None => None,
        };
        let caps = caps::Caps::new(&config);
        let broker = Self {
            inner: Arc::new(Inner {
                caps,
                daemon: store.daemon_id().clone(),
                audit: audit_queue::AuditQueue::start(store.clone()),
                store,
                backends,
                config,
                enabled,
                locks: locks::AgentLocks::default(),
                replication,
                metrics: Arc::new(metrics::Metrics::default()),
                pools,
                feature_probes: feature_probes::FeatureProbes::new(config_recheck),
                engine_support: engine_support::EngineSupport::new(config_recheck),
                answered_ping: std::sync::Mutex::new(None),
                experiments,
                ready: AtomicBool::new(false),
                restart: tokio_util::sync::CancellationToken::new(),
                started_at_ms: sandboxd_domain::clock::now_ms(),
            }),
        };
        broker.apply_stored_pool_sizes().await;
        broker.load_clone_pool_snapshots().await;
        broker.reconcile().await;
        broker.janitor_pass().await;
        broker.inner.ready.store(true, Ordering::SeqCst);
        Ok(broker)
    }

    /// Pools of clones start from their source's latest snapshot in the store.
    async fn load_clone_pool_snapshots(&self) {
        for source in self.inner.pools.clone_sources() {
            match self.store().latest_snapshot(&source).await {
                Ok(snapshot) => self
                    .inner
                    .pools
                    .offer_snapshot(&source, snapshot.map(Arc::new)),
                Err(err) => {
                    tracing::warn!(%source, error = %err, "reading a snapshot for its pool of clones");
                }
            }
        }
    }

    pub fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    /// Keeps the warm pools filled and checked until `shutdown` is cancelled, then removes
    /// their idle members. Without it the pools stay empty and every provision is cold.
    pub fn spawn_pools(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let armed = self.inner.enabled;
        self.inner
            .pools
            .spawn(self.inner.metrics.clone(), shutdown, armed)
    }

    /// Whether the experiment runtime is ready, preparing or failed (None: turned off).
    pub fn experiments_status(&self) -> Option<sandboxd_experiments::GuestStatus> {
        self.inner.experiments.as_ref().map(|r| r.status())
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.inner.config
    }

    /// This daemon's identity: the maker label of every instance it provisions.
    pub fn daemon_id(&self) -> &DaemonId {
        &self.inner.daemon
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    /// `agent`'s turn: calls of one agent (on any replica) run one at a time.
    pub(crate) async fn turn(&self, agent: &AgentSlug) -> Result<locks::Turn, BrokerError> {
        let local = self.inner.locks.lock(agent).await;
        let lease = match &self.inner.replication {
            Some(replication) => Some(replication.lease(locks::lease_name(agent)).await?),
            None => None,
        };
        Ok(locks::Turn::new(local, lease))
    }

    /// `agent`'s turn if no call of it runs now (on any replica).
    pub(crate) async fn try_turn(&self, agent: &AgentSlug) -> Option<locks::Turn> {
        let local = self.inner.locks.try_lock(agent)?;
        let lease = match &self.inner.replication {
            Some(replication) => Some(replication.try_lease(locks::lease_name(agent)).await?),
            None => None,
        };
        Some(locks::Turn::new(local, lease))
    }

    /// Whether this daemon runs the fleet-wide `task` now: always for a single daemon; for
    /// replicas, the one that holds (or takes) its lead for the next `term`.
    pub(crate) async fn leads(&self, task: &str, term: std::time::Duration) -> bool {
        match &self.inner.replication {
            Some(replication) => replication.leads(task, term).await,
            None => true,
        }
    }
}
