//! The records sandboxd keeps and every layer talks about: agents, projects, tasks and their
//! notes, clone sources, and who acted. Plain data: the store persists them, the broker decides
//! with them, the gateways show them; none of them carries a credential.

use std::fmt;

use crate::clone::{CloneChoice, Privacy, Summary};
use crate::lifecycle::TaskState;
use crate::{AgentSlug, EngineRef, FeatureRequest, ProjectSizes, ProjectSlug, SourceName};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pub slug: AgentSlug,
    /// A role name of the operator's role book; only the broker interprets it.
    pub role: String,
    pub project: ProjectSlug,
    /// Lowercase hex of the SHA-256 of its bearer token; the token itself is never kept.
    pub token_hash: String,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub slug: ProjectSlug,
    /// The engines the project opted into, in the order they were given; `None` when it never
    /// opted in. (What an empty list means is the broker's call.)
    pub sandbox_services: Option<Vec<EngineRef>>,
    /// Standing features per engine; `None` when none were set.
    pub sandbox_extensions: Option<FeatureRequest>,
    /// Engines handed out as clones of a source, of which and under which privacy mode;
    /// empty when none.
    pub sandbox_clones: Vec<(EngineRef, CloneChoice)>,
    /// The data space of each engine that has one of its own; empty: the backends' defaults.
    pub sandbox_sizes: ProjectSizes,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// `t-<n>`, numbered in creation order across the store.
    pub id: String,
    pub project: ProjectSlug,
    pub title: String,
    pub description: String,
    pub state: TaskState,
    pub claimed_by: Option<AgentSlug>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    Note,
    Evidence,
}

impl NoteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoteKind::Note => "note",
            NoteKind::Evidence => "evidence",
        }
    }

    pub fn parse(text: &str) -> Option<NoteKind> {
        match text {
            "note" => Some(NoteKind::Note),
            "evidence" => Some(NoteKind::Evidence),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskNote {
    /// Time-ordered.
    pub id: String,
    pub task_id: String,
    /// The author. Not checked against the agents table: a note outlives its author.
    pub agent: AgentSlug,
    pub kind: NoteKind,
    /// Seen only by readers that ask for private notes (the auditor's).
    pub private: bool,
    pub text: String,
    pub at_ms: i64,
}

/// A source as an operator sees it: everything but the DSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: SourceName,
    pub privacy: Privacy,
    /// Seconds between snapshots; 0: on demand only.
    pub refresh_secs: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_attempt_at_ms: Option<i64>,
    /// Why the last attempt failed; None when it succeeded (or none was made).
    pub last_error: Option<String>,
    pub snapshot: Option<SnapshotSummary>,
}

/// The latest snapshot, without its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub taken_at_ms: i64,
    pub server_version: String,
    pub took_ms: i64,
    /// What it holds and left out; None for a snapshot stored before summaries were kept.
    pub contents: Option<Summary>,
}

/// Who acted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    Agent(AgentSlug),
    /// A person or orchestrator through the CLI, the admin API or the panel.
    Operator,
    /// The daemon on its own (janitor, startup reconciliation).
    Daemon,
}

impl Actor {
    /// Stored form: `agent:<slug>`, `operator`, `daemon` (the prefix keeps an agent named
    /// "operator" apart from the operator).
    pub fn encode(&self) -> String {
        match self {
            Actor::Agent(slug) => format!("agent:{slug}"),
            Actor::Operator | Actor::Daemon => self.to_string(),
        }
    }

    pub fn decode(text: &str) -> Option<Actor> {
        match text {
            "operator" => Some(Actor::Operator),
            "daemon" => Some(Actor::Daemon),
            _ => text
                .strip_prefix("agent:")
                .and_then(|slug| AgentSlug::parse(slug).ok())
                .map(Actor::Agent),
        }
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Agent(slug) => f.write_str(slug.as_str()),
            Actor::Operator => f.write_str("operator"),
            Actor::Daemon => f.write_str("daemon"),
        }
    }
}
