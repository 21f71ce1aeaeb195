//! Production-faithful clones (§7): a snapshot of a source Postgres holds what its planner needs
//! and none of its rows — the schema, the planner statistics, the settings that steer the planner,
//! the extensions in use — and the pure plans that apply it to a fresh instance of the same major
//! version. Parts:
//! - [`snapshot`]: what a snapshot holds, and privacy mode (statistics without sample values).
//! - [`restore`]: the statements that apply a snapshot's statistics and settings.
//! - [`extended`]: extended statistics (`CREATE STATISTICS`) rebuilt in a clone: n-distinct
//!   and dependencies exactly, most-common-values lists by frequency through a scratch sample.
//! - [`padding`]: how far each relation file must reach so the planner believes its size.
//! - [`origin`]: what a clone was made from, kept with its instance for the agent's evidence,
//!   and the name its database takes (the source database's).
//! - [`choice`]: which source a project's engine clones and under which privacy mode, and the
//!   snapshot with its values stripped for a project stricter than the source.
//! - [`summary`]: what a snapshot holds and what it left out, and why, for operator and agent.
//! - [`plan_shape`]: a plan's shape (node types, join order, index names) from `EXPLAIN`'s JSON,
//!   what clone and source are compared by.

pub mod choice;
pub mod extended;
pub mod origin;
pub mod padding;
pub mod plan_shape;
pub mod restore;
pub mod snapshot;
pub mod summary;
pub mod unparsed;

pub use choice::{CloneChoice, snapshot_under, stricter};
pub use origin::{CloneOrigin, clone_database_name};
pub use padding::{BLOCK_SIZE, SEGMENT_BLOCKS, Segment, padding};
pub use plan_shape::plan_shape;
pub use restore::{clone_notes, restore_statements, schema_statements, setting_statements};
pub use snapshot::{
    ColumnStats, ExtendedStatistics, ExtendedStatisticsData, ExtensionUse, McvItem, PlannerSetting,
    Privacy, RelationKind, RelationSize, Snapshot, StatisticsColumn,
};
pub use summary::{LeftOut, Summary};
pub use unparsed::{UnparsedColumn, unparsed_note};
