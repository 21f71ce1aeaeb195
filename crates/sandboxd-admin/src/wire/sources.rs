//! `/v1/sources`: clone sources, their TLS and snapshots (never a DSN on the way out).

use sandboxd_broker::SourceTls;
use sandboxd_domain::Source;
use sandboxd_domain::clone::{LeftOut, Summary};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A source as an operator sees it: never its DSN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceOut {
    pub name: String,
    /// `keep-values` or `no-values` (statistics without sample values).
    pub privacy: String,
    /// Seconds between snapshots; 0: on demand only.
    pub refresh_secs: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_attempt_at_ms: Option<i64>,
    /// Why the last snapshot attempt failed; `null` when it succeeded.
    pub last_error: Option<String>,
    /// The latest snapshot; `null` before the first.
    pub snapshot: Option<SnapshotOut>,
    /// How sandboxd reaches it over TLS (read from its DSN, of which nothing else is shown);
    /// `null` when its DSN cannot be read.
    pub tls: Option<SourceTlsOut>,
}

/// A source's TLS: what the snapshot's connection and `pg_dump` both do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceTlsOut {
    /// libpq's `sslmode`: `disable`, `prefer`, `require`, `verify-ca` or `verify-full`.
    pub mode: String,
    /// The DSN named no `sslmode`: `verify-full` off loopback, `prefer` on it.
    pub default: bool,
    /// What a verifying mode trusts: the CA file (`sslrootcert`) or `system`; `null` when the
    /// mode checks no certificate.
    pub roots: Option<String>,
    /// Every address the DSN names is loopback or a Unix socket.
    pub loopback: bool,
    /// One line: the mode and what it checks.
    pub summary: String,
    /// Set when the host is not loopback and the mode checks no certificate: what that exposes
    /// and how to fix it.
    pub warning: Option<String>,
}

impl From<SourceTls> for SourceTlsOut {
    fn from(tls: SourceTls) -> Self {
        Self {
            mode: tls.mode.as_str().to_owned(),
            default: !tls.explicit,
            roots: tls.roots.as_ref().map(ToString::to_string),
            loopback: tls.loopback,
            summary: tls.summary(),
            warning: tls.warning(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotOut {
    pub taken_at_ms: i64,
    /// The source's server, e.g. `PostgreSQL 18.6`.
    pub server_version: String,
    pub took_ms: i64,
    /// What it holds and what a clone of it lacks, and why; `null` for a snapshot taken before
    /// summaries were kept.
    pub summary: Option<SnapshotSummaryOut>,
}

/// What a snapshot carries into a clone (counts), and what it leaves out with the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotSummaryOut {
    /// Ordinary tables, partitions included.
    pub tables: u32,
    pub partitioned_tables: u32,
    /// Indexes with their sizes, partitioned indexes included.
    pub indexes: u32,
    /// Indexes whose expression columns carry statistics (`lower(email)`).
    pub expression_indexes: u32,
    pub materialized_views: u32,
    /// Rows of `pg_stats` carried.
    pub column_statistics: u32,
    /// `CREATE STATISTICS` objects in the schema (their data is rebuilt in a clone where it can
    /// be; `left_out` names what could not).
    pub extended_statistics: u32,
    /// Planner settings captured.
    pub settings: u32,
    pub extensions: u32,
    /// What a clone lacks and why (e.g. extended statistics by name, sample values under
    /// `no-values`, column statistics from a source before PostgreSQL 18).
    pub left_out: Vec<LeftOutOut>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LeftOutOut {
    /// Short: `extended statistics (2)`, `column statistics`, `sample values`.
    pub what: String,
    /// Why, and what it costs the plans.
    pub why: String,
}

impl From<Summary> for SnapshotSummaryOut {
    fn from(s: Summary) -> Self {
        Self {
            tables: s.tables,
            partitioned_tables: s.partitioned_tables,
            indexes: s.indexes,
            expression_indexes: s.expression_indexes,
            materialized_views: s.materialized_views,
            column_statistics: s.column_statistics,
            extended_statistics: s.extended_statistics,
            settings: s.settings,
            extensions: s.extensions,
            left_out: s
                .left_out
                .into_iter()
                .map(|l| LeftOutOut {
                    what: l.what,
                    why: l.why,
                })
                .collect(),
        }
    }
}

impl From<SnapshotSummaryOut> for Summary {
    /// Back to the domain's, whose `line` and `lines` the CLI and the panel print.
    fn from(s: SnapshotSummaryOut) -> Self {
        Self {
            tables: s.tables,
            partitioned_tables: s.partitioned_tables,
            indexes: s.indexes,
            expression_indexes: s.expression_indexes,
            materialized_views: s.materialized_views,
            column_statistics: s.column_statistics,
            extended_statistics: s.extended_statistics,
            settings: s.settings,
            extensions: s.extensions,
            left_out: s
                .left_out
                .into_iter()
                .map(|l| LeftOut {
                    what: l.what,
                    why: l.why,
                })
                .collect(),
        }
    }
}

impl SourceOut {
    /// `s` with its TLS, which the store's row does not carry (it is read from the DSN).
    pub fn new(s: Source, tls: Option<SourceTls>) -> Self {
        Self {
            name: s.name.to_string(),
            privacy: s.privacy.as_str().to_owned(),
            refresh_secs: s.refresh_secs,
            created_at_ms: s.created_at_ms,
            updated_at_ms: s.updated_at_ms,
            last_attempt_at_ms: s.last_attempt_at_ms,
            last_error: s.last_error,
            snapshot: s.snapshot.map(|p| SnapshotOut {
                taken_at_ms: p.taken_at_ms,
                server_version: p.server_version,
                took_ms: p.took_ms,
                summary: p.contents.map(SnapshotSummaryOut::from),
            }),
            tls: tls.map(SourceTlsOut::from),
        }
    }
}

/// Registers (or replaces) a source. The DSN is libpq's (`host=… user=… password=… dbname=…`
/// or a `postgresql://` URL) for a role that may read the catalog and statistics (e.g. a
/// member of `pg_read_all_data`); sandboxd only ever opens read-only transactions with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSource {
    pub dsn: String,
    /// `keep-values` (default) or `no-values`.
    #[serde(default)]
    pub privacy: Option<String>,
    /// Seconds between snapshots; absent or 0: on demand only.
    #[serde(default)]
    pub refresh_secs: Option<u64>,
}
