//! Reading a source: one read-only, repeatable-read transaction on the source database for its
//! version, sizes, statistics, planner settings and extensions, and `pg_dump` for the schema.
//! The DSN is the operator's secret: it is never logged, and an error never quotes it. The
//! connection is TLS as the DSN's `sslmode` says (`tls.rs`; `verify-full` by default off
//! loopback), through rustls.

use sandboxd_domain::clone::{
    ColumnStats, ExtensionUse, PlannerSetting, Privacy, RelationKind, RelationSize, Snapshot,
};
use sandboxd_domain::{EngineRef, clock};
use secrecy::SecretString;
use tokio_postgres::{Client, IsolationLevel};

use super::dsn::{SourceDsn, redact};
use super::extended_read::read_extended;
use super::tls::SourceTls;
use crate::Backend;
use crate::error::BackendError;

/// The first major version whose column statistics a clone can import.
const STATS_IMPORT_MAJOR: u32 = 18;
/// The first major version whose `pg_stats_ext` has the columns read here (`exprs`,
/// `inherited`).
const EXTENDED_STATS_MAJOR: u32 = 15;

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the source DSN is not a PostgreSQL connection string: {0}")]
    BadDsn(String),
    #[error("the TLS roots of the source: {0}")]
    Roots(String),
    #[error("connecting to the source: {0}")]
    Connect(String),
    #[error(
        "the source's certificate failed TLS verification ({tls}): {detail}; sslrootcert names \
         the PEM file of the CA that signed it"
    )]
    TlsVerification { tls: String, detail: String },
    #[error("TLS with the source failed ({tls}): {detail}")]
    Tls { tls: String, detail: String },
    #[error("reading the source's {what}: {detail}")]
    Read { what: &'static str, detail: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Reads the source at `dsn` (everything but the schema), under privacy mode `privacy`.
pub async fn read_source(
    source: &str,
    dsn: &SecretString,
    privacy: Privacy,
) -> Result<Snapshot, SourceError> {
    let mut client = connect(dsn).await?;
    let tx = client
        .build_transaction()
        .read_only(true)
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await
        .map_err(|e| SourceError::Read {
            what: "snapshot transaction",
            detail: driver_text(&e, dsn),
        })?;
    // Every query below names operators and functions unqualified: with the source's schemas
    // off the path, none resolves to one an application role planted (`public.||(name, text)`
    // would beat `pg_catalog.textcat`), which would run as the snapshot's role.
    tx.batch_execute("SET LOCAL search_path TO pg_catalog, pg_temp")
        .await
        .map_err(|e| SourceError::Read {
            what: "snapshot transaction",
            detail: driver_text(&e, dsn),
        })?;
    let read = |what: &'static str| {
        move |e: tokio_postgres::Error| SourceError::Read {
            what,
            detail: driver_text(&e, dsn),
        }
    };
    let head = tx
        .query_one(
            "SELECT current_setting('server_version_num')::int, \
                    split_part(version(), ' ', 1) || ' ' || split_part(version(), ' ', 2), \
                    current_database()",
            &[],
        )
        .await
        .map_err(read("version"))?;
    let version_num = u32::try_from(head.get::<_, i32>(0)).unwrap_or(0);
    let relations = tx
        .query(RELATIONS, &[])
        .await
        .map_err(read("relation sizes"))?
        .iter()
        .filter_map(|row| {
            Some(RelationSize {
                schema: row.get(0),
                name: row.get(1),
                kind: RelationKind::from_relkind(row.get(2))?,
                relpages: row.get(3),
                reltuples: row.get(4),
                relallvisible: row.get(5),
            })
        })
        .collect();
    let columns = if version_num / 10_000 >= STATS_IMPORT_MAJOR {
        tx.query(COLUMNS, &[])
            .await
            .map_err(read("column statistics"))?
            .iter()
            .map(|row| ColumnStats {
                schema: row.get(0),
                table: row.get(1),
                column: row.get(2),
                inherited: row.get(3),
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
                range_length_histogram: row.get(14),
                range_empty_frac: row.get(15),
                range_bounds_histogram: row.get(16),
                attnum: row.get(17),
            })
            .collect()
    } else {
        Vec::new()
    };
    let settings = tx
        .query(SETTINGS, &[])
        .await
        .map_err(read("planner settings"))?
        .iter()
        .map(|row| PlannerSetting {
            name: row.get(0),
            value: row.get(1),
        })
        .collect();
    let extensions = tx
        .query(EXTENSIONS, &[])
        .await
        .map_err(read("extensions"))?
        .iter()
        .map(|row| ExtensionUse {
            name: row.get(0),
            version: row.get(1),
            schema: row.get(2),
        })
        .collect();
    let extended_statistics = first_column(&tx, EXTENDED_STATISTICS)
        .await
        .map_err(read("extended statistics"))?;
    let extended_statistics_data = if version_num / 10_000 >= EXTENDED_STATS_MAJOR {
        Some(read_extended(&tx, &read).await?)
    } else {
        None
    };
    let columns_without_statistics = first_column(&tx, COLUMNS_WITHOUT_STATISTICS)
        .await
        .map_err(read("columns without statistics"))?;
    let foreign_tables = first_column(&tx, FOREIGN_TABLES)
        .await
        .map_err(read("foreign tables"))?;
    tx.commit().await.map_err(read("snapshot transaction"))?;
    let snapshot = Snapshot {
        source: source.to_owned(),
        taken_at_ms: clock::now_ms(),
        server_version: head.get(1),
        server_version_num: version_num,
        database: head.get(2),
        schema_sql: String::new(),
        relations,
        columns,
        settings,
        extensions,
        extended_statistics,
        extended_statistics_data,
        columns_without_statistics,
        foreign_tables,
        privacy: Privacy::KeepValues,
    };
    Ok(snapshot.with_privacy(privacy))
}

