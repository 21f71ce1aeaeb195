//! `request_sandbox`'s guard chain (§3.4) as one pure decision: the broker gathers what the
//! guards read (the switch, the agent's task, its project, what the backend provides, whether
//! the provisioner answers) and [`decide`] answers, in the documented order, the earliest
//! refusal or what was granted. Each refusal has its own code; only "provisioner unavailable"
//! is retryable.

use std::collections::{BTreeMap, BTreeSet};

use crate::clone::CloneChoice;
use crate::envelope::{ErrorCode, ErrorEnvelope};
use crate::error::{allowed_list, quote};
use crate::hints::how_to_claim;
use crate::roles::RoleSpec;
use crate::verbs::RequestSandboxArgs;
use crate::{Agent, EngineRef, Feature, FeatureRequest, Project, ProjectSizes, Task};

/// What the primary backend provides of one engine's allowlist, as its probe found.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// Where the features come from: the image, or the host's installation.
    pub source: &'a str,
    pub available: &'a BTreeSet<Feature>,
    /// Each feature it lacks: the server's reason and what provides it.
    pub missing: &'a BTreeMap<&'static str, String>,
}

impl Offer<'_> {
    fn names(&self) -> Vec<&'static str> {
        self.available.iter().map(|f| f.name()).collect()
    }
}

/// Everything the guards read, gathered before they decide. A lookup that failed carries the
/// refusal it becomes, answered only when its guard is reached.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The master switch.
    pub enabled: bool,
    pub agent: &'a Agent,
    /// The agent's role's manifest (None: not configured).
    pub role: Option<&'a RoleSpec>,
    /// The task the agent holds.
    pub held: Result<Option<Task>, ErrorEnvelope>,
    /// The agent's project.
    pub project: Result<Option<Project>, ErrorEnvelope>,
    pub args: &'a RequestSandboxArgs,
    /// What the backend provides, for each engine in [`engines_to_probe`] whose probe answered.
    pub offers: BTreeMap<EngineRef, Offer<'a>>,
    /// The opted-in engines the primary backend cannot run, each with why and what provides it
    /// (for the operator). An engine whose backend could not be asked is not here: guard 5
    /// answers for an unreachable backend.
    pub unrunnable: BTreeMap<EngineRef, String>,
    /// Whether the provisioner answers; why not, when not.
    pub provisioner: Result<(), String>,
}

/// What passed the guards.
#[derive(Debug)]
pub struct Granted {
    pub task: Task,
    /// The project's whole opted-in set that the backend runs: what gets provisioned.
    pub services: Vec<EngineRef>,
    /// The services this call asked about: what the answer is filtered down to.
    pub asked: Vec<EngineRef>,
    /// The project's standing features plus this call's extra ones.
    pub features: FeatureRequest,
    /// Engines the project hands out as clones, of which source and under which privacy.
    pub clones: Vec<(EngineRef, CloneChoice)>,
    /// The project's data space per engine (the backends' defaults for the others).
    pub sizes: ProjectSizes,
}

fn names(engines: &[EngineRef]) -> String {
    allowed_list(engines.iter().map(|e| e.name))
}

fn opted_in(project: Option<&Project>) -> Vec<EngineRef> {
    project
        .and_then(|p| p.sandbox_services.clone())
        .unwrap_or_default()
}

/// The engines whose features a call asks for (standing or extra, of an opted-in engine):
/// the only ones whose offers [`decide`] reads.
pub fn engines_to_probe(project: Option<&Project>, args: &RequestSandboxArgs) -> Vec<EngineRef> {
    let services = opted_in(project);
    let mut engines: BTreeSet<EngineRef> = project
        .and_then(|p| p.sandbox_extensions.as_ref())
        .map(|standing| standing.engines().collect())
        .unwrap_or_default();
    for name in args.extensions.iter().flatten().map(|(name, _)| name) {
        if let Ok(engine) = EngineRef::parse(name)
            && services.contains(&engine)
        {
            engines.insert(engine);
        }
    }
    engines.into_iter().collect()
}

