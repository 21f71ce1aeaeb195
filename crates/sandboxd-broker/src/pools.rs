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
//! A pool of clones (`[pools."postgres@shop"]`: a [`PoolKey`] naming a source) holds members
//! that are already clones of the source's latest snapshot (`provision_idle_clone`), their
//! schema handed to the account minted at hand-out. It starts nothing until the source has a
//! snapshot, and a newer snapshot (taken here, or met in a request that read it from the
//! store) replaces every idle member made from an older one.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandboxd_backend::clone::provision_idle_clone;
use sandboxd_backend::{Backend, IdleMember, InstanceRequest};
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::instance::instance_name;
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Feature, Instance, SourceName};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long a take waits for a member out for its health check before it counts a miss: the
/// check is one round trip (milliseconds); a cold start is far longer.
const CHECKED_MEMBER_WAIT: Duration = Duration::from_millis(100);

/// Which pool: an engine's (`postgres`), or an engine's clones of a source (`postgres@shop`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub engine: EngineRef,
    /// The source every member is a clone of; None: ordinary members.
    pub clone_of: Option<SourceName>,
}

impl PoolKey {
    pub fn engine(engine: EngineRef) -> Self {
        Self {
            engine,
            clone_of: None,
        }
    }

    /// `<engine>` or `<engine>@<source>`; the error names what is allowed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (engine, source) = match text.split_once('@') {
            Some((engine, source)) => (engine, Some(source)),
            None => (text, None),
        };
        let engine = EngineRef::parse(engine).map_err(|e| e.to_string())?;
        let clone_of = source
            .map(|source| {
                if !crate::sources::clonable(engine) {
                    return Err(format!(
                        "{engine} cannot be a clone; clonable: {}",
                        crate::sources::clonable_list()
                    ));
                }
                SourceName::parse(source).map_err(|e| e.to_string())
            })
            .transpose()?;
        Ok(Self { engine, clone_of })
    }

    /// Its table in the config file: `[pools.postgres]`, `[pools."postgres@shop"]`.
    pub fn config_table(&self) -> String {
        match &self.clone_of {
            Some(_) => format!("[pools.\"{self}\"]"),
            None => format!("[pools.{self}]"),
        }
    }

    /// The metrics' `clone_of` label: the source, or empty.
    pub(crate) fn source_label(&self) -> String {
        self.clone_of
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.clone_of {
            Some(source) => write!(f, "{}@{source}", self.engine.name),
            None => f.write_str(self.engine.name),
        }
    }
}

/// One pool as configured (`[pools.<engine>]`, `[pools."<engine>@<source>"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub engine: EngineRef,
    /// Members are clones of this source's latest snapshot.
    pub clone_of: Option<SourceName>,
    /// Features every member has active; a request whose features include them takes a
    /// member (the rest are activated after the hand-out).
    pub features: BTreeSet<Feature>,
    /// Idle members kept ready at all times.
    pub min_idle: usize,
    /// Most members the pool holds at once, idle or starting.
    pub max_total: usize,
}

impl PoolConfig {
    pub fn key(&self) -> PoolKey {
        PoolKey {
            engine: self.engine,
            clone_of: self.clone_of.clone(),
        }
    }

    /// `min_idle` ≤ `max_total`, and a pool of at least one member.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_total == 0 {
            return Err(format!(
                "pools.{}: max_total must be at least 1",
                self.key()
            ));
        }
        if self.min_idle > self.max_total {
            return Err(format!(
                "pools.{}: min_idle ({}) must not exceed max_total ({})",
                self.key(),
                self.min_idle,
                self.max_total
            ));
        }
        Ok(())
    }
}

/// Why a pool could not be resized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResizeError {
    /// No pool is configured for the engine.
    NoPool,
    /// The sizes break a rule (named in the text).
    Invalid(String),
}

/// The settings key holding an operator's sizes for a pool (`min_idle,max_total`).
pub(crate) fn size_setting(key: &PoolKey) -> String {
    format!("pool_size.{key}")
}

