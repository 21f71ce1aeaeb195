//! `/v1/agents`: agents, and the one answer that hands out an agent's token.

use std::collections::BTreeMap;

use sandboxd_broker::Spawned;
use sandboxd_domain::Agent;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentOut {
    pub slug: String,
    pub role: String,
    pub project: String,
    pub created_at_ms: i64,
}

impl From<Agent> for AgentOut {
    fn from(a: Agent) -> Self {
        Self {
            slug: a.slug.to_string(),
            role: a.role,
            project: a.project.to_string(),
            created_at_ms: a.created_at_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnAgent {
    pub slug: String,
    /// A role of the daemon's role book (`developer`, `qa`, `pr_reviewer`, `documenter`,
    /// `auditor` by default).
    pub role: String,
    pub project: String,
}

/// The spawn answer (§3.1). The token is shown here once and never again: only its hash is
/// stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SpawnedOut {
    pub agent: String,
    pub role: String,
    pub project: String,
    /// The agent's bearer token for the MCP gateway.
    pub token: String,
    /// The exact verbs of the role.
    pub manifest: Vec<String>,
    /// The spawn environment: only `ROBOCO_SANDBOX_SERVICES_AVAILABLE`, and only for an
    /// opted-in project and a role that may request sandboxes. Never a credential.
    pub env: BTreeMap<String, String>,
    pub briefing: Vec<String>,
}

impl From<Spawned> for SpawnedOut {
    fn from(s: Spawned) -> Self {
        Self {
            agent: s.agent.to_string(),
            role: s.role,
            project: s.project.to_string(),
            token: s.token.expose_secret().to_owned(),
            manifest: s.manifest.iter().map(|v| v.name().to_owned()).collect(),
            env: s.env,
            briefing: s.briefing,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentsQuery {
    /// Only this project's agents.
    pub project: Option<String>,
}
