//! A rebuilt most-common-values list made exact: the sample (`mcv.rs`) gives the list the
//! source's combinations, but frequencies only as close as whole rows allow, and base
//! frequencies as the made-up rows happen to give them. The serialized list
//! (`statext_mcv_serialize`) ends with its items, each of a fixed size: the null flags (one
//! byte per dimension), the frequency and the base frequency (`double` each), then one
//! `uint16` index per dimension. So each item's two doubles are overwritten in place with the
//! source's, matched to it by its values: the list is read as `bytea` through the server's own
//! cast and written back through a binary-coercible cast from `bytea` that exists only inside
//! the transaction. The transaction commits
//! only if the server then reads back every item with the source's values and exactly its
//! frequencies; otherwise the caller keeps the list by frequency.

use super::{CloneColumn, Rebuild, data_row};
use crate::clone::snapshot::{ExtendedStatistics, McvItem};
use crate::engine::sql_literal;

/// `rebuild` (the sampled list's, from [`super::mcv_rebuild`]) with the source's exact
/// frequencies written over the sample's, before its scratch schema is dropped; `dims` are
/// the clone's columns in its dimension order, with where each sits in the source's order.
pub(super) fn with_exact_frequencies(
    mut rebuild: Rebuild,
    object: &ExtendedStatistics,
    items: &[McvItem],
    dims: &[(usize, &CloneColumn)],
    oid: u32,
) -> Rebuild {
    let ndims = dims.len();
    let size = 3 * ndims + 16;
    let n = items.len();
    let row = data_row(oid, object.inherited);
    let values = |item: &McvItem| {
        let listed: Vec<String> = dims
            .iter()
            .map(|(i, _)| match &item.values[*i] {
                Some(v) => sql_literal(v),
                None => "NULL".to_owned(),
            })
            .collect();
        format!("ARRAY[{}]::pg_catalog.text[]", listed.join(", "))
    };
    let patches: Vec<String> = items
        .iter()
        .map(|item| {
            let mut bytes = item.frequency.to_le_bytes().to_vec();
            bytes.extend(item.base_frequency.to_le_bytes());
            format!("({}, '{}')", values(item), hex::encode(&bytes))
        })
        .collect();
    let expected: Vec<String> = items
        .iter()
        .map(|item| {
            format!(
                "({}, {:?}::pg_catalog.float8, {:?}::pg_catalog.float8)",
                values(item),
                item.frequency,
                item.base_frequency
            )
        })
        .collect();
    let patch = [
        "CREATE CAST (pg_catalog.bytea AS pg_catalog.pg_mcv_list) WITHOUT FUNCTION".to_owned(),
        format!(
            "UPDATE pg_catalog.pg_statistic_ext_data SET stxdmcv = (\
               SELECT (pg_catalog.substr(r.raw, 1, pg_catalog.length(r.raw) - {n} * {size}) \
                       || pg_catalog.string_agg(\
                            pg_catalog.substr(r.raw, p.start, {ndims}) \
                            || pg_catalog.decode(v.bytes, 'hex') \
                            || pg_catalog.substr(r.raw, p.start + {ndims} + 16, {twice}), \
                            ''::pg_catalog.bytea ORDER BY i.index))::pg_catalog.pg_mcv_list \
               FROM (SELECT stxdmcv::pg_catalog.bytea AS raw FROM pg_catalog.pg_statistic_ext_data \
                     WHERE {row}) r \
               CROSS JOIN LATERAL pg_catalog.pg_mcv_list_items(r.raw::pg_catalog.pg_mcv_list) i \
               JOIN (VALUES {}) AS v(vals, bytes) ON v.vals = i.values \
               CROSS JOIN LATERAL (SELECT pg_catalog.length(r.raw) - ({n} - i.index) * {size} + 1 \
                                   AS start) p \
               GROUP BY r.raw HAVING pg_catalog.count(*) = {n} \
                 AND pg_catalog.length(r.raw) >= {n} * {size}) \
             WHERE {row}",
            patches.join(", "),
            twice = 2 * ndims,
        ),
        "DROP CAST (pg_catalog.bytea AS pg_catalog.pg_mcv_list)".to_owned(),
    ];
    // Before the scratch schema is dropped (the last statement).
    let at = rebuild.statements.len().saturating_sub(1);
    rebuild.statements.splice(at..at, patch);
    rebuild.check = format!(
        "SELECT pg_catalog.count(*)::pg_catalog.text FROM pg_catalog.pg_statistic_ext_data d \
         CROSS JOIN LATERAL pg_catalog.pg_mcv_list_items(d.stxdmcv) i \
         JOIN (VALUES {}) AS v(vals, f, b) ON v.vals = i.values \
           AND i.frequency = v.f AND i.base_frequency = v.b \
         WHERE {}",
        expected.join(", "),
        data_row(oid, object.inherited)
    );
    rebuild.expected = vec![Some(n.to_string())];
    rebuild
}
