//! Extended statistics in a clone (issue 32, item 2): a PostgreSQL 18 "production" of its own
//! with correlated columns under `CREATE STATISTICS` (a zip determines its city, state and
//! country; a place's kind and tier go together, with a rare combination), whose estimates
//! rest on them. The clone must estimate as production does (within 2×, the same plans unless
//! cost alone tips a near-tie at the same estimate); a clone of the same snapshot without their
//! data (what clones had before) must not. Under `no-values` the most-common-values lists stay
//! behind and the rest is carried. The snapshot role sees the data only with the tables'
//! owner's privileges, and says so without them.

use sandboxd_backend::clone::{Fidelity, read_source};
use sandboxd_domain::clone::{Privacy, Snapshot, Summary};

use crate::clone::{Production, READER, agent, clone_of, estimates, one_value, remove, shapes};
use crate::docker::{Harness, POSTGRES18, harness_owner};
use crate::support::engine;

/// 100k places over 2,000 zips: a zip is in one city (1,000), a city in one state (200), a
/// state in one country (20): dependencies and n-distinct counts say so. Kind and tier go
/// together: 50 % retail tier 1, 25 % online tier 2, 10 % wholesale tier 3, 15 % kiosks, mostly
/// tier 4 and rarely (0.2 %) tier 1, which only the MCV list knows (independence says 7.5 %,
/// and the join below becomes a hash join). 300k orders, three per place. `legacy` is dropped,
/// so the clone's attribute numbers differ from the source's. A zip's hundreds (`zip / 100`, an
/// expression no index has) name its country: only the expression's own statistics know its
/// distribution, and a dependency on it. The tables belong to `app`, as production tables
/// belong to an application role. The `id` columns' targets make ANALYZE read every row, so
/// production's estimates, and which plans flip without the rebuild, are the same on every run.
const LOAD: &str = "CREATE ROLE app; \
     CREATE TABLE places (id int PRIMARY KEY, legacy int, country text NOT NULL, \
         state text NOT NULL, city text NOT NULL, zip int NOT NULL, kind text NOT NULL, \
         tier int NOT NULL); \
     ALTER TABLE places DROP COLUMN legacy; \
     INSERT INTO places SELECT g, 'K' || (z / 100), 'S' || (z / 100) || '-' || (z / 10 % 10), \
         'C' || (z / 2), 10000 + z, \
         CASE WHEN r < 500 THEN 'retail' WHEN r < 750 THEN 'online' \
              WHEN r < 850 THEN 'wholesale' ELSE 'kiosk' END, \
         CASE WHEN r < 500 THEN 1 WHEN r < 750 THEN 2 WHEN r < 850 THEN 3 \
              WHEN r < 990 THEN 4 WHEN r < 998 THEN 2 ELSE 1 END \
     FROM (SELECT g, (g::bigint * 7919) % 2000 AS z, (g::bigint * 104729) % 1000 AS r \
           FROM generate_series(1, 100000) g) s; \
     CREATE TABLE orders (id int PRIMARY KEY, place_id int NOT NULL, amount int NOT NULL); \
     INSERT INTO orders SELECT g, g % 100000 + 1, g % 97 FROM generate_series(1, 300000) g; \
     CREATE INDEX orders_place ON orders (place_id); \
     CREATE STATISTICS places_geo (ndistinct, dependencies) \
         ON country, state, city, zip FROM places; \
     CREATE STATISTICS places_kind (ndistinct, dependencies, mcv) ON kind, tier FROM places; \
     CREATE STATISTICS places_band (ndistinct, dependencies) ON (zip / 100), country FROM places; \
     ALTER TABLE places ALTER COLUMN id SET STATISTICS 400; \
     ALTER TABLE orders ALTER COLUMN id SET STATISTICS 1000; \
     ALTER TABLE places OWNER TO app; ALTER TABLE orders OWNER TO app; \
     ALTER STATISTICS places_geo OWNER TO app; ALTER STATISTICS places_kind OWNER TO app; \
     ALTER STATISTICS places_band OWNER TO app;";

