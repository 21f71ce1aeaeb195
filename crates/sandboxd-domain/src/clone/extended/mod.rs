//! Extended statistics (`CREATE STATISTICS`) rebuilt in a clone, which no PostgreSQL 18 tool
//! restores: their values (`pg_ndistinct`, `pg_dependencies`, `pg_mcv_list`) refuse text and
//! binary input. The statements here run as the clone's superuser before anyone else may log
//! in, each group in one transaction, so whatever fails leaves nothing behind:
//! - n-distinct counts and functional dependencies are rebuilt **exactly**: their serialized
//!   form is a fixed header and fixed-size items (`mvdistinct.c`, `dependencies.c`), written as
//!   bytes through a binary-coercible cast from `bytea` that exists only inside the transaction,
//!   and read back as text: the transaction commits only if the server prints the source's
//!   values (with the clone's attribute numbers).
//! - a most-common-values list is rebuilt from a sample, then made **exact**: a scratch table
//!   in a schema of its own holds a sample in which each of the source's combinations occurs
//!   as often as its frequency says (the rest of the rows unique, so they make no combination
//!   of their own, and carrying each value as often as the source's column statistics say, so
//!   base frequencies follow), `ANALYZE`d under an MCV statistics object whose target is the
//!   source's list length; its `pg_statistic_ext_data.stxdmcv` is copied onto the clone's
//!   object, each item's frequency and base frequency overwritten with the source's
//!   (`mcv_exact.rs`; where that cannot be proven, the sampled ones stay) and the schema
//!   dropped.
//! - expression statistics (`pg_stats_ext_exprs`) are rebuilt **exactly** from PostgreSQL 18
//!   on, through a scratch table's `pg_statistic` rows (`expressions`).
//! - the MCV lists of objects with expressions are not rebuilt: [`left_out`] says so.

mod expressions;
mod mcv;
mod mcv_exact;

pub use expressions::{EXPRESSION_STATS_MAJOR, expression_rebuild};
pub use mcv::{Frequencies, mcv_obstacle, mcv_rebuild};

use super::snapshot::{ExtendedStatistics, Snapshot};

/// The scratch schema's name starts so; the caller adds a random suffix.
pub const SCRATCH_PREFIX: &str = "sandboxd_scratch_";

/// `STATS_NDISTINCT_MAGIC` and `STATS_DEPS_MAGIC` (`statistics/statistics.h`), type 1 each.
const NDISTINCT_MAGIC: u32 = 0xA352_BFA4;
const DEPENDENCIES_MAGIC: u32 = 0xB454_9A2C;
const BASIC_TYPE: u32 = 1;

/// A column of the clone's table, as the clone's catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneColumn {
    pub name: String,
    pub attnum: i16,
    /// The column's base type, schema-qualified and quoted, without type modifier
    /// (`"pg_catalog"."text"`): the scratch table's column.
    pub type_sql: String,
    /// Its collation, schema-qualified and quoted, if the type has one.
    pub collation_sql: Option<String>,
}

/// The clone's statistics object an [`ExtendedStatistics`] is rebuilt into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneObject {
    pub oid: u32,
    /// Its table's columns the object covers (matched to the source's by name).
    pub columns: Vec<CloneColumn>,
}

/// One transaction's statements and how to prove them before committing: `check` answers
/// one row whose text values must equal `expected`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rebuild {
    pub statements: Vec<String>,
    pub check: String,
    pub expected: Vec<Option<String>>,
}

/// An n-distinct or dependency entry: attribute numbers and the value.
type Entry = (Vec<i16>, f64);

/// The source's attribute numbers mapped to the clone's by column name; expressions (negative
/// numbers) keep theirs.
fn attnum_map(
    object: &ExtendedStatistics,
    target: &CloneObject,
) -> Result<Vec<(i16, i16)>, String> {
    object
        .columns
        .iter()
        .map(|column| {
            target
                .columns
                .iter()
                .find(|c| c.name == column.name)
                .map(|c| (column.attnum, c.attnum))
                .ok_or_else(|| format!("the clone's table has no column {}", column.name))
        })
        .collect()
}

