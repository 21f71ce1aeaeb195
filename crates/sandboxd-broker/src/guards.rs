//! `request_sandbox`'s guard chain (§3.4), in its documented order; each refusal has its own
//! code, and a call failing several guards gets the earliest one's. Only "provisioner
//! unavailable" is retryable.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::{allowed_list, quote};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::verbs::RequestSandboxArgs;
use sandboxd_domain::{Agent, Task};
use sandboxd_domain::{EngineRef, Feature, FeatureRequest, ProjectSizes, SourceName};

use crate::Broker;
use crate::envelopes::internal;

/// How long a request waits for a feature probe under way before activation decides.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

/// What passed the guards.
#[derive(Debug)]
pub(crate) struct Granted {
    pub task: Task,
    /// The project's whole opted-in set: what gets provisioned.
    pub services: Vec<EngineRef>,
    /// The services this call asked about: what the answer is filtered down to.
    pub asked: Vec<EngineRef>,
    /// The project's standing features plus this call's extra ones.
    pub features: FeatureRequest,
    /// Engines the project hands out as clones, and of which source.
    pub clones: Vec<(EngineRef, SourceName)>,
    /// The project's data space per engine (the backends' defaults for the others).
    pub sizes: ProjectSizes,
}

fn names(engines: &[EngineRef]) -> String {
    allowed_list(engines.iter().map(|e| e.name))
}

impl Broker {
    /// The remediation of `no_active_task`, naming only the claiming verbs of the caller's role.
    fn how_to_claim(&self, agent: &Agent) -> String {
        const CLAIMING: [Verb; 3] = [Verb::GiveMeWork, Verb::IWillWorkOn, Verb::ClaimReview];
        let claims: Vec<&str> = self
            .manifest(&agent.role)
            .map(|role| {
                CLAIMING
                    .into_iter()
                    .filter(|verb| role.allows(*verb))
                    .map(Verb::name)
                    .collect()
            })
            .unwrap_or_default();
        match claims.as_slice() {
            [] => "your role cannot claim a task; ask the operator for a role that can".to_owned(),
            [one] => format!("call {one} first, then request_sandbox"),
            [first, rest @ ..] => {
                format!(
                    "call {first} (or {}) first, then request_sandbox",
                    rest.join(" / ")
                )
            }
        }
    }

