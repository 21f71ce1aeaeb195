//! Making a fresh instance into a clone: as its superuser, in the sandbox's database, the
//! snapshot's schema, then its statistics (extended statistics rebuilt, each object in
//! transactions of its own, before anyone else may log in), the objects handed to the agent's
//! account, the planner settings, autovacuum off, and each relation file padded to the
//! source's size.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandboxd_domain::Instance;
use sandboxd_domain::clone::{
    Snapshot, UnparsedColumn, clone_notes, padding, restore_statements, schema_statements,
    setting_statements, unparsed_note,
};
use sandboxd_domain::engine::{pg_identifier, sql_literal};
use serde::Serialize;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::error::BackendError;
use crate::wire::{Reach, postgres};

/// How much of a snapshot a clone gets. Everything, unless a comparison wants less (the
/// agreement report measures an empty schema-only copy beside the clone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fidelity {
    pub statistics: bool,
    pub settings: bool,
    pub padding: bool,
}

impl Fidelity {
    pub const FULL: Self = Self {
        statistics: true,
        settings: true,
        padding: true,
    };
    pub const SCHEMA_ONLY: Self = Self {
        statistics: false,
        settings: false,
        padding: false,
    };
}

/// What making the clone did: its evidence.
#[derive(Debug, Clone, Serialize)]
pub struct CloneReport {
    pub source: String,
    pub snapshot_taken_at_ms: i64,
    pub server_version: String,
    pub privacy: &'static str,
    pub statistics_restored: usize,
    /// Import calls the server answered `false` to (it said why in a warning).
    pub statistics_refused: usize,
    /// `CREATE STATISTICS` objects whose data was rebuilt (n-distinct counts and dependencies,
    /// or a most-common-values list).
    pub extended_statistics_rebuilt: usize,
    pub settings_applied: usize,
    pub padded_files: usize,
    /// Apparent bytes the padding added (sparse: none of it is stored).
    pub padded_bytes: u64,
    pub hypothetical_indexes: bool,
    pub notes: Vec<String>,
    #[serde(skip)]
    pub took: Duration,
}

/// Who owns the schema a clone is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaOwner {
    /// The instance's handed-out account, which exists already (a cold clone).
    Agent,
    /// Nobody yet: a warm-pool member, whose account is minted at hand-out, when the schema is
    /// handed over with it ([`provision_idle_clone`]).
    AtHandOut,
}

/// What making a clone needs of the backend that runs the instance: where sandboxd dials it as
/// its superuser, and its server's relation files extended. Every
/// [`Backend`](crate::Backend) is one, with the methods of the same names; the port keeps this
/// module below the trait, whose `reset` makes a clone again.
#[async_trait]
pub trait CloneHost: Send + Sync {
    /// `Backend::admin_address`.
    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError>;

    /// `Backend::extend_files`.
    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError>;
}

