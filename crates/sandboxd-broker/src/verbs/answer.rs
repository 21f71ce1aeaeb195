//! What a verb answers: an envelope whose evidence is typed, one shape per verb. Only a
//! gateway turns it into JSON; nothing here is built from JSON.

use sandboxd_backend::wire::QueryLimits;
use sandboxd_domain::clone::CloneOrigin;
use sandboxd_domain::envelope::{ErrorEnvelope, OkEnvelope};
use sandboxd_domain::{AgentSlug, EnvPrefix, Instance, ServiceEvidence};
use sandboxd_experiments::RunReport;
use serde::Serialize;

use crate::Broker;
use crate::feature_probes::Probed;

impl Broker {
    /// `instance`'s evidence for its agent, each module with the version its backend's feature
    /// probe found (Redis: `MODULE LIST`); a version stays null while no probe of that backend
    /// is known.
    pub(crate) fn service_evidence(
        &self,
        instance: &Instance,
        prefix: &EnvPrefix,
    ) -> ServiceEvidence {
        let mut evidence = instance.evidence(prefix);
        // A clone runs its source's major version: that image's probe.
        let major = instance
            .clone
            .as_ref()
            .and_then(|origin| crate::feature_probes::major_of(&origin.server_version));
        let probed = self
            .inner
            .feature_probes
            .cached(instance.backend, instance.engine, major);
        if let Some(probe) = probed.as_ref().and_then(Probed::known) {
            evidence.set_module_versions(&probe.versions);
        }
        evidence
    }
}

/// A verb's answer and the detail its audit row keeps.
pub(crate) type Answer = Result<(OkEnvelope<Evidence>, String), ErrorEnvelope>;

/// The `evidence` of an answer, as each verb gives it.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    /// `request_sandbox`: each service asked for, with its credentials.
    Sandbox(Vec<ServiceEvidence>),
    /// `reset_sandbox`: each service reset.
    Resets(Vec<ResetEvidence>),
    /// `sandbox_sql`: the statement's answer.
    Sql(SqlEvidence),
    /// `sandbox_info`: each service of the sandbox.
    Info(Vec<ServiceInfo>),
    /// `run_experiment`: what the script did.
    Experiment(ExperimentEvidence),
    /// `evidence` without a text: what was recorded on the task.
    Recorded(Vec<RecordedEvidence>),
}

macro_rules! evidence_from {
    ($($variant:ident($type:ty)),* $(,)?) => {$(
        impl From<$type> for Evidence {
            fn from(evidence: $type) -> Self {
                Self::$variant(evidence)
            }
        }
    )*};
}

evidence_from!(
    Sandbox(Vec<ServiceEvidence>),
    Resets(Vec<ResetEvidence>),
    Sql(SqlEvidence),
    Info(Vec<ServiceInfo>),
    Experiment(ExperimentEvidence),
    Recorded(Vec<RecordedEvidence>),
);

#[derive(Debug, Clone, Serialize)]
pub struct ResetEvidence {
    pub service: &'static str,
    pub reset_ms: f64,
    /// A clone: the snapshot it was rebuilt from, as `request_sandbox`'s evidence gives it
    /// (source, snapshot, privacy, notes, summary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clone: Option<CloneOrigin>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SqlEvidence {
    pub service: &'static str,
    pub columns: Vec<String>,
    /// The server's values (SQL text as strings, NULL as null; Redis replies as JSON).
    pub rows: Vec<Vec<serde_json::Value>>,
    pub affected: Option<u64>,
    pub truncated: bool,
    /// Which limit cut the answer, when one did.
    pub cut_at: Option<&'static str>,
    pub limits: QueryLimits,
    pub elapsed_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceInfo {
    pub service: &'static str,
    pub engine: &'static str,
    pub version: String,
    pub backend: String,
    pub live: bool,
    pub features: Vec<&'static str>,
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub created_at_ms: i64,
    pub last_used_at_ms: i64,
    pub idle_timeout_secs: Option<u64>,
    pub released_if_idle_at_ms: Option<i64>,
    pub max_lifetime_secs: Option<u64>,
    pub released_at_latest_at_ms: Option<i64>,
    pub clone: Option<CloneOrigin>,
    pub size_mb: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentEvidence {
    pub service: &'static str,
    /// The run's own report, its fields beside `service`.
    #[serde(flatten)]
    pub report: RunReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordedEvidence {
    pub by: AgentSlug,
    pub at_ms: i64,
    pub text: String,
}
