//! What a source's schema can plant for the clone's superuser while extended statistics are
//! rebuilt (issue 32, and the rule of "No agent reaches the daemon's privileges"): the rebuild
//! runs as the clone's superuser on objects the source's owners wrote. A function of theirs in
//! a statistics expression, a domain whose CHECK calls one, and an enum of their own are each
//! armed to raise `trap fired` once the clone exists; restoring the statistics and rebuilding
//! the extended ones must carry what they can without running any of them (restoring the
//! domain column's most-common values once parsed them through the domain's CHECK, as the
//! superuser), refuse the rest by name, and the traps must be live in the clone (the agent
//! sets them off), so a rebuild that ran one would have been seen. An operator `||` on `name`
//! in `public`, which beats the built-in one in the snapshot's own catalog queries unless its
//! search path leaves `public` out, traps the snapshot itself.

use sandboxd_backend::clone::{Fidelity, take_snapshot};
use sandboxd_domain::clone::Privacy;

use crate::clone::{Production, agent, clone_of, one_value, remove};
use crate::docker::{Harness, POSTGRES18, harness_owner};
use crate::support::engine;

/// Traps that stay quiet on production (its ANALYZE runs them) until `armed` exists, which it
/// does in every clone of the schema. 20k rows: `a` has 40 values, `b` (the domain) and `c`
/// (the enum) go with it.
const LOAD: &str = "CREATE FUNCTION public.trap() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$ \
       BEGIN \
         IF pg_catalog.to_regclass('public.armed') IS NOT NULL THEN \
           RAISE EXCEPTION 'trap fired as %', current_user; \
         END IF; \
         RETURN true; \
       END $$; \
     CREATE FUNCTION public.trap_text(v text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$ \
       BEGIN PERFORM public.trap(); RETURN pg_catalog.lower(v); END $$; \
     CREATE DOMAIN public.trapped AS text CHECK (public.trap()); \
     CREATE FUNCTION public.cat(name, text) RETURNS text LANGUAGE plpgsql AS $$ \
       BEGIN \
         IF current_setting('application_name') = 'sandboxd-snapshot' THEN \
           RAISE EXCEPTION 'trap fired in the snapshot as %', current_user; \
         END IF; \
         RETURN $1::text || $2; \
       END $$; \
     CREATE OPERATOR public.|| (LEFTARG = name, RIGHTARG = text, FUNCTION = public.cat); \
     CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy'); \
     CREATE TABLE things (id int PRIMARY KEY, a text NOT NULL, b public.trapped NOT NULL, \
         c public.mood NOT NULL, n int NOT NULL); \
     INSERT INTO things SELECT g, 'A' || (g % 40), 'B' || (g % 40), \
         (ARRAY['sad', 'ok', 'happy']::public.mood[])[g % 3 + 1], g % 40 \
     FROM generate_series(1, 20000) g; \
     CREATE STATISTICS things_fn ON (public.trap_text(a)) FROM things; \
     CREATE STATISTICS things_domain ON ((a)::public.trapped), n FROM things; \
     CREATE STATISTICS things_mcv (mcv) ON b, n FROM things; \
     CREATE STATISTICS things_enum (mcv) ON c, n FROM things;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_runs_nothing_the_sources_schema_planted() {
    const TAG: &str = "clonetrap";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES18, &owner).await;
            production
                .load(LOAD, &["VACUUM ANALYZE", "CREATE TABLE armed ()"])
                .await;
            production.make_reader_the_tables_owner().await;
            let snapshot = take_snapshot(
                &*backend,
                engine("postgres"),
                "things",
                &production.reader_dsn(),
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of production");
            let data = snapshot
                .extended_statistics_data
                .as_ref()
                .expect("extended statistics are read");
            assert_eq!(data.objects.len(), 4, "{data:?}");

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            let notes = report.notes.join("\n");
            eprintln!("{report:?}");
            assert!(
                !notes.contains("trap fired"),
                "the rebuild ran a trap:\n{notes}"
            );
            // The user function's result is a built-in type: its statistics are carried
            // without calling it. The domain-typed expression and the enum's list are refused
            // by name; the domain column's list is sampled as its base type, where no CHECK
            // runs.
            assert!(
                notes.contains("expressions of public.things_domain were not rebuilt")
                    && notes.contains("not built in"),
                "{notes}"
            );
            assert!(
                notes.contains("public.things_enum") && notes.contains("not a built-in one"),
                "{notes}"
            );
            assert_eq!(report.extended_statistics_rebuilt, 3, "{report:?}");
            // The domain column's own sample values are not parsed either (its counts are
            // restored).
            assert!(
                notes.contains("the sample values of public.things.b are not restored"),
                "{notes}"
            );

            let client = agent(&clone).await;
            let carried = one_value(
                &client,
                "SELECT (SELECT count(*) FROM pg_stats_ext_exprs \
                         WHERE statistics_name = 'things_fn' AND n_distinct = 40 \
                           AND most_common_vals IS NOT NULL)::text || ' ' || \
                        (SELECT count(*) FROM pg_stats_ext \
                         WHERE statistics_name = 'things_mcv' \
                           AND most_common_vals IS NOT NULL)::text",
            )
            .await;
            assert_eq!(carried, "1 1");
            // The traps are live in the clone: anyone who evaluates them sets them off.
            for armed in ["SELECT public.trap_text('x')", "SELECT 'x'::public.trapped"] {
                let fired = client
                    .simple_query(armed)
                    .await
                    .expect_err("the trap is armed in the clone");
                assert!(format!("{fired:?}").contains("trap fired"), "{fired:?}");
            }
            let superusers = one_value(
                &client,
                "SELECT count(*)::text FROM pg_roles WHERE rolsuper AND rolname = current_user",
            )
            .await;
            assert_eq!(superusers, "0");

            remove(&backend, &clone).await;
            production.remove(&docker).await;
        })
        .await;
}
