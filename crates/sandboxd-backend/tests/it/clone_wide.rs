//! Clones of a production written to break them (issue 32): the testkit's wide data set
//! (`clone_fixtures::wide`: expression, partial, multi-column, GIN, GiST and BRIN indexes, a
//! range-partitioned table with a default partition and a list-partitioned one without,
//! inheritance, a materialized view, skew and correlation, `CREATE STATISTICS` objects,
//! non-default statistics targets, `point` and `xml` columns, the database's own planner
//! settings) on a real PostgreSQL 18, snapshotted, cloned with and without sample values, and
//! each of its queries' plan shapes compared with production's.
//!
//! Every query a keep-values clone plans otherwise must be on a named list of known misses, and
//! every query on one must miss, each for the reason its list gives, checked rather than taken on
//! trust: `wide::EXTENDED_STATS_MISSES` (where the rebuilt extended statistics fall short, or
//! cannot be rebuilt (expression statistics): production planning without its statistics
//! objects picks the clone's plan for each) and `wide::INDEX_HEIGHT_MISSES` (the clone's
//! indexes are empty, so their height is 0: the clone estimates the same rows as production and
//! differs by cost alone), and `wide::REBUILT_STATISTICS_MISSES` (decided on production by
//! extended statistics the clone rebuilt, not faithfully enough). A miss that goes fails this
//! test until it leaves its list.

use std::time::Instant;

use sandboxd_backend::clone::{Fidelity, read_source, take_snapshot};
use sandboxd_domain::clone::{Privacy, RelationKind, Snapshot};
use sandboxd_testkit::clone_fixtures::wide::{
    DECIDED_BY_EXTENDED_STATISTICS, EXTENDED_STATS_MISSES, FINISH, INDEX_HEIGHT_MISSES,
    KNOWN_MISSES, LOAD, QUERIES, REBUILT_STATISTICS_MISSES, STATISTICS_OBJECTS,
};
use sandboxd_testkit::clone_fixtures::{Agreement, KnownMiss};
use tokio_postgres::Client;

use crate::clone::{Production, agent, clone_of, estimated_rows, remove, shapes};
use crate::docker::{Harness, POSTGRES18, harness_owner};
use crate::support::engine;

/// The least share of plans a `no-values` clone must agree on. Without most-common values and
/// histograms every skewed predicate falls back to n-distinct and defaults, so skew-driven plans
/// flip by design: measured 18/39 (46.2 %) on 2026-12-07, the same run after run (every table
/// is analyzed whole). The floor is one query below, 17/39, so a change that costs the private
/// clone more plans fails here.
const NO_VALUES_FLOOR: f64 = 17.0 / 39.0;

/// The share a keep-values clone must agree on, the named misses (planner inputs a clone does not
/// carry) aside.
const KEEP_VALUES_TARGET: f64 = 0.95;

/// Each query's plan shape on production planning without its extended statistics: the objects
/// dropped in a transaction that is rolled back.
async fn shapes_without_extended_statistics(client: &Client) -> Vec<String> {
    client
        .batch_execute(&format!(
            "BEGIN; DROP STATISTICS {}",
            STATISTICS_OBJECTS.join(", ")
        ))
        .await
        .expect("drop the statistics objects in a transaction");
    let out = shapes(client, QUERIES).await;
    client.batch_execute("ROLLBACK").await.expect("rollback");
    out
}

