//! `request_sandbox`: the guard chain (`sandboxd_domain::guards::decide`, pure; this file only
//! gathers its inputs), then the agent's whole sandbox (`crate::sandbox`), answered filtered to
//! the services asked for.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::future::join_all;
use sandboxd_domain::Agent;
use sandboxd_domain::clone::snapshot_under;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::guards::{self, Granted, Inputs, Offer};
use sandboxd_domain::verbs::RequestSandboxArgs;

use super::Answer;
use crate::Broker;
use crate::envelopes::internal;
use crate::sandbox::{Cache, CloneOf};

/// How long a request waits for a feature probe under way before activation decides.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

/// How long a backend's answer to a ping is trusted: guard 5 must refuse within about a second
/// of the backend going away (SPEC §3.4), and a failed ping is never trusted at all.
const PING_TRUST: Duration = Duration::from_millis(500);

/// `request_sandbox`'s `next` for a role that is not configured (its call was refused before).
const AFTER_THE_SANDBOX: &str =
    "run your tests against the sandbox; call release_sandbox when you no longer need it";

impl Broker {
    /// The guard chain: its inputs gathered here, the decision `guards::decide`'s.
    #[tracing::instrument(name = "guards", skip_all)]
    async fn check_guards(
        &self,
        agent: &Agent,
        args: &RequestSandboxArgs,
    ) -> Result<Granted, ErrorEnvelope> {
        // Independent lookups, asked together; which refusal wins is `decide`'s alone, whatever
        // order they answer in.
        let (held, project, provisioner) = tokio::join!(
            self.store().active_task_of(&agent.slug),
            self.store().get_project(&agent.project),
            self.provisioner_answers(),
        );
        let held = held.map_err(|e| internal("looking up your task", &e));
        let project = project.map_err(|e| internal("reading your project", &e));
        let opted_in = project
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|p| p.sandbox_services.clone())
            .unwrap_or_default();
        // Read only past guard 3, but asked before it: a lookup, cheap, and never refusing.
        let unrunnable = self.unrunnable(&opted_in).await;
        let known = project.as_ref().ok().and_then(Option::as_ref);
        let engines = guards::engines_to_probe(known, args);
        let probes = join_all(
            engines
                .into_iter()
                .filter(|engine| !unrunnable.contains_key(engine))
                .map(|engine| async move {
                    // A clone's features are those of the major version it runs.
                    let major = match known {
                        Some(project) => self.clone_major(project, engine).await,
                        None => None,
                    };
                    (engine, self.offered_at(engine, major, PROBE_PATIENCE).await)
                }),
        )
        .await;
        let offers = probes
            .iter()
            .filter_map(|(engine, probe)| {
                probe.as_ref().map(|probe| {
                    let offer = Offer {
                        source: &probe.source,
                        available: &probe.available,
                        missing: &probe.missing,
                    };
                    (*engine, offer)
                })
            })
            .collect();
        // A feature probe may have been waited for since the ping: its answer is taken again,
        // from memory unless it has grown too old to trust.
        let provisioner = match provisioner {
            Ok(()) => self.provisioner_answers().await,
            refused => refused,
        };
        guards::decide(Inputs {
            enabled: self.inner.enabled,
            agent,
            role: self.manifest(&agent.role),
            held,
            project,
            args,
            offers,
            unrunnable,
            provisioner,
        })
    }

    /// Whether the primary backend can provision now; why not, when not.
    async fn provisioner_answers(&self) -> Result<(), String> {
        if !self.inner.ready.load(Ordering::SeqCst) {
            return Err("sandboxd is starting".into());
        }
        let answered = &self.inner.answered_ping;
        let lock = || answered.lock().unwrap_or_else(|p| p.into_inner());
        if lock().is_some_and(|at| at.elapsed() < PING_TRUST) {
            return Ok(());
        }
        let primary = self.inner.backends.primary();
        // Taken before pinging: the answer is trusted from when the ping left, not after.
        let asked = Instant::now();
        match primary.ping().await {
            Ok(()) => {
                *lock() = Some(asked);
                Ok(())
            }
            Err(err) => {
                tracing::warn!(error = %err, "backend unreachable");
                Err(format!("the {} backend does not answer", primary.kind()))
            }
        }
    }

    /// `request_sandbox`: the guard chain, then the sandbox, answered filtered to what was
    /// asked.
    pub(crate) async fn request_sandbox(&self, agent: &Agent, args: RequestSandboxArgs) -> Answer {
        let granted = self
            .check_guards(agent, &args)
            .await
            .inspect_err(|refusal| {
                self.inner.metrics.failed(refusal.error);
            })?;
        let clones = self
            .clone_snapshots(&granted)
            .await
            .inspect_err(|refusal| {
                self.inner.metrics.failed(refusal.error);
            })?;
        let (instances, cache) = self
            .ensure_sandbox(
                &agent.slug,
                &granted.services,
                &granted.features,
                &clones,
                &granted.sizes,
            )
            .await
            .map_err(|failure| {
                self.inner.metrics.failed(ErrorCode::InvalidState);
                tracing::warn!(agent = %agent.slug, error = %failure, "provisioning failed");
                failure.envelope()
            })?;
        self.inner.metrics.cache(cache == Cache::Hit);
        let prefix = &self.inner.config.env_prefix;
        let evidence: Vec<_> = instances
            .iter()
            .filter(|i| granted.asked.contains(&i.engine))
            .map(|i| self.service_evidence(i, prefix))
            .collect();
        let served: Vec<&str> = granted.asked.iter().map(|e| e.name).collect();
        let mut briefing = format!(
            "Sandbox for task {}: {}. Export each service's env (or use its url) in your test \
             run; these credentials are yours alone and stay the same on every request_sandbox \
             call until the sandbox is released.",
            granted.task.id,
            served.join(", ")
        );
        for instance in instances
            .iter()
            .filter(|i| granted.asked.contains(&i.engine))
        {
            if let Some(origin) = &instance.clone {
                briefing.push(' ');
                briefing.push_str(&origin.briefing(instance.engine.name));
            }
        }
        let ok = OkEnvelope::new(
            Some(granted.task.id.clone()),
            self.manifest(&agent.role)
                .map_or(AFTER_THE_SANDBOX, |role| role.after_the_sandbox()),
            briefing,
        )
        .with_evidence(evidence);
        let detail = format!(
            "{} {}",
            if cache == Cache::Hit {
                "cache hit"
            } else {
                "provisioned"
            },
            served.join(",")
        );
        Ok((ok, detail))
    }

    /// The latest snapshot of each source the granted services are clones of, under the
    /// project's privacy mode (values stripped for a project stricter than its source); a
    /// source without one refuses the request (retryable: a snapshot may be under way).
    async fn clone_snapshots(&self, granted: &Granted) -> Result<Vec<CloneOf>, ErrorEnvelope> {
        let mut clones = Vec::new();
        for (engine, choice) in &granted.clones {
            if !granted.services.contains(engine) {
                continue;
            }
            let source = &choice.source;
            let snapshot = self
                .store()
                .latest_snapshot(source)
                .await
                .map_err(|e| internal("reading the clone's snapshot", &e))?;
            let Some(snapshot) = snapshot else {
                return Err(ErrorEnvelope::new(
                    ErrorCode::ProvisionerUnavailable,
                    format!("{engine} is a clone of source {source}, which has no snapshot yet"),
                    format!(
                        "retry later; an operator takes one with `sandboxd sources snapshot \
                         {source}`"
                    ),
                ));
            };
            let privacy = choice.privacy_over(snapshot.privacy);
            let as_stored = privacy == snapshot.privacy;
            clones.push(CloneOf {
                engine: *engine,
                snapshot: Arc::new(snapshot_under(snapshot, privacy)),
                as_stored,
            });
        }
        Ok(clones)
    }
}
