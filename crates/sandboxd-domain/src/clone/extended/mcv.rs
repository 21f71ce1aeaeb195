//! A most-common-values list rebuilt by frequency: a scratch sample in which each of the
//! source's combinations occurs as often as its frequency says, `ANALYZE`d under an MCV
//! statistics object, whose `stxdmcv` is copied onto the clone's object (see the parent
//! module).

use super::mcv_exact::with_exact_frequencies;
use super::{CloneColumn, CloneObject, Rebuild, data_row, opening};
use crate::clone::snapshot::{ColumnStats, ExtendedStatistics, McvItem};
use crate::engine::{pg_identifier, sql_literal};

/// Rows ANALYZE samples at the default statistics target (300 × 100); a bigger sample raises the
/// scratch columns' targets so every row is read.
const DEFAULT_SAMPLE: u64 = 30_000;
/// The largest sample a statistics target (at most 10,000) lets ANALYZE read.
const MAX_SAMPLE: u64 = 3_000_000;
/// Each of the source's combinations occurs at least this often in the sample, so the unique
/// rows around them (each occurring once) never make the list.
const MIN_OCCURRENCES: u64 = 2;

/// How a type's column gets values no combination of the source's list has, one per row (a
/// text expression of the row number `g`); `None` for a type with few values (`boolean`, an
/// enum) or one this does not know. `type_name` is `format_type` of the base type without
/// modifier, as the snapshot has it.
fn unique_values(type_name: &str) -> Option<&'static str> {
    let bare = type_name.rsplit('.').next().unwrap_or(type_name);
    Some(match bare {
        "smallint" => "(-(g OPERATOR(pg_catalog.%) 32768))::pg_catalog.text",
        "integer" | "bigint" | "numeric" | "real" | "double precision" | "oid" => {
            "(-1000000000 OPERATOR(pg_catalog.-) g)::pg_catalog.text"
        }
        "text" | "character varying" | "bpchar" | "character" | "name" | "citext" => {
            "'~' OPERATOR(pg_catalog.||) g::pg_catalog.text"
        }
        "date" => "(DATE '4000-01-01' OPERATOR(pg_catalog.+) g::pg_catalog.int4)::pg_catalog.text",
        "timestamp without time zone" | "timestamp with time zone" => {
            "(TIMESTAMP '4000-01-01' OPERATOR(pg_catalog.+) \
             g OPERATOR(pg_catalog.*) INTERVAL '1 second')::pg_catalog.text"
        }
        "uuid" => "pg_catalog.md5(g::pg_catalog.text)",
        _ => return None,
    })
}

/// How the sample that reproduces an MCV list is made up.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    /// Rows in all.
    rows: u64,
    /// How often each of the source's combinations occurs.
    counts: Vec<u64>,
    /// Rows besides them, each unique in the first column [`unique_values`] knows (or, where
    /// that column carries extra occurrences of a listed value, in the second).
    fill: u64,
    /// Dimensions with unique values, in order.
    unique: Vec<usize>,
}