/// Queries whose estimates hinge on the extended statistics: dependencies (a zip's city),
/// multi-column n-distinct (GROUP BY country, state), a rare combination in the MCV list, and
/// joins on top of them.
const QUERIES: &[&str] = &[
    "SELECT * FROM places WHERE city = 'C17' AND zip = 10034",
    "SELECT * FROM places WHERE country = 'K3' AND state = 'S3-4' AND city = 'C170'",
    "SELECT country, state, count(*) FROM places GROUP BY country, state",
    "SELECT country, state, city FROM places GROUP BY 1, 2, 3",
    "SELECT * FROM places WHERE kind = 'kiosk' AND tier = 1",
    "SELECT * FROM places p JOIN orders o ON o.place_id = p.id \
     WHERE p.kind = 'kiosk' AND p.tier = 1",
    "SELECT * FROM places p JOIN orders o ON o.place_id = p.id \
     WHERE p.country = 'K3' AND p.state = 'S3-4'",
    "SELECT p.city, count(*) FROM places p JOIN orders o ON o.place_id = p.id \
     WHERE p.country = 'K3' AND p.state = 'S3-4' GROUP BY 1",
    "SELECT o.amount, count(*) FROM places p JOIN orders o ON o.place_id = p.id \
     WHERE p.kind = 'kiosk' AND p.tier = 1 GROUP BY 1",
    "SELECT * FROM places WHERE zip / 100 = 103",
    "SELECT * FROM places WHERE zip / 100 = 103 AND country = 'K3'",
    "SELECT zip / 100, country, count(*) FROM places GROUP BY 1, 2",
];

/// How far apart two estimates are, as a factor ≥ 1.
fn factor(a: f64, b: f64) -> f64 {
    a.max(b) / a.min(b).max(1.0)
}

