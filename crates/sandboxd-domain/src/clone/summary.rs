//! What a snapshot holds and what it left out, counted from the snapshot itself: what an
//! operator reads in `sources ls`, `sources snapshot`, the admin API and the panel, and an agent
//! in a clone's evidence. The reasons are the clone's own notes ([`super::clone_notes`]), not
//! texts of their own.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::extended;
use super::restore::{columns_without_statistics_note, imports_column_statistics, no_import_note};
use super::snapshot::{RelationKind, Snapshot};

/// The counts of what a snapshot carries into a clone, and what it does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Ordinary tables (partitions included).
    pub tables: u32,
    pub partitioned_tables: u32,
    /// Indexes with their sizes, partitioned indexes included.
    pub indexes: u32,
    /// Of those, the ones whose expression columns carry statistics (`lower(email)`).
    pub expression_indexes: u32,
    pub materialized_views: u32,
    /// Rows of `pg_stats` carried (a column of a table, materialized view or index expression).
    pub column_statistics: u32,
    /// `CREATE STATISTICS` objects in the schema. Their data is rebuilt in a clone (n-distinct
    /// counts and dependencies exactly, most-common-values lists by frequency); what is not
    /// (objects the snapshot's role cannot read, expression statistics, a list no sample can
    /// reproduce) is in `left_out`.
    pub extended_statistics: u32,
    /// Planner settings captured.
    pub settings: u32,
    pub extensions: u32,
    /// What the clone will lack, and why.
    pub left_out: Vec<LeftOut>,
}

