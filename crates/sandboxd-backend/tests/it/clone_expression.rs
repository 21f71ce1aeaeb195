//! Statistics of expression indexes in a clone (issue 32, item 1): a PostgreSQL 18 "production"
//! of its own (not the shop of `clone_fixtures`) whose predicates on `lower(email)` and
//! `date_part('year', created_at)` are estimated only from the indexes' statistics. The clone
//! must estimate them as production does; a clone made from the same snapshot without the
//! index rows (what snapshots carried before) estimates the 0.5 % default and plans otherwise.

use std::time::Instant;

use sandboxd_backend::clone::{Fidelity, read_source};
use sandboxd_domain::clone::{Privacy, Snapshot};

use crate::clone::{Production, agent, clone_of, estimates, one_value, remove, shapes};
use crate::docker::{Harness, POSTGRES18, harness_owner};
use crate::support::engine;

/// 200k people: `lower(email)` is unique but for one address a tenth of them share (in
/// different cases, so only the expression's statistics know it); four in five were created in
/// 2019, the rest spread over 2010–2023. One in fifty is active, and a partial index covers
/// them.
const LOAD: &str = "CREATE TABLE people (id int PRIMARY KEY, email text NOT NULL, \
         created_at timestamp NOT NULL, active boolean NOT NULL); \
     INSERT INTO people SELECT g, \
         CASE WHEN g % 10 = 0 THEN (ARRAY['Shared@Example.com', 'SHARED@example.com', \
                                           'shared@EXAMPLE.com'])[g % 3 + 1] \
              ELSE 'User' || g || '@Example.com' END, \
         CASE WHEN g % 100 < 80 THEN timestamp '2019-06-01' + (g % 1000) * interval '1 minute' \
              ELSE timestamp '2010-01-01' + (g % 5000) * interval '1 day' END, \
         g % 50 = 0 \
     FROM generate_series(1, 200000) g; \
     CREATE INDEX people_lower_email ON people (lower(email)); \
     CREATE INDEX people_year ON people (date_part('year', created_at)); \
     CREATE INDEX people_active_lower ON people (lower(email)) WHERE active;";

/// Each expression index's statistics row, by index name.
const INDEXES: [&str; 3] = ["people_lower_email", "people_year", "people_active_lower"];

const QUERIES: &[&str] = &[
    "SELECT * FROM people WHERE lower(email) = 'user5@example.com'",
    "SELECT * FROM people WHERE lower(email) = 'shared@example.com'",
    "SELECT * FROM people WHERE date_part('year', created_at) = 2019",
    "SELECT * FROM people WHERE date_part('year', created_at) = 2012",
    "SELECT * FROM people WHERE date_part('year', created_at) BETWEEN 2010 AND 2011",
    "SELECT * FROM people WHERE lower(email) = 'user50@example.com' AND active",
    "SELECT date_part('year', created_at), count(*) FROM people GROUP BY 1",
];

