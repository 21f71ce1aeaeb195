//! The statements that make a fresh instance into a clone of a snapshot, run as its superuser
//! in the sandbox's database: the schema, then the statistics, then the planner settings.

use super::snapshot::{ColumnStats, RelationSize, Snapshot};
use super::unparsed::{UnparsedColumn, without_unparsed_values};
use crate::engine::{pg_identifier, sql_literal};

/// The first major version that can import column statistics (`pg_restore_attribute_stats`).
const STATS_IMPORT_MAJOR: u32 = 18;

/// The schema script without psql's meta-commands (`\restrict`, `\unrestrict`: pg_dump
/// brackets its output with them), ready for one simple-query batch.
pub fn schema_statements(schema_sql: &str) -> String {
    schema_sql
        .lines()
        .filter(|line| !line.starts_with('\\'))
        .map(|line| match line.strip_prefix("CREATE SCHEMA ") {
            // A fresh instance has schemas of its own (the `extensions` schema every sandbox
            // gets), which the source may have too.
            Some(rest) if !rest.starts_with("IF NOT EXISTS") => {
                format!("CREATE SCHEMA IF NOT EXISTS {rest}")
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The statements that restore the snapshot's statistics on a server of `target_major`: the
/// statistics import functions from PostgreSQL 18 on; before that only `pg_class`'s sizes,
/// written directly (the column statistics are lost, and [`clone_notes`] says so).
/// The values of `unparsed` columns stay out (`unparsed.rs`).
pub fn restore_statements(
    snapshot: &Snapshot,
    target_major: u32,
    unparsed: &[UnparsedColumn],
) -> Vec<String> {
    if target_major >= STATS_IMPORT_MAJOR {
        let version = snapshot.server_version_num;
        snapshot
            .relations
            .iter()
            .map(|r| relation_stats_call(r, version))
            .chain(
                snapshot
                    .columns
                    .iter()
                    .map(|c| attribute_stats_call(&without_unparsed_values(c, unparsed), version)),
            )
            .collect()
    } else {
        snapshot.relations.iter().map(pg_class_update).collect()
    }
}

fn relation_stats_call(relation: &RelationSize, version: u32) -> String {
    format!(
        "SELECT pg_catalog.pg_restore_relation_stats('version', {version}::integer, \
         'schemaname', {}, 'relname', {}, 'relpages', {}::integer, 'reltuples', {}::real, \
         'relallvisible', {}::integer)",
        sql_literal(&relation.schema),
        sql_literal(&relation.name),
        relation.relpages,
        sql_literal(&relation.reltuples),
        relation.relallvisible,
    )
}

pub(crate) fn attribute_stats_call(column: &ColumnStats, version: u32) -> String {
    let mut args = vec![
        format!("'version', {version}::integer"),
        format!("'schemaname', {}", sql_literal(&column.schema)),
        format!("'relname', {}", sql_literal(&column.table)),
        // An index's expression column by number, as pg_dump does: its name is not stable.
        match column.attnum {
            Some(attnum) => format!("'attnum', {attnum}::smallint"),
            None => format!("'attname', {}", sql_literal(&column.column)),
        },
        format!("'inherited', {}::boolean", column.inherited),
    ];
    let typed: [(&str, &Option<String>, &str); 13] = [
        ("null_frac", &column.null_frac, "real"),
        ("avg_width", &column.avg_width, "integer"),
        ("n_distinct", &column.n_distinct, "real"),
        ("most_common_vals", &column.most_common_vals, "text"),
        ("most_common_freqs", &column.most_common_freqs, "real[]"),
        ("histogram_bounds", &column.histogram_bounds, "text"),
        ("correlation", &column.correlation, "real"),
        ("most_common_elems", &column.most_common_elems, "text"),
        (
            "most_common_elem_freqs",
            &column.most_common_elem_freqs,
            "real[]",
        ),
        (
            "elem_count_histogram",
            &column.elem_count_histogram,
            "real[]",
        ),
        (
            "range_length_histogram",
            &column.range_length_histogram,
            "text",
        ),
        ("range_empty_frac", &column.range_empty_frac, "real"),
        (
            "range_bounds_histogram",
            &column.range_bounds_histogram,
            "text",
        ),
    ];
    for (name, value, ty) in typed {
        if let Some(value) = value {
            args.push(format!("'{name}', {}::{ty}", sql_literal(value)));
        }
    }
    format!(
        "SELECT pg_catalog.pg_restore_attribute_stats({})",
        args.join(", ")
    )
}

fn pg_class_update(relation: &RelationSize) -> String {
    let qualified = format!(
        "{}.{}",
        pg_identifier(&relation.schema),
        pg_identifier(&relation.name)
    );
    format!(
        "UPDATE pg_catalog.pg_class SET relpages = {}, reltuples = {}::real, relallvisible = {} \
         WHERE oid OPERATOR(pg_catalog.=) {}::pg_catalog.regclass",
        relation.relpages,
        sql_literal(&relation.reltuples),
        relation.relallvisible,
        sql_literal(&qualified),
    )
}

/// `ALTER DATABASE … SET` for each planner setting, so every new session on the clone's
/// database plans as the source's do. A name that is not a plain setting name is skipped.
pub fn setting_statements(snapshot: &Snapshot, database: &str) -> Vec<String> {
    snapshot
        .settings
        .iter()
        .filter(|s| {
            !s.name.is_empty()
                && s.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
        })
        .map(|s| {
            format!(
                "ALTER DATABASE {} SET {} = {}",
                pg_identifier(database),
                s.name,
                sql_literal(&s.value)
            )
        })
        .collect()
}

/// What a clone of `snapshot` on a server of `target_major` does not carry, and what would undo
/// it: the clone's evidence says all of it.
pub fn clone_notes(snapshot: &Snapshot, target_major: u32) -> Vec<String> {
    let mut notes = vec![
        "no rows: the schema, statistics and planner settings are the source's; relation files \
         are sparse, padded to the source's sizes"
            .to_owned(),
        "ANALYZE, VACUUM, TRUNCATE, REINDEX, CLUSTER, VACUUM FULL or any table rewrite replaces \
         the source's statistics or sizes with the clone's own (autovacuum is off)"
            .to_owned(),
    ];
    if target_major < STATS_IMPORT_MAJOR {
        notes.push(no_import_note(target_major));
    }
    notes.extend(
        super::extended::left_out(snapshot)
            .into_iter()
            .map(|(_, why)| why),
    );
    if let Some(why) = columns_without_statistics_note(&snapshot.columns_without_statistics) {
        notes.push(why);
    }
    if let Some(consequence) = snapshot.privacy.consequence() {
        notes.push(consequence.to_owned());
    }
    notes
}

/// Whether a server of `major` can import column statistics.
pub(super) fn imports_column_statistics(major: u32) -> bool {
    major >= STATS_IMPORT_MAJOR
}

/// Why a clone on a server of `major` (before 18) has no column statistics.
pub(super) fn no_import_note(major: u32) -> String {
    format!(
        "PostgreSQL {major} cannot import column statistics: only table and index sizes \
         (pg_class) were restored, so selectivity estimates are the planner's defaults"
    )
}

/// What it means that the source keeps no statistics of `columns`.
pub(super) fn columns_without_statistics_note(columns: &[String]) -> Option<String> {
    if columns.is_empty() {
        return None;
    }
    Some(format!(
        "the source keeps no statistics of {} beyond their null fraction and width (a type \
         without the `=`/`<` operators ANALYZE needs, or statistics turned off for the \
         column): the planner estimates predicates on them from defaults, on the source as in \
         a clone",
        columns.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clone::snapshot::{PlannerSetting, Privacy, RelationKind};

    fn snapshot() -> Snapshot {
        Snapshot {
            source: "prod".into(),
            taken_at_ms: 0,
            server_version: "PostgreSQL 18.6".into(),
            server_version_num: 180_006,
            database: "shop".into(),
            schema_sql: "\\restrict abc\nCREATE TABLE t (a int);\n\\unrestrict abc\n".into(),
            relations: vec![RelationSize {
                schema: "public".into(),
                name: "it's".into(),
                kind: RelationKind::Table,
                relpages: 100,
                reltuples: "12345".into(),
                relallvisible: 7,
            }],
            columns: vec![ColumnStats {
                schema: "public".into(),
                table: "it's".into(),
                column: "a".into(),
                null_frac: Some("0.5".into()),
                most_common_vals: Some("{1,2}".into()),
                most_common_freqs: Some("{0.4,0.1}".into()),
                ..ColumnStats::default()
            }],
            settings: vec![
                PlannerSetting {
                    name: "random_page_cost".into(),
                    value: "1.1".into(),
                },
                PlannerSetting {
                    name: "work_mem; DROP".into(),
                    value: "x".into(),
                },
            ],
            extensions: vec![],
            extended_statistics: vec!["public.s1".into()],
            foreign_tables: vec![],
            extended_statistics_data: None,
            columns_without_statistics: vec![],
            privacy: Privacy::KeepValues,
        }
    }

    #[test]
    fn the_schema_loses_only_psql_meta_commands() {
        assert_eq!(
            schema_statements(&snapshot().schema_sql),
            "CREATE TABLE t (a int);"
        );
        assert_eq!(
            schema_statements("CREATE SCHEMA extensions;\nCREATE SCHEMA IF NOT EXISTS a;"),
            "CREATE SCHEMA IF NOT EXISTS extensions;\nCREATE SCHEMA IF NOT EXISTS a;",
            "a schema the fresh instance has already is no error"
        );
    }

    #[test]
    fn postgres_18_gets_the_import_functions_with_quoted_names() {
        let statements = restore_statements(&snapshot(), 18, &[]);
        assert_eq!(statements.len(), 2);
        assert!(statements[0].contains("pg_restore_relation_stats"));
        assert!(statements[0].contains("'relname', 'it''s'"));
        assert!(statements[0].contains("'relpages', 100::integer"));
        assert!(statements[1].contains("pg_restore_attribute_stats"));
        assert!(statements[1].contains("'most_common_freqs', '{0.4,0.1}'::real[]"));
        assert!(
            !statements[1].contains("histogram_bounds"),
            "absent stays absent"
        );
    }

    #[test]
    fn an_index_expression_column_is_restored_by_number_and_privacy_still_strips_it() {
        let mut snapshot = snapshot();
        snapshot.columns.push(ColumnStats {
            schema: "public".into(),
            table: "people_lower_email".into(),
            column: "lower".into(),
            attnum: Some(1),
            n_distinct: Some("-1".into()),
            most_common_vals: Some("{shared@example.com}".into()),
            most_common_freqs: Some("{0.1}".into()),
            histogram_bounds: Some("{a@example.com,z@example.com}".into()),
            ..ColumnStats::default()
        });
        let statements = restore_statements(&snapshot, 18, &[]);
        assert_eq!(statements.len(), 3);
        let table = &statements[1];
        assert!(table.contains("'attname', 'a'"), "{table}");
        assert!(!table.contains("attnum"), "{table}");
        let index = &statements[2];
        assert!(
            index.contains("'relname', 'people_lower_email', 'attnum', 1::smallint, "),
            "{index}"
        );
        assert!(!index.contains("attname"), "{index}");
        assert!(!index.contains("'lower'"), "{index}");
        assert!(
            index.contains("'most_common_vals', '{shared@example.com}'::text"),
            "{index}"
        );

        let private = snapshot.with_privacy(Privacy::NoValues);
        let statements = restore_statements(&private, 18, &[]);
        let index = &statements[2];
        assert!(index.contains("'attnum', 1::smallint"), "{index}");
        assert!(index.contains("'n_distinct', '-1'::real"), "{index}");
        for sample in ["example.com", "most_common", "histogram"] {
            assert!(!index.contains(sample), "{sample} left in {index}");
        }
    }

    #[test]
    fn before_18_only_pg_class_is_written_and_the_notes_say_so() {
        let statements = restore_statements(&snapshot(), 17, &[]);
        assert_eq!(statements.len(), 1);
        assert!(statements[0].starts_with("UPDATE pg_catalog.pg_class"));
        assert!(statements[0].contains("'\"public\".\"it''s\"'::pg_catalog.regclass"));
        let notes = clone_notes(&snapshot(), 17).join("\n");
        assert!(notes.contains("cannot import column statistics"));
        assert!(notes.contains("public.s1"));
        assert!(
            !clone_notes(&snapshot(), 18)
                .join("\n")
                .contains("cannot import")
        );
    }

    #[test]
    fn settings_go_to_the_database_and_odd_names_are_skipped() {
        let statements = setting_statements(&snapshot(), "sandbox");
        assert_eq!(
            statements,
            ["ALTER DATABASE \"sandbox\" SET random_page_cost = '1.1'"]
        );
    }
}