/// The first column of every row `query` answers.
pub(super) async fn first_column(
    tx: &tokio_postgres::Transaction<'_>,
    query: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(tx
        .query(query, &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// A whole snapshot: [`read_source`], then the schema dumped by `backend` with a `pg_dump` of
/// the source's major version.
pub async fn take_snapshot(
    backend: &dyn Backend,
    engine: EngineRef,
    source: &str,
    dsn: &SecretString,
    privacy: Privacy,
) -> Result<Snapshot, SourceError> {
    let mut snapshot = read_source(source, dsn, privacy).await?;
    snapshot.schema_sql = backend.dump_schema(engine, snapshot.major(), dsn).await?;
    Ok(snapshot)
}

async fn connect(dsn: &SecretString) -> Result<Client, SourceError> {
    let SourceDsn { mut config, tls } = SourceDsn::parse(dsn)?;
    config
        .application_name("sandboxd-snapshot")
        .connect_timeout(std::time::Duration::from_secs(10))
        .options("-c default_transaction_read_only=on -c statement_timeout=60s");
    let connector = tls.connector().map_err(SourceError::Roots)?;
    let (client, connection) = config
        .connect(connector)
        .await
        .map_err(|e| connect_error(&e, &tls, dsn))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A failed connection, told apart: a certificate TLS verification refused, another TLS
/// failure (the server offers none, say), or anything else.
fn connect_error(err: &tokio_postgres::Error, tls: &SourceTls, dsn: &SecretString) -> SourceError {
    let detail = driver_text(err, dsn);
    let mut cause = std::error::Error::source(err);
    while let Some(current) = cause {
        if let Some(rustls::Error::InvalidCertificate(_)) = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return SourceError::TlsVerification {
                tls: tls.short(),
                detail,
            };
        }
        cause = current.source();
    }
    if detail.starts_with("error performing TLS handshake") {
        return SourceError::Tls {
            tls: tls.short(),
            detail,
        };
    }
    SourceError::Connect(detail)
}

/// The driver's (or server's) message and its causes, with the DSN and its password blanked
/// should either appear in them.
fn driver_text(err: &tokio_postgres::Error, dsn: &SecretString) -> String {
    let mut text = match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => err.to_string(),
    };
    if err.as_db_error().is_none() {
        let mut cause = std::error::Error::source(err);
        while let Some(current) = cause {
            text.push_str(": ");
            text.push_str(&current.to_string());
            cause = current.source();
        }
    }
    redact(&text, dsn)
}

/// Relations of the source's own (not an extension's) whose files the planner measures.
const RELATIONS: &str = "SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relpages::bigint, \
            c.reltuples::text, c.relallvisible::bigint \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relkind IN ('r', 'p', 'i', 'I', 'm') \
       AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
       AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d \
                       WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid \
                         AND d.deptype = 'e') \
     ORDER BY 1, 2";

/// `pg_stats` of tables, materialized views and indexes (an index has rows for its expression
/// columns: `lower(email)`, `date_part('year', created_at)`); an index row keeps its attribute
/// number, which it is restored by. (ANALYZE gives a partitioned index no rows of its own, its
/// partitions' indexes have them; should one appear it is read too.)
const COLUMNS: &str = "SELECT s.schemaname::text, s.tablename::text, s.attname::text, s.inherited, \
            s.null_frac::text, s.avg_width::text, s.n_distinct::text, \
            s.most_common_vals::text, s.most_common_freqs::text, s.histogram_bounds::text, \
            s.correlation::text, s.most_common_elems::text, s.most_common_elem_freqs::text, \
            s.elem_count_histogram::text, s.range_length_histogram::text, \
            s.range_empty_frac::text, s.range_bounds_histogram::text, \
            CASE WHEN c.relkind IN ('i', 'I') THEN a.attnum END \
     FROM pg_catalog.pg_stats s \
     JOIN pg_catalog.pg_namespace n ON n.nspname = s.schemaname \
     JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = s.attname \
     WHERE c.relkind IN ('r', 'p', 'm', 'i', 'I') \
       AND s.schemaname NOT IN ('pg_catalog', 'information_schema') \
     ORDER BY 1, 2, 3, 4";

/// What steers the planner and a session may set: every "Query Tuning" setting (methods, costs,
/// genetic optimizer, other planner options such as `default_statistics_target`, `jit*`) and
/// the memory settings plans depend on, as this session on the source database sees them
/// (`ALTER DATABASE … SET` and the configuration file included).
const SETTINGS: &str = "SELECT name::text, current_setting(name) FROM pg_catalog.pg_settings \
     WHERE context IN ('user', 'superuser') \
       AND (category LIKE 'Query Tuning%' \
            OR name IN ('work_mem', 'hash_mem_multiplier', 'max_parallel_workers_per_gather')) \
     ORDER BY 1";

const EXTENSIONS: &str = "SELECT e.extname::text, e.extversion::text, n.nspname::text \
     FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
     WHERE e.extname <> 'plpgsql' ORDER BY 1";

/// Foreign tables: their definitions are in the schema, their statistics and sizes are not
/// read (the snapshot's summary says so).
const FOREIGN_TABLES: &str = "SELECT n.nspname || '.' || c.relname \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relkind = 'f' \
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d \
                       WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid \
                         AND d.deptype = 'e') \
     ORDER BY 1";

/// Columns of analyzed tables (some column has statistics) that have none, or only the null
/// fraction and width ANALYZE keeps for a type without `=`/`<` (`n_distinct` 0 on a column
/// that is not all NULL).
const COLUMNS_WITHOUT_STATISTICS: &str = "SELECT n.nspname || '.' || c.relname || '.' || \
            a.attname || ' (' || pg_catalog.format_type(a.atttypid, a.atttypmod) || ')' \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
     WHERE c.relkind IN ('r', 'p', 'm') \
       AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
       AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d \
                       WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid \
                         AND d.deptype = 'e') \
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_stats s \
                   WHERE s.schemaname = n.nspname AND s.tablename = c.relname) \
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stats s \
                       WHERE s.schemaname = n.nspname AND s.tablename = c.relname \
                         AND s.attname = a.attname AND (s.n_distinct <> 0 OR s.null_frac >= 1)) \
     ORDER BY 1";

const EXTENDED_STATISTICS: &str = "SELECT n.nspname || '.' || s.stxname \
     FROM pg_catalog.pg_statistic_ext s JOIN pg_catalog.pg_namespace n ON n.oid = s.stxnamespace \
     ORDER BY 1";