/// The guard chain, in order: 1. the master switch, 2. an active task of the agent's project,
/// 3. the project opted in, 4. what was asked is within the project's set, runs here, and its
/// features are what the backend provides, 5. the provisioner answers.
pub fn decide(inputs: Inputs<'_>) -> Result<Granted, ErrorEnvelope> {
    let Inputs {
        enabled,
        agent,
        role,
        held,
        project,
        args,
        offers,
        unrunnable,
        provisioner,
    } = inputs;

    // 1. The master switch.
    if !enabled {
        return Err(ErrorEnvelope::new(
            ErrorCode::SandboxDisabled,
            "sandboxes are switched off on this sandboxd",
            "do not retry: an operator must arm Settings → Feature Flags → sandbox_db_enabled \
             and restart sandboxd; run your tests without a database meanwhile",
        ));
    }

    // 2. An active, project-bound task.
    let task = match held? {
        Some(task) if task.project == agent.project => task,
        _ => {
            return Err(ErrorEnvelope::new(
                ErrorCode::NoActiveTask,
                "request_sandbox needs a task you hold in your project, and you hold none",
                how_to_claim(role),
            ));
        }
    };

    // 3. The project opted in.
    let project = project?;
    let services = opted_in(project.as_ref());
    if services.is_empty() {
        return Err(ErrorEnvelope::new(
            ErrorCode::ProjectNotOptedIn,
            format!("project {} has not opted into sandboxes", agent.project),
            "do not retry: an operator must check the services on the project's Sandbox card; \
             run your tests without a database meanwhile",
        ));
    }

    // 4. What was asked is within the project's set, runs here, and the allowlists.
    let asked = asked_services(agent, args, &services)?;
    let runnable = runnable_of(agent, &asked, &services, &unrunnable)?;
    let standing = project
        .as_ref()
        .and_then(|p| p.sandbox_extensions.clone())
        .unwrap_or_default();
    let features = with_extras(agent, args, &services, &standing, &offers)?;
    check_provided(agent, &standing, &features, &offers)?;
    let features = only_for(&features, &runnable);

    // 5. The provisioner is reachable.
    if let Err(why) = provisioner {
        return Err(ErrorEnvelope::new(
            ErrorCode::ProvisionerUnavailable,
            format!("the provisioner is unavailable right now: {why}"),
            "retry the same call in a few seconds",
        ));
    }

    let (clones, sizes) = project
        .map(|p| (p.sandbox_clones, p.sandbox_sizes))
        .unwrap_or_default();
    Ok(Granted {
        task,
        services: runnable,
        asked,
        features,
        clones,
        sizes,
    })
}

/// Guard 4's first part: the services asked for (all when none is named), each in the
/// project's set, without repeats.
fn asked_services(
    agent: &Agent,
    args: &RequestSandboxArgs,
    services: &[EngineRef],
) -> Result<Vec<EngineRef>, ErrorEnvelope> {
    let Some(requested) = args.services.as_deref().filter(|r| !r.is_empty()) else {
        return Ok(services.to_vec());
    };
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
                        names(services)
                    ),
                    format!(
                        "call request_sandbox again with services from: {}",
                        names(services)
                    ),
                )
                .with_missing(vec![name.chars().take(64).collect()]));
            }
        }
    }
    Ok(asked)
}

/// Guard 4's second part: every service asked for is one the backend runs. An opted-in engine
/// that stopped running here (its image removed, its programs uninstalled) stays the project's
/// choice, but is left out of the sandbox: a call not asking for it gets the others. The agent
/// is told what it can ask for instead; how to provide the engine is the operator's to read.
fn runnable_of(
    agent: &Agent,
    asked: &[EngineRef],
    services: &[EngineRef],
    unrunnable: &BTreeMap<EngineRef, String>,
) -> Result<Vec<EngineRef>, ErrorEnvelope> {
    let runnable: Vec<EngineRef> = services
        .iter()
        .copied()
        .filter(|engine| !unrunnable.contains_key(engine))
        .collect();
    let lacking: Vec<EngineRef> = asked
        .iter()
        .copied()
        .filter(|engine| unrunnable.contains_key(engine))
        .collect();
    if lacking.is_empty() {
        return Ok(runnable);
    }
    let what = names(&lacking);
    let instead = if runnable.is_empty() {
        "none of its other services runs here either: run your tests without a database until \
         an operator provides one"
            .to_owned()
    } else {
        format!(
            "call request_sandbox again with services from those that run here: {}",
            names(&runnable)
        )
    };
    let why: Vec<String> = lacking
        .iter()
        .map(|engine| unrunnable.get(engine).cloned().unwrap_or_default())
        .collect();
    Err(ErrorEnvelope::new(
        ErrorCode::EngineUnavailable,
        format!(
            "{what}, which project {} opted into, cannot run on this sandboxd; do not ask for \
             {what} again: {instead}",
            agent.project
        ),
        format!(
            "for the operator: {}; or remove {what} from project {}'s services",
            why.join("; "),
            agent.project
        ),
    )
    .with_missing(lacking.iter().map(|e| e.name.to_owned()).collect()))
}

