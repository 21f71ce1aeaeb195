//! Every text an agent reads names only verbs of its own role, and every call it suggests fits
//! that verb's schema: a walk of every verb × every default role × the outcomes each can reach
//! (ok and each refusal the broker answers it), through the broker on the process backend.
//! The server's `instructions` are checked beside the gateway (`sandboxd_mcp::gateway`).

use std::collections::{BTreeMap, BTreeSet};

use sandboxd_broker::{BrokerConfig, ExperimentsConfig};
use sandboxd_domain::call::Call;
use sandboxd_domain::envelope::Envelope;
use sandboxd_domain::roles::{RoleBook, RoleSpec, Verb};
use sandboxd_domain::{Agent, EngineRef, verbs};
use serde_json::{Value, json};

use crate::support::{World, WorldSpec, engines, unique};

/// What the walk saw and what it found wrong.
#[derive(Default)]
struct Walk {
    /// Per role and verb, the outcomes met (`ok` or an error code).
    seen: BTreeMap<(String, Verb), BTreeSet<String>>,
    wrong: Vec<String>,
}

impl Walk {
    fn check(&mut self, role_name: &str, role: &RoleSpec, verb: Verb, envelope: &Envelope) {
        let (outcome, texts) = match envelope {
            Envelope::Ok(ok) => ("ok".to_owned(), vec![("next", ok.next.as_str())]),
            Envelope::Error(err) => (
                err.error.as_str().to_owned(),
                vec![
                    ("message", err.message.as_str()),
                    ("remediate", err.remediate.as_str()),
                ],
            ),
        };
        for (field, text) in texts {
            for problem in problems(role, verb, field, text) {
                self.wrong.push(format!(
                    "{role_name} {verb} → {outcome}: {field} {problem}: {text:?}"
                ));
            }
        }
        self.seen
            .entry((role_name.to_owned(), verb))
            .or_default()
            .insert(outcome);
    }

    fn outcomes(&self, role_name: &str, verb: Verb) -> BTreeSet<String> {
        self.seen
            .get(&(role_name.to_owned(), verb))
            .cloned()
            .unwrap_or_default()
    }
}

/// The verbs `text` names, as whole words.
fn verbs_named(text: &str) -> BTreeSet<Verb> {
    let words: BTreeSet<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    Verb::ALL
        .into_iter()
        .filter(|verb| words.contains(verb.name()))
        .collect()
}

/// Every argument name of every verb: a word that, after "call X with", names an argument.
fn argument_names() -> BTreeSet<String> {
    Verb::ALL
        .into_iter()
        .flat_map(|verb| properties(verb).into_keys())
        .collect()
}

fn properties(verb: Verb) -> BTreeMap<String, Value> {
    verbs::schema(verb)["properties"]
        .as_object()
        .map(|p| p.clone().into_iter().collect())
        .unwrap_or_default()
}