/// Sizes read back from [`size_setting`]; None when malformed.
pub(crate) fn parse_sizes(value: &str) -> Option<(usize, usize)> {
    let (min_idle, max_total) = value.split_once(',')?;
    Some((
        min_idle.trim().parse().ok()?,
        max_total.trim().parse().ok()?,
    ))
}

/// How pools refill, check and back off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTuning {
    /// The wait after the first failed start; it doubles with every further failure.
    pub backoff_base: Duration,
    /// The longest wait between attempts of a failing pool.
    pub backoff_max: Duration,
    /// How often idle members are asked whether they still answer.
    pub check_interval: Duration,
    /// Members started at once per pool.
    pub parallel_starts: usize,
}

impl Default for PoolTuning {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            check_interval: Duration::from_secs(10),
            parallel_starts: 2,
        }
    }
}

impl PoolTuning {
    fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// A pool as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolView {
    pub key: PoolKey,
    pub engine: EngineRef,
    pub backend: &'static str,
    /// For a pool of clones: when the snapshot its members are made from was taken; None
    /// while the source has none (the pool waits for one).
    pub snapshot_taken_at_ms: Option<i64>,
    pub features: Vec<String>,
    pub min_idle: usize,
    pub max_total: usize,
    /// What the pool aims to hold idle now (`min_idle`, more after requests found it empty).
    pub target: usize,
    pub idle: usize,
    pub starting: usize,
    pub handed_out: u64,
    pub misses: u64,
    /// Members that stopped answering while idle, or failed their hand-out.
    pub quarantined: u64,
    /// Failed starts in a row (0 when the last one worked).
    pub failures: u32,
    /// Set while the pool waits after failures: how long it still waits.
    pub backing_off_for: Option<Duration>,
    /// The last start failure, as the backend said it (no credentials).
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: VecDeque<IdleMember>,
    starting: usize,
    /// Members taken and being handed out: the refill waits for them, so a member's start
    /// never competes with the hand-out an agent is waiting for.
    handing: usize,
    /// Members out of `idle` for their health check's round trip: a take waits for one
    /// ([`CHECKED_MEMBER_WAIT`]) rather than missing it.
    checking: usize,
    /// Member names this pool holds or is starting or handing out: never the janitor's.
    held: HashSet<String>,
    target: usize,
    failures: u32,
    backoff_until: Option<Instant>,
    last_error: Option<String>,
    handed_out: u64,
    misses: u64,
    quarantined: u64,
    /// Hand-outs and misses since the last shrink check.
    demand: u64,
}

impl PoolState {
    /// Takes the newest idle members beyond the first `keep` out of the pool, to be removed.
    fn release_beyond(&mut self, keep: usize) -> Vec<IdleMember> {
        let surplus: Vec<IdleMember> = self.idle.drain(keep.min(self.idle.len())..).collect();
        for member in &surplus {
            self.held.remove(&member.instance.name);
        }
        surplus
    }
}

#[derive(Debug)]
struct Pool {
    config: Mutex<PoolConfig>,
    state: Mutex<PoolState>,
    /// Wakes takes waiting for a member out for its health check: it is back (or gone).
    checked: Notify,
    /// A pool of clones: the snapshot its members are made from (None: none yet). A std
    /// mutex: held only to read or swap the `Arc`, never across an await.
    snapshot: Mutex<Option<Arc<Snapshot>>>,
}