/// One thing a clone of the snapshot lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Short: `extended statistics (2)`, `column statistics`, `sample values`.
    pub what: String,
    /// Why, and what it costs the plans.
    pub why: String,
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Summary {
    /// The summary of `snapshot`, restored on a server of its own major version (as clones are).
    pub fn of(snapshot: &Snapshot) -> Self {
        let of_kind = |kinds: &[RelationKind]| {
            count(
                snapshot
                    .relations
                    .iter()
                    .filter(|r| kinds.contains(&r.kind))
                    .count(),
            )
        };
        let expression_indexes = snapshot
            .columns
            .iter()
            .filter(|c| c.attnum.is_some())
            .map(|c| (c.schema.as_str(), c.table.as_str()))
            .collect::<BTreeSet<_>>()
            .len();
        let mut left_out = Vec::new();
        if !imports_column_statistics(snapshot.major()) {
            left_out.push(LeftOut {
                what: "column statistics".into(),
                why: no_import_note(snapshot.major()),
            });
        }
        left_out.extend(
            extended::left_out(snapshot)
                .into_iter()
                .map(|(what, why)| LeftOut { what, why }),
        );
        if let Some(why) = columns_without_statistics_note(&snapshot.columns_without_statistics) {
            left_out.push(LeftOut {
                what: format!(
                    "a type without statistics ({})",
                    snapshot.columns_without_statistics.len()
                ),
                why,
            });
        }
        if let Some(consequence) = snapshot.privacy.consequence() {
            left_out.push(LeftOut {
                what: "sample values".into(),
                why: consequence.to_owned(),
            });
        }
        if !snapshot.foreign_tables.is_empty() {
            left_out.push(LeftOut {
                what: format!("foreign tables ({})", snapshot.foreign_tables.len()),
                why: format!(
                    "foreign tables ({}) are in the schema but their statistics and sizes are \
                     not read (their rows live on another server), so the planner estimates \
                     them from its defaults",
                    snapshot.foreign_tables.join(", ")
                ),
            });
        }
        Self {
            tables: of_kind(&[RelationKind::Table]),
            partitioned_tables: of_kind(&[RelationKind::PartitionedTable]),
            indexes: of_kind(&[RelationKind::Index, RelationKind::PartitionedIndex]),
            expression_indexes: count(expression_indexes),
            materialized_views: of_kind(&[RelationKind::MaterializedView]),
            column_statistics: count(snapshot.columns.len()),
            extended_statistics: count(snapshot.extended_statistics.len()),
            settings: count(snapshot.settings.len()),
            extensions: count(snapshot.extensions.len()),
            left_out,
        }
    }

    /// One short line for a listing: `12 tables, 30 stats rows, 2 left out`.
    pub fn line(&self) -> String {
        let mut parts = vec![plural(self.tables, "table", "tables")];
        if self.partitioned_tables > 0 {
            parts.push(plural(
                self.partitioned_tables,
                "partitioned",
                "partitioned",
            ));
        }
        parts.push(plural(self.column_statistics, "stats row", "stats rows"));
        parts.push(format!("{} left out", self.left_out.len()));
        parts.join(", ")
    }

    /// A few lines: every count, then each thing left out with its reason.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "holds: {}, {}, {} ({} with expression statistics), {}",
                plural(self.tables, "table", "tables"),
                plural(
                    self.partitioned_tables,
                    "partitioned table",
                    "partitioned tables"
                ),
                plural(self.indexes, "index", "indexes"),
                self.expression_indexes,
                plural(
                    self.materialized_views,
                    "materialized view",
                    "materialized views"
                ),
            ),
            format!(
                "       {}, {}, {}, {}",
                plural(
                    self.column_statistics,
                    "column statistics row",
                    "column statistics rows"
                ),
                plural(
                    self.extended_statistics,
                    "extended statistics object",
                    "extended statistics objects"
                ),
                plural(self.settings, "planner setting", "planner settings"),
                plural(self.extensions, "extension", "extensions"),
            ),
        ];
        if self.left_out.is_empty() {
            lines.push("left out: nothing".into());
        }
        for item in &self.left_out {
            lines.push(format!("left out: {}: {}", item.what, item.why));
        }
        lines
    }
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clone::snapshot::{
        ColumnStats, ExtensionUse, PlannerSetting, Privacy, RelationSize,
    };

    fn relation(name: &str, kind: RelationKind) -> RelationSize {
        RelationSize {
            schema: "public".into(),
            name: name.into(),
            kind,
            relpages: 1,
            reltuples: "10".into(),
            relallvisible: 0,
        }
    }

    fn stats(table: &str, column: &str, attnum: Option<i16>) -> ColumnStats {
        ColumnStats {
            schema: "public".into(),
            table: table.into(),
            column: column.into(),
            attnum,
            most_common_vals: Some("{a,b}".into()),
            ..ColumnStats::default()
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            source: "prod".into(),
            taken_at_ms: 0,
            server_version: "PostgreSQL 18.1".into(),
            server_version_num: 180_001,
            database: "shop".into(),
            schema_sql: String::new(),
            relations: vec![
                relation("orders", RelationKind::PartitionedTable),
                relation("orders_2025", RelationKind::Table),
                relation("orders_2026", RelationKind::Table),
                relation("people", RelationKind::Table),
                relation("people_pkey", RelationKind::Index),
                relation("people_lower_email", RelationKind::Index),
                relation("people_year", RelationKind::Index),
                relation("orders_pkey", RelationKind::PartitionedIndex),
                relation("daily", RelationKind::MaterializedView),
            ],
            columns: vec![
                stats("people", "id", None),
                stats("people", "email", None),
                stats("people_lower_email", "lower", Some(1)),
                stats("people_year", "date_part", Some(1)),
                stats("people_year", "expr", Some(2)),
                stats("daily", "day", None),
            ],
            settings: vec![PlannerSetting {
                name: "random_page_cost".into(),
                value: "1.1".into(),
            }],
            extensions: vec![ExtensionUse {
                name: "pg_trgm".into(),
                version: "1.6".into(),
                schema: "public".into(),
            }],
            extended_statistics: vec!["public.s_city_zip".into(), "public.s_nd".into()],
            foreign_tables: vec![],
            extended_statistics_data: None,
            columns_without_statistics: vec![],
            privacy: Privacy::KeepValues,
        }
    }

    #[test]
    fn counts_every_kind_and_expression_indexes_once() {
        let summary = Summary::of(&snapshot());
        assert_eq!(summary.tables, 3);
        assert_eq!(summary.partitioned_tables, 1);
        assert_eq!(summary.indexes, 4, "partitioned indexes count as indexes");
        assert_eq!(
            summary.expression_indexes, 2,
            "two rows of one index count once"
        );
        assert_eq!(summary.materialized_views, 1);
        assert_eq!(summary.column_statistics, 6);
        assert_eq!(summary.extended_statistics, 2);
        assert_eq!(summary.settings, 1);
        assert_eq!(summary.extensions, 1);
        assert_eq!(
            summary.line(),
            "3 tables, 1 partitioned, 6 stats rows, 1 left out"
        );
    }

    #[test]
    fn extended_statistics_are_left_out_by_name_with_the_clone_notes_reason() {
        let snapshot = snapshot();
        let summary = Summary::of(&snapshot);
        assert_eq!(summary.left_out.len(), 1);
        assert_eq!(summary.left_out[0].what, "extended statistics (2)");
        assert!(
            summary.left_out[0]
                .why
                .contains("public.s_city_zip, public.s_nd")
        );
        let notes = super::super::clone_notes(&snapshot, snapshot.major());
        assert!(
            notes.contains(&summary.left_out[0].why),
            "the same text as the clone's notes"
        );
    }

    #[test]
    fn rebuilt_extended_statistics_are_carried_and_only_what_cannot_be_is_left_out() {
        use crate::clone::snapshot::{
            ExtendedStatistics, ExtendedStatisticsData, McvItem, StatisticsColumn,
        };
        let column = |attnum, name: &str, type_name: &str| StatisticsColumn {
            attnum,
            name: name.into(),
            type_name: type_name.into(),
        };
        let item = |values: [&str; 2], frequency| McvItem {
            values: values.iter().map(|v| Some((*v).to_owned())).collect(),
            frequency,
            base_frequency: frequency / 2.0,
        };
        let rebuilt = ExtendedStatistics {
            schema: "public".into(),
            name: "s_city_zip".into(),
            table_schema: "public".into(),
            table: "people".into(),
            columns: vec![column(2, "city", "text"), column(3, "zip", "integer")],
            n_distinct: Some(r#"{"2, 3": 40}"#.into()),
            dependencies: Some(r#"{"3 => 2": 1.000000}"#.into()),
            mcv: Some(vec![item(["Oslo", "150"], 0.2)]),
            ..ExtendedStatistics::default()
        };
        let flags = ExtendedStatistics {
            name: "s_flags".into(),
            columns: vec![column(4, "a", "boolean"), column(5, "b", "boolean")],
            n_distinct: None,
            dependencies: None,
            mcv: Some(vec![item(["t", "t"], 0.3)]),
            ..rebuilt.clone()
        };
        let expression = ExtendedStatistics {
            name: "s_lower".into(),
            expressions: 1,
            mcv: None,
            ..rebuilt.clone()
        };
        let mut snapshot = snapshot();
        snapshot.extended_statistics = vec![
            "public.s_city_zip".into(),
            "public.s_flags".into(),
            "public.s_lower".into(),
            "public.s_hidden".into(),
        ];
        snapshot.extended_statistics_data = Some(ExtendedStatisticsData {
            objects: vec![rebuilt, flags, expression],
            unreadable: vec!["public.s_hidden".into()],
        });
        snapshot.columns_without_statistics = vec!["public.people.shape (point)".into()];
        let summary = Summary::of(&snapshot);
        assert_eq!(summary.extended_statistics, 4);
        assert_eq!(super::super::extended::carried(&snapshot), 2);
        let whats: Vec<_> = summary.left_out.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "extended statistics (1)",
                "expression statistics (1)",
                "extended most-common values (1)",
                "a type without statistics (1)"
            ]
        );
        assert!(summary.left_out[0].why.contains("public.s_hidden"));
        assert!(summary.left_out[0].why.contains("owner"));
        assert!(summary.left_out[1].why.contains("public.s_lower"));
        assert!(
            summary.left_out[2]
                .why
                .contains("public.s_flags: none of its columns")
        );
        assert!(
            summary.left_out[3]
                .why
                .contains("public.people.shape (point)")
        );
        let notes = super::super::clone_notes(&snapshot, snapshot.major());
        for item in &summary.left_out {
            assert!(
                notes.contains(&item.why),
                "{} is the clone's note",
                item.what
            );
        }
        let text = serde_json::to_string(&summary).expect("json");
        assert!(
            !text.contains("s_city_zip"),
            "a rebuilt object is not left out: {text}"
        );

        let private = snapshot.clone().with_privacy(Privacy::NoValues);
        let data = private.extended_statistics_data.as_ref().expect("data");
        assert!(data.objects.iter().all(|o| o.mcv.is_none()));
        assert!(data.objects[0].n_distinct.is_some() && data.objects[0].dependencies.is_some());
        let whats: Vec<_> = Summary::of(&private)
            .left_out
            .into_iter()
            .map(|l| l.what)
            .collect();
        assert!(
            !whats.iter().any(|w| w.contains("most-common")),
            "{whats:?}"
        );
        assert!(whats.iter().any(|w| w == "sample values"), "{whats:?}");

        // Read expression statistics are carried (rebuilt); under no-values without samples.
        let mut read = snapshot.clone();
        if let Some(data) = &mut read.extended_statistics_data {
            data.objects[2].expression_stats = vec![crate::clone::snapshot::ColumnStats {
                n_distinct: Some("12".into()),
                most_common_vals: Some("{a,b}".into()),
                ..Default::default()
            }];
        }
        let whats: Vec<_> = Summary::of(&read)
            .left_out
            .into_iter()
            .map(|l| l.what)
            .collect();
        assert!(!whats.iter().any(|w| w.contains("expression")), "{whats:?}");
        let private = read.with_privacy(Privacy::NoValues);
        let expression = &private
            .extended_statistics_data
            .as_ref()
            .expect("data")
            .objects[2];
        assert_eq!(expression.expression_stats[0].most_common_vals, None);
        assert_eq!(
            expression.expression_stats[0].n_distinct.as_deref(),
            Some("12")
        );
    }

    #[test]
    fn no_values_and_an_old_source_and_foreign_tables_are_each_left_out() {
        let mut old = snapshot().with_privacy(Privacy::NoValues);
        old.server_version_num = 170_004;
        old.columns.clear();
        old.extended_statistics.clear();
        old.foreign_tables = vec!["public.remote_orders".into()];
        let summary = Summary::of(&old);
        let whats: Vec<_> = summary.left_out.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(
            whats,
            ["column statistics", "sample values", "foreign tables (1)"]
        );
        let notes = super::super::clone_notes(&old, 17);
        for item in &summary.left_out[..2] {
            assert!(
                notes.contains(&item.why),
                "{} is the clone's note",
                item.what
            );
        }
        assert!(summary.left_out[0].why.contains("PostgreSQL 17"));
        assert!(summary.left_out[2].why.contains("public.remote_orders"));
        let text = summary.lines().join("\n");
        assert!(
            text.contains("left out: sample values: privacy mode no-values"),
            "{text}"
        );
        assert!(text.contains("0 column statistics rows"), "{text}");
    }

    #[test]
    fn a_complete_snapshot_says_nothing_was_left_out() {
        let mut whole = snapshot();
        whole.extended_statistics.clear();
        let summary = Summary::of(&whole);
        assert!(summary.left_out.is_empty());
        let lines = summary.lines();
        assert_eq!(lines.last().map(String::as_str), Some("left out: nothing"));
        assert!(
            lines[0].contains("4 indexes (2 with expression statistics)"),
            "{}",
            lines[0]
        );
        let json = serde_json::to_string(&summary).expect("json");
        let back: Summary = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, summary);
    }
}