/// Makes the running Postgres `instance` a clone of `snapshot`, its schema owned by `owner`.
pub async fn apply<B: CloneHost + ?Sized>(
    backend: &B,
    instance: &Instance,
    snapshot: &Snapshot,
    fidelity: Fidelity,
    owner: SchemaOwner,
) -> Result<CloneReport, BackendError> {
    let started = Instant::now();
    let failed = |step: &'static str| {
        let name = instance.name.clone();
        move |detail: String| BackendError::Clone {
            name: name.clone(),
            step,
            detail,
        }
    };
    let (host, port) = backend.admin_address(instance).await?;
    let client = postgres::connect_admin(
        &instance.admin,
        Reach { host: &host, port },
        &instance.database,
    )
    .await
    .map_err(|e| failed("connecting as superuser")(e.0))?;
    let major = server_major(&client)
        .await
        .map_err(failed("asking the version"))?;
    if major != snapshot.major() {
        return Err(failed("checking the version")(format!(
            "the instance runs PostgreSQL {major}, the snapshot of {} is of {}: a clone needs \
             the same major version",
            snapshot.source,
            snapshot.major()
        )));
    }
    client
        .batch_execute(&schema_statements(&snapshot.schema_sql))
        .await
        .map_err(|e| failed("applying the schema")(postgres::refused(e).0))?;
    // The dump's `SET`s (an empty search_path among them) end with it.
    client
        .batch_execute("RESET ALL")
        .await
        .map_err(|e| failed("resetting the session")(postgres::refused(e).0))?;

    let (mut restored, mut refused) = (0, 0);
    let mut unparsed = Vec::new();
    if fidelity.statistics {
        unparsed = unparsed_columns(&client)
            .await
            .map_err(|e| failed("reading the column types")(e))?;
        let statements = restore_statements(snapshot, major, &unparsed);
        for chunk in statements.chunks(200) {
            let answers = client
                .simple_query(&chunk.join(";\n"))
                .await
                .map_err(|e| failed("restoring the statistics")(postgres::refused(e).0))?;
            for answer in answers {
                match answer {
                    SimpleQueryMessage::Row(row) => match row.get(0) {
                        Some("f") => refused += 1,
                        _ => restored += 1,
                    },
                    SimpleQueryMessage::CommandComplete(n) if major < 18 => {
                        if n == 1 {
                            restored += 1;
                        } else {
                            refused += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    let (extended_statistics_rebuilt, extended_notes) = if fidelity.statistics {
        super::extended::rebuild_extended(&client, snapshot, major).await
    } else {
        (0, Vec::new())
    };

    if owner == SchemaOwner::Agent {
        client
            .batch_execute(&hand_over(&instance.agent.user))
            .await
            .map_err(|e| {
                failed("handing the schema to the agent's account")(postgres::refused(e).0)
            })?;
    }
    let hypothetical_indexes = client
        .batch_execute(
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions \
             WHERE name OPERATOR(pg_catalog.=) 'hypopg') THEN \
             CREATE EXTENSION IF NOT EXISTS hypopg SCHEMA extensions; END IF; END $$",
        )
        .await
        .is_ok()
        && client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_extension \
                 WHERE extname OPERATOR(pg_catalog.=) 'hypopg'",
                &[],
            )
            .await
            .ok()
            .flatten()
            .is_some();

    let mut notes = clone_notes(snapshot, major);
    notes.extend(unparsed_note(&unparsed, &snapshot.columns));
    notes.extend(extended_notes);
    let mut settings_applied = 0;
    if fidelity.settings {
        for statement in setting_statements(snapshot, &instance.database) {
            match client.batch_execute(&statement).await {
                Ok(()) => settings_applied += 1,
                Err(e) => notes.push(format!(
                    "a planner setting was not applied: {}",
                    postgres::refused(e).0
                )),
            }
        }
    }
    // Autoanalyze would replace the source's statistics with the empty tables' own.
    client
        .batch_execute("ALTER SYSTEM SET autovacuum = off")
        .await
        .map_err(|e| failed("turning autovacuum off")(postgres::refused(e).0))?;
    client
        .batch_execute("SELECT pg_catalog.pg_reload_conf()")
        .await
        .map_err(|e| failed("reloading the configuration")(postgres::refused(e).0))?;

    let (mut padded_files, mut padded_bytes) = (0, 0);
    if fidelity.padding {
        let files = padding_plan(&client, snapshot)
            .await
            .map_err(failed("finding the relation files"))?;
        padded_files = files.len();
        padded_bytes = files.iter().map(|(_, grow, _)| grow).sum();
        let targets: Vec<(String, u64)> = files.into_iter().map(|(p, _, len)| (p, len)).collect();
        backend.extend_files(instance, &targets).await?;
    }
    Ok(CloneReport {
        source: snapshot.source.clone(),
        snapshot_taken_at_ms: snapshot.taken_at_ms,
        server_version: snapshot.server_version.clone(),
        privacy: snapshot.privacy.as_str(),
        statistics_restored: restored,
        statistics_refused: refused,
        extended_statistics_rebuilt,
        settings_applied,
        padded_files,
        padded_bytes,
        hypothetical_indexes,
        notes,
        took: started.elapsed(),
    })
}

async fn server_major(client: &Client) -> Result<u32, String> {
    let row = client
        .query_one(
            "SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4",
            &[],
        )
        .await
        .map_err(|e| postgres::refused(e).0)?;
    Ok(u32::try_from(row.get::<_, i32>(0)).unwrap_or(0) / 10_000)
}

/// Every file to extend, as (absolute path on the server, bytes added, length it must reach).
async fn padding_plan(
    client: &Client,
    snapshot: &Snapshot,
) -> Result<Vec<(String, u64, u64)>, String> {
    let (schemas, names): (Vec<&str>, Vec<&str>) = snapshot
        .relations
        .iter()
        .filter(|r| r.kind.has_storage() && r.relpages > 0)
        .map(|r| (r.schema.as_str(), r.name.as_str()))
        .unzip();
    let data_directory: String = client
        .query_one("SELECT pg_catalog.current_setting('data_directory')", &[])
        .await
        .map_err(|e| postgres::refused(e).0)?
        .get(0);
    let rows = client
        .query(
            "SELECT r.schema, r.name, pg_catalog.pg_relation_filepath(x.c), \
                    pg_catalog.pg_relation_size(x.c) \
             FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), \
                             pg_catalog.unnest($2::pg_catalog.text[])) AS r(schema, name) \
             CROSS JOIN LATERAL (SELECT pg_catalog.to_regclass( \
                 pg_catalog.quote_ident(r.schema) OPERATOR(pg_catalog.||) '.' \
                 OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.name)) AS c) x \
             WHERE x.c IS NOT NULL",
            &[&schemas, &names],
        )
        .await
        .map_err(|e| postgres::refused(e).0)?;
    let mut files = Vec::new();
    for row in rows {
        let (schema, name, path, size): (String, String, Option<String>, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let Some(path) = path else { continue };
        let Some(relation) = snapshot
            .relations
            .iter()
            .find(|r| r.schema == schema && r.name == name)
        else {
            continue;
        };
        let current = u64::try_from(size).unwrap_or(0);
        for segment in padding(current, relation.relpages) {
            let file = if segment.number == 0 {
                format!("{data_directory}/{path}")
            } else {
                format!("{data_directory}/{path}.{}", segment.number)
            };
            let grow = if segment.number == 0 {
                segment.bytes.saturating_sub(current)
            } else {
                segment.bytes
            };
            files.push((file, grow, segment.bytes));
        }
    }
    Ok(files)
}

/// Every object the schema made, handed to the agent's account: it owns its sandbox's schema as
/// it owns an ordinary sandbox's database (extension members and the superuser's `extensions`
/// schema excepted; sequences that belong to a column follow their table).
pub(super) fn hand_over(agent: &str) -> String {
    let agent = sql_literal(&pg_identifier(agent));
    format!(
        r#"DO $hand_over$
DECLARE
    r record;
    agent text := {agent};
BEGIN
    FOR r IN
        SELECT n.oid, n.nspname FROM pg_catalog.pg_namespace n
        WHERE n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', 'extensions']::pg_catalog.name[])
          AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_%'
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                            AND d.objid OPERATOR(pg_catalog.=) n.oid AND d.deptype OPERATOR(pg_catalog.=) 'e')
    LOOP
        EXECUTE pg_catalog.format('ALTER SCHEMA %I OWNER TO %s', r.nspname, agent);
    END LOOP;
    FOR r IN
        SELECT c.oid::pg_catalog.regclass AS rel, c.relkind FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        WHERE n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', 'extensions']::pg_catalog.name[])
          AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_%'
          AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm', 'S', 'f']::pg_catalog."char"[])
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                            AND d.objid OPERATOR(pg_catalog.=) c.oid
                            AND (d.deptype OPERATOR(pg_catalog.=) 'e'
                                 OR (c.relkind OPERATOR(pg_catalog.=) 'S'
                                     AND d.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'i']::pg_catalog."char"[])
                                     AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass)))
    LOOP
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %s',
            CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'v' THEN 'VIEW'
                 WHEN r.relkind OPERATOR(pg_catalog.=) 'm' THEN 'MATERIALIZED VIEW'
                 WHEN r.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE'
                 WHEN r.relkind OPERATOR(pg_catalog.=) 'f' THEN 'FOREIGN TABLE'
                 ELSE 'TABLE' END,
            r.rel, agent);
    END LOOP;
    FOR r IN
        SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
        WHERE n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', 'extensions']::pg_catalog.name[])
          AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_%'
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                            AND d.objid OPERATOR(pg_catalog.=) p.oid
                            AND d.deptype OPERATOR(pg_catalog.=) 'e')
    LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %s', r.fn, agent);
    END LOOP;
    FOR r IN
        SELECT t.oid::pg_catalog.regtype AS ty FROM pg_catalog.pg_type t
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
        WHERE n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', 'extensions']::pg_catalog.name[])
          AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_%'
          AND (t.typtype OPERATOR(pg_catalog.=) ANY (ARRAY['d', 'e', 'r']::pg_catalog."char"[])
               OR (t.typtype OPERATOR(pg_catalog.=) 'c'
                   AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                               WHERE c.oid OPERATOR(pg_catalog.=) t.typrelid
                                 AND c.relkind OPERATOR(pg_catalog.=) 'c')))
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                            AND d.objid OPERATOR(pg_catalog.=) t.oid
                            AND d.deptype OPERATOR(pg_catalog.=) 'e')
    LOOP
        EXECUTE pg_catalog.format('ALTER TYPE %s OWNER TO %s', r.ty, agent);
    END LOOP;
