//! The orphan janitor: at start and on every tick it lists every instance the backends know
//! (labels, metadata — never memory) and acts only on those this daemon made (their maker is
//! its store's id); every other instance is foreign, counted and never touched. Of its own, it
//! reaps at once the orphans (instances its store does not know and no call of their owner is
//! making: a provision a crash cut short), and, past the grace window, those whose owner is
//! gone, that died, that outlived the maximum lifetime, or that their owner left idle past the
//! idle TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sandboxd_backend::{ListedInstance, Sweep};
use sandboxd_domain::Actor;
use sandboxd_domain::AgentSlug;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::envelope::ErrorCode;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};

/// Why the janitor removed an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReapReason {
    /// Made by this daemon but unknown to its store, and no call of its owner is making it.
    Orphan,
    /// No agent of that name exists any more.
    OwnerGone,
    /// Older than the configured maximum lifetime.
    MaxLifetime,
    /// Its owner left it unused past the idle TTL.
    Idle,
    /// It is no longer running (killed, OOM, removed in part).
    Dead,
}

impl ReapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Orphan => "orphan",
            Self::OwnerGone => "owner_gone",
            Self::MaxLifetime => "max_lifetime",
            Self::Idle => "idle",
            Self::Dead => "dead",
        }
    }
}

impl std::fmt::Display for ReapReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Default, Clone)]
pub struct JanitorReport {
    /// Instances the backends listed.
    pub examined: usize,
    /// Reaped instances (by name) and why.
    pub reaped: Vec<(String, ReapReason)>,
    /// Skipped because they are younger than the grace window.
    pub kept_young: usize,
    /// Made by another daemon or the CLI: listed, never touched.
    pub foreign: usize,
    /// Members of this run's warm pools (or of a live replica's), idle, starting or being
    /// handed out: left to them.
    pub pooled: usize,
    /// Another replica leads the janitor now: this one looked at nothing.
    pub not_leader: bool,
    /// Stored sandbox rows whose instances no backend lists any more.
    pub forgotten: usize,
    /// Things this daemon's instances left beside themselves (a daemon network none of its containers uses).
    pub swept: usize,
}

fn since(at_ms: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(now - at_ms).unwrap_or(0))
}

