//! A clone's extended statistics rebuilt as its superuser (the statements come from
//! `sandboxd_domain::clone::extended`): each object's clone found by name, then its n-distinct
//! counts and dependencies, then its most-common-values list, each in a transaction of its own
//! that commits only if the server reads back what was meant.

use rand::Rng;
use sandboxd_domain::clone::extended::{
    CloneColumn, CloneObject, EXPRESSION_STATS_MAJOR, Frequencies, Rebuild, SCRATCH_PREFIX,
    exact_rebuild, expression_rebuild, mcv_obstacle, mcv_rebuild,
};
use sandboxd_domain::clone::{ExtendedStatistics, Snapshot};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::wire::postgres;

/// Rebuilds the data of the snapshot's extended statistics objects in the clone (see
/// `sandboxd_domain::clone::extended`): how many objects got data, and a note for each part
/// that failed (what cannot be rebuilt at all is in the clone's notes already).
pub(super) async fn rebuild_extended(
    client: &Client,
    snapshot: &Snapshot,
    major: u32,
) -> (usize, Vec<String>) {
    let Some(data) = &snapshot.extended_statistics_data else {
        return (0, Vec::new());
    };
    // Every rebuild runs DDL as the superuser; before 17 an event trigger the schema brought
    // cannot be turned off for it, and would run as the superuser.
    if major < 17 && event_triggers_enabled(client).await {
        return (
            0,
            vec![
                "extended statistics were not rebuilt: the schema has event triggers, which \
                 PostgreSQL before 17 cannot turn off for the rebuild's DDL"
                    .to_owned(),
            ],
        );
    }
    let mut rebuilt = std::collections::BTreeSet::new();
    let mut notes = Vec::new();
    for object in &data.objects {
        let label = format!("{}.{}", object.schema, object.name);
        let target = match clone_object(client, object).await {
            Ok(Some(target)) => target,
            Ok(None) => {
                notes.push(format!(
                    "extended statistics {label} are not in the clone's schema: not rebuilt"
                ));
                continue;
            }
            Err(e) => {
                notes.push(format!("extended statistics {label} were not rebuilt: {e}"));
                continue;
            }
        };
        match exact_rebuild(object, &target) {
            Ok(None) => {}
            Ok(Some(rebuild)) => match run_rebuild(client, &rebuild, major).await {
                Ok(()) => {
                    rebuilt.insert(label.clone());
                }
                Err(e) => notes.push(format!(
                    "the n-distinct counts and dependencies of {label} were not rebuilt: {e}"
                )),
            },
            Err(e) => notes.push(format!(
                "the n-distinct counts and dependencies of {label} were not rebuilt: {e}"
            )),
        }
        let outcome = match mcv_list(client, object, &target, snapshot, major).await {
            Ok(Some(None)) => Ok(true),
            Ok(Some(Some(why))) => {
                notes.push(format!(
                    "the most-common-values list of {label} has frequencies as a sample gives \
                     them, not the source's exact ones: {why}"
                ));
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(true) => {
                rebuilt.insert(label.clone());
            }
            Ok(false) => {}
            // A list no sample can reproduce is in the clone's notes already
            // (`extended::left_out`).
            Err(_) if mcv_obstacle(object).is_some() => {}
            Err(e) => notes.push(format!(
                "the most-common-values list of {label} was not rebuilt: {e}"
            )),
        }
        // Before 18 no column statistics are imported at all, and the clone's notes say so.
        if major >= EXPRESSION_STATS_MAJOR {
            let version = snapshot.server_version_num;
            let outcome = match expression_rebuild(object, &target, &scratch(), version) {
                Ok(Some(rebuild)) => run_rebuild(client, &rebuild, major).await.map(|()| true),
                Ok(None) => Ok(false),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(true) => {
                    rebuilt.insert(label);
                }
                Ok(false) => {}
                Err(e) => notes.push(format!(
                    "the statistics of the expressions of {label} were not rebuilt: {e}"
                )),
            }
        }
    }
    (rebuilt.len(), notes)
}

/// Rebuilds `object`'s MCV list with the source's exact frequencies or, where that cannot be
/// proven, as the sample gives them: `None` when it has no list, `Some(None)` when exact,
/// `Some(Some(why))` when sampled.
async fn mcv_list(
    client: &Client,
    object: &ExtendedStatistics,
    target: &CloneObject,
    snapshot: &Snapshot,
    major: u32,
) -> Result<Option<Option<String>>, String> {
    let rebuild =
        |frequencies| mcv_rebuild(object, target, &scratch(), &snapshot.columns, frequencies);
    let Some(exact) = rebuild(Frequencies::Exact)? else {
        return Ok(None);
    };
    let Err(why) = run_rebuild(client, &exact, major).await else {
        return Ok(Some(None));
    };
    match rebuild(Frequencies::Sampled)? {
        Some(sampled) => run_rebuild(client, &sampled, major)
            .await
            .map(|()| Some(Some(why))),
        None => Ok(None),
    }
}

/// Whether the clone has an enabled event trigger (or cannot tell: then it is taken to have
/// one).
async fn event_triggers_enabled(client: &Client) -> bool {
    client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_event_trigger \
                            WHERE evtenabled OPERATOR(pg_catalog.<>) 'D')",
            &[],
        )
        .await
        .map_or(true, |row| row.get(0))
}