/// `features` without those of engines that are not provisioned.
fn only_for(features: &FeatureRequest, services: &[EngineRef]) -> FeatureRequest {
    let mut kept = FeatureRequest::default();
    for feature in features.features() {
        if services.contains(&feature.engine()) {
            kept.insert(feature);
        }
    }
    kept
}

/// Guard 4's third part: the project's standing features plus the call's extras, each for an
/// opted-in engine and in its allowlist.
fn with_extras(
    agent: &Agent,
    args: &RequestSandboxArgs,
    services: &[EngineRef],
    standing: &FeatureRequest,
    offers: &BTreeMap<EngineRef, Offer<'_>>,
) -> Result<FeatureRequest, ErrorEnvelope> {
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
                        names(services)
                    ),
                    format!(
                        "call request_sandbox again with extensions only for: {}",
                        names(services)
                    ),
                ));
            }
        };
        for name in wanted {
            let Ok(feature) = Feature::parse(engine, name) else {
                // What the probe found, else the allowlist (activation names what is missing).
                let offered = match offers.get(&engine) {
                    Some(offer) => offer.names(),
                    None => engine.features.iter().map(|f| f.name).collect(),
                };
                let allowlist = allowed_list(offered);
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
    Ok(features)
}

/// Guard 4's last part: every feature is one the primary backend provides, as far as its
/// probe knows (an engine without an offer is left to activation, which names what is
/// missing). The call's own extras are the agent's to drop; the project's standing ones are an
/// operator's to fix.
fn check_provided(
    agent: &Agent,
    standing: &FeatureRequest,
    features: &FeatureRequest,
    offers: &BTreeMap<EngineRef, Offer<'_>>,
) -> Result<(), ErrorEnvelope> {
    for engine in features.engines() {
        let Some(offer) = offers.get(&engine) else {
            continue;
        };
        let lacking = features
            .for_engine(engine)
            .into_iter()
            .find(|feature| !offer.available.contains(feature));
        let Some(feature) = lacking else {
            continue;
        };
        let offered = allowed_list(offer.names());
        let why = offer
            .missing
            .get(feature.name())
            .map(|reason| format!(" ({reason})"))
            .unwrap_or_default();
        let message = |whose: String| {
            format!(
                "{whose} {} is not available on this sandboxd: {} lacks it{why}; available \
                 for {}: {offered}",
                quote(feature.name()),
                offer.source,
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
                if offer.available.is_empty() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::TaskState;
    use crate::roles::RoleBook;
    use crate::{AgentSlug, ProjectSlug};

    fn engine(name: &str) -> EngineRef {
        EngineRef::parse(name).expect("a known engine")
    }

    fn agent() -> Agent {
        Agent {
            slug: AgentSlug::parse("dev-1").expect("slug"),
            role: "developer".into(),
            project: ProjectSlug::parse("shop").expect("slug"),
            token_hash: String::new(),
            created_at_ms: 0,
        }
    }

    fn task(project: &str) -> Task {
        Task {
            id: "t-1".into(),
            project: ProjectSlug::parse(project).expect("slug"),
            title: "t".into(),
            description: String::new(),
            state: TaskState::InProgress,
            claimed_by: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    fn project(services: &[&str]) -> Project {
        Project {
            slug: ProjectSlug::parse("shop").expect("slug"),
            sandbox_services: Some(services.iter().map(|s| engine(s)).collect()),
            sandbox_extensions: None,
            sandbox_clones: Vec::new(),
            sandbox_sizes: ProjectSizes::default(),
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    /// `engine` cannot run, for the reason an image-less Docker backend gives.
    fn unrunnable(engine_name: &str) -> BTreeMap<EngineRef, String> {
        BTreeMap::from([(
            engine(engine_name),
            format!(
                "the docker backend cannot run {engine_name}: image {engine_name}:8 is not \
                 present; pull it with `docker pull {engine_name}:8`"
            ),
        )])
    }

    struct Case {
        enabled: bool,
        held: Option<Task>,
        project: Option<Project>,
        args: RequestSandboxArgs,
        unrunnable: BTreeMap<EngineRef, String>,
        provisioner: Result<(), String>,
    }

    impl Case {
        /// A call that passes every guard.
        fn passing() -> Self {
            Self {
                enabled: true,
                held: Some(task("shop")),
                project: Some(project(&["postgres", "redis"])),
                args: RequestSandboxArgs::default(),
                unrunnable: BTreeMap::new(),
                provisioner: Ok(()),
            }
        }

        fn decide(self, offers: BTreeMap<EngineRef, Offer<'_>>) -> Result<Granted, ErrorEnvelope> {
            let book = RoleBook::default();
            let agent = agent();
            decide(Inputs {
                enabled: self.enabled,
                agent: &agent,
                role: book.get(&agent.role),
                held: Ok(self.held),
                project: Ok(self.project),
                args: &self.args,
                offers,
                unrunnable: self.unrunnable,
                provisioner: self.provisioner,
            })
        }

        fn refusal(self) -> ErrorCode {
            self.decide(BTreeMap::new()).expect_err("refused").error
        }
    }

    #[test]
    fn a_call_failing_every_guard_gets_the_first_ones_refusal() {
        let failing = |upto: usize| {
            let mut case = Case::passing();
            if upto >= 1 {
                case.provisioner = Err("down".into());
            }
            if upto >= 2 {
                case.unrunnable = unrunnable("redis");
            }
            if upto >= 3 {
                case.args.services = Some(vec!["redis".into(), "mongo".into()]);
            }
            if upto >= 4 {
                case.project = Some(project(&[]));
            }
            if upto >= 5 {
                case.held = Some(task("elsewhere"));
            }
            if upto >= 6 {
                case.enabled = false;
            }
            case.refusal()
        };
        assert_eq!(failing(1), ErrorCode::ProvisionerUnavailable);
        assert_eq!(failing(2), ErrorCode::EngineUnavailable);
        assert_eq!(failing(3), ErrorCode::ServiceNotAllowed);
        assert_eq!(failing(4), ErrorCode::ProjectNotOptedIn);
        assert_eq!(failing(5), ErrorCode::NoActiveTask);
        assert_eq!(failing(6), ErrorCode::SandboxDisabled);
    }

    #[test]
    fn a_failed_lookup_refuses_only_when_its_guard_is_reached() {
        let book = RoleBook::default();
        let agent = agent();
        let args = RequestSandboxArgs::default();
        let broken = || ErrorEnvelope::new(ErrorCode::Internal, "store down", "retry");
        let inputs = |enabled| Inputs {
            enabled,
            agent: &agent,
            role: book.get("developer"),
            held: Err(broken()),
            project: Err(broken()),
            args: &args,
            offers: BTreeMap::new(),
            unrunnable: BTreeMap::new(),
            provisioner: Ok(()),
        };
        assert_eq!(
            decide(inputs(false)).expect_err("off").error,
            ErrorCode::SandboxDisabled
        );
        assert_eq!(
            decide(inputs(true)).expect_err("lookup").error,
            ErrorCode::Internal
        );
    }

    #[test]
    fn the_whole_set_is_granted_and_the_answer_filtered_to_what_was_asked() {
        let mut case = Case::passing();
        case.args.services = Some(vec!["redis".into(), "redis".into()]);
        let granted = case.decide(BTreeMap::new()).expect("granted");
        assert_eq!(granted.services, [engine("postgres"), engine("redis")]);
        assert_eq!(granted.asked, [engine("redis")]);
        assert_eq!(granted.task.id, "t-1");
    }

    #[test]
    fn a_feature_the_backend_lacks_is_refused_naming_what_it_has() {
        let postgres = engine("postgres");
        let available = BTreeSet::from([Feature::parse(postgres, "citext").expect("allowlisted")]);
        let missing = BTreeMap::from([("vector", "no vector.control".to_owned())]);
        let offers = BTreeMap::from([(
            postgres,
            Offer {
                source: "image pg:17",
                available: &available,
                missing: &missing,
            },
        )]);
        let mut case = Case::passing();
        case.args.extensions = Some(BTreeMap::from([(
            "postgres".to_owned(),
            vec!["vector".to_owned()],
        )]));
        let refusal = case.decide(offers.clone()).expect_err("lacking");
        assert_eq!(refusal.error, ErrorCode::FeatureNotAllowed);
        assert!(refusal.message.contains("no vector.control"), "{refusal:?}");
        assert!(refusal.remediate.contains("citext"), "{refusal:?}");

        let mut case = Case::passing();
        case.args.extensions = Some(BTreeMap::from([(
            "postgres".to_owned(),
            vec!["citext".to_owned()],
        )]));
        let granted = case.decide(offers).expect("provided");
        assert_eq!(granted.features.for_engine(postgres).len(), 1);
    }

    #[test]
    fn only_engines_whose_features_are_asked_for_are_probed() {
        let args = RequestSandboxArgs {
            extensions: Some(BTreeMap::from([
                ("postgres".to_owned(), vec!["vector".to_owned()]),
                ("mongo".to_owned(), vec![]),
            ])),
            ..Default::default()
        };
        let probed = engines_to_probe(Some(&project(&["postgres", "redis"])), &args);
        assert_eq!(probed, [engine("postgres")]);
        assert!(engines_to_probe(None, &args).is_empty());
    }

    #[test]
    fn an_opted_in_engine_that_cannot_run_is_refused_for_good_naming_what_runs() {
        let mut case = Case::passing();
        case.unrunnable = unrunnable("redis");
        let refusal = case.decide(BTreeMap::new()).expect_err("redis cannot run");
        assert_eq!(refusal.error, ErrorCode::EngineUnavailable);
        assert!(!refusal.retryable, "{refusal:?}");
        assert_eq!(refusal.missing.as_deref(), Some(&["redis".to_owned()][..]));
        // The agent is told what it can ask for, in words: the operator's fix is in remediate.
        assert!(
            refusal
                .message
                .contains("services from those that run here: postgres"),
            "{refusal:?}"
        );
        assert!(
            !refusal.message.contains('`') && !refusal.message.contains("docker"),
            "{refusal:?}"
        );
        assert!(
            refusal.remediate.contains("docker pull redis:8")
                && refusal.remediate.contains("remove redis from project shop"),
            "{refusal:?}"
        );

        let mut case = Case::passing();
        case.project = Some(project(&["redis"]));
        case.unrunnable = unrunnable("redis");
        let refusal = case.decide(BTreeMap::new()).expect_err("nothing runs");
        assert_eq!(refusal.error, ErrorCode::EngineUnavailable);
        assert!(
            refusal.message.contains("without a database"),
            "{refusal:?}"
        );
    }

    #[test]
    fn a_call_for_the_engines_that_run_gets_them_without_the_one_that_does_not() {
        let mut standing = FeatureRequest::default();
        standing.insert(Feature::parse(engine("redis"), "json").expect("allowlisted"));
        standing.insert(Feature::parse(engine("postgres"), "citext").expect("allowlisted"));
        let mut case = Case::passing();
        let mut opted = project(&["postgres", "redis"]);
        opted.sandbox_extensions = Some(standing);
        case.project = Some(opted);
        case.unrunnable = unrunnable("redis");
        case.args.services = Some(vec!["postgres".into()]);
        let granted = case.decide(BTreeMap::new()).expect("postgres runs");
        assert_eq!(granted.services, [engine("postgres")]);
        assert_eq!(granted.asked, [engine("postgres")]);
        assert!(granted.features.for_engine(engine("redis")).is_empty());
        assert_eq!(granted.features.for_engine(engine("postgres")).len(), 1);
    }
}
