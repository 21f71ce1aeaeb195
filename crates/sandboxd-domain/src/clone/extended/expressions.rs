//! The statistics of a statistics object's expressions (`CREATE STATISTICS … ON (lower(a))`,
//! `pg_stats_ext_exprs`) rebuilt **exactly**, from PostgreSQL 18 on. They are stored as an
//! array of `pg_statistic` rows (`stxdexpr`), one per expression, which nothing can type in;
//! but the server makes such rows itself: a scratch table whose columns have the expressions'
//! types (taken from a view over the clone's own expressions, which parsing alone types: no
//! function of the schema runs) gets the source's values through
//! `pg_restore_attribute_stats`, and its `pg_statistic` rows, in column order, become the
//! clone's `stxdexpr`. Only built-in types: their values are read by the server's own input
//! functions, never by a function the source's schema brought.

use super::{CloneObject, Rebuild, data_row, opening};
use crate::clone::restore::attribute_stats_call;
use crate::clone::snapshot::{ColumnStats, ExtendedStatistics};
use crate::engine::{pg_identifier, sql_literal};

/// The first major version with `pg_restore_attribute_stats`.
pub const EXPRESSION_STATS_MAJOR: u32 = 18;

/// What the clone's `pg_stats_ext_exprs` must print for each expression after the rebuild:
/// the source's values.
const CHECKED: [&str; 10] = [
    "null_frac",
    "avg_width",
    "n_distinct",
    "most_common_vals",
    "most_common_freqs",
    "histogram_bounds",
    "correlation",
    "most_common_elems",
    "most_common_elem_freqs",
    "elem_count_histogram",
];

fn checked_value<'a>(stats: &'a ColumnStats, field: &str) -> &'a Option<String> {
    match field {
        "null_frac" => &stats.null_frac,
        "avg_width" => &stats.avg_width,
        "n_distinct" => &stats.n_distinct,
        "most_common_vals" => &stats.most_common_vals,
        "most_common_freqs" => &stats.most_common_freqs,
        "histogram_bounds" => &stats.histogram_bounds,
        "correlation" => &stats.correlation,
        "most_common_elems" => &stats.most_common_elems,
        "most_common_elem_freqs" => &stats.most_common_elem_freqs,
        _ => &stats.elem_count_histogram,
    }
}