END
$hand_over$"#
    )
}

/// The clone's columns whose sample values its superuser must not parse
/// (`sandboxd_domain::clone::unparsed`): of a domain or composite type of the schema's, or an
/// array or range of one, however deep.
async fn unparsed_columns(client: &Client) -> Result<Vec<UnparsedColumn>, String> {
    let rows = client
        .query(UNPARSED_COLUMNS, &[])
        .await
        .map_err(|e| postgres::refused(e).0)?;
    Ok(rows
        .iter()
        .map(|row| UnparsedColumn {
            schema: row.get(0),
            relation: row.get(1),
            column: row.get(2),
            attnum: row.get(3),
        })
        .collect())
}

const UNPARSED_COLUMNS: &str = "WITH RECURSIVE reach(nspname, relname, attname, attnum, t) AS ( \
       SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, \
              a.attname::pg_catalog.text, a.attnum, a.atttypid \
       FROM pg_catalog.pg_attribute a \
       JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid \
       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
       WHERE a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
         AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m,i,I}'::pg_catalog.char[]) \
         AND n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[]) \
     UNION \
       SELECT r.nspname, r.relname, r.attname, r.attnum, x.t \
       FROM reach r JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) r.t \
       CROSS JOIN LATERAL (VALUES \
           (CASE WHEN ty.typcategory OPERATOR(pg_catalog.=) 'A' THEN ty.typelem END), \
           (CASE WHEN ty.typtype OPERATOR(pg_catalog.=) 'd' THEN ty.typbasetype END), \
           ((SELECT g.rngsubtype FROM pg_catalog.pg_range g \
             WHERE g.rngtypid OPERATOR(pg_catalog.=) ty.oid)), \
           ((SELECT g.rngtypid FROM pg_catalog.pg_range g \
             WHERE g.rngmultitypid OPERATOR(pg_catalog.=) ty.oid))) AS x(t) \
       WHERE x.t IS NOT NULL AND x.t OPERATOR(pg_catalog.<>) 0 \
     ) \
     SELECT DISTINCT r.nspname, r.relname, r.attname, r.attnum FROM reach r \
     JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) r.t \
     JOIN pg_catalog.pg_namespace tn ON tn.oid OPERATOR(pg_catalog.=) ty.typnamespace \
     WHERE ty.typtype OPERATOR(pg_catalog.=) ANY ('{d,c}'::pg_catalog.char[]) \
       AND tn.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[]) \
     ORDER BY 1, 2, 4";