/// A scratch schema's name no object of the clone has.
fn scratch() -> String {
    format!("{SCRATCH_PREFIX}{:016x}", rand::rng().random::<u64>())
}

/// The clone's statistics object of the same name as `object`, with the columns it covers.
async fn clone_object(
    client: &Client,
    object: &ExtendedStatistics,
) -> Result<Option<CloneObject>, String> {
    let rows = client
        .query(
            "SELECT s.oid, a.attname::pg_catalog.text, a.attnum, \
                    pg_catalog.quote_ident(tn.nspname) OPERATOR(pg_catalog.||) '.' \
                        OPERATOR(pg_catalog.||) pg_catalog.quote_ident(bt.typname), \
                    CASE WHEN co.oid IS NOT NULL THEN \
                        pg_catalog.quote_ident(cn.nspname) OPERATOR(pg_catalog.||) '.' \
                        OPERATOR(pg_catalog.||) pg_catalog.quote_ident(co.collname) END \
             FROM pg_catalog.pg_statistic_ext s \
             JOIN pg_catalog.pg_namespace sn ON sn.oid OPERATOR(pg_catalog.=) s.stxnamespace \
             JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) s.stxrelid \
                  AND a.attnum OPERATOR(pg_catalog.=) ANY (s.stxkeys) \
             JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid \
             JOIN pg_catalog.pg_type bt ON bt.oid OPERATOR(pg_catalog.=) \
                  CASE WHEN t.typtype OPERATOR(pg_catalog.=) 'd' THEN t.typbasetype ELSE t.oid END \
             JOIN pg_catalog.pg_namespace tn ON tn.oid OPERATOR(pg_catalog.=) bt.typnamespace \
             LEFT JOIN pg_catalog.pg_collation co ON co.oid OPERATOR(pg_catalog.=) a.attcollation \
             LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid OPERATOR(pg_catalog.=) co.collnamespace \
             WHERE sn.nspname OPERATOR(pg_catalog.=) $1 AND s.stxname OPERATOR(pg_catalog.=) $2 \
             ORDER BY a.attnum",
            &[&object.schema, &object.name],
        )
        .await
        .map_err(|e| postgres::refused(e).0)?;
    if rows.is_empty() {
        // An object of expressions only has no columns: found by name alone.
        let oid = client
            .query_opt(
                "SELECT s.oid FROM pg_catalog.pg_statistic_ext s \
                 JOIN pg_catalog.pg_namespace sn ON sn.oid OPERATOR(pg_catalog.=) s.stxnamespace \
                 WHERE sn.nspname OPERATOR(pg_catalog.=) $1 \
                   AND s.stxname OPERATOR(pg_catalog.=) $2",
                &[&object.schema, &object.name],
            )
            .await
            .map_err(|e| postgres::refused(e).0)?;
        return Ok(oid.map(|row| CloneObject {
            oid: row.get(0),
            columns: Vec::new(),
        }));
    }
    Ok(Some(CloneObject {
        oid: rows[0].get(0),
        columns: rows
            .iter()
            .map(|row| CloneColumn {
                name: row.get(1),
                attnum: row.get(2),
                type_sql: row.get(3),
                collation_sql: row.get(4),
            })
            .collect(),
    }))
}

/// Runs one rebuild in a transaction that commits only if the server reads back what was
/// meant; on any failure it rolls back, and with it the scratch schema and casts. Event
/// triggers the schema brought (from 17 on, where they can be turned off) do not fire on the
/// scratch objects.
async fn run_rebuild(client: &Client, rebuild: &Rebuild, major: u32) -> Result<(), String> {
    let quiet = if major >= 17 {
        "SET LOCAL event_triggers = off;\n"
    } else {
        ""
    };
    let outcome = async {
        client
            .batch_execute(&format!(
                "BEGIN;\n{quiet}{}",
                rebuild.statements.join(";\n")
            ))
            .await
            .map_err(|e| postgres::refused(e).0)?;
        let answers = client
            .simple_query(&rebuild.check)
            .await
            .map_err(|e| postgres::refused(e).0)?;
        let got: Vec<Option<String>> = answers
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        if got != rebuild.expected {
            return Err(format!(
                "the server reads back {got:?}, not {:?}",
                rebuild.expected
            ));
        }
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| postgres::refused(e).0)
    }
    .await;
    if outcome.is_err() {
        // A broken session rolls back by itself.
        let _ = client.batch_execute("ROLLBACK").await;
    }
    outcome
}