/// The rebuild of `object`'s expression statistics in `target`, with a scratch schema named
/// `scratch` (dropped before the end); `None` when the snapshot holds none. `version` is the
/// source's `server_version_num`, as `pg_restore_attribute_stats` takes it.
pub fn expression_rebuild(
    object: &ExtendedStatistics,
    target: &CloneObject,
    scratch: &str,
    version: u32,
) -> Result<Option<Rebuild>, String> {
    let count = object.expression_stats.len();
    if count == 0 {
        return Ok(None);
    }
    if count != object.expressions as usize {
        return Err(format!(
            "the snapshot holds statistics of {count} of its {} expressions",
            object.expressions
        ));
    }
    let oid = target.oid;
    let schema = pg_identifier(scratch);
    let mut statements = opening(oid, object.inherited);
    statements.push(format!("CREATE SCHEMA {schema}"));
    // The expressions and the table come from the clone's catalog inside the transaction
    // (deparsed under the search path `opening` set), so no text of the snapshot is spliced
    // into a statement.
    statements.push(format!(
        "DO $$ DECLARE \
           exprs text[] := pg_get_statisticsobjdef_expressions({oid}::oid); \
           source text := (SELECT s.stxrelid::regclass::text FROM pg_statistic_ext s \
                           WHERE s.oid = {oid}::oid); \
         BEGIN \
           IF cardinality(exprs) IS DISTINCT FROM {count} THEN \
             RAISE EXCEPTION 'the clone''s statistics object has % expressions, the source''s {count}', \
               coalesce(cardinality(exprs), 0); \
           END IF; \
           EXECUTE 'CREATE VIEW {schema}.shape AS SELECT ' || \
             (SELECT string_agg('(' || u.x || ') AS e' || u.n, ', ' ORDER BY u.n) \
              FROM unnest(exprs) WITH ORDINALITY u(x, n)) || ' FROM ONLY ' || source; \
         END $$"
    ));
    statements.push(format!(
        "CREATE TABLE {schema}.sample (LIKE {schema}.shape)"
    ));
    statements.push(format!(
        "DO $$ BEGIN \
           IF EXISTS (SELECT FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                      WHERE a.attrelid = '{schema}.sample'::regclass AND a.attnum > 0 \
                        AND t.typnamespace <> 'pg_catalog'::regnamespace) THEN \
             RAISE EXCEPTION 'an expression is of a type that is not built in: its values would \
               be read by a function of the source''s schema'; \
           END IF; \
         END $$"
    ));
    for (i, stats) in object.expression_stats.iter().enumerate() {
        let column = ColumnStats {
            schema: scratch.to_owned(),
            table: "sample".to_owned(),
            column: format!("e{}", i + 1),
            attnum: None,
            inherited: false,
            ..stats.clone()
        };
        statements.push(attribute_stats_call(&column, version));
    }
    statements.push(format!(
        "UPDATE pg_statistic_ext_data SET stxdexpr = \
           (SELECT array_agg(s ORDER BY s.staattnum) FROM pg_statistic s \
            WHERE s.starelid = '{schema}.sample'::regclass) \
         WHERE {}",
        data_row(oid, object.inherited)
    ));
    statements.push(format!("DROP SCHEMA {schema} CASCADE"));

    let mut columns = Vec::new();
    let mut expected = Vec::new();
    for (i, stats) in object.expression_stats.iter().enumerate() {
        for field in CHECKED {
            columns.push(format!(
                "(SELECT x.{field}::text FROM x WHERE x.n = {})",
                i + 1
            ));
            expected.push(checked_value(stats, field).clone());
        }
    }
    let check = format!(
        "WITH x AS (SELECT o.n, e.* FROM pg_stats_ext_exprs e, \
                    unnest(pg_get_statisticsobjdef_expressions({oid}::oid)) WITH ORDINALITY o(expr, n) \
                    WHERE e.statistics_schemaname = {} AND e.statistics_name = {} \
                      AND e.inherited = {} AND e.expr = o.expr) \
         SELECT {}",
        sql_literal(&object.schema),
        sql_literal(&object.name),
        object.inherited,
        columns.join(", ")
    );
    Ok(Some(Rebuild {
        statements,
        check,
        expected,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(expressions: u32, stats: usize) -> ExtendedStatistics {
        ExtendedStatistics {
            schema: "public".into(),
            name: "signup_year".into(),
            table_schema: "public".into(),
            table: "customers".into(),
            expressions,
            expression_stats: (0..stats)
                .map(|i| ColumnStats {
                    column: format!("date_part('year'::text, signup_on) + {i}"),
                    null_frac: Some("0".into()),
                    n_distinct: Some("7".into()),
                    most_common_vals: Some("{2019,2020}".into()),
                    most_common_freqs: Some("{0.7,0.1}".into()),
                    ..ColumnStats::default()
                })
                .collect(),
            ..ExtendedStatistics::default()
        }
    }

    fn target() -> CloneObject {
        CloneObject {
            oid: 16500,
            columns: Vec::new(),
        }
    }

    #[test]
    fn each_expression_is_restored_onto_a_scratch_column_and_checked_field_by_field() {
        let rebuild = expression_rebuild(&object(2, 2), &target(), "sandboxd_scratch_ab", 180001)
            .expect("rebuilds")
            .expect("has expression statistics");
        let joined = rebuild.statements.join(";\n");
        assert!(
            joined.contains("'relname', 'sample', 'attname', 'e1'"),
            "{joined}"
        );
        assert!(joined.contains("'attname', 'e2'"));
        assert!(joined.contains("'most_common_vals', '{2019,2020}'::text"));
        assert!(joined.contains("stxdexpr"));
        assert!(
            rebuild
                .statements
                .last()
                .is_some_and(|s| s.starts_with("DROP SCHEMA \"sandboxd_scratch_ab\""))
        );
        // No text of the snapshot (the expression's deparsed form) is in a statement.
        assert!(!joined.contains("signup_on"));
        assert_eq!(rebuild.expected.len(), 2 * CHECKED.len());
        assert_eq!(rebuild.expected[2], Some("7".into()));
        assert_eq!(
            rebuild.expected[CHECKED.len() + 3],
            Some("{2019,2020}".into())
        );
        assert!(rebuild.check.contains("x.n = 2"));
    }

    #[test]
    fn nothing_to_rebuild_or_a_partial_snapshot_is_told_apart() {
        assert_eq!(
            expression_rebuild(&object(1, 0), &target(), "s", 180001),
            Ok(None)
        );
        let partial = expression_rebuild(&object(2, 1), &target(), "s", 180001);
        assert!(partial.is_err_and(|e| e.contains("1 of its 2")));
    }

    #[test]
    fn a_name_in_the_snapshot_cannot_reach_the_statements() {
        let mut hostile = object(1, 1);
        hostile.name = "x'; DROP TABLE t; --".into();
        let rebuild = expression_rebuild(&hostile, &target(), "sandboxd_scratch_ab", 180001)
            .expect("rebuilds")
            .expect("has expression statistics");
        assert!(!rebuild.statements.join("\n").contains("DROP TABLE"));
        assert!(rebuild.check.contains("'x''; DROP TABLE t; --'"));
    }
}
