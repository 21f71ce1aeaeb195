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
    /// Extra features for this call, per engine, e.g. {"postgres": ["pg_trgm"]}; each must be
    /// one this sandboxd offers for that engine (tools/list names them) and for an engine the
    /// project opted into.
    #[serde(default)]
    pub extensions: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetSandboxArgs {
    /// Engines to reset, e.g. ["postgres"]; leave out to reset every service of your sandbox.
    #[serde(default)]
    pub services: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSqlArgs {
    /// Which service of your sandbox, e.g. "postgres".
    pub service: String,
    /// One SQL statement (Postgres, MariaDB), or one Redis command line such as `HGETALL user:1`.
    pub statement: String,
    /// At most this many rows back (default and maximum 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max_rows: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunExperimentArgs {
    /// A short Python script. `sql(query, params=None)` runs one statement against your
    /// sandbox's Postgres as your sandbox account and returns its rows as a list of dicts (with
    /// `.columns`, `.affected`, `.truncated`); `params` is a list of str, int, float, bool or
    /// None bound to $1, $2, … (sent apart from the statement, never spliced into it). Print what
    /// you want back. No files, network, environment or subprocesses; the standard library's
    /// json, re, math, statistics, decimal, datetime, collections, itertools, csv, hashlib, time
    /// and random are there.
    pub script: String,
    /// Which service `sql()` talks to, e.g. "postgres" (the default).
    #[serde(default)]
    pub service: Option<String>,
    /// Tighter or looser limits than the defaults, each within its range (the ranges shown are
    /// the shipped ones; a refusal names the range in force here); the answer states the limits
    /// the run had.
    #[serde(default)]
    pub limits: Option<ExperimentLimits>,
}

/// The limits of one experiment; any left out takes its default. The ranges are the shipped
/// defaults of `sandboxd_experiments::Policy` (a test there keeps them equal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentLimits {
    /// Wall time of the whole run, milliseconds (default 10000).
    #[serde(default)]
    #[schemars(range(min = 100, max = 60_000))]
    pub wall_ms: Option<u64>,
    /// CPU, in WebAssembly fuel units (about one per instruction; default 20000000000).
    #[serde(default)]
    #[schemars(range(min = 1_000_000, max = 200_000_000_000_u64))]
    pub fuel: Option<u64>,
    /// Memory of the interpreter, bytes (default 268435456, 256 MiB).
    #[serde(default)]
    #[schemars(range(min = 67_108_864, max = 1_073_741_824))]
    pub memory_bytes: Option<u64>,
    /// Characters of printed output kept (default 65536).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub output_chars: Option<u32>,
    /// `sql()` calls per run (default 1000).
    #[serde(default)]
    #[schemars(range(min = 0, max = 100_000))]
    pub sql_calls: Option<u32>,
    /// Time one `sql()` statement may take, milliseconds (default 5000).
    #[serde(default)]
    #[schemars(range(min = 10, max = 30_000))]
    pub sql_ms: Option<u64>,
    /// Rows one `sql()` call returns at most (default 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10_000))]
    pub sql_rows: Option<u32>,
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
        Verb::ResetSandbox => {
            "Empty your sandbox in place between test runs: every database, table, key and extra database you made is dropped and the services come back as freshly provisioned, with the same host, port and credentials. Faster than releasing and requesting again."
        }
        Verb::SandboxSql => {
            "Run one statement in your own sandbox as your sandbox account and get the rows back as JSON: one SQL statement for postgres or mariadb (EXPLAIN works), one command for redis. Rows, bytes and time are capped; the answer states the limits and whether rows were left out. It can change or drop data like any client."
        }
        Verb::RunExperiment => {
            "Run a short Python script in a WebAssembly sandbox whose one capability is sql(query, params) against your own sandbox's Postgres, as your sandbox account (params: a list bound to $1, $2, …, never spliced into the statement): load rows, time variants of a query, compare EXPLAIN plans. Answers what it printed and each sql() call's timing; wall time, CPU, memory, output and sql() calls are capped and the answer names any limit it met. Its statements can change or drop data like any client."
        }
        Verb::SandboxInfo => {
            "Describe your sandbox without changing it: each service's engine, server version, features, endpoint (no password), when it was created and last used, and what ends it (idle timeout, maximum lifetime)."
        }
        Verb::Note => "Record a note on the task you hold.",
        Verb::Evidence => {
            "Record evidence (e.g. test results) on your task, or read the evidence recorded so far."
        }
    }
}