fn mapped(map: &[(i16, i16)], attnum: i16) -> Result<i16, String> {
    if attnum < 0 {
        return Ok(attnum);
    }
    map.iter()
        .find(|(source, _)| *source == attnum)
        .map(|(_, clone)| *clone)
        .ok_or_else(|| format!("attribute {attnum} is not one of the object's columns"))
}

/// Reads `{"1, 2": 11, "1, 3 => 2": 0.5}`-shaped text into its keys and values.
fn parse_entries(text: &str) -> Result<Vec<(String, f64)>, String> {
    let bad = || format!("unexpected extended statistics text {text:?}");
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(bad)?;
    let mut entries = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let after_quote = rest.strip_prefix('"').ok_or_else(bad)?;
        let end = after_quote.find('"').ok_or_else(bad)?;
        let key = &after_quote[..end];
        let after_key = after_quote[end + 1..]
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(bad)?;
        let value_end = after_key.find(',').unwrap_or(after_key.len());
        let value: f64 = after_key[..value_end].trim().parse().map_err(|_| bad())?;
        entries.push((key.to_owned(), value));
        rest = after_key[value_end..]
            .strip_prefix(',')
            .unwrap_or("")
            .trim_start();
    }
    if entries.is_empty() {
        return Err(bad());
    }
    Ok(entries)
}

fn parse_attnums(list: &str) -> Result<Vec<i16>, String> {
    list.split(',')
        .map(|n| {
            n.trim()
                .parse::<i16>()
                .map_err(|_| format!("unexpected attribute number {n:?}"))
        })
        .collect()
}

/// `{"1, 2": 100}`: each entry's attribute numbers (mapped) and distinct count.
fn ndistinct_entries(text: &str, map: &[(i16, i16)]) -> Result<Vec<Entry>, String> {
    parse_entries(text)?
        .into_iter()
        .map(|(key, value)| {
            let attnums = parse_attnums(&key)?
                .into_iter()
                .map(|a| mapped(map, a))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((attnums, value))
        })
        .collect()
}

/// `{"1, 3 => 2": 1.000000}`: each dependency's attribute numbers (the implied one last,
/// mapped) and degree.
fn dependency_entries(text: &str, map: &[(i16, i16)]) -> Result<Vec<Entry>, String> {
    parse_entries(text)?
        .into_iter()
        .map(|(key, value)| {
            let (from, to) = key
                .split_once("=>")
                .ok_or_else(|| format!("unexpected dependency {key:?}"))?;
            let mut attnums = parse_attnums(from)?;
            attnums.extend(parse_attnums(to)?);
            let attnums = attnums
                .into_iter()
                .map(|a| mapped(map, a))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((attnums, value))
        })
        .collect()
}

