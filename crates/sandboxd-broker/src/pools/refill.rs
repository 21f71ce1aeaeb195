//! The background task: starts members up to each pool's target, checks idle ones, backs off,
//! grows and shrinks the target with demand, and removes members at shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_backend::clone::provision_idle_clone;
use sandboxd_backend::{IdleMember, InstanceRequest};
use sandboxd_domain::AgentSlug;
use sandboxd_domain::clone::Snapshot;
use sandboxd_domain::instance::instance_name;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Pool, Pools};
use crate::metrics::Metrics;

impl Pools {
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
        // The account is made and proven now, off any agent's request path.
        let outcome = match outcome {
            Ok(member) => member.ready(self.backend.as_ref()).await,
            Err(err) => Err(err),
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
                    state.started_in(began.elapsed());
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
        // A take queued for this start looks again: at the member, or at a failure.
        pool.checked.notify_waiters();
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
                let answers = match member.check_on(self.backend.as_ref()).await {
                    Ok(()) => self.backend.is_live(&handle).await.unwrap_or(false),
                    Err(err) => {
                        tracing::warn!(instance = %handle.name, error = %err, "an idle pool member failed its check");
                        false
                    }
                };
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

    /// Keeps the pools filled and checked until `shutdown`; then drains them. While the master
    /// switch is off (`armed` false) nothing runs for agents, so the pools start nothing and
    /// stay empty (a previous run's members are the janitor's at start); the restart that arms
    /// the switch fills them.
    pub fn spawn(
        self: &Arc<Self>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        armed: bool,
    ) -> JoinHandle<()> {
        let pools = self.clone();
        tokio::spawn(async move {
            if !armed {
                if !pools.pools.is_empty() {
                    tracing::info!(
                        "warm pools stay empty: sandbox_db_enabled is off (they fill after the \
                         restart that arms it)"
                    );
                }
                shutdown.cancelled().await;
                pools.drain().await;
                return;
            }
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