/// The values of a `pg_ndistinct`/`pg_dependencies` text, in order (the keys are attribute
/// numbers, which differ between source and clone).
fn values_of(text: &str) -> Vec<String> {
    text.split("\": ")
        .skip(1)
        .map(|v| v.split([',', '}']).next().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_rebuilds_extended_statistics_and_estimates_correlated_columns_like_production() {
    const TAG: &str = "clonext";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES18, &owner).await;
            production.load(LOAD, &["VACUUM ANALYZE"]).await;
            let dsn = production.reader_dsn();
            let source = production.superuser().await.expect("production");

            // A role that may read every table but is not the owner's sees no extended data,
            // and the summary says so.
            let unprivileged = read_source("places", &dsn, Privacy::KeepValues)
                .await
                .expect("a snapshot without the owner's privileges");
            let data = unprivileged
                .extended_statistics_data
                .as_ref()
                .expect("extended statistics are read");
            assert!(data.objects.is_empty(), "{data:?}");
            assert_eq!(
                data.unreadable,
                ["public.places_band", "public.places_geo", "public.places_kind"]
            );
            let summary = Summary::of(&unprivileged);
            let hidden = summary
                .left_out
                .iter()
                .find(|l| l.what == "extended statistics (3)")
                .unwrap_or_else(|| panic!("unreadable objects are left out: {summary:?}"));
            assert!(hidden.why.contains("owner"), "{}", hidden.why);

            source
                .batch_execute(&format!("GRANT app TO {READER}"))
                .await
                .expect("the snapshot role gets the owner's privileges");
            let snapshot = sandboxd_backend::clone::take_snapshot(
                &*backend,
                engine("postgres"),
                "places",
                &dsn,
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of production");
            let data = snapshot
                .extended_statistics_data
                .clone()
                .expect("extended statistics are read");
            assert!(data.unreadable.is_empty(), "{data:?}");
            let object = |name: &str| {
                data.objects
                    .iter()
                    .find(|o| o.name == name && !o.inherited)
                    .unwrap_or_else(|| panic!("{name} in the snapshot: {data:?}"))
                    .clone()
            };
            let geo = object("places_geo");
            let kind = object("places_kind");
            assert_eq!(
                geo.columns.iter().map(|c| c.attnum).collect::<Vec<_>>(),
                [3, 4, 5, 6],
                "the source's numbers, the dropped column counted"
            );
            assert!(geo.n_distinct.is_some() && geo.dependencies.is_some(), "{geo:?}");
            let band = object("places_band");
            assert_eq!(band.expressions, 1);
            assert!(
                band.expression_stats.len() == 1
                    && band.expression_stats[0].most_common_vals.is_some(),
                "{band:?}"
            );
            let items = kind.mcv.clone().expect("the kind's most-common values");
            assert!(
                items.iter().any(|i| i.values
                    == [Some("kiosk".to_owned()), Some("1".to_owned())]
                    && i.frequency < 0.01),
                "{items:?}"
            );
            let summary = Summary::of(&snapshot);
            assert!(
                !summary
                    .left_out
                    .iter()
                    .any(|l| l.what.contains("extended") || l.what.contains("expression")),
                "everything is carried: {summary:?}"
            );

            let on_production = (
                shapes(&source, QUERIES).await,
                estimates(&source, QUERIES).await,
            );
            let extended_text = "SELECT string_agg(statistics_name || ' | ' || \
                 coalesce(n_distinct::text, '-') || ' | ' || coalesce(dependencies::text, '-') \
                 || ' | ' || coalesce(most_common_freqs::text, '-') || ' | ' || \
                 coalesce(most_common_base_freqs::text, '-'), E'\\n' \
                 ORDER BY statistics_name) FROM pg_stats_ext";
            let production_extended = one_value(&source, extended_text).await;
            let expressions_text = "SELECT string_agg(statistics_name || ' | ' || expr || ' | ' \
                 || null_frac || ' | ' || n_distinct || ' | ' || correlation || ' | ' || \
                 coalesce(most_common_vals::text, '-') || ' | ' || \
                 coalesce(most_common_freqs::text, '-'), E'\\n' ORDER BY statistics_name) \
                 FROM pg_stats_ext_exprs";
            let production_expressions = one_value(&source, expressions_text).await;

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            assert_eq!(report.extended_statistics_rebuilt, 3, "{report:?}");
            assert!(
                !report
                    .notes
                    .iter()
                    .any(|n| n.contains("not rebuilt") || n.contains("as a sample gives")),
                "{:?}",
                report.notes
            );
            let without: Snapshot = {
                let mut without = snapshot.clone();
                without.extended_statistics_data = None;
                without
            };
            let (unrebuilt, _) = clone_of(&backend, TAG, &without, Fidelity::FULL).await;
            let private = {
                let mut private = read_source("places", &dsn, Privacy::NoValues)
                    .await
                    .expect("a no-values snapshot");
                private.schema_sql.clone_from(&snapshot.schema_sql);
                private
            };
            let private_data = private
                .extended_statistics_data
                .as_ref()
                .expect("extended statistics are read");
            assert!(
                private_data
                    .objects
                    .iter()
                    .all(|o| o.mcv.is_none() && o.n_distinct.is_some()),
                "{private_data:?}"
            );
            assert!(
                !serde_json::to_string(&private)
                    .expect("json")
                    .contains("kiosk"),
                "no value leaves the source under no-values"
            );
            let (private_clone, private_report) =
                clone_of(&backend, TAG, &private, Fidelity::FULL).await;
            assert_eq!(private_report.extended_statistics_rebuilt, 3);

            let clone_client = agent(&clone).await;
            let unrebuilt_client = agent(&unrebuilt).await;
            let private_client = agent(&private_clone).await;
            let on_clone = (
                shapes(&clone_client, QUERIES).await,
                estimates(&clone_client, QUERIES).await,
            );
            let on_unrebuilt = (
                shapes(&unrebuilt_client, QUERIES).await,
                estimates(&unrebuilt_client, QUERIES).await,
            );
            let on_private = (
                shapes(&private_client, QUERIES).await,
                estimates(&private_client, QUERIES).await,
            );
            eprintln!(
                "estimated rows: production / clone / clone without extended data / no-values"
            );
            for (i, query) in QUERIES.iter().enumerate() {
                let mark = |other: &[String]| {
                    if other[i] == on_production.0[i] {
                        "="
                    } else {
                        "x"
                    }
                };
                eprintln!(
                    "  {} / {} {} / {} {} / {} {}  {query}",
                    on_production.1[i],
                    on_clone.1[i],
                    mark(&on_clone.0),
                    on_unrebuilt.1[i],
                    mark(&on_unrebuilt.0),
                    on_private.1[i],
                    mark(&on_private.0),
                );
            }

            for (i, query) in QUERIES.iter().enumerate() {
                if on_production.0[i] != on_unrebuilt.0[i] {
                    eprintln!(
                        "{query}: production plans {}, the clone without extended data {}",
                        on_production.0[i], on_unrebuilt.0[i]
                    );
                }
            }
            // The clone's data is production's: n-distinct counts and dependencies exactly
            // (under the clone's attribute numbers), the MCV list's frequencies and base frequencies.
            let clone_extended = one_value(&clone_client, extended_text).await;
            eprintln!("production:\n{production_extended}\nclone:\n{clone_extended}");
            for (production_line, clone_line) in
                production_extended.lines().zip(clone_extended.lines())
            {
                let split = |line: &str| -> Vec<String> {
                    line.split(" | ").map(str::to_owned).collect()
                };
                let (p, c) = (split(production_line), split(clone_line));
                assert_eq!(p[0], c[0]);
                assert_eq!(values_of(&p[1]), values_of(&c[1]), "n-distinct of {}", p[0]);
                assert_eq!(values_of(&p[2]), values_of(&c[2]), "dependencies of {}", p[0]);
                assert_ne!(p[1], c[1], "the clone's attribute numbers are its own");
                assert_eq!(p[3..], c[3..], "MCV frequencies of {}, exactly", p[0]);
            }
            assert_eq!(clone_extended.lines().count(), 3, "{clone_extended}");
            // The expressions' own statistics are production's, value for value; under
            // no-values their counts are, and no value.
            assert_eq!(
                one_value(&clone_client, expressions_text).await,
                production_expressions
            );
            let private_expressions = one_value(&private_client, expressions_text).await;
            let counts = |text: &str| -> Vec<String> {
                text.split(" | ").take(5).map(str::to_owned).collect()
            };
            assert_eq!(counts(&private_expressions), counts(&production_expressions));
            assert!(
                private_expressions.ends_with("| - | -"),
                "no value under no-values: {private_expressions}"
            );

            for (i, query) in QUERIES.iter().enumerate() {
                // A plan may differ only where the clone estimates exactly production's rows:
                // then cost alone tips it (the clone's empty indexes have height 0, see
                // `clone_fixtures::wide::INDEX_HEIGHT_MISSES`), not the statistics.
                if on_clone.0[i] != on_production.0[i] {
                    assert_eq!(
                        on_clone.1[i], on_production.1[i],
                        "the clone plans {query} otherwise, and estimates other rows"
                    );
                    eprintln!("cost-only difference (same estimate): {query}");
                }
                assert!(
                    factor(on_production.1[i], on_clone.1[i]) <= 2.0,
                    "{query}: production estimates {} rows, the clone {}",
                    on_production.1[i],
                    on_clone.1[i]
                );
            }
            // Without the rebuild, the clone is far off on every correlated query, and plans
            // flip.
            let far: Vec<&str> = QUERIES
                .iter()
                .enumerate()
                .filter(|(i, _)| factor(on_production.1[*i], on_unrebuilt.1[*i]) > 5.0)
                .map(|(_, q)| *q)
                .collect();
            assert!(
                far.len() >= 7,
                "only {} queries are far off without extended statistics: {far:?}",
                far.len()
            );
            let flipped = on_production
                .0
                .iter()
                .zip(&on_unrebuilt.0)
                .filter(|(a, b)| a != b)
                .count();
            assert!(
                flipped >= 2,
                "only {flipped} plans flip without extended statistics"
            );

            // Under no-values: n-distinct counts and dependencies carried, no MCV list.
            let private_lists = one_value(
                &private_client,
                "SELECT count(*) FILTER (WHERE most_common_vals IS NOT NULL)::text || ' ' || \
                 count(*) FILTER (WHERE n_distinct IS NOT NULL AND dependencies IS NOT NULL) \
                 FROM pg_stats_ext",
            )
            .await;
            assert_eq!(private_lists, "0 3");
            // The group counts rest on n-distinct alone: as production's.
            for i in [2, 3] {
                assert!(
                    factor(on_production.1[i], on_private.1[i]) <= 2.0,
                    "no-values {}: production {} rows, the clone {}",
                    QUERIES[i],
                    on_production.1[i],
                    on_private.1[i]
                );
            }

            // Nothing of the rebuild is left: no scratch schema, no cast into those types.
            for client in [&clone_client, &private_client] {
                let leftovers = one_value(
                    client,
                    "SELECT (SELECT count(*) FROM pg_namespace \
                             WHERE nspname LIKE 'sandboxd\\_scratch\\_%') + \
                            (SELECT count(*) FROM pg_class c JOIN pg_namespace n \
                             ON n.oid = c.relnamespace WHERE n.nspname LIKE 'sandboxd\\_scratch%') + \
                            (SELECT count(*) FROM pg_cast WHERE castsource = 'bytea'::regtype \
                             AND casttarget IN ('pg_ndistinct'::regtype, \
                                                'pg_dependencies'::regtype, \
                                                'pg_mcv_list'::regtype))",
                )
                .await;
                assert_eq!(leftovers, "0");
            }

            for instance in [&clone, &unrebuilt, &private_clone] {
                remove(&backend, instance).await;
            }
            production.remove(&docker).await;
        })
        .await;
}