fn required(verb: Verb) -> BTreeSet<String> {
    verbs::schema(verb)["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// What is wrong with `text` (the `field` of an answer to `called`) for an agent of `role`.
fn problems(role: &RoleSpec, called: Verb, field: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for named in verbs_named(text) {
        // A refusal may say which verb was called, even one the role does not have.
        let the_call_itself = field == "message" && named == called;
        if !role.allows(named) && !the_call_itself {
            found.push(format!("names {named}, which the role does not have"));
        }
    }
    for (verb, args) in written_calls(text) {
        if let Err(why) = fits(verb, &args) {
            found.push(format!(
                "suggests {verb}({args}), which does not fit: {why}"
            ));
        }
    }
    found.extend(phrased_arguments(text));
    found
}

/// Whether `args` fit `verb`: its JSON schema, and the broker's own strict parse.
fn fits(verb: Verb, args: &Value) -> Result<(), String> {
    let schema = verbs::schema(verb);
    let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
    if let Some(error) = validator.iter_errors(args).next() {
        return Err(error.to_string());
    }
    Call::parse(verb, args.clone())
        .map(drop)
        .map_err(|malformed| malformed.refusal.message)
}

/// Calls written out as `verb(name=value, …)`, their arguments as JSON.
fn written_calls(text: &str) -> Vec<(Verb, Value)> {
    let mut calls = Vec::new();
    for verb in Verb::ALL {
        let opening = format!("{}(", verb.name());
        for (at, _) in text.match_indices(&opening) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let inner = &text[at + opening.len()..];
            let Some(end) = closing(inner) else {
                calls.push((verb, json!({"unclosed call": inner})));
                continue;
            };
            calls.push((verb, keyword_arguments(&inner[..end])));
        }
    }
    calls
}

/// Where the parenthesis opened before `text` closes.
fn closing(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quoted = None;
    for (at, c) in text.char_indices() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quoted = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')') if depth == 0 => return Some(at),
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// `name=value, …` as a JSON object (values as JSON, or Python's literals).
fn keyword_arguments(text: &str) -> Value {
    let mut object = serde_json::Map::new();
    let mut depth = 0usize;
    let mut quoted = None;
    let mut parts = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quoted = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    for part in parts.into_iter().filter(|p| !p.trim().is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            object.insert(format!("positional {}", part.trim()), Value::Null);
            continue;
        };
        let value = value.trim();
        let pythonic = value
            .replace('\'', "\"")
            .replace("True", "true")
            .replace("False", "false")
            .replace("None", "null");
        let value = serde_json::from_str(&pythonic).unwrap_or_else(|_| Value::from(value));
        object.insert(name.trim().to_owned(), value);
    }
    Value::Object(object)
}

