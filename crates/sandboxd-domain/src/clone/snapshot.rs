//! What a snapshot of a source holds. Every statistic is kept as the text Postgres printed it,
//! so restoring it gives back exactly the source's value (a `real` printed and read again is the
//! same `real`).

use serde::{Deserialize, Serialize};

/// How much of the source's data the statistics may carry into a clone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Privacy {
    /// Everything the planner has, sample values included (most-common values, histogram
    /// bounds): plans match the source best.
    #[default]
    KeepValues,
    /// No data value leaves the source: counts, null fractions, distinct estimates, widths and
    /// correlation stay; most-common values and frequencies and every histogram go.
    NoValues,
}

impl Privacy {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "keep-values" => Some(Self::KeepValues),
            "no-values" => Some(Self::NoValues),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeepValues => "keep-values",
            Self::NoValues => "no-values",
        }
    }

    /// What the mode costs, for the clone's evidence and the operator.
    pub fn consequence(self) -> Option<&'static str> {
        match self {
            Self::KeepValues => None,
            Self::NoValues => Some(
                "privacy mode no-values: most-common values and histograms were left out, so \
                 the planner estimates equality and range predicates from distinct counts and \
                 defaults; plans that hinge on skew (a rare value choosing an index, a frequent \
                 one a sequential scan) or on range bounds may differ from the source",
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelationKind {
    Table,
    PartitionedTable,
    Index,
    MaterializedView,
    /// A partitioned table's index: no file of its own, its partitions' indexes have them.
    PartitionedIndex,
}

impl RelationKind {
    /// From `pg_class.relkind`.
    pub fn from_relkind(relkind: &str) -> Option<Self> {
        match relkind {
            "r" => Some(Self::Table),
            "p" => Some(Self::PartitionedTable),
            "i" => Some(Self::Index),
            "m" => Some(Self::MaterializedView),
            "I" => Some(Self::PartitionedIndex),
            _ => None,
        }
    }

    /// Whether it has a file whose length the planner reads.
    pub fn has_storage(self) -> bool {
        !matches!(self, Self::PartitionedTable | Self::PartitionedIndex)
    }
}

/// A relation's size as the source's `pg_class` has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelationSize {
    pub schema: String,
    pub name: String,
    pub kind: RelationKind,
    pub relpages: i64,
    /// As printed (`real`).
    pub reltuples: String,
    pub relallvisible: i64,
}

/// One row of the source's `pg_stats`, every value as text: a table's (or materialized
/// view's) column, or an index's expression column (`lower(email)`), whose `table` is then the
/// index's name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ColumnStats {
    pub schema: String,
    pub table: String,
    pub column: String,
    /// An index column's attribute number, set for index rows only: they are restored by
    /// number, as `pg_dump --statistics` does, because an expression column's name (`lower`,
    /// `expr1`) is not stable from one server to the next. Absent in snapshots taken before
    /// index rows were read.
    #[serde(default)]
    pub attnum: Option<i16>,
    pub inherited: bool,
    pub null_frac: Option<String>,
    pub avg_width: Option<String>,
    pub n_distinct: Option<String>,
    pub most_common_vals: Option<String>,
    pub most_common_freqs: Option<String>,
    pub histogram_bounds: Option<String>,
    pub correlation: Option<String>,
    pub most_common_elems: Option<String>,
    pub most_common_elem_freqs: Option<String>,
    pub elem_count_histogram: Option<String>,
    pub range_length_histogram: Option<String>,
    pub range_empty_frac: Option<String>,
    pub range_bounds_histogram: Option<String>,
}

impl ColumnStats {
    /// The same statistics with every data value left out (privacy mode `no-values`).
    pub fn without_values(mut self) -> Self {
        self.most_common_vals = None;
        self.most_common_freqs = None;
        self.histogram_bounds = None;
        self.most_common_elems = None;
        self.most_common_elem_freqs = None;
        self.range_length_histogram = None;
        self.range_bounds_histogram = None;
        self
    }
}