impl Broker {
    /// One janitor pass.
    #[tracing::instrument(name = "janitor_pass", skip_all)]
    pub async fn janitor_pass(&self) -> JanitorReport {
        let mut report = JanitorReport::default();
        // Replicas: one at a time, for a term that outlasts a few ticks (a crashed leader's
        // lead passes on within it).
        let term = crate::replicas::Replication::alive_within(self.inner.config.janitor_interval);
        if !self.leads("janitor", term).await {
            report.not_leader = true;
            return report;
        }
        let agents: BTreeSet<AgentSlug> = match self.store().list_agents(None).await {
            Ok(agents) => agents.into_iter().map(|a| a.slug).collect(),
            Err(err) => {
                // Without the owner list nothing can be judged safely: reap nothing this time.
                tracing::error!(error = %err, "janitor: listing agents failed; skipping this pass");
                return report;
            }
        };
        let grace = self.inner.config.grace;
        let max_lifetime = self.inner.config.max_lifetime;
        let idle_ttl = self.inner.config.idle_ttl;
        // The idle clock lives in the store; an instance it does not know (provisioned outside
        // the broker) counts as last used when it was created.
        let stored = match self.store().instance_summaries().await {
            Ok(stored) => stored,
            Err(err) => {
                tracing::error!(error = %err, "janitor: reading the store failed; skipping this pass");
                return report;
            }
        };
        let last_used: BTreeMap<&str, i64> = stored
            .iter()
            .map(|row| (row.name.as_str(), row.last_used_at_ms))
            .collect();
        let listing = self.inner.backends.listing().await;
        let listed = listing.instances;
        let listed_names: BTreeSet<String> = listed.iter().map(|i| i.handle.name.clone()).collect();
        let now = now_ms();
        let pool_slots: std::collections::HashSet<String> = listed
            .iter()
            .filter(|i| i.handle.owner.is_pool_slot())
            .map(|i| i.handle.name.clone())
            .collect();
        for instance in listed {
            report.examined += 1;
            if instance.handle.maker != self.inner.daemon {
                report.foreign += 1;
                continue;
            }
            if instance.handle.owner.is_pool_slot() {
                // This run's pools (and a live replica's) judge their own members; any other
                // member of this daemon is a previous run's (pools are rebuilt after a restart).
                if self.inner.pools.owns(&instance.handle.name)
                    || self.pool_member_elsewhere(&instance.handle.name).await
                {
                    report.pooled += 1;
                } else if self.reap_orphan(&instance).await {
                    report
                        .reaped
                        .push((instance.handle.name.clone(), ReapReason::Orphan));
                }
                continue;
            }
            if !last_used.contains_key(instance.handle.name.as_str()) {
                if self.reap_orphan(&instance).await {
                    report
                        .reaped
                        .push((instance.handle.name.clone(), ReapReason::Orphan));
                }
                continue;
            }
            let age = since(instance.created_at_ms, now);
            if age < grace {
                report.kept_young += 1;
                continue;
            }
            let reason = if !agents.contains(&instance.handle.owner) {
                ReapReason::OwnerGone
            } else if max_lifetime.is_some_and(|max| age > max) {
                ReapReason::MaxLifetime
            } else if idle_ttl.is_some_and(|ttl| {
                let used = last_used
                    .get(instance.handle.name.as_str())
                    .copied()
                    .unwrap_or(instance.created_at_ms);
                since(used, now) > ttl
            }) {
                ReapReason::Idle
            } else if !instance.live {
                ReapReason::Dead
            } else {
                continue;
            };
            if !self.reap(&instance, reason).await {
                continue;
            }
            report.reaped.push((instance.handle.name.clone(), reason));
        }
        self.inner.pools.forget_gone(&pool_slots);
        // What this daemon's reaped or crashed instances left beside themselves.
        for backend in self.inner.backends.all() {
            match backend.sweep(&self.inner.daemon, Sweep::Settled).await {
                Ok(swept) => report.swept += swept,
                Err(err) => {
                    tracing::warn!(backend = %backend.kind(), error = %err, "janitor: sweeping failed");
                }
            }
        }
        // Rows of instances their backend no longer lists (removed out of band, host rebooted).
        // A backend that could not list says nothing about its instances: keep their rows.
        let now = now_ms();
        for row in &stored {
            let old = since(row.created_at_ms, now) >= grace;
            if old && !listing.unlisted.contains(&row.backend) && !listed_names.contains(&row.name)
            {
                let Ok(_turn) = self.turn(&row.owner).await else {
                    continue;
                };
                if self
                    .store()
                    .delete_instance(&row.name)
                    .await
                    .unwrap_or(false)
                {
                    report.forgotten += 1;
                }
            }
        }
        self.refresh_live_gauge().await;
        if !report.reaped.is_empty() || report.forgotten > 0 {
            tracing::info!(
                reaped = report.reaped.len(),
                forgotten = report.forgotten,
                "janitor pass"
            );
        }
        report
    }

    /// Reaps an instance of this daemon that its store does not know, without waiting for the
    /// grace window. Its owner's lock tells a leftover from a provision under way: a call that
    /// provisions holds it until the store knows the result, so a free lock and a store that
    /// still does not know the instance mean nothing will ever claim it. False when it was left.
    async fn reap_orphan(&self, instance: &ListedInstance) -> bool {
        let owner = &instance.handle.owner;
        let Some(_turn) = self.try_turn(owner).await else {
            return false;
        };
        match self.store().instances_of(owner).await {
            Ok(stored) if stored.iter().all(|i| i.name != instance.handle.name) => {}
            Ok(_) => return false,
            Err(err) => {
                tracing::warn!(instance = %instance.handle.name, error = %err, "janitor: reading the store failed; keeping a possible orphan");
                return false;
            }
        }
        self.remove_listed(instance, ReapReason::Orphan, Instant::now())
            .await;
        true
    }