fn sample_of(object: &ExtendedStatistics, items: &[McvItem]) -> Result<Sample, String> {
    if object.expressions > 0 {
        return Err(
            "its list has expression dimensions, which a sample of columns cannot reproduce"
                .to_owned(),
        );
    }
    if items.iter().any(|i| i.values.len() != object.columns.len()) {
        return Err("its list's items do not match its columns".to_owned());
    }
    let smallest = items
        .iter()
        .map(|i| i.frequency)
        .fold(f64::INFINITY, f64::min);
    if smallest.is_nan() || smallest <= 0.0 || items.len() > 10_000 {
        return Err("its list's frequencies are out of range".to_owned());
    }
    let rows = ((MIN_OCCURRENCES as f64 * 2.0 / smallest).ceil() as u64).max(DEFAULT_SAMPLE);
    if rows > MAX_SAMPLE {
        return Err(format!(
            "its rarest combination (frequency {smallest}) needs a sample above {MAX_SAMPLE} rows"
        ));
    }
    let counts: Vec<u64> = items
        .iter()
        .map(|i| ((i.frequency * rows as f64).round() as u64).max(MIN_OCCURRENCES))
        .collect();
    let fill = rows.saturating_sub(counts.iter().sum());
    let unique: Vec<usize> = object
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| unique_values(&c.type_name).is_some())
        .map(|(i, _)| i)
        .collect();
    if fill > 0 && unique.is_empty() {
        return Err(format!(
            "none of its columns is of a type whose values a sample can make up ({}), and its \
             list does not cover the table",
            object
                .columns
                .iter()
                .map(|c| c.type_name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(Sample {
        rows,
        counts,
        fill,
        unique,
    })
}

/// Why `object`'s MCV list cannot be rebuilt, if it has one that cannot.
pub fn mcv_obstacle(object: &ExtendedStatistics) -> Option<String> {
    let items = object.mcv.as_ref().filter(|items| !items.is_empty())?;
    sample_of(object, items).err()
}

/// Reads a one-dimensional array as Postgres prints it (`{a,"b c",NULL}`).
pub(super) fn parse_array(text: &str) -> Option<Vec<Option<String>>> {
    let inner = text.strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    if inner.is_empty() {
        return Some(out);
    }
    loop {
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut value = String::new();
            loop {
                match chars.next()? {
                    '\\' => value.push(chars.next()?),
                    '"' => break,
                    c => value.push(c),
                }
            }
            out.push(Some(value));
        } else {
            let mut value = String::new();
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            out.push((value != "NULL").then_some(value));
        }
        match chars.next() {
            None => return Some(out),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

/// How often each listed value of column `dim` occurs in the source, by the source's column
/// statistics (the same sample ANALYZE took its base frequencies from).
fn column_frequencies(
    object: &ExtendedStatistics,
    dim: usize,
    columns: &[ColumnStats],
) -> Vec<(String, f64)> {
    let Some(stats) = columns.iter().find(|c| {
        c.schema == object.table_schema
            && c.table == object.table
            && c.column == object.columns[dim].name
            && c.inherited == object.inherited
            && c.attnum.is_none()
    }) else {
        return Vec::new();
    };
    let (Some(values), Some(freqs)) = (&stats.most_common_vals, &stats.most_common_freqs) else {
        return Vec::new();
    };
    let (Some(values), Some(freqs)) = (parse_array(values), parse_array(freqs)) else {
        return Vec::new();
    };
    values
        .into_iter()
        .zip(freqs)
        .filter_map(|(v, f)| Some((v?, f?.parse().ok()?)))
        .collect()
}

/// How close a rebuilt list's frequencies come to the source's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frequencies {
    /// The source's, bit for bit, written over the sample's (`mcv_exact.rs`).
    Exact,
    /// As the sample gives them: each within a row of the sample's size.
    Sampled,
}

/// The rebuild of `object`'s MCV list in `target` through a scratch schema `scratch` (which
/// the statements create and drop); `None` when it has no list. `columns` are the snapshot's
/// column statistics, which say how often each listed value occurs on its own.
pub fn mcv_rebuild(
    object: &ExtendedStatistics,
    target: &CloneObject,
    scratch: &str,
    columns: &[ColumnStats],
    frequencies: Frequencies,
) -> Result<Option<Rebuild>, String> {
    let Some(items) = object.mcv.as_ref().filter(|items| !items.is_empty()) else {
        return Ok(None);
    };
    let sample = sample_of(object, items)?;
    // The clone's columns in its attribute order (the list's dimension order), with where each
    // sits in the source's order.
    let mut dims: Vec<(usize, &CloneColumn)> = object
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            target
                .columns
                .iter()
                .find(|c| c.name == column.name)
                .map(|c| (i, c))
                .ok_or_else(|| format!("the clone's table has no column {}", column.name))
        })
        .collect::<Result<_, _>>()?;
    dims.sort_by_key(|(_, c)| c.attnum);
    // The sample casts text to each column's type and ANALYZE compares its values, as the
    // clone's superuser: only built-in types, whose casts and operators no schema can replace
    // (a cast from text to a type of the source's own may be a function the source wrote).
    if let Some((_, column)) = dims.iter().find(|(_, c)| {
        !["pg_catalog.", "\"pg_catalog\"."]
            .iter()
            .any(|p| c.type_sql.starts_with(p))
    }) {
        return Err(format!(
            "its column {} is of type {}, not a built-in one: casting values to it could run \
             the source's own code as the clone's superuser",
            column.name, column.type_sql
        ));
    }

    let schema = pg_identifier(scratch);
    let table = format!("{schema}.\"sample\"");
    let name = |n: usize| pg_identifier(&format!("c{n}"));
    let mut statements = opening(target.oid, object.inherited);
    statements.push(format!("CREATE SCHEMA {schema}"));
    statements.push(format!(
        "CREATE TABLE {table} ({})",
        dims.iter()
            .enumerate()
            .map(|(n, (_, c))| match &c.collation_sql {
                Some(collation) => format!("{} {} COLLATE {collation}", name(n), c.type_sql),
                None => format!("{} {}", name(n), c.type_sql),
            })
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if sample.rows > DEFAULT_SAMPLE {
        let target_rows = sample.rows.div_ceil(300);
        for n in 0..dims.len() {
            statements.push(format!(
                "ALTER TABLE {table} ALTER COLUMN {} SET STATISTICS {target_rows}",
                name(n)
            ));
        }
    }
    let casts = |alias: &str| {
        dims.iter()
            .enumerate()
            .map(|(n, (_, c))| format!("{alias}.{}::{}", name(n), c.type_sql))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let listed: Vec<String> = items
        .iter()
        .zip(&sample.counts)
        .map(|(item, count)| {
            let values: Vec<String> = dims
                .iter()
                .map(|(i, _)| match &item.values[*i] {
                    Some(v) => format!("{}::pg_catalog.text", sql_literal(v)),
                    None => "NULL::pg_catalog.text".to_owned(),
                })
                .collect();
            format!("({}, {count})", values.join(", "))
        })
        .collect();
    let aliases: Vec<String> = (0..dims.len()).map(name).collect();
    statements.push(format!(
        "INSERT INTO {table} SELECT {} FROM (VALUES {}) AS x({}, n), \
         pg_catalog.generate_series(1, x.n)",
        casts("x"),
        listed.join(", "),
        aliases.join(", ")
    ));
    if sample.fill > 0 {
        statements.push(fill_statement(
            object, items, &sample, &dims, columns, &table,
        ));
    }
    statements.push(format!(
        "CREATE STATISTICS {schema}.\"sample_mcv\" (mcv) ON {} FROM {table}",
        aliases.join(", ")
    ));
    statements.push(format!(
        "ALTER STATISTICS {schema}.\"sample_mcv\" SET STATISTICS {}",
        items.len()
    ));
    statements.push(format!("ANALYZE {table}"));
    statements.push(format!(
        "UPDATE pg_catalog.pg_statistic_ext_data SET stxdmcv = \
         (SELECT d.stxdmcv FROM pg_catalog.pg_statistic_ext_data d \
          JOIN pg_catalog.pg_statistic_ext s ON s.oid OPERATOR(pg_catalog.=) d.stxoid \
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) s.stxnamespace \
          WHERE n.nspname OPERATOR(pg_catalog.=) {} \
            AND s.stxname OPERATOR(pg_catalog.=) 'sample_mcv' AND NOT d.stxdinherit) \
         WHERE {}",
        sql_literal(scratch),
        data_row(target.oid, object.inherited)
    ));
    statements.push(format!("DROP SCHEMA {schema} CASCADE"));
    let sampled = Rebuild {
        statements,
        check: format!(
            "SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_mcv_list_items(stxdmcv))\
             ::pg_catalog.text FROM pg_catalog.pg_statistic_ext_data WHERE {}",
            data_row(target.oid, object.inherited)
        ),
        expected: vec![Some(items.len().to_string())],
    };
    Ok(Some(match frequencies {
        Frequencies::Sampled => sampled,
        Frequencies::Exact => with_exact_frequencies(sampled, object, items, &dims, target.oid),
    }))
}

/// The rows besides the listed combinations: each listed value occurs as often in all as the
/// source's column statistics say (as far as the rows allow), and every row is unique in a
/// column of [`unique_values`], so no combination of them reaches the list.
fn fill_statement(
    object: &ExtendedStatistics,
    items: &[McvItem],
    sample: &Sample,
    dims: &[(usize, &CloneColumn)],
    columns: &[ColumnStats],
    table: &str,
) -> String {
    let rows = sample.rows as f64;
    let fill = sample.fill;
    // Extra occurrences of each listed value, per source dimension.
    let extras = |source_dim: usize| -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (value, frequency) in column_frequencies(object, source_dim, columns) {
            let in_items: u64 = items
                .iter()
                .zip(&sample.counts)
                .filter(|(item, _)| item.values[source_dim].as_deref() == Some(value.as_str()))
                .map(|(_, count)| count)
                .sum();
            if in_items == 0 {
                continue;
            }
            let wanted = (frequency * rows).round() as u64;
            if wanted > in_items {
                out.push((value, wanted - in_items));
            }
        }
        out
    };
    let first = sample.unique.first().copied();
    let second = sample.unique.get(1).copied();
    let columns_sql: Vec<String> = dims
        .iter()
        .map(|(source_dim, column)| {
            let source_dim = *source_dim;
            let unique = unique_values(&object.columns[source_dim].type_name);
            // The first unique column carries extra occurrences only when a second one keeps
            // those rows unique; the second's start after the first's.
            let is_first = Some(source_dim) == first;
            let allowed = !(is_first && second.is_none());
            let mut start = 0;
            let mut branches = Vec::new();
            if Some(source_dim) == second
                && let Some(first) = first
            {
                let taken: u64 = extras(first).iter().map(|(_, n)| n).sum();
                let taken = taken.min(fill);
                if taken > 0 {
                    branches.push(format!(
                        "WHEN g OPERATOR(pg_catalog.<=) {taken} THEN {}",
                        unique.unwrap_or("NULL")
                    ));
                }
                start = taken;
            }
            if allowed {
                for (value, count) in extras(source_dim) {
                    let end = (start + count).min(fill);
                    if end > start {
                        branches.push(format!(
                            "WHEN g OPERATOR(pg_catalog.<=) {end} THEN {}",
                            sql_literal(&value)
                        ));
                    }
                    start = end;
                }
            }
            let otherwise = unique.unwrap_or("NULL");
            let expression = if branches.is_empty() {
                otherwise.to_owned()
            } else {
                format!("CASE {} ELSE {otherwise} END", branches.join(" "))
            };
            format!("({expression})::{}", column.type_sql)
        })
        .collect();
    format!(
        "INSERT INTO {table} SELECT {} FROM pg_catalog.generate_series(1, {fill}) AS g",
        columns_sql.join(", ")
    )
}
