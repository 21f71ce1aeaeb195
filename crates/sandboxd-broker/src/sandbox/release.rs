//! Tearing sandboxes down (on release, on a member's death, at the end of an engagement), and
//! after a restart reconciling what the backends run with what the store holds.

use std::collections::BTreeSet;
use std::time::Instant;

use futures::future::join_all;
use sandboxd_backend::InstanceHandle;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::{Actor, Agent, AgentSlug, Instance};

use super::SandboxFailure;
use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};

impl Broker {
    /// Tears instances down on their own backends, best effort.
    pub(crate) async fn teardown_instances(&self, instances: &[Instance]) {
        let handles: Vec<InstanceHandle> = instances.iter().map(InstanceHandle::of).collect();
        self.teardown_handles(&handles).await;
    }

    pub(crate) async fn teardown_handles(&self, handles: &[InstanceHandle]) {
        let work = handles.iter().map(|handle| async move {
            let Some(backend) = self.inner.backends.for_kind(handle.backend) else {
                tracing::warn!(instance = %handle.name, "no backend of its kind to tear it down");
                return;
            };
            if let Err(err) = backend.teardown(handle).await {
                tracing::warn!(instance = %handle.name, error = %err, "teardown failed");
            }
        });
        join_all(work).await;
    }

    /// Releases an agent's sandbox: its cached members and any stray instance a backend lists
    /// under its name. Returns how many instances went.
    #[tracing::instrument(name = "release", skip_all, fields(agent = %agent))]
    pub(crate) async fn release(&self, agent: &AgentSlug) -> Result<usize, SandboxFailure> {
        let _turn = self.turn(agent).await.map_err(SandboxFailure::Turn)?;
        let cached = self
            .store()
            .instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        let mut handles: Vec<InstanceHandle> = cached.iter().map(InstanceHandle::of).collect();
        for instance in self.inner.backends.list_all().await {
            if &instance.handle.owner == agent
                && instance.handle.maker == self.inner.daemon
                && !handles.iter().any(|h| h.name == instance.handle.name)
            {
                handles.push(instance.handle);
            }
        }
        self.teardown_handles(&handles).await;
        self.store()
            .delete_instances_of(agent)
            .await
            .map_err(SandboxFailure::Store)?;
        self.refresh_live_gauge().await;
        Ok(handles.len())
    }

    /// The release hook of lifecycle verbs and agent removal: best effort, audited, never
    /// failing its caller.
    pub(crate) async fn release_best_effort(&self, agent: &Agent, because: &str) {
        let started = Instant::now();
        let outcome = self.release(&agent.slug).await;
        let (result, detail) = match &outcome {
            Ok(0) => (Outcome::Ok, format!("nothing to release ({because})")),
            Ok(n) => (Outcome::Ok, format!("{n} instance(s) released ({because})")),
            Err(err) => {
                tracing::warn!(agent = %agent.slug, error = %err, "release failed");
                (
                    Outcome::Failed(ErrorCode::Internal),
                    format!("release failed ({because})"),
                )
            }
        };
        if !matches!(outcome, Ok(0)) {
            self.audit(AuditRecord {
                actor: Actor::Agent(agent.slug.clone()),
                action: AuditAction::Release,
                subject: agent.slug.as_str(),
                project: Some(&agent.project),
                outcome: result,
                started,
                detail,
            })
            .await;
        }
    }

    /// At start: sandboxes of a previous run whose members are all live keep their credentials
    /// (adopted); any other is torn down and forgotten, to be re-provisioned on the next request.
    pub(crate) async fn reconcile(&self) {
        let started = Instant::now();
        let instances = match self.store().all_instances().await {
            Ok(instances) => instances,
            Err(err) => {
                tracing::error!(error = %err, "reading stored sandboxes failed");
                return;
            }
        };
        let owners: BTreeSet<AgentSlug> = instances.iter().map(|i| i.owner.clone()).collect();
        let (mut adopted, mut dropped) = (0, 0);
        for owner in owners {
            let members: Vec<Instance> = instances
                .iter()
                .filter(|i| i.owner == owner)
                .cloned()
                .collect();
            if self.all_live(&members).await {
                adopted += members.len();
                continue;
            }
            dropped += members.len();
            self.teardown_instances(&members).await;
            if let Err(err) = self.store().delete_instances_of(&owner).await {
                tracing::error!(%owner, error = %err, "forgetting a dead sandbox failed");
            }
        }
        self.refresh_live_gauge().await;
        tracing::info!(adopted, dropped, "reconciled stored sandboxes");
        self.audit(AuditRecord {
            actor: Actor::Daemon,
            action: AuditAction::Reconcile,
            subject: "sandboxes",
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!("{adopted} instance(s) adopted, {dropped} dropped"),
        })
        .await;
    }

    /// The gauge refreshed off the request path: the agent's answer does not wait for a
    /// `COUNT`. Two refreshes may finish out of order; the next one corrects a stale value.
    pub(crate) fn spawn_live_gauge_refresh(&self) {
        let broker = self.clone();
        tokio::spawn(async move { broker.refresh_live_gauge().await });
    }

    pub(crate) async fn refresh_live_gauge(&self) {
        if let Ok(count) = self.store().count_instances().await {
            self.inner.metrics.live_sandboxes.set(count);
        }
    }
}