/// One `CREATE STATISTICS` object's data as the source's `pg_stats_ext` shows it: one per
/// object and `inherited` (a parent of partitions or children has both).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExtendedStatistics {
    /// The statistics object's schema and name.
    pub schema: String,
    pub name: String,
    /// Its table's.
    pub table_schema: String,
    pub table: String,
    /// Its columns in the source's attribute-number order. n-distinct and dependencies name
    /// columns by number, and a clone's numbers may differ (pg_dump leaves dropped columns
    /// out), so they are mapped by name when rebuilt.
    pub columns: Vec<StatisticsColumn>,
    /// How many expressions it has besides columns (`CREATE STATISTICS … ON (a + b), c`).
    pub expressions: u32,
    /// Each expression's own statistics as the source's `pg_stats_ext_exprs` prints them, in
    /// the object's expression order (`column` holds the expression's text). Absent in
    /// snapshots taken before they were read.
    #[serde(default)]
    pub expression_stats: Vec<ColumnStats>,
    pub inherited: bool,
    /// `pg_ndistinct` as printed: `{"1, 2": 100, "1, 3": 700}` (exact: the server rounds each
    /// count to an integer before storing it).
    pub n_distinct: Option<String>,
    /// `pg_dependencies` as printed: `{"1 => 2": 1.000000}` (degrees to six decimals).
    pub dependencies: Option<String>,
    /// The multi-column most-common-values list, absent under privacy mode `no-values`.
    pub mcv: Option<Vec<McvItem>>,
}

/// A column of an extended statistics object on the source.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatisticsColumn {
    pub attnum: i16,
    pub name: String,
    /// `format_type` of it, as the source printed it.
    pub type_name: String,
}

/// One combination of values of an extended MCV list: one value per dimension (columns, then
/// expressions), each as its type's output text, `None` for NULL.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct McvItem {
    pub values: Vec<Option<String>>,
    pub frequency: f64,
    /// The frequency the combination would have if its columns were independent.
    pub base_frequency: f64,
}

/// What the snapshot could read of its source's extended statistics.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExtendedStatisticsData {
    /// Every object's data the snapshot's role could see (`pg_stats_ext` shows an object only
    /// to members of its table's owner, and hides it under row security).
    pub objects: Vec<ExtendedStatistics>,
    /// Objects (`schema.name`) whose data the role could not see.
    pub unreadable: Vec<String>,
}

/// A setting that steers the planner, as the source's session on its database sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerSetting {
    pub name: String,
    /// `current_setting(name)`: with its unit (`4MB`), as `SET` takes it.
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtensionUse {
    pub name: String,
    pub version: String,
    pub schema: String,
}

/// Everything a clone is made from. Many clones come from one snapshot; making one never
/// touches the source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The source's registered name.
    pub source: String,
    pub taken_at_ms: i64,
    /// `version()`'s first words, e.g. `PostgreSQL 18.6`.
    pub server_version: String,
    /// `server_version_num`, e.g. 180006.
    pub server_version_num: u32,
    /// The source database's name (the clone's schema goes into the sandbox's database).
    pub database: String,
    /// `pg_dump --schema-only --no-owner --no-privileges` of the source database.
    pub schema_sql: String,
    pub relations: Vec<RelationSize>,
    pub columns: Vec<ColumnStats>,
    pub settings: Vec<PlannerSetting>,
    pub extensions: Vec<ExtensionUse>,
    /// `CREATE STATISTICS` objects (`schema.name`): the schema has them.
    pub extended_statistics: Vec<String>,
    /// Their data, rebuilt in a clone; absent in snapshots taken before it was read (their
    /// clones have the objects without data).
    #[serde(default)]
    pub extended_statistics_data: Option<ExtendedStatisticsData>,
    /// Columns (`schema.table.column (type)`) of analyzed tables that the source keeps no
    /// statistics for, or only their null fraction and width (a type without `=`, such as
    /// `json` or `point`, or statistics turned off for the column): the planner estimates them
    /// from defaults there as in a clone. Absent in older snapshots.
    #[serde(default)]
    pub columns_without_statistics: Vec<String>,
    /// Foreign tables (`schema.name`): the schema has them, their statistics and sizes are not
    /// read. Absent in snapshots taken before they were listed.
    #[serde(default)]
    pub foreign_tables: Vec<String>,
    pub privacy: Privacy,
}

