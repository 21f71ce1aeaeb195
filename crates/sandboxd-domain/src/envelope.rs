//! The envelopes every verb answers with (§3.2). `next` and `remediate` lead an agent through the
//! flow; error codes are stable strings clients can branch on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a verb was refused. Each guard of `request_sandbox` has its own code; only
/// `provisioner_unavailable` and `invalid_state` (a failed provision) are retryable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Guard 1: the master switch is off.
    SandboxDisabled,
    /// Guard 2: the agent holds no active, project-bound task.
    NoActiveTask,
    /// Guard 3: the project has no `sandbox_services`.
    ProjectNotOptedIn,
    /// Guard 4: a service outside the project's set.
    ServiceNotAllowed,
    /// Guard 4: a feature for a service not opted into, or outside the allowlist.
    FeatureNotAllowed,
    /// Guard 4: an opted-in service this sandboxd's backend cannot run (its image or
    /// programs are missing); an operator must provide it.
    EngineUnavailable,
    /// Guard 5: the provisioner cannot be reached right now.
    ProvisionerUnavailable,
    /// Provisioning itself failed; nothing was left behind.
    InvalidState,
    /// The verb is not in the caller's manifest.
    VerbNotAllowed,
    /// The call's arguments are malformed.
    InvalidArgument,
    /// A verb called before the one it depends on.
    OutOfOrder,
    /// The named task does not exist.
    NotFound,
    /// Another agent holds the task.
    TaskTaken,
    /// No open task to hand out.
    NoWork,
    /// An experiment's script raised: the message carries its traceback.
    ScriptError,
    /// An experiment met one of its limits: the message names it.
    LimitExceeded,
    /// The experiment runtime could not run the script (guest missing or being compiled, a
    /// runtime failure, the sandbox unreachable); nothing of the script ran to its end.
    RuntimeUnavailable,
    /// Something failed inside sandboxd; details are in its log, not here.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SandboxDisabled => "sandbox_disabled",
            Self::NoActiveTask => "no_active_task",
            Self::ProjectNotOptedIn => "project_not_opted_in",
            Self::ServiceNotAllowed => "service_not_allowed",
            Self::FeatureNotAllowed => "feature_not_allowed",
            Self::EngineUnavailable => "engine_unavailable",
            Self::ProvisionerUnavailable => "provisioner_unavailable",
            Self::InvalidState => "invalid_state",
            Self::VerbNotAllowed => "verb_not_allowed",
            Self::InvalidArgument => "invalid_argument",
            Self::OutOfOrder => "out_of_order",
            Self::NotFound => "not_found",
            Self::TaskTaken => "task_taken",
            Self::NoWork => "no_work",
            Self::ScriptError => "script_error",
            Self::LimitExceeded => "limit_exceeded",
            Self::RuntimeUnavailable => "runtime_unavailable",
            Self::Internal => "internal",
        }
    }

    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::ProvisionerUnavailable
                | Self::InvalidState
                | Self::NoWork
                | Self::RuntimeUnavailable
                | Self::Internal
        )
    }
}

/// `{ "status": "ok", "task_id", "next", "evidence"?, "context_briefing" }`
// `E` is the evidence: the broker answers a typed value (its `Evidence`), which only a gateway
// serializes; a client reading an answer back gets JSON (the default). (Not a doc comment: the
// doc is the description agents read in the output schema.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OkEnvelope<E = serde_json::Value> {
    pub status: OkStatus,
    pub task_id: Option<String>,
    pub next: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<E>,
    pub context_briefing: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OkStatus {
    Ok,
}

/// `{ "error", "message", "remediate", "missing"?, "retryable" }`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorCode,
    pub message: String,
    pub remediate: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
    pub retryable: bool,
}

impl ErrorEnvelope {
    pub fn new(error: ErrorCode, message: impl Into<String>, remediate: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
            remediate: remediate.into(),
            missing: None,
            retryable: error.retryable(),
        }
    }

    pub fn with_missing(mut self, missing: Vec<String>) -> Self {
        self.missing = Some(missing);
        self
    }

    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }
}

impl<E> OkEnvelope<E> {
    pub fn new(
        task_id: Option<String>,
        next: impl Into<String>,
        briefing: impl Into<String>,
    ) -> Self {
        Self {
            status: OkStatus::Ok,
            task_id,
            next: next.into(),
            evidence: None,
            context_briefing: briefing.into(),
        }
    }

    pub fn with_evidence(mut self, evidence: impl Into<E>) -> Self {
        self.evidence = Some(evidence.into());
        self
    }
}

/// Either answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Envelope<E = serde_json::Value> {
    Ok(OkEnvelope<E>),
    Error(ErrorEnvelope),
}

impl<E> Envelope<E> {
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }
}

impl<E: Serialize> Envelope<E> {
    /// The answer as a client reads it back: its evidence turned into JSON, as a gateway
    /// sends it.
    pub fn to_json(&self) -> Envelope {
        match self {
            Self::Ok(ok) => Envelope::Ok(OkEnvelope {
                status: ok.status,
                task_id: ok.task_id.clone(),
                next: ok.next.clone(),
                evidence: ok.evidence.as_ref().map(|evidence| {
                    serde_json::to_value(evidence).expect("evidence always serializes")
                }),
                context_briefing: ok.context_briefing.clone(),
            }),
            Self::Error(err) => Envelope::Error(err.clone()),
        }
    }
}

impl<E> From<OkEnvelope<E>> for Envelope<E> {
    fn from(ok: OkEnvelope<E>) -> Self {
        Self::Ok(ok)
    }
}

impl<E> From<ErrorEnvelope> for Envelope<E> {
    fn from(err: ErrorEnvelope) -> Self {
        Self::Error(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_envelope_shape() {
        let json = serde_json::to_value(OkEnvelope::<serde_json::Value>::new(
            Some("t1".into()),
            "request_sandbox",
            "b",
        ))
        .expect("json");
        assert_eq!(json["status"], "ok");
        assert_eq!(json["task_id"], "t1");
        assert_eq!(json["next"], "request_sandbox");
        assert!(json.get("evidence").is_none());
    }

    #[test]
    fn error_envelope_shape_and_retryability() {
        let err = ErrorEnvelope::new(ErrorCode::ProvisionerUnavailable, "m", "r");
        let json = serde_json::to_value(&err).expect("json");
        assert_eq!(json["error"], "provisioner_unavailable");
        assert_eq!(json["retryable"], true);
        assert!(!ErrorCode::SandboxDisabled.retryable());
        assert_eq!(
            serde_json::to_value(ErrorCode::NoActiveTask).expect("json"),
            ErrorCode::NoActiveTask.as_str()
        );
    }
}
