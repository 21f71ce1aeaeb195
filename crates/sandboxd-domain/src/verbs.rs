//! The arguments of every agent verb, as the gateway receives them. Each derives a JSON schema
//! (shown to the agent's model in `tools/list`) and is parsed strictly: unknown fields are
//! refused, so a typo never silently drops an intent.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::roles::Verb;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArg {
    /// The id of the task, as listed by the operator or returned by give_me_work.
    pub task: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionalTaskArg {
    /// A task id; leave out to take the next one waiting.
    #[serde(default)]
    pub task: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SummaryArg {
    /// A short summary of what was done (recorded as evidence on the task).
    #[serde(default)]
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentArg {
    /// Why the review passed or failed (recorded on the task).
    #[serde(default)]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestSandboxArgs {
    /// Engines to get credentials for, e.g. ["postgres"]; leave out for every engine the
    /// project opted into. The whole opted-in set is provisioned either way.
    #[serde(default)]
    pub services: Option<Vec<String>>,
    /// Extra features for this call, per engine, e.g. {"postgres": ["vector"]}; each must be
    /// in the engine's allowlist and for an engine the project opted into.
    #[serde(default)]
    pub extensions: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteArgs {
    /// The note.
    pub text: String,
    /// Visible to operators only (auditors can write only private notes).
    #[serde(default)]
    pub private: bool,
    /// The task to note on; defaults to the task you hold.
    #[serde(default)]
    pub task: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceArgs {
    /// Evidence to record on your current task (test output, a summary). Leave out to read the
    /// evidence recorded so far.
    #[serde(default)]
    pub text: Option<String>,
    /// The task to read or record on; defaults to the task you hold.
    #[serde(default)]
    pub task: Option<String>,
}

/// What each verb is for, as the description an agent's model reads.
pub fn description(verb: Verb) -> &'static str {
    match verb {
        Verb::GiveMeWork => {
            "Claim the next open task of your project. Call this first; it returns the task id and what to do next."
        }
        Verb::IWillWorkOn => "Claim a specific open task by id instead of the next one.",
        Verb::IAmDone => {
            "Hand the task you hold to review when your work is finished. Releases your sandbox."
        }
        Verb::ClaimReview => {
            "Claim the next task waiting for review (or a named one). Call this before pass_review or fail_review."
        }
        Verb::PassReview => "Pass the review you claimed; the task is done. Releases your sandbox.",
        Verb::FailReview => {
            "Fail the review you claimed; the task goes back to open with your comment. Releases your sandbox."
        }
        Verb::IDocumented => {
            "Hand the documentation task you hold to review when it is written. Releases your sandbox."
        }
        Verb::Unclaim => "Give back the task you hold without finishing it. Releases your sandbox.",
        Verb::IAmIdle => {
            "End your engagement when you hold no task and there is nothing to do. Releases your sandbox."
        }
        Verb::RequestSandbox => {
            "Get a throwaway database for your task's tests: returns host, port, user, password, database, a URL and an env dict to export, per service. Call it when your work needs a database; the same call again returns the same credentials."
        }
        Verb::ReleaseSandbox => {
            "Tear down your sandbox now (it is also released when you finish or unclaim your task)."
        }
        Verb::Note => "Record a note on the task you hold.",
        Verb::Evidence => {
            "Record evidence (e.g. test results) on your task, or read the evidence recorded so far."
        }
    }
}

/// The JSON schema of a verb's arguments.
pub fn schema(verb: Verb) -> serde_json::Value {
    let schema = match verb {
        Verb::GiveMeWork | Verb::Unclaim | Verb::IAmIdle | Verb::ReleaseSandbox => {
            schemars::schema_for!(NoArgs)
        }
        Verb::IWillWorkOn => schemars::schema_for!(TaskArg),
        Verb::ClaimReview => schemars::schema_for!(OptionalTaskArg),
        Verb::IAmDone | Verb::IDocumented => schemars::schema_for!(SummaryArg),
        Verb::PassReview | Verb::FailReview => schemars::schema_for!(CommentArg),
        Verb::RequestSandbox => schemars::schema_for!(RequestSandboxArgs),
        Verb::Note => schemars::schema_for!(NoteArgs),
        Verb::Evidence => schemars::schema_for!(EvidenceArgs),
    };
    serde_json::to_value(schema).expect("a JSON schema always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_has_an_object_schema_and_a_description() {
        for verb in Verb::ALL {
            let schema = schema(verb);
            assert_eq!(schema["type"], "object", "{verb}: {schema}");
            assert!(description(verb).len() > 20);
        }
        let request = schema(Verb::RequestSandbox);
        assert!(request["properties"]["services"].is_object(), "{request}");
        assert!(request["properties"]["extensions"].is_object(), "{request}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err =
            serde_json::from_value::<RequestSandboxArgs>(serde_json::json!({"service": ["x"]}))
                .expect_err("typo");
        assert!(err.to_string().contains("service"), "{err}");
    }
}