    pub(crate) async fn check_guards(
        &self,
        agent: &Agent,
        args: &RequestSandboxArgs,
    ) -> Result<Granted, ErrorEnvelope> {
        // 1. The master switch.
        if !self.inner.enabled {
            return Err(ErrorEnvelope::new(
                ErrorCode::SandboxDisabled,
                "sandboxes are switched off on this sandboxd",
                "do not retry: an operator must arm Settings → Feature Flags → sandbox_db_enabled \
                 and restart sandboxd; run your tests without a database meanwhile",
            ));
        }

        // 2. An active, project-bound task.
        let task = self
            .store()
            .active_task_of(&agent.slug)
            .await
            .map_err(|e| internal("looking up your task", &e))?;
        let task = match task {
            Some(task) if task.project == agent.project => task,
            _ => {
                return Err(ErrorEnvelope::new(
                    ErrorCode::NoActiveTask,
                    "request_sandbox needs a task you hold in your project, and you hold none",
                    self.how_to_claim(agent),
                ));
            }
        };

        // 3. The project opted in.
        let project = self
            .store()
            .get_project(&agent.project)
            .await
            .map_err(|e| internal("reading your project", &e))?;
        let services: Vec<EngineRef> = project
            .as_ref()
            .and_then(|p| p.sandbox_services.clone())
            .unwrap_or_default();
        if services.is_empty() {
            return Err(ErrorEnvelope::new(
                ErrorCode::ProjectNotOptedIn,
                format!("project {} has not opted into sandboxes", agent.project),
                "do not retry: an operator must check the services on the project's Sandbox card; \
                 run your tests without a database meanwhile",
            ));
        }

        // 4. What was asked is within the project's set and the allowlists.
        let asked = match args.services.as_deref() {
            None | Some([]) => services.clone(),
            Some(requested) => {
                let mut asked = Vec::new();
                for name in requested {
                    match EngineRef::parse(name) {
                        Ok(engine) if services.contains(&engine) => {
                            if !asked.contains(&engine) {
                                asked.push(engine);
                            }
                        }
                        _ => {
                            return Err(ErrorEnvelope::new(
                                ErrorCode::ServiceNotAllowed,
                                format!(
                                    "service {} is not in project {}'s sandbox set; allowed: {}",
                                    quote(name),
                                    agent.project,
                                    names(&services)
                                ),
                                format!(
                                    "call request_sandbox again with services from: {}",
                                    names(&services)
                                ),
                            )
                            .with_missing(vec![name.chars().take(64).collect()]));
                        }
                    }
                }
                asked
            }
        };
        let standing = project
            .as_ref()
            .and_then(|p| p.sandbox_extensions.clone())
            .unwrap_or_default();
        let mut features = standing.clone();
        for (engine_name, wanted) in args.extensions.iter().flatten() {
            let engine = match EngineRef::parse(engine_name) {
                Ok(engine) if services.contains(&engine) => engine,
                _ => {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::FeatureNotAllowed,
                        format!(
                            "extensions were asked for {}, which project {} has not opted into; allowed services: {}",
                            quote(engine_name),
                            agent.project,
                            names(&services)
                        ),
                        format!(
                            "call request_sandbox again with extensions only for: {}",
                            names(&services)
                        ),
                    ));
                }
            };
            for name in wanted {
                let Ok(feature) = Feature::parse(engine, name) else {
                    let allowlist = allowed_list(self.offered_names(engine, PROBE_PATIENCE).await);
                    return Err(ErrorEnvelope::new(
                        ErrorCode::FeatureNotAllowed,
                        format!(
                            "feature {} is not among {}'s features here; allowed: {allowlist}",
                            quote(name),
                            engine.name
                        ),
                        format!(
                            "call request_sandbox again with {} features from: {allowlist}",
                            engine.name
                        ),
                    ));
                };
                features.insert(feature);
            }
        }
        self.check_provided(agent, &standing, &features).await?;

        // 5. The provisioner is reachable.
        let unavailable = |why: String| {
            ErrorEnvelope::new(
                ErrorCode::ProvisionerUnavailable,
                format!("the provisioner is unavailable right now: {why}"),
                "retry the same call in a few seconds",
            )
        };
        if !self.inner.ready.load(Ordering::SeqCst) {
            return Err(unavailable("sandboxd is starting".into()));
        }
        if let Err(err) = self.inner.backends.primary().ping().await {
            tracing::warn!(error = %err, "backend unreachable");
            return Err(unavailable(format!(
                "the {} backend does not answer",
                self.inner.backends.primary().kind()
            )));
        }

        let (clones, sizes) = project
            .map(|p| (p.sandbox_clones, p.sandbox_sizes))
            .unwrap_or_default();
        Ok(Granted {
            task,
            services,
            asked,
            features,
            clones,
            sizes,
        })
    }

    /// Guard 4's last part: every feature is one the primary backend provides, as far as its
    /// probe knows (a probe that cannot answer in time leaves it to activation, which names
    /// what is missing). The call's own extras are the agent's to drop; the project's standing
    /// ones are an operator's to fix.
    async fn check_provided(
        &self,
        agent: &Agent,
        standing: &FeatureRequest,
        features: &FeatureRequest,
    ) -> Result<(), ErrorEnvelope> {
        for engine in features.engines() {
            let Some(probe) = self.offered(engine, PROBE_PATIENCE).await else {
                continue;
            };
            let lacking = features
                .for_engine(engine)
                .into_iter()
                .find(|feature| !probe.provides(*feature));
            let Some(feature) = lacking else {
                continue;
            };
            let offered = allowed_list(probe.names());
            let why = probe
                .missing
                .get(feature.name())
                .map(|reason| format!(" ({reason})"))
                .unwrap_or_default();
            let message = |whose: String| {
                format!(
                    "{whose} {} is not available on this sandboxd: {} lacks it{why}; available \
                     for {}: {offered}",
                    quote(feature.name()),
                    probe.source,
                    engine.name
                )
            };
            return Err(if standing.for_engine(engine).contains(&feature) {
                ErrorEnvelope::new(
                    ErrorCode::FeatureNotAllowed,
                    message(format!(
                        "project {}'s standing {} feature",
                        agent.project, engine.name
                    )),
                    "do not retry: an operator must provide it on this sandboxd or remove it \
                     from the project's standing features; run your tests without a database \
                     meanwhile",
                )
            } else {
                ErrorEnvelope::new(
                    ErrorCode::FeatureNotAllowed,
                    message(format!("{} feature", engine.name)),
                    if probe.available.is_empty() {
                        format!(
                            "call request_sandbox again without extensions for {}",
                            engine.name
                        )
                    } else {
                        format!(
                            "call request_sandbox again with {} features from: {offered}",
                            engine.name
                        )
                    },
                )
            });
        }
        Ok(())
    }
}
