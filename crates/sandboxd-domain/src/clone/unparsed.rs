//! Columns whose sample values the clone's superuser must not parse. Restoring a most-common
//! value or a histogram bound reads its text through the column type's input function, as the
//! caller: for a domain that runs its `CHECK` constraints, which may call any function the
//! source's schema wrote, and for a composite type, the input of each of its fields. So such
//! a column (or an array or range of one) gets its counts, null fraction, width and
//! correlation, and no value; the clone's notes name it. Base types (whose input is C code only
//! a superuser can install), enums and ranges of those are parsed as before.

use super::snapshot::ColumnStats;

/// A column of the clone (a table's, a materialized view's, or an index's) whose type's input
/// can run code of the source's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnparsedColumn {
    pub schema: String,
    pub relation: String,
    pub column: String,
    pub attnum: i16,
}

impl UnparsedColumn {
    /// Whether `stats` are this column's: a table's by name, an index's by number (as they are
    /// restored).
    fn holds(&self, stats: &ColumnStats) -> bool {
        self.schema == stats.schema
            && self.relation == stats.table
            && match stats.attnum {
                Some(attnum) => attnum == self.attnum,
                None => stats.column == self.column,
            }
    }
}

/// `stats` without values where they are of one of `columns`.
pub fn without_unparsed_values(stats: &ColumnStats, columns: &[UnparsedColumn]) -> ColumnStats {
    if columns.iter().any(|c| c.holds(stats)) {
        stats.clone().without_values()
    } else {
        stats.clone()
    }
}

/// What the clone's notes say of `columns`, if any of them has statistics in `stats`.
pub fn unparsed_note(columns: &[UnparsedColumn], stats: &[ColumnStats]) -> Option<String> {
    let mut named: Vec<String> = columns
        .iter()
        .filter(|c| {
            stats.iter().any(|s| {
                c.holds(s)
                    && (s.most_common_vals.is_some()
                        || s.histogram_bounds.is_some()
                        || s.most_common_elems.is_some()
                        || s.range_bounds_histogram.is_some())
            })
        })
        .map(|c| format!("{}.{}.{}", c.schema, c.relation, c.column))
        .collect();
    named.sort();
    named.dedup();
    if named.is_empty() {
        return None;
    }
    Some(format!(
        "the sample values of {} are not restored (their counts, null fraction and correlation \
         are): the column's type is a domain or composite of the source's schema, whose input \
         could run the schema's own functions as the clone's superuser",
        named.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(table: &str, column: &str, attnum: Option<i16>) -> ColumnStats {
        ColumnStats {
            schema: "public".into(),
            table: table.into(),
            column: column.into(),
            attnum,
            n_distinct: Some("40".into()),
            most_common_vals: Some("{B1,B2}".into()),
            most_common_freqs: Some("{0.5,0.5}".into()),
            ..ColumnStats::default()
        }
    }

    fn unparsed(relation: &str, column: &str, attnum: i16) -> UnparsedColumn {
        UnparsedColumn {
            schema: "public".into(),
            relation: relation.into(),
            column: column.into(),
            attnum,
        }
    }

    #[test]
    fn a_column_of_a_domain_keeps_its_counts_and_loses_its_values() {
        let columns = [unparsed("things", "b", 3), unparsed("things_b_idx", "b", 1)];
        let table = without_unparsed_values(&stats("things", "b", None), &columns);
        assert_eq!(table.most_common_vals, None);
        assert_eq!(table.n_distinct.as_deref(), Some("40"));
        let index = without_unparsed_values(&stats("things_b_idx", "expr", Some(1)), &columns);
        assert_eq!(index.most_common_vals, None, "an index column by number");
        let other = without_unparsed_values(&stats("things", "a", None), &columns);
        assert!(other.most_common_vals.is_some());
        let note = unparsed_note(&columns, &[stats("things", "b", None)]).expect("a note");
        assert!(
            note.contains("public.things.b") && !note.contains("things_b_idx"),
            "{note}"
        );
        assert_eq!(unparsed_note(&columns, &[stats("things", "a", None)]), None);
    }
}