/// Within 3 % (or one row) of production's estimate.
fn close(production: f64, other: f64) -> bool {
    (production - other).abs() <= (production * 0.03).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_carries_the_statistics_of_expression_indexes() {
    const TAG: &str = "clonexp";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES18, &owner).await;
            production.load(LOAD, &["VACUUM ANALYZE"]).await;
            let dsn = production.reader_dsn();

            let snapshot = sandboxd_backend::clone::take_snapshot(
                &*backend,
                engine("postgres"),
                "people",
                &dsn,
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of production");
            // What was missing before: the expression indexes' rows, keyed by attribute number.
            for index in INDEXES {
                let row = snapshot
                    .columns
                    .iter()
                    .find(|c| c.table == index)
                    .unwrap_or_else(|| panic!("no statistics of {index} in the snapshot"));
                assert_eq!(row.attnum, Some(1), "{row:?}");
                assert!(row.n_distinct.is_some(), "{row:?}");
            }
            assert!(
                snapshot
                    .columns
                    .iter()
                    .find(|c| c.table == "people_year")
                    .and_then(|c| c.most_common_vals.as_deref())
                    .is_some_and(|v| v.contains("2019")),
                "the year index's most common values"
            );
            assert!(
                snapshot
                    .columns
                    .iter()
                    .filter(|c| c.table == "people")
                    .all(|c| c.attnum.is_none()),
                "a table's rows are restored by name"
            );
            let private = read_source("people", &dsn, Privacy::NoValues)
                .await
                .expect("a no-values snapshot");
            let private_index = private
                .columns
                .iter()
                .find(|c| c.table == "people_lower_email")
                .expect("the index's row under no-values");
            assert_eq!(private_index.attnum, Some(1));
            assert!(private_index.n_distinct.is_some());
            assert!(
                private_index.most_common_vals.is_none()
                    && private_index.histogram_bounds.is_none(),
                "privacy strips the index's sample values: {private_index:?}"
            );

            let source = production.superuser().await.expect("production");
            let on_production = (
                shapes(&source, QUERIES).await,
                estimates(&source, QUERIES).await,
            );

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            assert_eq!(report.statistics_refused, 0, "{report:?}");
            let before: Snapshot = {
                let mut before = snapshot.clone();
                before.columns.retain(|c| c.attnum.is_none());
                before
            };
            let (unfixed, _) = clone_of(&backend, TAG, &before, Fidelity::FULL).await;

            let clone_client = agent(&clone).await;
            let unfixed_client = agent(&unfixed).await;
            let on_clone = (
                shapes(&clone_client, QUERIES).await,
                estimates(&clone_client, QUERIES).await,
            );
            let on_unfixed = (
                shapes(&unfixed_client, QUERIES).await,
                estimates(&unfixed_client, QUERIES).await,
            );
            let indexed = format!(
                "SELECT count(*) FROM pg_stats WHERE schemaname = 'public' \
                 AND tablename IN ('{}')",
                INDEXES.join("', '")
            );
            assert_eq!(one_value(&clone_client, &indexed).await, "3");
            assert_eq!(one_value(&unfixed_client, &indexed).await, "0");

            eprintln!("estimated rows: production / clone / clone without index statistics");
            for (i, query) in QUERIES.iter().enumerate() {
                let mark = |other: &[String]| {
                    if other[i] == on_production.0[i] {
                        "="
                    } else {
                        "x"
                    }
                };
                eprintln!(
                    "  {} / {} {} / {} {}  {query}",
                    on_production.1[i],
                    on_clone.1[i],
                    mark(&on_clone.0),
                    on_unfixed.1[i],
                    mark(&on_unfixed.0)
                );
            }
            for (i, query) in QUERIES.iter().enumerate() {
                assert_eq!(
                    on_clone.0[i], on_production.0[i],
                    "the clone plans {query} otherwise"
                );
                assert!(
                    close(on_production.1[i], on_clone.1[i]),
                    "{query}: production estimates {} rows, the clone {}",
                    on_production.1[i],
                    on_clone.1[i]
                );
            }
            // Without the index rows the rare address is estimated at the 0.5 % default, and
            // plans flip.
            assert!(
                on_unfixed.1[0] >= 100.0 * on_production.1[0],
                "without index statistics: {} against production's {}",
                on_unfixed.1[0],
                on_production.1[0]
            );
            let flipped = on_production
                .0
                .iter()
                .zip(&on_unfixed.0)
                .filter(|(a, b)| a != b)
                .count();
            assert!(
                flipped >= 3,
                "only {flipped} plans flip: the data set does not make expression statistics \
                 matter"
            );

            let started = Instant::now();
            for instance in [&clone, &unfixed] {
                remove(&backend, instance).await;
            }
            production.remove(&docker).await;
            eprintln!("removed in {} ms", started.elapsed().as_millis());
        })
        .await;
}
