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

    /// `reset_sandbox`'s sentence for `engine` made this clone again: which snapshot of which
    /// source it was rebuilt from (its evidence carries the rest).
    pub fn rebuilt(&self, engine: &str) -> String {
        format!(
            "{engine} was rebuilt as a clone of source {} from its snapshot {} ({}, taken {} \
             ago, privacy {}): the source's schema, statistics and settings again, no rows.",
            self.source,
            self.snapshot_taken_at_ms,
            self.server_version,
            crate::clock::format_age_since(self.snapshot_taken_at_ms),
            self.privacy.as_str()
        )
    }
}

/// The database a clone's schema goes into: the source database's own name, so the agent's
/// URL, `DB_NAME` and `current_database()` say which production this is. A name the clone's
/// server keeps for sandboxd itself (`kept`: its own database and the templates, which a reset
/// never drops) cannot be the agent's: the clone keeps `fresh`, the database it was provisioned
/// with, and the second value says why, for the clone's notes. A snapshot that names no
/// database keeps `fresh` too.
pub fn clone_database_name(
    source_database: &str,
    fresh: &str,
    kept: &[String],
) -> (String, Option<String>) {
    if source_database.is_empty() || source_database == fresh {
        return (fresh.to_owned(), None);
    }
    if kept.iter().any(|name| name == source_database) {
        let note = format!(
            "the source's database is named {source_database:?}, a name the clone's server \
             keeps for sandboxd itself, so the clone's database is {fresh:?} (the schema, \
             statistics and settings are the source's)"
        );
        return (fresh.to_owned(), Some(note));
    }
    (source_database.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_takes_the_source_database_name_unless_the_server_keeps_it() {
        let kept: Vec<String> = ["postgres", "template0", "template1"]
            .map(str::to_owned)
            .to_vec();
        for odd in ["shop", "Prod Shop", "we\"ird", "UPPER", "sandbox_2"] {
            assert_eq!(
                clone_database_name(odd, "sandbox", &kept),
                (odd.to_owned(), None),
                "{odd}"
            );
        }
        assert_eq!(
            clone_database_name("sandbox", "sandbox", &kept),
            ("sandbox".to_owned(), None)
        );
        assert_eq!(
            clone_database_name("", "sandbox", &kept),
            ("sandbox".to_owned(), None),
            "a snapshot that names none"
        );
        for daemons in ["postgres", "template0", "template1"] {
            let (name, note) = clone_database_name(daemons, "sandbox", &kept);
            assert_eq!(name, "sandbox", "{daemons}");
            let note = note.expect("a note says why");
            assert!(
                note.contains(&format!("{daemons:?}")) && note.contains("keeps for sandboxd"),
                "{note}"
            );
        }
    }

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
        let rebuilt = CloneOrigin {
            snapshot_taken_at_ms: 1_765_000_000_000,
            ..origin
        }
        .rebuilt("postgres");
        assert!(
            rebuilt.starts_with(
                "postgres was rebuilt as a clone of source shop from its snapshot \
                 1765000000000 (PostgreSQL 18.6, taken "
            ) && rebuilt.contains("privacy keep-values"),
            "{rebuilt}"
        );
    }
}
