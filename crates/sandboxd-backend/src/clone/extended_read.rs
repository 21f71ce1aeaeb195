//! A source's extended statistics (`CREATE STATISTICS`) as its `pg_stats_ext` and
//! `pg_stats_ext_exprs` show them to the snapshot's role, inside the snapshot's transaction.

use sandboxd_domain::clone::{
    ColumnStats, ExtendedStatistics, ExtendedStatisticsData, McvItem, StatisticsColumn,
};

use super::source::{SourceError, first_column};

/// The data of every extended statistics object the role may see, and the names of those it
/// may not (`pg_stats_ext` shows an object's data only to members of its table's owner, and
/// not under row security).
pub(super) async fn read_extended<F>(
    tx: &tokio_postgres::Transaction<'_>,
    read: &impl Fn(&'static str) -> F,
) -> Result<ExtendedStatisticsData, SourceError>
where
    F: FnOnce(tokio_postgres::Error) -> SourceError,
{
    let unreadable = first_column(tx, EXTENDED_STATISTICS_UNREADABLE)
        .await
        .map_err(read("extended statistics' visibility"))?;
    let items = tx
        .query(EXTENDED_MCV_ITEMS, &[])
        .await
        .map_err(read("extended most-common values"))?;
    let mut objects: Vec<ExtendedStatistics> = tx
        .query(EXTENDED_STATISTICS_DATA, &[])
        .await
        .map_err(read("extended statistics"))?
        .iter()
        .map(|row| {
            let attnums: Vec<i16> = row.get(4);
            let names: Vec<String> = row.get(5);
            let types: Vec<String> = row.get(6);
            ExtendedStatistics {
                schema: row.get(0),
                name: row.get(1),
                table_schema: row.get(2),
                table: row.get(3),
                columns: attnums
                    .into_iter()
                    .zip(names)
                    .zip(types)
                    .map(|((attnum, name), type_name)| StatisticsColumn {
                        attnum,
                        name,
                        type_name,
                    })
                    .collect(),
                expressions: u32::try_from(row.get::<_, i32>(7)).unwrap_or(0),
                inherited: row.get(8),
                n_distinct: row.get(9),
                dependencies: row.get(10),
                mcv: row.get::<_, bool>(11).then(Vec::new),
                expression_stats: Vec::new(),
            }
        })
        .collect();
    for row in &items {
        let (schema, name, inherited): (String, String, bool) =
            (row.get(0), row.get(1), row.get(2));
        if let Some(object) = objects
            .iter_mut()
            .find(|o| o.schema == schema && o.name == name && o.inherited == inherited)
            && let Some(mcv) = &mut object.mcv
        {
            mcv.push(McvItem {
                values: row.get(3),
                frequency: row.get(4),
                base_frequency: row.get(5),
            });
        }
    }
    for row in tx
        .query(EXTENDED_EXPRESSION_STATS, &[])
        .await
        .map_err(read("expression statistics"))?
    {
        let (schema, name, inherited): (String, String, bool) =
            (row.get(0), row.get(1), row.get(2));
        let stats = ColumnStats {
            schema: schema.clone(),
            table: name.clone(),
            column: row.get(3),
            attnum: None,
            inherited,
            null_frac: row.get(4),
            avg_width: row.get(5),
            n_distinct: row.get(6),
            most_common_vals: row.get(7),
            most_common_freqs: row.get(8),
            histogram_bounds: row.get(9),
            correlation: row.get(10),
            most_common_elems: row.get(11),
            most_common_elem_freqs: row.get(12),
            elem_count_histogram: row.get(13),
            ..ColumnStats::default()
        };
        if let Some(object) = objects
            .iter_mut()
            .find(|o| o.schema == schema && o.name == name && o.inherited == inherited)
        {
            object.expression_stats.push(stats);
        }
    }
    Ok(ExtendedStatisticsData {
        objects,
        unreadable,
    })
}

/// Every extended statistics object's data this role may see, one row per object and
/// `inherited`: its table, its columns in attribute order (with the base type of each, without
/// modifier, which tells how a sample can make up values of it), how many expressions it has,
/// and the n-distinct counts and dependencies as printed.
const EXTENDED_STATISTICS_DATA: &str = "SELECT e.statistics_schemaname::text, \
            e.statistics_name::text, e.schemaname::text, e.tablename::text, \
            ARRAY(SELECT a.attnum FROM pg_catalog.pg_attribute a \
                  WHERE a.attrelid = s.stxrelid AND a.attnum = ANY (s.stxkeys) ORDER BY a.attnum), \
            ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                  WHERE a.attrelid = s.stxrelid AND a.attnum = ANY (s.stxkeys) ORDER BY a.attnum), \
            ARRAY(SELECT pg_catalog.format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype \
                                                     ELSE t.oid END, NULL) \
                  FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
                  WHERE a.attrelid = s.stxrelid AND a.attnum = ANY (s.stxkeys) ORDER BY a.attnum), \
            COALESCE(pg_catalog.cardinality(e.exprs), 0), e.inherited, \
            e.n_distinct::text, e.dependencies::text, e.most_common_vals IS NOT NULL \
     FROM pg_catalog.pg_stats_ext e \
     JOIN pg_catalog.pg_namespace sn ON sn.nspname = e.statistics_schemaname \
     JOIN pg_catalog.pg_statistic_ext s ON s.stxnamespace = sn.oid AND s.stxname = e.statistics_name \
     ORDER BY 1, 2, 9";