/// What the snapshot must hold of each kind the data set has.
fn assert_snapshot_covers_the_data_set(snapshot: &Snapshot) {
    let relation = |name: &str| {
        snapshot
            .relations
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the snapshot"))
    };
    for (name, kind) in [
        ("trips", RelationKind::PartitionedTable),
        ("payments", RelationKind::PartitionedTable),
        ("trips_other", RelationKind::Table),
        ("maintenance_2025", RelationKind::Table),
        ("station_daily", RelationKind::MaterializedView),
        ("trips_started_brin", RelationKind::PartitionedIndex),
    ] {
        assert_eq!(relation(name).kind, kind, "{name}");
    }
    // The sizes of every index kind: GIN, GiST on a point and on a range, a partition's BRIN.
    for index in [
        "customers_tags_gin",
        "customers_home_gist",
        "reservations_during",
        "trips_2025_02_started_at_idx",
        "station_daily_trips",
    ] {
        let size = relation(index);
        assert_eq!(size.kind, RelationKind::Index, "{index}");
        assert!(size.relpages > 0, "{size:?}");
    }
    let row = |table: &str, column: &str, inherited: bool| {
        snapshot
            .columns
            .iter()
            .find(|c| c.table == table && c.column == column && c.inherited == inherited)
            .unwrap_or_else(|| {
                panic!("no statistics of {table}.{column} (inherited {inherited}) in the snapshot")
            })
    };
    // Inheritance: the parent's own rows and its rows over the children.
    row("maintenance", "vehicle_id", false);
    row("maintenance", "vehicle_id", true);
    // A partitioned table has only `inherited` rows; its partitions their own.
    row("trips", "customer_id", true);
    row("trips_other", "started_at", false);
    row("station_daily", "trips", false);
    let expression = row("customers_lower_email", "lower", false);
    assert_eq!(expression.attnum, Some(1), "{expression:?}");
    // A target of 1000 keeps up to 1000 most common values; the default keeps 100.
    let cities = row("customers", "city", false)
        .most_common_vals
        .as_deref()
        .expect("the cities' most common values");
    assert!(cities.contains("Town-"), "{cities}");
    let setting = |name: &str| {
        snapshot
            .settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.as_str())
    };
    assert_eq!(
        setting("random_page_cost"),
        Some("1.5"),
        "the database's own"
    );
    assert_eq!(setting("effective_cache_size"), Some("1GB"));
    assert_eq!(setting("enable_partitionwise_aggregate"), Some("on"));
    assert_eq!(setting("enable_partitionwise_join"), Some("on"));
    assert_eq!(snapshot.extended_statistics, STATISTICS_OBJECTS);
}

