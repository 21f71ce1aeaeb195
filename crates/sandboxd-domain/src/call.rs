//! One agent call as the gateway parsed it: a variant per verb with its typed, strictly parsed
//! arguments (firecracker's action enum). JSON stops here: the gateway turns a `tools/call` into
//! a [`Call`] (or a [`Malformed`] naming what does not fit), and the broker decides and acts on
//! typed values only.

use serde::de::DeserializeOwned;

use crate::envelope::{ErrorCode, ErrorEnvelope};
use crate::error::quote_up_to;
use crate::roles::Verb;
use crate::verbs::{
    CommentArg, EvidenceArgs, NoArgs, NoteArgs, OptionalTaskArg, RequestSandboxArgs,
    ResetSandboxArgs, RunExperimentArgs, SandboxSqlArgs, SummaryArg, TaskArg,
};

#[derive(Debug, Clone)]
pub enum Call {
    GiveMeWork,
    IWillWorkOn(TaskArg),
    IAmDone(SummaryArg),
    ClaimReview(OptionalTaskArg),
    PassReview(CommentArg),
    FailReview(CommentArg),
    IDocumented(SummaryArg),
    Unclaim,
    IAmIdle,
    RequestSandbox(RequestSandboxArgs),
    ReleaseSandbox,
    ResetSandbox(ResetSandboxArgs),
    SandboxInfo,
    SandboxSql(SandboxSqlArgs),
    RunExperiment(RunExperimentArgs),
    Note(NoteArgs),
    Evidence(EvidenceArgs),
}

/// A call whose arguments do not fit its verb's schema: the verb (the manifest is still checked
/// first, and the refusal audited under it) and the refusal the agent gets.
#[derive(Debug, Clone)]
pub struct Malformed {
    pub verb: Verb,
    pub refusal: ErrorEnvelope,
}

/// Arguments that do not fit the verb's schema. The parser's text may quote the caller's input,
/// so it is escaped and cut, with room for the fields the schema allows.
fn bad_arguments(verb: Verb, err: &dyn std::fmt::Display) -> ErrorEnvelope {
    let said = err.to_string();
    // An unknown field: the caller's name is cut, the fields the schema allows (our own
    // names) are kept whole.
    let unknown = said.strip_prefix("unknown field `").and_then(|rest| {
        let end = rest
            .rfind("`, expected")
            .or_else(|| rest.rfind("`, there are no"))?;
        Some((&rest[..end], &rest[end + 3..]))
    });
    let detail = match unknown {
        Some((field, allowed)) => {
            format!("unknown field {}, {allowed}", quote_up_to(field, 64))
        }
        None => quote_up_to(&said, 240),
    };
    ErrorEnvelope::new(
        ErrorCode::InvalidArgument,
        format!("the arguments of {verb} do not fit its schema: {detail}"),
        format!("call {verb} again with arguments matching the schema in tools/list"),
    )
}

impl Call {
    /// Parses `verb`'s arguments (a JSON object; absent or `null` reads as `{}`), refusing
    /// unknown fields.
    pub fn parse(verb: Verb, args: serde_json::Value) -> Result<Call, Malformed> {
        let args = if args.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            args
        };
        Self::parse_object(verb, args).map_err(|err| Malformed {
            verb,
            refusal: bad_arguments(verb, &err),
        })
    }

    fn parse_object(verb: Verb, args: serde_json::Value) -> Result<Call, serde_json::Error> {
        fn typed<T: DeserializeOwned>(args: serde_json::Value) -> Result<T, serde_json::Error> {
            serde_json::from_value(args)
        }
        let none = |args| typed::<NoArgs>(args).map(|_| ());
        Ok(match verb {
            Verb::GiveMeWork => none(args).map(|()| Call::GiveMeWork)?,
            Verb::IWillWorkOn => Call::IWillWorkOn(typed(args)?),
            Verb::IAmDone => Call::IAmDone(typed(args)?),
            Verb::ClaimReview => Call::ClaimReview(typed(args)?),
            Verb::PassReview => Call::PassReview(typed(args)?),
            Verb::FailReview => Call::FailReview(typed(args)?),
            Verb::IDocumented => Call::IDocumented(typed(args)?),
            Verb::Unclaim => none(args).map(|()| Call::Unclaim)?,
            Verb::IAmIdle => none(args).map(|()| Call::IAmIdle)?,
            Verb::RequestSandbox => Call::RequestSandbox(typed(args)?),
            Verb::ReleaseSandbox => none(args).map(|()| Call::ReleaseSandbox)?,
            Verb::ResetSandbox => Call::ResetSandbox(typed(args)?),
            Verb::SandboxInfo => none(args).map(|()| Call::SandboxInfo)?,
            Verb::SandboxSql => Call::SandboxSql(typed(args)?),
            Verb::RunExperiment => Call::RunExperiment(typed(args)?),
            Verb::Note => Call::Note(typed(args)?),
            Verb::Evidence => Call::Evidence(typed(args)?),
        })
    }

    pub fn verb(&self) -> Verb {
        match self {
            Call::GiveMeWork => Verb::GiveMeWork,
            Call::IWillWorkOn(_) => Verb::IWillWorkOn,
            Call::IAmDone(_) => Verb::IAmDone,
            Call::ClaimReview(_) => Verb::ClaimReview,
            Call::PassReview(_) => Verb::PassReview,
            Call::FailReview(_) => Verb::FailReview,
            Call::IDocumented(_) => Verb::IDocumented,
            Call::Unclaim => Verb::Unclaim,
            Call::IAmIdle => Verb::IAmIdle,
            Call::RequestSandbox(_) => Verb::RequestSandbox,
            Call::ReleaseSandbox => Verb::ReleaseSandbox,
            Call::ResetSandbox(_) => Verb::ResetSandbox,
            Call::SandboxInfo => Verb::SandboxInfo,
            Call::SandboxSql(_) => Verb::SandboxSql,
            Call::RunExperiment(_) => Verb::RunExperiment,
            Call::Note(_) => Verb::Note,
            Call::Evidence(_) => Verb::Evidence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_parses_to_its_own_variant() {
        for verb in Verb::ALL {
            let args = match verb {
                Verb::IWillWorkOn => serde_json::json!({"task": "t-1"}),
                Verb::SandboxSql => {
                    serde_json::json!({"service": "postgres", "statement": "SELECT 1"})
                }
                Verb::RunExperiment => serde_json::json!({"script": "print(1)"}),
                Verb::Note => serde_json::json!({"text": "n"}),
                _ => serde_json::Value::Null,
            };
            let call = Call::parse(verb, args).expect("the minimal arguments fit");
            assert_eq!(call.verb(), verb);
        }
    }

    #[test]
    fn a_long_unknown_field_is_cut_and_the_allowed_ones_kept_whole() {
        let long = "x".repeat(500);
        let malformed = Call::parse(Verb::Note, serde_json::json!({ long: 1, "text": "n" }))
            .expect_err("unknown field");
        let message = malformed.refusal.message;
        assert!(
            message.contains("expected one of `text`, `private`, `task`"),
            "{message}"
        );
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn an_unknown_field_is_refused_under_its_verb() {
        for verb in Verb::ALL {
            let malformed = Call::parse(verb, serde_json::json!({"sneaky": true}))
                .expect_err("unknown fields are refused");
            assert_eq!(malformed.verb, verb);
            assert_eq!(malformed.refusal.error, ErrorCode::InvalidArgument);
            assert!(
                malformed.refusal.message.contains("sneaky"),
                "{malformed:?}"
            );
        }
    }
}