/// The items of those objects' most-common-values lists, in order: each one's values (one per
/// dimension, NULL for a null) and frequencies.
const EXTENDED_MCV_ITEMS: &str = "SELECT e.statistics_schemaname::text, e.statistics_name::text, \
            e.inherited, \
            ARRAY(SELECT e.most_common_vals[i][j] \
                  FROM pg_catalog.generate_subscripts(e.most_common_vals, 2) j ORDER BY j), \
            e.most_common_freqs[i], e.most_common_base_freqs[i] \
     FROM pg_catalog.pg_stats_ext e, \
          pg_catalog.generate_subscripts(e.most_common_vals, 1) i \
     ORDER BY 1, 2, 3, i";

/// Extended statistics objects whose data `pg_stats_ext` hides from this role.
const EXTENDED_STATISTICS_UNREADABLE: &str = "SELECT n.nspname || '.' || s.stxname \
     FROM pg_catalog.pg_statistic_ext s JOIN pg_catalog.pg_namespace n ON n.oid = s.stxnamespace \
     JOIN pg_catalog.pg_class c ON c.oid = s.stxrelid \
     WHERE NOT (pg_catalog.pg_has_role(c.relowner, 'USAGE') \
                AND (NOT c.relrowsecurity OR NOT pg_catalog.row_security_active(c.oid))) \
     ORDER BY 1";

/// The statistics of every expression of those objects, in each object's expression order
/// (`pg_stats_ext_exprs` has no position; an object's expressions are distinct, so their text
/// finds it). Expressions never analyzed (no statistics at all) are left out.
const EXTENDED_EXPRESSION_STATS: &str = "SELECT e.statistics_schemaname::text, \
            e.statistics_name::text, e.inherited, e.expr, e.null_frac::text, \
            e.avg_width::text, e.n_distinct::text, e.most_common_vals::text, \
            e.most_common_freqs::text, e.histogram_bounds::text, e.correlation::text, \
            e.most_common_elems::text, e.most_common_elem_freqs::text, \
            e.elem_count_histogram::text \
     FROM pg_catalog.pg_stats_ext_exprs e \
     JOIN pg_catalog.pg_namespace sn ON sn.nspname = e.statistics_schemaname \
     JOIN pg_catalog.pg_statistic_ext s ON s.stxnamespace = sn.oid AND s.stxname = e.statistics_name \
     CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.pg_get_statisticsobjdef_expressions(s.oid)) \
          WITH ORDINALITY o(expr, n) \
     WHERE o.expr = e.expr AND e.null_frac IS NOT NULL \
     ORDER BY 1, 2, 3, o.n";