impl Snapshot {
    pub fn major(&self) -> u32 {
        self.server_version_num / 10_000
    }

    /// Applies privacy mode: with `NoValues` no column statistic carries a data value, and no
    /// extended statistics object its most-common-values list (n-distinct counts and
    /// dependencies, which hold no values, stay).
    pub fn with_privacy(mut self, privacy: Privacy) -> Self {
        self.privacy = privacy;
        if privacy == Privacy::NoValues {
            self.columns = self
                .columns
                .into_iter()
                .map(ColumnStats::without_values)
                .collect();
            if let Some(data) = &mut self.extended_statistics_data {
                for object in &mut data.objects {
                    object.mcv = None;
                    object.expression_stats = std::mem::take(&mut object.expression_stats)
                        .into_iter()
                        .map(ColumnStats::without_values)
                        .collect();
                }
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_values_strips_every_sample_and_keeps_the_counts() {
        let column = ColumnStats {
            schema: "public".into(),
            table: "orders".into(),
            column: "status".into(),
            null_frac: Some("0.01".into()),
            avg_width: Some("8".into()),
            n_distinct: Some("5".into()),
            most_common_vals: Some("{paid,open}".into()),
            most_common_freqs: Some("{0.9,0.05}".into()),
            histogram_bounds: Some("{a,b,c}".into()),
            correlation: Some("0.2".into()),
            most_common_elems: Some("{x}".into()),
            most_common_elem_freqs: Some("{0.1,0.1,0.1}".into()),
            range_bounds_histogram: Some("{[1,2)}".into()),
            range_length_histogram: Some("{1}".into()),
            ..ColumnStats::default()
        };
        let stripped = column.clone().without_values();
        let text = serde_json::to_string(&stripped).expect("json");
        for sample in ["paid", "open", "{a,b,c}", "{x}", "[1,2)"] {
            assert!(!text.contains(sample), "{sample} left in {text}");
        }
        assert_eq!(stripped.null_frac, column.null_frac);
        assert_eq!(stripped.n_distinct, column.n_distinct);
        assert_eq!(stripped.correlation, column.correlation);
        assert_eq!(stripped.avg_width, column.avg_width);
    }

    #[test]
    fn a_snapshot_row_stored_before_attnum_existed_still_reads() {
        let old = r#"{"schema":"public","table":"t","column":"a","inherited":false,
            "null_frac":"0","avg_width":"4","n_distinct":"-1","most_common_vals":null,
            "most_common_freqs":null,"histogram_bounds":null,"correlation":"1",
            "most_common_elems":null,"most_common_elem_freqs":null,"elem_count_histogram":null,
            "range_length_histogram":null,"range_empty_frac":null,"range_bounds_histogram":null}"#;
        let column: ColumnStats = serde_json::from_str(old).expect("an old row deserializes");
        assert_eq!(column.attnum, None);
        assert_eq!(column.n_distinct.as_deref(), Some("-1"));
        assert_eq!(
            RelationKind::from_relkind("I"),
            Some(RelationKind::PartitionedIndex)
        );
        assert!(!RelationKind::PartitionedIndex.has_storage());
        assert!(RelationKind::Index.has_storage());
    }

    #[test]
    fn privacy_names_round_trip_and_unknown_ones_are_refused() {
        for privacy in [Privacy::KeepValues, Privacy::NoValues] {
            assert_eq!(Privacy::parse(privacy.as_str()), Some(privacy));
        }
        assert_eq!(Privacy::parse("none"), None);
        assert!(Privacy::NoValues.consequence().is_some());
        assert!(Privacy::KeepValues.consequence().is_none());
    }
}
