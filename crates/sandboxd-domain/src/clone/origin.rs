//! What a clone was made from: kept with the instance, shown in its evidence and `sandbox_info`.

use serde::{Deserialize, Serialize};

use super::restore::clone_notes;
use super::snapshot::{Privacy, Snapshot};
use super::summary::Summary;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneOrigin {
    /// The source's name (never its address or DSN).
    pub source: String,
    /// Unix milliseconds.
    pub snapshot_taken_at_ms: i64,
    /// The source's server, e.g. `PostgreSQL 18.6`.
    pub server_version: String,
    pub privacy: Privacy,
    /// What the clone lacks and what undoes it, for the agent.
    pub notes: Vec<String>,
    /// What the snapshot held and left out: what the clone's estimates rest on. Absent for
    /// clones made before summaries.
    #[serde(default)]
    pub summary: Option<Summary>,
}

impl CloneOrigin {
    /// The origin of a clone of `snapshot` on a server of major version `target_major`.
    pub fn of(snapshot: &Snapshot, target_major: u32) -> Self {
        Self {
            source: snapshot.source.clone(),
            snapshot_taken_at_ms: snapshot.taken_at_ms,
            server_version: snapshot.server_version.clone(),
            privacy: snapshot.privacy,
            notes: clone_notes(snapshot, target_major),
            summary: Some(Summary::of(snapshot)),
        }
    }

    /// The briefing's sentence for an agent handed `engine` as this clone: what it is, what it
    /// is for, and what undoes it.
    pub fn briefing(&self, engine: &str) -> String {
        format!(
            "{engine} is a clone of source {} ({}): its schema, planner statistics and planner \
             settings with no rows, so EXPLAIN picks the plans production would; ANALYZE, \
             VACUUM, TRUNCATE, REINDEX or any table rewrite replaces the copied statistics, and \
             reset_sandbox makes it a clone again (its evidence says what else it lacks).",
            self.source, self.server_version
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_briefing_names_the_source_and_what_resets_the_statistics() {
        let origin = CloneOrigin {
            source: "shop".into(),
            snapshot_taken_at_ms: 0,
            server_version: "PostgreSQL 18.6".into(),
            privacy: Privacy::KeepValues,
            notes: Vec::new(),
            summary: None,
        };
        let text = origin.briefing("postgres");
        assert!(text.starts_with("postgres is a clone of source shop (PostgreSQL 18.6)"));
        for word in ["EXPLAIN", "ANALYZE", "VACUUM", "TRUNCATE", "reset_sandbox"] {
            assert!(text.contains(word), "{word}: {text}");
        }
    }
}
