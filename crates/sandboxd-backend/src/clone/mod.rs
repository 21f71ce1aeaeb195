//! Production-faithful clones (§7) on any backend: a snapshot read from a source Postgres
//! (`source.rs`: read-only, the schema through `Backend::dump_schema`), and a fresh instance of
//! the same major version made into a clone of it (`apply.rs`: schema, statistics, planner
//! settings, autovacuum off, relation files padded through `Backend::extend_files`;
//! `provision.rs` provisions and applies in one step). What a snapshot holds and the statements
//! are pure, in `sandboxd_domain::clone`. A source's DSN is read in `dsn.rs`, and how it is
//! reached over TLS (the snapshot's rustls connector, the roots `pg_dump` trusts) is `tls.rs`'s.

mod apply;
mod dsn;
mod extended;
mod extended_read;
mod provision;
mod source;
mod tls;

pub use apply::{CloneHost, CloneReport, Fidelity, SchemaOwner, apply};
pub(crate) use dsn::{LibpqInput, libpq_input, redact};
pub use dsn::{check_dsn, describe_tls};
pub use provision::{database_note, origin_of, provision_clone, provision_idle_clone};
pub use source::{SourceError, read_source, take_snapshot};
pub use tls::{Roots, SourceTls, SslMode};
