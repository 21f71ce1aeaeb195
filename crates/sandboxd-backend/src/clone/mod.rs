//! Production-faithful clones (§7) on any backend: a snapshot read from a source Postgres
//! (`source.rs`: read-only, the schema through `Backend::dump_schema`), and a fresh instance of
//! the same major version made into a clone of it (`apply.rs`: schema, statistics, planner
//! settings, autovacuum off, relation files padded through `Backend::extend_files`). What a
//! snapshot holds and the statements are pure, in `sandboxd_domain::clone`.

mod apply;
mod source;

pub use apply::{CloneReport, Fidelity, SchemaOwner, apply, provision_clone, provision_idle_clone};
pub use source::{SourceError, check_dsn, read_source, take_snapshot};
pub(crate) use source::{redact, split_password};