/// A verb's name for people (MCP `title`).
pub fn title(verb: Verb) -> &'static str {
    match verb {
        Verb::GiveMeWork => "Take the next task",
        Verb::IWillWorkOn => "Take a named task",
        Verb::IAmDone => "Hand in the task for review",
        Verb::ClaimReview => "Take a review",
        Verb::PassReview => "Pass the review",
        Verb::FailReview => "Fail the review",
        Verb::IDocumented => "Hand in the documentation",
        Verb::Unclaim => "Give the task back",
        Verb::IAmIdle => "End the engagement",
        Verb::RequestSandbox => "Get a sandbox database",
        Verb::ReleaseSandbox => "Tear down the sandbox",
        Verb::ResetSandbox => "Empty the sandbox in place",
        Verb::SandboxInfo => "Describe the sandbox",
        Verb::SandboxSql => "Run one statement in the sandbox",
        Verb::RunExperiment => "Run a Python experiment against the sandbox",
        Verb::Note => "Note on the task",
        Verb::Evidence => "Record or read evidence",
    }
}

/// What a client may assume about a verb before calling it (the MCP tool annotations): clients
/// use them to decide what runs without asking the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbHints {
    /// It changes nothing.
    pub read_only: bool,
    /// It may destroy something the agent made (its sandbox and the data in it).
    pub destructive: bool,
    /// Calling it again with the same arguments changes nothing more.
    pub idempotent: bool,
    /// It reaches beyond sandboxd's own closed world (it never does).
    pub open_world: bool,
}

pub fn hints(verb: Verb) -> VerbHints {
    let (read_only, destructive, idempotent) = match verb {
        // Claims change the task board; another call claims another task or is refused.
        Verb::GiveMeWork | Verb::IWillWorkOn | Verb::ClaimReview => (false, false, false),
        // These end the agent's hold on a task and tear its sandbox down with its data.
        Verb::IAmDone
        | Verb::PassReview
        | Verb::FailReview
        | Verb::IDocumented
        | Verb::Unclaim
        | Verb::IAmIdle => (false, true, false),
        // The same call again answers the same credentials.
        Verb::RequestSandbox => (false, false, true),
        // Releasing an already released sandbox does nothing.
        Verb::ReleaseSandbox => (false, true, true),
        // Wipes what the agent wrote; a second reset finds an empty sandbox and leaves it so.
        Verb::ResetSandbox => (false, true, true),
        Verb::SandboxInfo => (true, false, true),
        // Any statement, DROP TABLE included.
        Verb::SandboxSql => (false, true, false),
        // Its sql() calls run any statement.
        Verb::RunExperiment => (false, true, false),
        // Each call adds one more entry.
        Verb::Note | Verb::Evidence => (false, false, false),
    };
    VerbHints {
        read_only,
        destructive,
        idempotent,
        open_world: false,
    }
}

/// The JSON schema of every verb's answer: an ok envelope or an error envelope. The root is an
/// object, as MCP requires of an `outputSchema`.
pub fn output_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(crate::envelope::Envelope))
        .expect("a JSON schema always serializes");
    schema["type"] = serde_json::Value::from("object");
    schema
}

/// The JSON schema of a verb's arguments.
pub fn schema(verb: Verb) -> serde_json::Value {
    let schema = match verb {
        Verb::GiveMeWork
        | Verb::Unclaim
        | Verb::IAmIdle
        | Verb::ReleaseSandbox
        | Verb::SandboxInfo => schemars::schema_for!(NoArgs),
        Verb::ResetSandbox => schemars::schema_for!(ResetSandboxArgs),
        Verb::SandboxSql => schemars::schema_for!(SandboxSqlArgs),
        Verb::RunExperiment => schemars::schema_for!(RunExperimentArgs),
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
    fn every_verb_has_a_title_and_only_verbs_that_end_or_wipe_the_sandbox_are_destructive() {
        for verb in Verb::ALL {
            assert!(!title(verb).is_empty());
            let hints = hints(verb);
            assert!(!hints.open_world);
            assert!(!(hints.read_only && hints.destructive), "{verb}");
            let releases =
                description(verb).contains("Releases your sandbox") || verb == Verb::ReleaseSandbox;
            let wipes =
                description(verb).contains("is dropped") || description(verb).contains("drop data");
            assert_eq!(hints.destructive, releases || wipes, "{verb}");
        }
    }

    #[test]
    fn both_envelopes_validate_against_the_output_schema() {
        use crate::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
        let schema = output_schema();
        assert_eq!(schema["type"], "object", "{schema}");
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON schema");
        let ok = serde_json::to_value(
            OkEnvelope::<serde_json::Value>::new(Some("t1".into()), "request_sandbox", "b")
                .with_evidence(serde_json::json!({"services": []})),
        )
        .expect("json");
        let error =
            serde_json::to_value(ErrorEnvelope::new(ErrorCode::NoWork, "m", "r")).expect("json");
        assert!(validator.is_valid(&ok), "{ok}");
        assert!(validator.is_valid(&error), "{error}");
        for wrong in [
            serde_json::json!({"status": "fine"}),
            serde_json::json!({"error": "no_such_code", "message": "m", "remediate": "r", "retryable": true}),
        ] {
            assert!(!validator.is_valid(&wrong), "{wrong}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err =
            serde_json::from_value::<RequestSandboxArgs>(serde_json::json!({"service": ["x"]}))
                .expect_err("typo");
        assert!(err.to_string().contains("service"), "{err}");
    }
}