    /// Reaps one instance; false when it turned out to be in use after all.
    async fn reap(&self, instance: &ListedInstance, reason: ReapReason) -> bool {
        let started = Instant::now();
        let Ok(_turn) = self.turn(&instance.handle.owner).await else {
            return false;
        };
        // The owner may have asked for its sandbox since the listing: judge idleness again
        // under its lock, where no request can slip in.
        if reason == ReapReason::Idle && !self.still_idle(instance).await {
            return false;
        }
        self.remove_listed(instance, reason, started).await;
        true
    }

    /// Tears a listed instance down and forgets it, counted and audited. The caller holds its
    /// owner's lock.
    #[tracing::instrument(name = "reap", skip_all, fields(instance = %instance.handle.name, agent = %instance.handle.owner, %reason))]
    async fn remove_listed(&self, instance: &ListedInstance, reason: ReapReason, started: Instant) {
        let owner = &instance.handle.owner;
        let outcome = match self.inner.backends.for_kind(instance.handle.backend) {
            Some(backend) => backend.teardown(&instance.handle).await,
            None => Ok(()),
        };
        // A dead member takes its whole sandbox with it: the agent's next request then gets a
        // fresh full set with new credentials, never a mix of old and new.
        let members = self.store().instances_of(owner).await.unwrap_or_default();
        if reason == ReapReason::Dead && members.iter().any(|m| m.name == instance.handle.name) {
            let others: Vec<_> = members
                .into_iter()
                .filter(|m| m.name != instance.handle.name)
                .collect();
            self.teardown_instances(&others).await;
            let _ = self.store().delete_instances_of(owner).await;
        } else {
            let _ = self.store().delete_instance(&instance.handle.name).await;
        }
        let result = match &outcome {
            Ok(()) => {
                self.inner.metrics.reaped(reason);
                Outcome::Ok
            }
            Err(err) => {
                tracing::warn!(instance = %instance.handle.name, error = %err, "janitor: reap failed");
                Outcome::Failed(ErrorCode::Internal)
            }
        };
        self.audit(AuditRecord {
            actor: Actor::Daemon,
            action: AuditAction::Reap,
            subject: owner.as_str(),
            project: None,
            outcome: result,
            started,
            detail: format!("{} ({reason})", instance.handle.name),
        })
        .await;
    }

    /// Whether `name` is a member of another live replica's warm pools.
    async fn pool_member_elsewhere(&self, name: &str) -> bool {
        match &self.inner.replication {
            Some(replication) => {
                let within =
                    crate::replicas::Replication::alive_within(self.inner.config.janitor_interval);
                replication.pool_member_alive(name, within).await
            }
            None => false,
        }
    }

    async fn still_idle(&self, instance: &ListedInstance) -> bool {
        let Some(ttl) = self.inner.config.idle_ttl else {
            return false;
        };
        match self.store().last_used_of(&instance.handle.name).await {
            Ok(used) => since(used.unwrap_or(instance.created_at_ms), now_ms()) > ttl,
            Err(err) => {
                tracing::warn!(instance = %instance.handle.name, error = %err, "janitor: reading the idle clock failed");
                false
            }
        }
    }

    /// At a clean stop: removes what this daemon's instances shared when none is left (its
    /// Docker network), so a stopped daemon with no sandbox leaves nothing behind. Sandboxes
    /// that are still up keep it. Feature probes under way end first: each removes its
    /// instance.
    pub async fn sweep_at_stop(&self) {
        self.wait_for_probes().await;
        for backend in self.inner.backends.all() {
            if let Err(err) = backend.sweep(&self.inner.daemon, Sweep::Now).await {
                tracing::warn!(backend = %backend.kind(), error = %err, "sweeping at stop failed");
            }
        }
    }

    /// Runs a pass every `janitor_interval` until `shutdown` is cancelled.
    pub fn spawn_janitor(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        let broker = self.clone();
        let period = self.inner.config.janitor_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await; // the first tick is immediate; start already ran a pass
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = ticker.tick() => {
                        broker.janitor_pass().await;
                    }
                }
            }
        })
    }
}
