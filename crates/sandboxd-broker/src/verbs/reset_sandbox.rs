//! `reset_sandbox`: every chosen service of the agent's sandbox back to how it was handed out,
//! in place (same endpoint, same credentials), in parallel; a clone is made again from its
//! source's newest snapshot, under its project's privacy mode (never with more of the source's
//! values than it was made with), and says which. Serialized with the agent's other sandbox
//! calls.

use std::time::Instant;

use futures::future::join_all;
use sandboxd_backend::clone::origin_of;
use sandboxd_domain::clone::{CloneOrigin, Snapshot, snapshot_under, stricter};
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::ResetSandboxArgs;
use sandboxd_domain::{Agent, Instance};

use super::Answer;
use super::answer::ResetEvidence;
use super::held::{a_member_died, choose, millis};
use crate::Broker;

impl Broker {
    /// `reset_sandbox`: every chosen service of the agent's sandbox back to how it was handed
    /// out, in place (same endpoint, same credentials), in parallel.
    pub(crate) async fn reset_sandbox(&self, agent: &Agent, args: ResetSandboxArgs) -> Answer {
        // Counted before waiting for the turn: a flood of resets is refused, not queued.
        let _heavy = self.heavy_call(&agent.slug, Verb::ResetSandbox)?;
        let _turn = self
            .turn(&agent.slug)
            .await
            .map_err(|e| crate::envelopes::internal("waiting for the agent's turn", &e))?;
        let instances = self.held_sandbox(agent).await?;
        let chosen = choose("reset_sandbox", &instances, args.services.as_deref())?;
        if !self.all_live(&instances).await {
            return Err(a_member_died());
        }
        let resets = chosen.iter().map(|instance| async move {
            let started = Instant::now();
            let outcome = match self.inner.backends.for_kind(instance.backend) {
                Some(backend) => match self.snapshot_to_reclone(agent, instance).await {
                    Ok(snapshot) => backend
                        .reset(instance, snapshot.as_ref())
                        .await
                        .map(|report| {
                            snapshot
                                .zip(report)
                                .map(|(snapshot, report)| origin_of(&snapshot, &report))
                        })
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                },
                None => Err(format!("no {} backend is configured", instance.backend)),
            };
            (*instance, outcome, started.elapsed())
        });
        let results = join_all(resets).await;
        let mut evidence = Vec::new();
        let mut failed = Vec::new();
        let mut rebuilt: Vec<(&Instance, CloneOrigin)> = Vec::new();
        for (instance, outcome, elapsed) in &results {
            self.inner
                .metrics
                .reset(instance.engine, outcome.is_ok(), *elapsed);
            match outcome {
                Ok(origin) => {
                    evidence.push(ResetEvidence {
                        service: instance.engine.name,
                        reset_ms: millis(*elapsed),
                        clone: origin.clone(),
                    });
                    if let Some(origin) = origin {
                        rebuilt.push((instance, origin.clone()));
                    }
                }
                Err(err) => {
                    tracing::warn!(agent = %agent.slug, instance = %instance.name, error = %err, "reset failed");
                    failed.push(format!("{}: {err}", instance.engine.name));
                }
            }
        }
        if !failed.is_empty() {
            return Err(ErrorEnvelope::new(
                ErrorCode::InvalidState,
                format!(
                    "your sandbox could not be reset: {}; its credentials are unchanged, its \
                     data may be partly gone",
                    failed.join("; ")
                ),
                "call reset_sandbox again, or release_sandbox and request_sandbox for a fresh one",
            )
            .retryable(true));
        }
        if !rebuilt.is_empty() {
            // A clone is now of the snapshot it was rebuilt from: `sandbox_info` says so too.
            let updated: Vec<Instance> = instances
                .iter()
                .map(|instance| {
                    let mut instance = instance.clone();
                    if let Some((_, origin)) = rebuilt.iter().find(|(i, _)| i.name == instance.name)
                    {
                        instance.clone = Some(origin.clone());
                    }
                    instance
                })
                .collect();
            if let Err(err) = self.store().put_instances(&agent.slug, &updated).await {
                tracing::warn!(agent = %agent.slug, error = %err, "recording the clones' new snapshot failed");
            }
        }
        if let Err(err) = self.store().touch_instances_of(&agent.slug).await {
            tracing::warn!(agent = %agent.slug, error = %err, "recording the sandbox's use failed");
        }
        let names: Vec<&str> = chosen.iter().map(|i| i.engine.name).collect();
        let held = self.held_task_id(&agent.slug).await;
        let mut briefing = format!(
            "Reset {}: every database, table, key and role you made is gone; the features you \
             had are active again.",
            names.join(", ")
        );
        for (instance, origin) in &rebuilt {
            briefing.push(' ');
            briefing.push_str(&origin.rebuilt(instance.engine.name));
        }
        Ok((
            OkEnvelope::new(
                held,
                "run your tests again: the same host, port and credentials work",
                briefing,
            )
            .with_evidence(evidence),
            format!("reset {}", names.join(",")),
        ))
    }

    /// What a reset makes a clone a clone of again: its source's latest snapshot (the reset
    /// removes the schema the agent owned), under the stricter of the mode the clone was made
    /// with and the one its project asks for now. None for an instance that is not a clone.
    async fn snapshot_to_reclone(
        &self,
        agent: &Agent,
        instance: &Instance,
    ) -> Result<Option<Snapshot>, String> {
        let Some(origin) = &instance.clone else {
            return Ok(None);
        };
        let source =
            sandboxd_domain::SourceName::parse(&origin.source).map_err(|e| e.to_string())?;
        let asked_now =
            self.store()
                .get_project(&agent.project)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|project| {
                    project.sandbox_clones.into_iter().find(|(engine, choice)| {
                        *engine == instance.engine && choice.source == source
                    })
                })
                .and_then(|(_, choice)| choice.privacy);
        let privacy = asked_now.map_or(origin.privacy, |now| stricter(now, origin.privacy));
        let snapshot = self
            .store()
            .latest_snapshot(&source)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("source {source} has no snapshot any more"))?;
        Ok(Some(snapshot_under(snapshot, privacy)))
    }
}