/// "call V with X" and "call V without X", where X is an argument name: V must have X (and a
/// `limits.Y` its limit Y), and a required X cannot be left out.
fn phrased_arguments(text: &str) -> Vec<String> {
    let arguments = argument_names();
    let mut found = Vec::new();
    for verb in Verb::ALL {
        for (at, _) in text.match_indices(verb.name()) {
            let rest = &text[at + verb.name().len()..];
            let rest = rest.strip_prefix(" again").unwrap_or(rest);
            let (without, rest) = if let Some(rest) = rest.strip_prefix(" without ") {
                (true, rest)
            } else if let Some(rest) = rest.strip_prefix(" with ") {
                (false, rest)
            } else {
                continue;
            };
            let Some((word, sub)) = rest
                .split_whitespace()
                .take(3)
                .map(|w| {
                    w.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                })
                .map(|w| match w.split_once('.') {
                    Some((word, sub)) => (word.to_owned(), Some(sub.to_owned())),
                    None => (w.to_owned(), None),
                })
                .find(|(w, _)| arguments.contains(w))
            else {
                continue;
            };
            let own = properties(verb);
            match own.get(&word) {
                None => found.push(format!(
                    "says {verb} with {word}, an argument {verb} does not have"
                )),
                Some(_) if without && required(verb).contains(&word) => {
                    found.push(format!("says {verb} without {word}, which {verb} requires"))
                }
                Some(schema) => {
                    if let Some(sub) = sub {
                        let limits = verbs::schema(verb);
                        let inner = schema_properties(&limits, schema);
                        if !inner.contains(&sub) {
                            found.push(format!(
                                "says {verb} with {word}.{sub}, not one of {inner:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    found
}

/// The property names of `property`'s object schema (following a `$ref` into `root`).
fn schema_properties(root: &Value, property: &Value) -> BTreeSet<String> {
    let reference = property["$ref"].as_str().or_else(|| {
        property["anyOf"]
            .as_array()
            .and_then(|any| any.iter().find_map(|s| s["$ref"].as_str()))
    });
    let target = match reference {
        Some(pointer) => root.pointer(pointer.trim_start_matches('#')).cloned(),
        None => Some(property.clone()),
    };
    target
        .and_then(|t| t["properties"].as_object().cloned())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Arguments that fit each verb, so a free agent's call reaches the verb itself.
fn fitting_args(verb: Verb) -> Value {
    match verb {
        Verb::IWillWorkOn => json!({"task": "t-none"}),
        Verb::SandboxSql => json!({"service": "postgres", "statement": "SELECT 1"}),
        Verb::RunExperiment => json!({"script": "print(1)"}),
        Verb::Note => json!({"text": "a note"}),
        _ => json!({}),
    }
}

/// A world whose broker runs experiments (their guest, when built; else they answer
/// `runtime_unavailable`).
fn with_experiments(config: &mut BrokerConfig) {
    config.experiments = Some(ExperimentsConfig {
        files: sandboxd_experiments::GuestFiles {
            component: sandboxd_testkit::experiment_guest(),
            cache_dir: sandboxd_testkit::experiment_cache(),
        },
        policy: sandboxd_experiments::Policy::default(),
        capacity: sandboxd_experiments::Capacity::default(),
        max_per_agent: ExperimentsConfig::DEFAULT_MAX_PER_AGENT,
    });
}

/// One role's walk in a world of its own.
struct RoleWalk<'a> {
    w: &'a World,
    walk: &'a mut Walk,
    name: &'a str,
    role: RoleSpec,
}

impl RoleWalk<'_> {
    async fn call(&mut self, agent: &Agent, verb: Verb, args: Value) -> Envelope {
        let envelope = self.w.call(agent, verb, args).await;
        self.walk.check(self.name, &self.role, verb, &envelope);
        envelope
    }

    fn allows(&self, verb: Verb) -> bool {
        self.role.allows(verb)
    }

    /// A task handed in by a developer of the world's own (not walked), waiting for review.
    async fn task_for_review(&self) -> String {
        let id = self.open_task().await;
        let dev = self.w.agent("developer").await;
        let claimed = self
            .w
            .call(&dev, Verb::IWillWorkOn, json!({"task": id}))
            .await;
        assert!(matches!(claimed, Envelope::Ok(_)), "{claimed:?}");
        let handed = self.w.call(&dev, Verb::IAmDone, json!({})).await;
        assert!(matches!(handed, Envelope::Ok(_)), "{handed:?}");
        id
    }

    async fn open_task(&self) -> String {
        self.w
            .broker
            .add_task(&self.w.project, &unique("task"), "walked")
            .await
            .expect("task")
            .id
    }

    /// Claims a task the role's own way; its id, or None when the role cannot claim.
    async fn claim(&mut self, agent: &Agent) -> Option<String> {
        let verb = if self.allows(Verb::GiveMeWork) {
            Verb::GiveMeWork
        } else if self.allows(Verb::ClaimReview) {
            Verb::ClaimReview
        } else {
            return None;
        };
        match self.call(agent, verb, json!({})).await {
            Envelope::Ok(ok) => ok.task_id,
            Envelope::Error(err) => panic!("{} cannot {verb}: {err:?}", self.name),
        }
    }

    /// The verb that finishes a task the role holds.
    fn finishing(&self) -> Vec<Verb> {
        [
            Verb::IAmDone,
            Verb::IDocumented,
            Verb::PassReview,
            Verb::FailReview,
        ]
        .into_iter()
        .filter(|v| self.allows(*v))
        .collect()
    }

    async fn run(&mut self) {
        // 1. Free, with nothing waiting: every verb, and every allowed one malformed.
        let free = self.w.agent(self.name).await;
        for verb in Verb::ALL {
            self.call(&free, verb, fitting_args(verb)).await;
            if self.allows(verb) {
                self.call(&free, verb, json!({"sneaky": true})).await;
            }
        }
        let long = "x".repeat(17 * 1024);
        for (verb, args) in [
            (Verb::IWillWorkOn, json!({})),
            (Verb::ClaimReview, json!({"task": "t-none"})),
            (Verb::Note, json!({"text": "n", "task": "t-none"})),
            (Verb::Evidence, json!({"task": "t-none"})),
            (Verb::Note, json!({"text": long})),
            (Verb::Evidence, json!({"text": long})),
            (Verb::IAmDone, json!({"summary": long})),
            (Verb::IDocumented, json!({"summary": long})),
            (Verb::PassReview, json!({"comment": long})),
            (Verb::FailReview, json!({"comment": long})),
        ] {
            if self.allows(verb) {
                self.call(&free, verb, args).await;
            }
        }

        // 2. Work waiting: open tasks and tasks waiting for review.
        let open = self.open_task().await;
        let spare = self.open_task().await;
        let _reviews = [self.task_for_review().await, self.task_for_review().await];
        // An auditor reads and notes on a named task; it can record no evidence.
        for (verb, args) in [
            (Verb::Note, json!({"text": "seen", "task": open})),
            (Verb::Evidence, json!({"task": open})),
            (Verb::Evidence, json!({"text": "e", "task": open})),
        ] {
            self.call(&free, verb, args).await;
        }

        // 3. The role's own claim; another agent of it meets the task taken.
        let holder = self.w.agent(self.name).await;
        let Some(held) = self.claim(&holder).await else {
            return;
        };
        let other = self.w.agent(self.name).await;
        for verb in [Verb::IWillWorkOn, Verb::ClaimReview] {
            if self.allows(verb) {
                self.call(&other, verb, json!({"task": held})).await;
            }
        }
        let unheld = if held == open { &spare } else { &open };
        if self.allows(Verb::IWillWorkOn) {
            self.call(&other, Verb::IWillWorkOn, json!({"task": unheld}))
                .await;
            self.call(&other, Verb::Unclaim, json!({})).await;
        }
        // Recording on a task the caller does not hold.
        self.call(&other, Verb::Evidence, json!({"text": "e", "task": held}))
            .await;

        // 4. While holding: claims refused, notes and evidence recorded, the sandbox.
        for (verb, args) in [
            (Verb::GiveMeWork, json!({})),
            (Verb::IWillWorkOn, json!({"task": unheld})),
            (Verb::ClaimReview, json!({})),
            (Verb::IAmIdle, json!({})),
            (Verb::Note, json!({"text": "working"})),
            (Verb::Evidence, json!({"text": "tests pass"})),
            (Verb::Evidence, json!({})),
        ] {
            if self.allows(verb) {
                self.call(&holder, verb, args).await;
            }
        }
        if self.allows(Verb::RequestSandbox) {
            self.sandbox(&holder).await;
        }

        // 5. Given back, claimed again, finished; then the end of the engagement.
        if self.allows(Verb::Unclaim) {
            self.call(&holder, Verb::Unclaim, json!({})).await;
            self.claim(&holder).await;
        }
        let finishing = self.finishing();
        for (n, verb) in finishing.iter().enumerate() {
            if n > 0 {
                self.claim(&holder).await;
            }
            // The summary (or comment) is recorded, so it fits the verb's schema.
            let args = match verb {
                Verb::PassReview | Verb::FailReview => json!({"comment": "checked"}),
                _ => json!({"summary": "done"}),
            };
            self.call(&holder, *verb, args).await;
            self.call(&holder, *verb, json!({})).await;
        }
        if self.allows(Verb::IAmIdle) {
            self.call(&holder, Verb::IAmIdle, json!({})).await;
        }
    }

    /// The sandbox verbs of a role that holds a task, with each refusal they can answer.
    async fn sandbox(&mut self, holder: &Agent) {
        let sql = |statement: &str| json!({"service": "postgres", "statement": statement});
        for (verb, args) in [
            (Verb::RequestSandbox, json!({"services": ["mariadb"]})),
            (
                Verb::RequestSandbox,
                json!({"extensions": {"mariadb": ["x"]}}),
            ),
            (
                Verb::RequestSandbox,
                json!({"extensions": {"postgres": ["plpython3u"]}}),
            ),
            (Verb::RequestSandbox, json!({"services": "postgres"})),
            (Verb::RequestSandbox, json!({})),
            (Verb::RequestSandbox, json!({"services": ["postgres"]})),
        ] {
            self.call(holder, verb, args).await;
        }
        // The guest compiles on the first run (seconds in a debug build): the runs below meet
        // it ready (or failed, where no guest is built).
        self.call(holder, Verb::RunExperiment, json!({"script": "print(1)"}))
            .await;
        for _ in 0..1500 {
            let Some(sandboxd_experiments::GuestStatus::Preparing { .. }) =
                self.w.broker.experiments_status()
            else {
                break;
            };
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        for (verb, args) in [
            (Verb::SandboxInfo, json!({})),
            (Verb::SandboxSql, sql("SELECT 1")),
            (Verb::SandboxSql, sql("SELEC 1")),
            (Verb::SandboxSql, sql("")),
            (
                Verb::SandboxSql,
                json!({"service": "mariadb", "statement": "SELECT 1"}),
            ),
            (
                Verb::SandboxSql,
                json!({"service": "postgres", "statement": "SELECT 1", "max_rows": 0}),
            ),
            (
                Verb::SandboxSql,
                json!({"service": "redis", "statement": "SET \"open"}),
            ),
            (
                Verb::RunExperiment,
                json!({"script": "print(sql('SELECT 1'))"}),
            ),
            (
                Verb::RunExperiment,
                json!({"script": "raise ValueError('no')"}),
            ),
            (
                Verb::RunExperiment,
                json!({"script": "while True: pass", "limits": {"wall_ms": 200}}),
            ),
            (
                Verb::RunExperiment,
                json!({"script": "print(1)", "limits": {"wall_ms": 1}}),
            ),
            (
                Verb::RunExperiment,
                json!({"script": "print(1)", "service": "redis"}),
            ),
            (Verb::RunExperiment, json!({"script": " "})),
            (Verb::ResetSandbox, json!({"services": ["mariadb"]})),
            (Verb::ResetSandbox, json!({"services": []})),
            (Verb::ResetSandbox, json!({"services": ["redis"]})),
            (Verb::ReleaseSandbox, json!({})),
            (Verb::SandboxInfo, json!({})),
        ] {
            self.call(holder, verb, args).await;
        }
        // The project opts out while the agent works.
        let project = &self.w.project;
        self.w
            .broker
            .set_project(project, None, None)
            .await
            .expect("opt out");
        self.call(holder, Verb::RequestSandbox, json!({})).await;
        let services: Vec<EngineRef> = engines(&["postgres", "redis"]);
        self.w
            .broker
            .set_project(project, Some(services), None)
            .await
            .expect("opt in again");
    }
}

#[tokio::test]
async fn every_text_names_only_the_roles_verbs_and_fits_their_schemas() {
    let book = RoleBook::default();
    let mut walk = Walk::default();
    for (name, role) in &book.roles {
        let world = World::new(WorldSpec {
            tweak_config: with_experiments,
            ..WorldSpec::default()
        })
        .await
        .expect("process world");
        let (seen, wrong) = {
            let name = name.clone();
            let role = role.clone();
            let shared = std::sync::Arc::new(std::sync::Mutex::new(Walk::default()));
            let inside = shared.clone();
            world
                .run(|w| async move {
                    let mut walk = Walk::default();
                    RoleWalk {
                        w: &w,
                        walk: &mut walk,
                        name: &name,
                        role,
                    }
                    .run()
                    .await;
                    *inside.lock().expect("lock") = walk;
                })
                .await;
            let done = std::mem::take(&mut *shared.lock().expect("lock"));
            (done.seen, done.wrong)
        };
        walk.seen.extend(seen);
        walk.wrong.extend(wrong);
    }

    // The switch off: each role with request_sandbox is told so, and nothing else.
    World::new(WorldSpec {
        enabled: false,
        ..WorldSpec::default()
    })
    .await
    .expect("process world")
    .run(|w| async move {
        let book = RoleBook::default();
        let mut walk = Walk::default();
        for (name, role) in &book.roles {
            if !role.allows(Verb::RequestSandbox) {
                continue;
            }
            let agent = w.working_agent(name).await;
            let envelope = w.call(&agent, Verb::RequestSandbox, json!({})).await;
            walk.check(name, role, Verb::RequestSandbox, &envelope);
            assert!(
                walk.outcomes(name, Verb::RequestSandbox)
                    .contains("sandbox_disabled"),
                "{envelope:?}"
            );
        }
        assert!(walk.wrong.is_empty(), "{:#?}", walk.wrong);
    })
    .await;

    assert!(
        walk.wrong.is_empty(),
        "{} wrong text(s):\n{}",
        walk.wrong.len(),
        walk.wrong.join("\n")
    );

    // The walk reached what it means to: every verb of every role, allowed ones both answered
    // and refused, the others refused by the manifest.
    let guest = sandboxd_testkit::experiment_guest().exists();
    for (name, role) in &book.roles {
        for verb in Verb::ALL {
            let outcomes = walk.outcomes(name, verb);
            if !role.allows(verb) {
                assert_eq!(
                    outcomes,
                    BTreeSet::from(["verb_not_allowed".to_owned()]),
                    "{name} {verb}"
                );
                continue;
            }
            let claims = role.allows(Verb::GiveMeWork) || role.allows(Verb::ClaimReview);
            let answerable = claims && (verb != Verb::RunExperiment || guest);
            if answerable || matches!(verb, Verb::Note | Verb::Evidence) {
                assert!(outcomes.contains("ok"), "{name} {verb}: {outcomes:?}");
            }
            assert!(
                outcomes.iter().any(|o| o != "ok"),
                "{name} {verb} was never refused: {outcomes:?}"
            );
        }
    }
    let every: BTreeSet<String> = walk.seen.values().flatten().cloned().collect();
    for code in [
        "ok",
        "out_of_order",
        "not_found",
        "task_taken",
        "no_work",
        "no_active_task",
        "project_not_opted_in",
        "service_not_allowed",
        "feature_not_allowed",
        "invalid_argument",
        "verb_not_allowed",
    ] {
        assert!(every.contains(code), "the walk never met {code}: {every:?}");
    }
    if guest {
        for code in ["script_error", "limit_exceeded"] {
            assert!(every.contains(code), "the walk never met {code}: {every:?}");
        }
    }
}

#[test]
fn the_checker_finds_what_it_looks_for() {
    let book = RoleBook::default();
    let qa = book.get("qa").expect("qa");
    let dev = book.get("developer").expect("developer");
    // A verb of another role.
    assert!(!problems(qa, Verb::RequestSandbox, "next", "then call i_am_done").is_empty());
    assert!(problems(dev, Verb::RequestSandbox, "next", "then call i_am_done").is_empty());
    // A required argument left out, an argument the verb does not have, a limit that is not one.
    assert!(
        !problems(
            dev,
            Verb::IWillWorkOn,
            "remediate",
            "call i_will_work_on without a task id"
        )
        .is_empty()
    );
    assert!(
        problems(
            qa,
            Verb::ClaimReview,
            "remediate",
            "call claim_review without a task id"
        )
        .is_empty()
    );
    assert!(
        !problems(
            dev,
            Verb::ResetSandbox,
            "remediate",
            "call reset_sandbox again with a service from that list"
        )
        .is_empty()
    );
    assert!(
        !problems(
            dev,
            Verb::RunExperiment,
            "remediate",
            "call run_experiment again with limits.wall_time higher"
        )
        .is_empty()
    );
    assert!(
        problems(
            dev,
            Verb::RunExperiment,
            "remediate",
            "call run_experiment again with limits.wall_ms higher"
        )
        .is_empty()
    );
    // Written-out calls are held to the verb's schema.
    assert!(
        problems(
            dev,
            Verb::GiveMeWork,
            "remediate",
            "call i_will_work_on(task=\"t-1\")"
        )
        .is_empty()
    );
    assert!(!problems(dev, Verb::GiveMeWork, "remediate", "call i_will_work_on()").is_empty());
    assert!(
        problems(
            dev,
            Verb::RequestSandbox,
            "remediate",
            "request_sandbox(services=['postgres'])"
        )
        .is_empty()
    );
    assert!(
        !problems(
            dev,
            Verb::RequestSandbox,
            "remediate",
            "request_sandbox(services='postgres')"
        )
        .is_empty()
    );
    // The message may name the verb that was called.
    assert!(
        problems(
            qa,
            Verb::IAmDone,
            "message",
            "i_am_done is not in the manifest of role qa"
        )
        .is_empty()
    );
}