/// Two snapshots are one when they are of one source, taken at one time.
fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
    a.source == b.source && a.taken_at_ms == b.taken_at_ms
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `snapshot` the one members are made from; when it replaces another (or none
    /// replaces one), returns the idle members made from the old one, to be removed.
    fn offer(&self, snapshot: Option<Arc<Snapshot>>) -> Option<Vec<IdleMember>> {
        let mut current = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let unchanged = match (current.as_deref(), snapshot.as_deref()) {
            // A request that read the store before a newer snapshot was stored offers the
            // older one: the newer stays.
            (Some(a), Some(b)) => same_snapshot(a, b) || b.taken_at_ms < a.taken_at_ms,
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return None;
        }
        let had_one = current.is_some();
        *current = snapshot;
        drop(current);
        had_one.then(|| self.state().release_beyond(0))
    }

    /// Whether `member` was made from the snapshot members are made from now.
    fn current(&self, member: &IdleMember) -> bool {
        match (self.snapshot().as_deref(), &member.instance.clone) {
            (None, None) => true,
            (Some(snapshot), Some(origin)) => {
                origin.source == snapshot.source
                    && origin.snapshot_taken_at_ms == snapshot.taken_at_ms
            }
            _ => false,
        }
    }

    fn config(&self) -> PoolConfig {
        self.config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Every pool of one daemon, and what they share.
#[derive(Debug)]
pub(crate) struct Pools {
    pools: Vec<Arc<Pool>>,
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
        let pools = configs
            .iter()
            .map(|config| {
                Arc::new(Pool {
                    state: Mutex::new(PoolState {
                        target: config.min_idle,
                        ..PoolState::default()
                    }),
                    config: Mutex::new(config.clone()),
                    checked: Notify::new(),
                    snapshot: Mutex::new(None),
                })
            })
            .collect();
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

    fn pool_of(&self, key: &PoolKey) -> Option<&Arc<Pool>> {
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

    /// An idle member for `engine` (a clone of `clone`'s source, made from that very
    /// snapshot, when `clone` is given) whose features are all `wanted`, taken out of its pool
    /// (a refill starts); when every idle member is out for its health check, the first one
    /// back (waiting up to [`CHECKED_MEMBER_WAIT`]). None when no pool serves it or it is
    /// empty (a miss: the pool grows towards `max_total`).
    pub async fn take(
        &self,
        engine: EngineRef,
        wanted: &BTreeSet<Feature>,
        clone: Option<&Arc<Snapshot>>,
        metrics: &Metrics,
    ) -> Option<Taken> {
        let key = PoolKey {
            engine,
            clone_of: match clone {
                Some(snapshot) => Some(SourceName::parse(&snapshot.source).ok()?),
                None => None,
            },
        };
        let pool = self.pool_of(&key)?;
        if let (Some(snapshot), Some(source)) = (clone, &key.clone_of) {
            // The request read the store's latest: members of an older one are not clones of
            // what the project asks for now.
            self.offer_snapshot(source, Some(snapshot.clone()));
        }
        let config = pool.config();
        if !config.features.is_subset(wanted) {
            return None;
        }
        let deadline = tokio::time::Instant::now() + CHECKED_MEMBER_WAIT;
        let member = loop {
            // Registered before the look, so a member returned right after it is not missed.
            let checked = pool.checked.notified();
            tokio::pin!(checked);
            checked.as_mut().enable();
            {
                let mut state = pool.state();
                if let Some(member) = state.idle.pop_front() {
                    state.demand += 1;
                    state.handed_out += 1;
                    state.handing += 1;
                    break Some(member);
                }
                if state.checking == 0 || tokio::time::Instant::now() >= deadline {
                    state.demand += 1;
                    state.misses += 1;
                    state.target = (state.target + 1).min(config.max_total);
                    break None;
                }
            }
            let _ = tokio::time::timeout_at(deadline, checked).await;
        };
        metrics.pool_request(&key, self.metrics_backend, member.is_some());
        self.refresh_gauges(pool, metrics);
        match member {
            Some(member) => Some(Taken {
                pool: pool.clone(),
                wake: self.wake.clone(),
                name: member.instance.name.clone(),
                member: Some(member),
            }),
            None => {
                // A miss: the pool grows now; a hand-out refills when it is over.
                self.wake.notify_one();
                None
            }
        }
    }

    /// Hands `taken` to `owner` on the pool's backend. A failure quarantines the member (the
    /// backend already removed it).
    pub async fn hand_out(
        &self,
        mut taken: Taken,
        owner: &AgentSlug,
        metrics: &Metrics,
    ) -> Result<Instance, sandboxd_backend::BackendError> {
        let member = taken
            .member
            .take()
            .expect("a taken member is handed out once");
        let name = member.instance.name.clone();
        let outcome = self.backend.hand_out(member, owner).await;
        // The agent's now (or gone): no longer a pool's.
        self.unregister(&name).await;
        if outcome.is_err() {
            taken.pool.state().quarantined += 1;
            metrics.pool_member_failed(
                &taken.pool.config().key(),
                self.metrics_backend,
                "hand_out",
            );
        }
        outcome
    }

    /// The pools' state for the operator.
    pub fn views(&self) -> Vec<PoolView> {
        let now = Instant::now();
        self.pools
            .iter()
            .map(|pool| {
                let config = pool.config();
                let snapshot_taken_at_ms = pool.snapshot().map(|s| s.taken_at_ms);
                let state = pool.state();
                PoolView {
                    key: config.key(),
                    engine: config.engine,
                    backend: self.metrics_backend,
                    snapshot_taken_at_ms,
                    features: config
                        .features
                        .iter()
                        .map(|f| f.name().to_owned())
                        .collect(),
                    min_idle: config.min_idle,
                    max_total: config.max_total,
                    target: state.target,
                    idle: state.idle.len(),
                    starting: state.starting,
                    handed_out: state.handed_out,
                    misses: state.misses,
                    quarantined: state.quarantined,
                    failures: state.failures,
                    backing_off_for: state
                        .backoff_until
                        .filter(|until| *until > now)
                        .map(|until| until - now),
                    last_error: state.last_error.clone(),
                }
            })
            .collect()
    }

    /// New sizes for a pool; the refill loop adds or removes members to match.
    pub fn resize(
        &self,
        key: &PoolKey,
        min_idle: usize,
        max_total: usize,
    ) -> Result<(), ResizeError> {
        let pool = self.pool_of(key).ok_or(ResizeError::NoPool)?;
        let mut config = pool.config();
        config.min_idle = min_idle;
        config.max_total = max_total;
        config.validate().map_err(ResizeError::Invalid)?;
        *pool.config.lock().unwrap_or_else(|p| p.into_inner()) = config;
        {
            let mut state = pool.state();
            // The operator's sizes rule from now on; demand grows the target again.
            state.target = min_idle;
            // An operator's change is a reason to try again now.
            state.backoff_until = None;
        }
        self.wake.notify_one();
        Ok(())
    }

    fn refresh_gauges(&self, pool: &Pool, metrics: &Metrics) {
        let key = pool.config().key();
        let state = pool.state();
        let backing_off = state.backoff_until.is_some_and(|u| u > Instant::now());
        metrics.pool_state(&key, self.metrics_backend, state.idle.len(), backing_off);
    }

    /// Starts the members each pool lacks, within its backoff; returns the starts begun.
    fn fill(self: &Arc<Self>, metrics: &Arc<Metrics>) -> Vec<JoinHandle<()>> {
        let mut started = Vec::new();
        let now = Instant::now();
        for pool in &self.pools {
            let config = pool.config();
            let snapshot = pool.snapshot();
            if config.clone_of.is_some() && snapshot.is_none() {
                // Nothing to clone yet: the source's first snapshot wakes the pool.
                continue;
            }
            let slots = {
                let mut state = pool.state();
                let want = state.target.max(config.min_idle).min(config.max_total);
                // Shrunk by an operator: the newest surplus members go.
                let surplus = state.release_beyond(want);
                if !surplus.is_empty() {
                    let pools = self.clone();
                    started.push(tokio::spawn(async move {
                        pools.remove_members(surplus).await;
                    }));
                }
                if state.backoff_until.is_some_and(|until| until > now) {
                    continue;
                }
                let have = state.idle.len() + state.starting + state.handing;
                let room = config.max_total.saturating_sub(have);
                let starts = want
                    .saturating_sub(have)
                    .min(room)
                    .min(self.tuning.parallel_starts.saturating_sub(state.starting));
                let mut slots = Vec::with_capacity(starts);
                for _ in 0..starts {
                    let slot = AgentSlug::pool_slot();
                    let name = instance_name(config.engine, &slot, &self.maker);
                    state.held.insert(name.clone());
                    self.issued().insert(name.clone());
                    state.starting += 1;
                    slots.push((slot, name));
                }
                slots
            };
            for (slot, name) in slots {
                let pools = self.clone();
                let pool = pool.clone();
                let metrics = metrics.clone();
                let snapshot = snapshot.clone();
                let request = InstanceRequest {
                    major: snapshot.as_ref().map(|s| s.major()),
                    engine: config.engine,
                    owner: slot,
                    maker: self.maker.clone(),
                    features: config.features.clone(),
                    size: None,
                };
                started.push(tokio::spawn(async move {
                    pools
                        .start_member(&pool, request, snapshot, name, &metrics)
                        .await;
                }));
            }
        }
        started
    }

    async fn start_member(
        &self,
        pool: &Pool,
        request: InstanceRequest,
        snapshot: Option<Arc<Snapshot>>,
        name: String,
        metrics: &Metrics,
    ) {
        let began = Instant::now();
        self.register(&name).await;
        let outcome = match &snapshot {
            Some(snapshot) => provision_idle_clone(self.backend.as_ref(), &request, snapshot)
                .await
                .map(|(member, _)| member),
            None => self.backend.provision_idle(&request).await,
        };
        let engine = request.engine;
        let key = pool.config().key();
        let mut stale = None;
        {
            let mut state = pool.state();
            state.starting -= 1;
            match outcome {
                Ok(member) if !pool.current(&member) => {
                    // Made from a snapshot that a newer one replaced while it started.
                    state.held.remove(&name);
                    stale = Some(member.handle());
                }
                Ok(member) => {
                    state.failures = 0;
                    state.backoff_until = None;
                    state.last_error = None;
                    state.idle.push_back(member);
                    metrics.provisioned(engine, self.backend.kind(), began.elapsed());
                }
                Err(err) => {
                    state.held.remove(&name);
                    state.failures += 1;
                    let wait = self.tuning.backoff(state.failures);
                    state.backoff_until = Some(Instant::now() + wait);
                    tracing::warn!(engine = engine.name, failures = state.failures, wait_ms = wait.as_millis() as u64, error = %err, "a pool member failed to start; backing off");
                    state.last_error = Some(err.to_string());
                    metrics.pool_member_failed(&key, self.metrics_backend, "start");
                }
            }
        }
        if let Some(stale) = stale {
            sandboxd_backend::teardown_all(self.backend.as_ref(), vec![stale]).await;
        }
        if !pool.state().held.contains(&name) {
            self.unregister(&name).await;
        }
        self.refresh_gauges(pool, metrics);
        self.wake.notify_one();
    }

    /// Asks every idle member whether it still answers; quarantines the ones that do not, and
    /// shrinks pools that saw no demand since the last check back towards `min_idle`.
    async fn check(&self, metrics: &Metrics) {
        for pool in &self.pools {
            let config = pool.config();
            let count = pool.state().idle.len();
            for _ in 0..count {
                let Some(mut member) = ({
                    let mut state = pool.state();
                    let member = state.idle.pop_front();
                    state.checking += usize::from(member.is_some());
                    member
                }) else {
                    break;
                };
                let handle = member.handle();
                let answers = member.check().await.is_ok()
                    && self.backend.is_live(&handle).await.unwrap_or(false);
                if answers {
                    {
                        let mut state = pool.state();
                        state.checking -= 1;
                        state.idle.push_back(member);
                    }
                    pool.checked.notify_waiters();
                    continue;
                }
                tracing::warn!(instance = %handle.name, "an idle pool member stopped answering: quarantined");
                {
                    let mut state = pool.state();
                    state.checking -= 1;
                    state.quarantined += 1;
                    state.held.remove(&handle.name);
                }
                pool.checked.notify_waiters();
                metrics.pool_member_failed(&config.key(), self.metrics_backend, "idle");
                drop(member);
                if let Err(err) = self.backend.teardown(&handle).await {
                    tracing::warn!(instance = %handle.name, error = %err, "removing a quarantined pool member");
                }
                self.unregister(&handle.name).await;
            }
            let surplus = {
                let mut state = pool.state();
                if state.demand == 0 && state.target > config.min_idle {
                    state.target -= 1;
                }
                state.demand = 0;
                let keep = state.target.max(config.min_idle);
                state.release_beyond(keep)
            };
            self.remove_members(surplus).await;
            self.refresh_gauges(pool, metrics);
        }
    }

    async fn remove_members(&self, members: Vec<IdleMember>) {
        let handles: Vec<_> = members.iter().map(IdleMember::handle).collect();
        drop(members);
        let names: Vec<String> = handles.iter().map(|h| h.name.clone()).collect();
        sandboxd_backend::teardown_all(self.backend.as_ref(), handles).await;
        for name in names {
            self.unregister(&name).await;
        }
    }

    /// Tears down every idle member (a clean stop, once the starts under way finished).
    pub async fn drain(&self) {
        let mut members = Vec::new();
        for pool in &self.pools {
            let mut state = pool.state();
            members.extend(state.release_beyond(0));
            state.target = 0;
        }
        self.remove_members(members).await;
    }

    /// Keeps the pools filled and checked until `shutdown`; then drains them.
    pub fn spawn(
        self: &Arc<Self>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        let pools = self.clone();
        tokio::spawn(async move {
            let mut checks = tokio::time::interval(pools.tuning.check_interval);
            checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            checks.tick().await;
            let mut starts: Vec<JoinHandle<()>> = Vec::new();
            loop {
                starts.retain(|s| !s.is_finished());
                starts.extend(pools.fill(&metrics));
                // A pool in backoff is looked at again when its wait ends.
                let retry = pools.next_retry().unwrap_or(pools.tuning.check_interval);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = pools.wake.notified() => {}
                    _ = tokio::time::sleep(retry) => {}
                    _ = checks.tick() => pools.check(&metrics).await,
                }
            }
            for start in starts {
                let _ = start.await;
            }
            pools.drain().await;
        })
    }

    fn next_retry(&self) -> Option<Duration> {
        let now = Instant::now();
        self.pools
            .iter()
            .filter_map(|p| p.state().backoff_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
            .min()
    }
}

/// A member taken out of its pool for one hand-out; its name stays the pool's (so the janitor
/// leaves it alone) until the hand-out is over.
#[derive(Debug)]
pub(crate) struct Taken {
    pool: Arc<Pool>,
    wake: Arc<Notify>,
    name: String,
    member: Option<IdleMember>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        {
            let mut state = self.pool.state();
            state.held.remove(&self.name);
            state.handing -= 1;
        }
        // The hand-out is over: now the pool refills.
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min_idle: usize, max_total: usize) -> PoolConfig {
        PoolConfig {
            engine: sandboxd_domain::engines::all().next().expect("an engine"),
            clone_of: None,
            features: BTreeSet::new(),
            min_idle,
            max_total,
        }
    }

    #[test]
    fn sizes_are_validated_with_the_rule_named() {
        assert!(config(2, 4).validate().is_ok());
        assert!(config(0, 1).validate().is_ok());
        assert!(
            config(5, 4)
                .validate()
                .expect_err("refused")
                .contains("must not exceed max_total")
        );
        assert!(
            config(0, 0)
                .validate()
                .expect_err("refused")
                .contains("at least 1")
        );
    }

    #[test]
    fn the_backoff_doubles_up_to_its_ceiling() {
        let tuning = PoolTuning {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            ..PoolTuning::default()
        };
        let waits: Vec<u128> = (1..=6).map(|n| tuning.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(tuning.backoff(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn stored_sizes_parse_back() {
        assert_eq!(parse_sizes("2,6"), Some((2, 6)));
        assert_eq!(parse_sizes(" 0 , 1 "), Some((0, 1)));
        assert_eq!(parse_sizes("2"), None);
        assert_eq!(parse_sizes("a,b"), None);
    }
}