fn joined(attnums: &[i16]) -> String {
    attnums
        .iter()
        .map(i16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `pg_ndistinct_out` prints for `entries` (the count cast to an integer).
fn ndistinct_text(entries: &[Entry]) -> String {
    let items: Vec<String> = entries
        .iter()
        .map(|(attnums, n)| format!("\"{}\": {}", joined(attnums), *n as i64))
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// What `pg_dependencies_out` prints for `entries` (`%f`: six decimals).
fn dependencies_text(entries: &[Entry]) -> String {
    let items: Vec<String> = entries
        .iter()
        .map(|(attnums, degree)| {
            let (implied, from) = attnums.split_last().unwrap_or((&0, &[]));
            format!("\"{} => {implied}\": {degree:.6}", joined(from))
        })
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// `statext_ndistinct_serialize`'s bytes (without the varlena header) in the server's byte
/// order: magic, type, count, then per item the count (`double`), the number of attributes
/// (`int`) and the attribute numbers (`int16`). Little-endian, as every platform the images
/// run on; on another the server prints something else and the check rolls back.
fn ndistinct_bytes(entries: &[Entry]) -> Vec<u8> {
    let mut out = header(NDISTINCT_MAGIC, entries.len());
    for (attnums, n) in entries {
        out.extend(n.to_le_bytes());
        out.extend((attnums.len() as i32).to_le_bytes());
        for attnum in attnums {
            out.extend(attnum.to_le_bytes());
        }
    }
    out
}

/// `statext_dependencies_serialize`'s bytes: magic, type, count, then per dependency the
/// degree (`double`), the number of attributes (`int16`) and the attribute numbers.
fn dependencies_bytes(entries: &[Entry]) -> Vec<u8> {
    let mut out = header(DEPENDENCIES_MAGIC, entries.len());
    for (attnums, degree) in entries {
        out.extend(degree.to_le_bytes());
        out.extend((attnums.len() as i16).to_le_bytes());
        for attnum in attnums {
            out.extend(attnum.to_le_bytes());
        }
    }
    out
}

fn header(magic: u32, items: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(magic.to_le_bytes());
    out.extend(BASIC_TYPE.to_le_bytes());
    out.extend(u32::try_from(items).unwrap_or(u32::MAX).to_le_bytes());
    out
}

/// Where an object's data lives in the clone's catalog.
fn data_row(oid: u32, inherited: bool) -> String {
    format!(
        "stxoid OPERATOR(pg_catalog.=) {oid}::pg_catalog.oid \
         AND stxdinherit OPERATOR(pg_catalog.=) {inherited}"
    )
}

/// The statements every rebuild opens with: a search path no object of the schema is on, and
/// the object's data row (ANALYZE never ran on the clone, so it has none).
fn opening(oid: u32, inherited: bool) -> Vec<String> {
    vec![
        "SET LOCAL search_path TO pg_catalog, pg_temp".to_owned(),
        format!(
            "INSERT INTO pg_catalog.pg_statistic_ext_data (stxoid, stxdinherit) \
             SELECT {oid}::pg_catalog.oid, {inherited} WHERE NOT EXISTS \
             (SELECT 1 FROM pg_catalog.pg_statistic_ext_data WHERE {})",
            data_row(oid, inherited)
        ),
    ]
}

/// The exact rebuild of `object`'s n-distinct counts and dependencies in `target`; `None`
/// when it has neither.
pub fn exact_rebuild(
    object: &ExtendedStatistics,
    target: &CloneObject,
) -> Result<Option<Rebuild>, String> {
    if object.n_distinct.is_none() && object.dependencies.is_none() {
        return Ok(None);
    }
    let map = attnum_map(object, target)?;
    let mut statements = opening(target.oid, object.inherited);
    let mut sets = Vec::new();
    let mut expected = Vec::new();
    let mut checks = Vec::new();
    let kinds: [(&Option<String>, &str, &str, bool); 2] = [
        (&object.n_distinct, "stxdndistinct", "pg_ndistinct", true),
        (
            &object.dependencies,
            "stxddependencies",
            "pg_dependencies",
            false,
        ),
    ];
    for (text, column, ty, is_ndistinct) in kinds {
        let Some(text) = text else { continue };
        let (bytes, printed) = if is_ndistinct {
            let entries = ndistinct_entries(text, &map)?;
            (ndistinct_bytes(&entries), ndistinct_text(&entries))
        } else {
            let entries = dependency_entries(text, &map)?;
            (dependencies_bytes(&entries), dependencies_text(&entries))
        };
        statements.push(format!(
            "CREATE CAST (pg_catalog.bytea AS pg_catalog.{ty}) WITHOUT FUNCTION"
        ));
        sets.push(format!(
            "{column} = pg_catalog.decode('{}', 'hex')::pg_catalog.{ty}",
            hex::encode(&bytes)
        ));
        checks.push(format!("{column}::pg_catalog.text"));
        expected.push(Some(printed));
    }
    statements.push(format!(
        "UPDATE pg_catalog.pg_statistic_ext_data SET {} WHERE {}",
        sets.join(", "),
        data_row(target.oid, object.inherited)
    ));
    for (text, _, ty, _) in kinds {
        if text.is_some() {
            statements.push(format!("DROP CAST (pg_catalog.bytea AS pg_catalog.{ty})"));
        }
    }
    Ok(Some(Rebuild {
        statements,
        check: format!(
            "SELECT {} FROM pg_catalog.pg_statistic_ext_data WHERE {}",
            checks.join(", "),
            data_row(target.oid, object.inherited)
        ),
        expected,
    }))
}

/// Whether `snapshot` read its source's extended statistics (older snapshots did not).
pub fn read(snapshot: &Snapshot) -> bool {
    snapshot.extended_statistics_data.is_some()
}

/// What of `snapshot`'s extended statistics a clone lacks, as (what, why): objects the
/// snapshot could not read, expression statistics, MCV lists that cannot be rebuilt; for an
/// older snapshot, every object's data.
pub fn left_out(snapshot: &Snapshot) -> Vec<(String, String)> {
    let Some(data) = &snapshot.extended_statistics_data else {
        if snapshot.extended_statistics.is_empty() {
            return Vec::new();
        }
        return vec![(
            format!(
                "extended statistics ({})",
                snapshot.extended_statistics.len()
            ),
            format!(
                "extended statistics ({}) exist in the schema but hold no data: the snapshot \
                 was taken before their data was read; a new snapshot carries it",
                snapshot.extended_statistics.join(", ")
            ),
        )];
    };
    let mut out = Vec::new();
    if !data.unreadable.is_empty() {
        out.push((
            format!("extended statistics ({})", data.unreadable.len()),
            format!(
                "extended statistics ({}) exist in the schema but hold no data: the snapshot's \
                 role cannot see their data (pg_stats_ext shows it only to members of the \
                 table's owner, with row security off for them); grant the role the owner's \
                 privileges or snapshot as a superuser",
                data.unreadable.join(", ")
            ),
        ));
    }
    let named = |o: &ExtendedStatistics| format!("{}.{}", o.schema, o.name);
    let expressions: Vec<String> = distinct(
        data.objects
            .iter()
            .filter(|o| o.expressions > 0 && o.expression_stats.is_empty())
            .map(named),
    );
    if !expressions.is_empty() {
        out.push((
            format!("expression statistics ({})", expressions.len()),
            format!(
                "the statistics of the expressions of {} are not in the snapshot (taken before \
                 they were read, or the source never analyzed them): a clone estimates those \
                 expressions from defaults",
                expressions.join(", ")
            ),
        ));
    }
    let mcv: Vec<String> = distinct(
        data.objects
            .iter()
            .filter_map(|o| mcv_obstacle(o).map(|why| format!("{}: {why}", named(o)))),
    );
    if !mcv.is_empty() {
        out.push((
            format!("extended most-common values ({})", mcv.len()),
            format!(
                "these most-common-values lists are not rebuilt, so estimates of combined \
                 equality predicates rest on n-distinct counts and dependencies: {}",
                mcv.join("; ")
            ),
        ));
    }
    out
}

fn distinct(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = names.collect();
    out.sort();
    out.dedup();
    out
}

/// How many of `snapshot`'s objects a clone carries data of (at least one kind rebuilt).
pub fn carried(snapshot: &Snapshot) -> usize {
    snapshot
        .extended_statistics_data
        .as_ref()
        .map(|data| {
            distinct(
                data.objects
                    .iter()
                    .filter(|o| {
                        o.n_distinct.is_some()
                            || o.dependencies.is_some()
                            || !o.expression_stats.is_empty()
                            || (o.mcv.as_ref().is_some_and(|m| !m.is_empty())
                                && mcv_obstacle(o).is_none())
                    })
                    .map(|o| format!("{}.{}", o.schema, o.name)),
            )
            .len()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::mcv::parse_array;
    use super::*;
    use crate::clone::snapshot::{ColumnStats, McvItem, StatisticsColumn};

    fn object() -> ExtendedStatistics {
        ExtendedStatistics {
            schema: "public".into(),
            name: "s".into(),
            table_schema: "public".into(),
            table: "t".into(),
            columns: vec![
                StatisticsColumn {
                    attnum: 1,
                    name: "a".into(),
                    type_name: "integer".into(),
                },
                StatisticsColumn {
                    attnum: 2,
                    name: "b".into(),
                    type_name: "integer".into(),
                },
                StatisticsColumn {
                    attnum: 3,
                    name: "c".into(),
                    type_name: "boolean".into(),
                },
            ],
            n_distinct: Some(r#"{"1, 2": 100, "1, 3": 700, "2, 3": 70, "1, 2, 3": 700}"#.into()),
            dependencies: Some(r#"{"1 => 2": 1.000000, "1, 3 => 2": 1.000000}"#.into()),
            ..ExtendedStatistics::default()
        }
    }

    fn clone_object(attnums: [i16; 3]) -> CloneObject {
        CloneObject {
            oid: 16400,
            columns: ["a", "b", "c"]
                .iter()
                .zip(attnums)
                .map(|(name, attnum)| CloneColumn {
                    name: (*name).into(),
                    attnum,
                    type_sql: "\"pg_catalog\".\"int4\"".into(),
                    collation_sql: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_bytes_are_the_servers_own() {
        // What PostgreSQL 18 stored for these values (`stxdndistinct::bytea`).
        let map = [(1, 1), (2, 2), (3, 3)];
        let entries =
            ndistinct_entries(object().n_distinct.as_deref().unwrap_or(""), &map).expect("parses");
        assert_eq!(
            hex::encode(ndistinct_bytes(&entries)),
            "a4bf52a30100000004000000000000000000594002000000010002000000000000e0854002000000\
             01000300000000000080514002000000020003000000000000e0854003000000010002000300"
        );
        let entries = dependency_entries(object().dependencies.as_deref().unwrap_or(""), &map)
            .expect("parses");
        assert_eq!(
            hex::encode(dependencies_bytes(&entries)),
            "2c9a54b40100000002000000000000000000f03f020001000200000000000000f03f0300010003000200"
        );
        assert_eq!(
            dependencies_text(&entries),
            object().dependencies.unwrap_or_default()
        );
    }

    #[test]
    fn attribute_numbers_follow_the_clones_columns_by_name() {
        let rebuild = exact_rebuild(&object(), &clone_object([2, 4, 5]))
            .expect("rebuilds")
            .expect("has data");
        assert_eq!(
            rebuild.expected,
            [
                Some(r#"{"2, 4": 100, "2, 5": 700, "4, 5": 70, "2, 4, 5": 700}"#.to_owned()),
                Some(r#"{"2 => 4": 1.000000, "2, 5 => 4": 1.000000}"#.to_owned()),
            ]
        );
        let text = rebuild.statements.join(";\n");
        assert!(text.starts_with("SET LOCAL search_path TO pg_catalog, pg_temp"));
        assert!(text.contains("CREATE CAST (pg_catalog.bytea AS pg_catalog.pg_ndistinct)"));
        assert!(text.contains("DROP CAST (pg_catalog.bytea AS pg_catalog.pg_dependencies)"));
        assert!(text.contains("stxoid OPERATOR(pg_catalog.=) 16400::pg_catalog.oid"));
        let mut missing = clone_object([1, 2, 3]);
        missing.columns.pop();
        assert!(exact_rebuild(&object(), &missing).is_err());
    }

    #[test]
    fn an_mcv_list_is_sampled_by_frequency_with_unique_rows_around_it() {
        let mut object = object();
        object.columns.truncate(2);
        object.mcv = Some(vec![
            McvItem {
                values: vec![Some("1".into()), Some("10".into())],
                frequency: 0.5,
                base_frequency: 0.3,
            },
            McvItem {
                values: vec![Some("2".into()), None],
                frequency: 0.01,
                base_frequency: 0.001,
            },
        ]);
        let columns = vec![ColumnStats {
            schema: "public".into(),
            table: "t".into(),
            column: "a".into(),
            most_common_vals: Some("{1,2}".into()),
            most_common_freqs: Some("{0.6,0.02}".into()),
            ..ColumnStats::default()
        }];
        let rebuild = mcv_rebuild(
            &object,
            &clone_object([1, 2, 3]),
            "sandboxd_scratch_x",
            &columns,
            Frequencies::Sampled,
        )
        .expect("rebuilds")
        .expect("has a list");
        let text = rebuild.statements.join(";\n");
        assert!(
            text.contains("CREATE SCHEMA \"sandboxd_scratch_x\""),
            "{text}"
        );
        assert!(
            text.contains("('1'::pg_catalog.text, '10'::pg_catalog.text, 15000)"),
            "{text}"
        );
        assert!(
            text.contains("('2'::pg_catalog.text, NULL::pg_catalog.text, 300)"),
            "{text}"
        );
        // 14,700 more rows: a's listed values reach their column frequencies (0.6 and 0.02 of
        // 30,000) where b keeps each row unique.
        assert!(text.contains("generate_series(1, 14700) AS g"), "{text}");
        assert!(
            text.contains("WHEN g OPERATOR(pg_catalog.<=) 3000 THEN '1'"),
            "{text}"
        );
        assert!(
            text.contains("WHEN g OPERATOR(pg_catalog.<=) 3300 THEN '2'"),
            "{text}"
        );
        assert!(text.contains("SET STATISTICS 2"), "{text}");
        assert!(
            text.ends_with("DROP SCHEMA \"sandboxd_scratch_x\" CASCADE"),
            "{text}"
        );
        assert_eq!(rebuild.expected, [Some("2".to_owned())]);

        // Exact: each item's two doubles, little-endian, matched by its values, before the
        // schema goes; the check wants every item with exactly the source's frequencies.
        let exact = mcv_rebuild(
            &object,
            &clone_object([1, 2, 3]),
            "sandboxd_scratch_x",
            &columns,
            Frequencies::Exact,
        )
        .expect("rebuilds")
        .expect("has a list");
        let text = exact.statements.join(";\n");
        let mut bytes = 0.5f64.to_le_bytes().to_vec();
        bytes.extend(0.3f64.to_le_bytes());
        assert!(
            text.contains(&format!(
                "(ARRAY['1', '10']::pg_catalog.text[], '{}')",
                hex::encode(&bytes)
            )),
            "{text}"
        );
        assert!(
            text.contains("ARRAY['2', NULL]::pg_catalog.text[]"),
            "{text}"
        );
        // Two dimensions: items of 2 + 16 + 4 bytes at the end of the list.
        assert!(text.contains("length(r.raw) - 2 * 22"), "{text}");
        assert!(text.contains("HAVING pg_catalog.count(*) = 2"), "{text}");
        assert!(text.ends_with("DROP SCHEMA \"sandboxd_scratch_x\" CASCADE"));
        assert!(
            !text.contains("CREATE CAST")
                || text.contains("DROP CAST (pg_catalog.bytea AS pg_catalog.pg_mcv_list)")
        );
        assert!(
            exact
                .check
                .contains("i.frequency = v.f AND i.base_frequency = v.b")
        );
        assert!(
            exact
                .check
                .contains("0.01::pg_catalog.float8, 0.001::pg_catalog.float8")
        );
        assert_eq!(exact.expected, [Some("2".to_owned())]);
    }

    #[test]
    fn lists_that_cannot_be_sampled_say_why() {
        let mut object = object();
        object.columns = vec![object.columns[2].clone(), object.columns[2].clone()];
        object.mcv = Some(vec![McvItem {
            values: vec![Some("t".into()), Some("f".into())],
            frequency: 0.4,
            base_frequency: 0.2,
        }]);
        assert!(
            mcv_obstacle(&object).is_some_and(|why| why.contains("boolean")),
            "two booleans cannot make unique rows"
        );
        object.mcv.as_mut().expect("list")[0].frequency = 1.0;
        assert_eq!(
            mcv_obstacle(&object),
            None,
            "a list covering the table needs no fill"
        );
        object.expressions = 1;
        assert!(mcv_obstacle(&object).is_some());
    }

    #[test]
    fn arrays_read_as_postgres_prints_them() {
        assert_eq!(
            parse_array(r#"{a,"b,c",NULL,"d\"e"}"#),
            Some(vec![
                Some("a".into()),
                Some("b,c".into()),
                None,
                Some("d\"e".into())
            ])
        );
        assert_eq!(parse_array("{}"), Some(vec![]));
        assert_eq!(parse_array("x"), None);
    }
}