/// Each miss of `agreement`, with its reason (`unnamed` for one no known miss names).
fn print_misses(what: &str, agreement: &Agreement, unnamed: &str) {
    eprintln!("{what}: {}", agreement.summary());
    for miss in &agreement.misses {
        eprintln!(
            "  x {:>2} {}\n       reason:     {}\n       production: {}\n       {what}: {}",
            miss.number,
            miss.query,
            miss.reason.unwrap_or(unnamed),
            miss.production,
            miss.copy
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_of_the_wide_data_set_plans_like_production_but_where_extended_statistics_decide() {
    const TAG: &str = "clonewide";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES18, &owner).await;
            production.load(LOAD, FINISH).await;
            production.make_reader_the_tables_owner().await;
            let dsn = production.reader_dsn();

            let started = Instant::now();
            let snapshot = take_snapshot(
                &*backend,
                engine("postgres"),
                "fleet",
                &dsn,
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of production");
            eprintln!("snapshot taken in {} ms", started.elapsed().as_millis());
            assert_snapshot_covers_the_data_set(&snapshot);
            let private = {
                let mut private = read_source("fleet", &dsn, Privacy::NoValues)
                    .await
                    .expect("a no-values snapshot");
                private.schema_sql = snapshot.schema_sql.clone();
                private
            };

            let source = production.superuser().await.expect("production");
            let on_production = shapes(&source, QUERIES).await;
            let without_extended = shapes_without_extended_statistics(&source).await;

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            assert_eq!(report.statistics_refused, 0, "{report:?}");
            let (private_clone, _) = clone_of(&backend, TAG, &private, Fidelity::FULL).await;
            let (empty, _) = clone_of(&backend, TAG, &snapshot, Fidelity::SCHEMA_ONLY).await;
            let on_clone = shapes(&agent(&clone).await, QUERIES).await;
            let on_private = shapes(&agent(&private_clone).await, QUERIES).await;
            let on_empty = shapes(&agent(&empty).await, QUERIES).await;

            let kept = Agreement::compare(QUERIES, &on_production, &on_clone, KNOWN_MISSES);
            let stripped = Agreement::compare(QUERIES, &on_production, &on_private, &[]);
            let schema_only = Agreement::compare(QUERIES, &on_production, &on_empty, &[]);
            eprintln!(
                "plan shapes, production against each copy ({} queries):",
                QUERIES.len()
            );
            for (i, query) in QUERIES.iter().enumerate() {
                let [clone, private, empty] = [&kept, &stripped, &schema_only].map(|copy| {
                    if copy.misses.iter().any(|m| m.number == i + 1) {
                        "x"
                    } else {
                        "="
                    }
                });
                eprintln!(
                    "  {:>2} clone {clone} no-values {private} empty {empty}  {query}",
                    i + 1
                );
            }
            print_misses("clone", &kept, "NONE NAMED");
            print_misses(
                "no-values clone",
                &stripped,
                "no-values: most common values and histograms stripped",
            );
            eprintln!("schema-only copy: {}", schema_only.summary());

            // Every miss is named, and every named miss happens.
            let unexplained: Vec<&str> = kept.unexplained().iter().map(|m| m.query).collect();
            assert!(
                unexplained.is_empty(),
                "the clone plans these otherwise, and no known miss says why: {unexplained:#?}"
            );
            let stale: Vec<&KnownMiss> = kept.stale(KNOWN_MISSES);
            assert!(
                stale.is_empty(),
                "the clone now plans these as production does: take them off their list of \
                 known misses: {stale:#?}"
            );
            // Each reason is checked. Extended statistics: production without its statistics
            // objects plans each of those queries as the clone does, and the objects decide no
            // other query. Index height: the clone estimates the same rows as production.
            let clone_client = agent(&clone).await;
            for miss in &kept.misses {
                if EXTENDED_STATS_MISSES.iter().any(|k| k.query == miss.query) {
                    assert_eq!(
                        miss.copy,
                        without_extended[miss.number - 1],
                        "{} misses for another reason than extended statistics",
                        miss.query
                    );
                } else if REBUILT_STATISTICS_MISSES
                    .iter()
                    .any(|k| k.query == miss.query)
                {
                    assert!(
                        DECIDED_BY_EXTENDED_STATISTICS.contains(&miss.query),
                        "{} is not decided by extended statistics on production",
                        miss.query
                    );
                } else {
                    assert!(INDEX_HEIGHT_MISSES.iter().any(|k| k.query == miss.query));
                    assert_eq!(
                        estimated_rows(&clone_client, miss.query).await,
                        estimated_rows(&source, miss.query).await,
                        "{} is estimated otherwise: not the index height alone",
                        miss.query
                    );
                }
            }
            let decided_by_extended: Vec<&str> = QUERIES
                .iter()
                .zip(on_production.iter().zip(&without_extended))
                .filter(|(_, (with, without))| with != without)
                .map(|(query, _)| *query)
                .collect();
            assert_eq!(
                decided_by_extended, DECIDED_BY_EXTENDED_STATISTICS,
                "the queries extended statistics decide on production"
            );
            let others = QUERIES.len() - KNOWN_MISSES.len();
            let others_agreed = kept.agreed() as f64 / others as f64;
            eprintln!(
                "clone: {} overall, {:.1} % of the {others} queries no known miss names",
                kept.summary(),
                others_agreed * 100.0
            );
            assert!(
                others_agreed >= KEEP_VALUES_TARGET,
                "the clone agrees on {:.1} % of the plans no known miss names",
                others_agreed * 100.0
            );
            assert!(
                stripped.rate() >= NO_VALUES_FLOOR,
                "the no-values clone agrees on {}, below the floor of {:.0} %",
                stripped.summary(),
                NO_VALUES_FLOOR * 100.0
            );
            assert!(
                schema_only.rate() <= kept.rate() - 0.3,
                "the schema-only copy agrees on {}: the data set does not make statistics matter",
                schema_only.summary()
            );

            for instance in [&clone, &private_clone, &empty] {
                remove(&backend, instance).await;
            }
            production.remove(&docker).await;
        })
        .await;
}
