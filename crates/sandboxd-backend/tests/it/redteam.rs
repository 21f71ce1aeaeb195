//! The red team (issue 27): before each daemon operation that works on an agent's instance with
//! more privilege than the agent, the test — as the agent, with only the handed-out account —
//! plants every trap it can where that work could trip on it, and races the operation with a
//! reconnect loop that plants them again. Afterwards the agent holds exactly the privileges it
//! was handed and no trap ever ran as anyone but the agent.
//!
//! Postgres traps: database-level settings (`search_path` putting `public` before
//! `pg_catalog`, `role` set to the agent), operators and functions in `public` shadowing the
//! `pg_catalog` ones for the types the daemon's SQL uses, views shadowing catalog views, a
//! schema named like the daemon's `extensions`, a trigger. A trap that runs as a superuser
//! makes the agent a superuser and creates the role `sbx_trap_fired` (cluster-wide, so a reset
//! cannot hide it); one that runs as the agent only logs that it ran, which proves the traps
//! are live. MariaDB: invoker-rights routines and views, a trigger and an event that would grant
//! the agent everything when root runs them. Redis: a function library. Process backend: forged
//! metadata never makes the root daemon signal a process that is not the instance's.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::{Feature, Instance};
use secrecy::ExposeSecret;

use crate::docker::{Harness, POSTGRES, harness_owner};
use crate::support::{self, ProcessHarness, engine};

/// The role a trap creates when it runs as a superuser.
const FIRED: &str = "sbx_trap_fired";

/// Operators the daemon's SQL could resolve by name, by their argument types.
const SHADOWED_OPERATORS: &[(&str, &str, &str)] = &[
    ("=", "name", "name"),
    ("=", "name", "text"),
    ("=", "text", "text"),
    ("=", "oid", "oid"),
    ("=", "oid", "regclass"),
    ("=", "integer", "integer"),
    ("=", "bigint", "bigint"),
    ("<>", "name", "name"),
    ("<>", "name", "text"),
    ("<>", "oid", "oid"),
    (">=", "oid", "integer"),
    ("||", "text", "text"),
    ("~~", "name", "text"),
    ("~~", "text", "text"),
];

/// Functions the daemon's SQL calls, shadowed with the same argument types.
const SHADOWED_FUNCTIONS: &[(&str, &str, &str, &str)] = &[
    // (name, arguments, returns, how to answer as the real one)
    (
        "unnest",
        "text[]",
        "SETOF text",
        "RETURN QUERY SELECT pg_catalog.unnest($1)",
    ),
    (
        "quote_ident",
        "text",
        "text",
        "RETURN pg_catalog.quote_ident($1)",
    ),
    (
        "to_regclass",
        "text",
        "regclass",
        "RETURN pg_catalog.to_regclass($1)",
    ),
    (
        "current_setting",
        "text",
        "text",
        "RETURN pg_catalog.current_setting($1)",
    ),
    ("lower", "text", "text", "RETURN pg_catalog.lower($1)"),
    ("format", "text", "text", "RETURN pg_catalog.format($1)"),
    (
        "format",
        "text, text",
        "text",
        "RETURN pg_catalog.format($1, $2)",
    ),
    (
        "pg_backend_pid",
        "",
        "integer",
        "RETURN pg_catalog.pg_backend_pid()",
    ),
    ("pg_terminate_backend", "integer", "boolean", "RETURN false"),
    (
        "pg_relation_filepath",
        "regclass",
        "text",
        "RETURN pg_catalog.pg_relation_filepath($1)",
    ),
    (
        "pg_relation_size",
        "regclass",
        "bigint",
        "RETURN pg_catalog.pg_relation_size($1)",
    ),
    (
        "pg_reload_conf",
        "",
        "boolean",
        "RETURN pg_catalog.pg_reload_conf()",
    ),
];

/// Catalog views shadowed by views in `public`.
const SHADOWED_VIEWS: &[&str] = &[
    "pg_roles",
    "pg_namespace",
    "pg_database",
    "pg_stat_activity",
    "pg_extension",
    "pg_class",
    "pg_available_extensions",
];

/// The traps, as the agent `agent_role` plants them in the database it is connected to.
/// Idempotent: the reconnect loop runs it again and again.
fn postgres_traps(agent_role: &str, database: &str) -> String {
    let mut sql = format!(
        r#"
CREATE TABLE IF NOT EXISTS public.trap_log (tag text, who text, superuser boolean);
GRANT INSERT, SELECT ON public.trap_log TO PUBLIC;
CREATE OR REPLACE FUNCTION public.sbx_trap(p_tag text) RETURNS boolean
LANGUAGE plpgsql AS $trap$
DECLARE su boolean;
BEGIN
  SELECT r.rolsuper INTO su FROM pg_catalog.pg_roles r
   WHERE r.rolname OPERATOR(pg_catalog.=) current_user;
  BEGIN
    INSERT INTO public.trap_log VALUES (p_tag, current_user, su);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  IF su THEN
    BEGIN
      EXECUTE 'ALTER ROLE "{agent_role}" SUPERUSER';
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                      WHERE r.rolname OPERATOR(pg_catalog.=) '{FIRED}') THEN
        EXECUTE 'CREATE ROLE {FIRED}';
      END IF;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END IF;
  RETURN true;
END $trap$;
"#
    );
    for (i, (op, left, right)) in SHADOWED_OPERATORS.iter().enumerate() {
        let answer = match *op {
            "||" => "text",
            _ => "boolean",
        };
        sql.push_str(&format!(
            "CREATE OR REPLACE FUNCTION public.trap_op_{i}(a {left}, b {right}) RETURNS {answer} \
             LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.sbx_trap('op {op} {left} {right}'); \
             RETURN a OPERATOR(pg_catalog.{op}) b; END $f$;\n\
             DROP OPERATOR IF EXISTS public.{op} ({left}, {right});\n\
             CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, \
             FUNCTION = public.trap_op_{i});\n"
        ));
    }
    for (name, args, returns, answer) in SHADOWED_FUNCTIONS {
        let params = if args.is_empty() { "" } else { args };
        sql.push_str(&format!(
            "CREATE OR REPLACE FUNCTION public.{name}({params}) RETURNS {returns} \
             LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.sbx_trap('fn {name}'); {answer}; \
             {tail} END $f$;\n",
            tail = if returns.starts_with("SETOF") {
                "RETURN;"
            } else {
                ""
            }
        ));
    }
    for view in SHADOWED_VIEWS {
        sql.push_str(&format!(
            "CREATE OR REPLACE VIEW public.{view} AS SELECT c.* FROM pg_catalog.{view} c \
             WHERE public.sbx_trap('view {view}');\n"
        ));
    }
    sql.push_str(&format!(
        r#"
CREATE TABLE IF NOT EXISTS public.trap_table (id int);
CREATE OR REPLACE FUNCTION public.trap_trigger() RETURNS trigger LANGUAGE plpgsql AS
  $f$ BEGIN PERFORM public.sbx_trap('trigger'); RETURN NEW; END $f$;
DROP TRIGGER IF EXISTS trap_trigger ON public.trap_table;
CREATE TRIGGER trap_trigger BEFORE INSERT OR UPDATE OR DELETE ON public.trap_table
  FOR EACH ROW EXECUTE FUNCTION public.trap_trigger();
ALTER DATABASE "{database}" SET search_path = public, pg_catalog;
"#
    ));
    sql
}

/// The agent's privileges as the server reports them to the agent itself.
async fn agent_privileges(client: &tokio_postgres::Client) -> String {
    client
        .query_one(
            "SELECT concat_ws(',', rolsuper, rolcreaterole, rolcreatedb, rolreplication, \
                    rolbypassrls, \
                    pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'), \
                    pg_has_role(current_user, 'pg_read_server_files', 'MEMBER'), \
                    pg_has_role(current_user, 'pg_write_server_files', 'MEMBER')) \
             FROM pg_catalog.pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .expect("the agent reads its own role")
        .get(0)
}

/// Nothing ran as a superuser: no trap's witness role, the agent's privileges as before, and
/// no program runs on the server's host side for it.
async fn assert_no_trap_fired(instance: &Instance, privileges_before: &str, what: &str) {
    let client = support::pg(instance).await;
    let fired: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = $1",
            &[&FIRED],
        )
        .await
        .expect("roles")
        .get(0);
    assert_eq!(fired, 0, "{what}: a trap ran as a superuser");
    assert_eq!(
        agent_privileges(&client).await,
        privileges_before,
        "{what}: the agent's privileges changed"
    );
    let program = client
        .batch_execute("COPY (SELECT 1) TO PROGRAM 'true'")
        .await
        .expect_err("the agent runs no program on the server's side");
    assert!(
        program.to_string().contains("permission") || format!("{program:?}").contains("42501"),
        "{what}: {program:?}"
    );
}

/// The rows of `trap_log` in the agent's database: (tag, who, superuser).
async fn trap_log(instance: &Instance) -> Vec<(String, String, bool)> {
    support::pg(instance)
        .await
        .query(
            "SELECT tag, who, coalesce(superuser, false) FROM public.trap_log ORDER BY tag",
            &[],
        )
        .await
        .map(|rows| {
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        })
        .unwrap_or_default()
}

/// A task that, as the agent, reconnects to its database in a loop and plants the traps each
/// time it gets in (creating the `extensions` schema first when it can), until stopped.
struct Racer {
    stop: Arc<AtomicBool>,
    planted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Racer {
    fn start(instance: &Instance) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let planted = Arc::new(AtomicUsize::new(0));
        let instance = instance.clone();
        let traps = postgres_traps(&instance.agent.user, &instance.database);
        let task = tokio::spawn({
            let (stop, planted) = (stop.clone(), planted.clone());
            async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(client) =
                        support::pg_connect(&instance, instance.agent.password.expose_secret())
                            .await
                    {
                        // The daemon's schema for extensions, and a table a clone's
                        // schema makes, taken first: a rebuild beside the agent trips on them.
                        let schema = client
                            .batch_execute(
                                "CREATE SCHEMA IF NOT EXISTS extensions; \
                                 CREATE TABLE IF NOT EXISTS public.orders (id int)",
                            )
                            .await;
                        if client.batch_execute(&traps).await.is_ok() && schema.is_ok() {
                            planted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
        Self {
            stop,
            planted,
            task,
        }
    }

    /// Waits until the traps were planted at least once: the race is live.
    async fn planted_once(&self) {
        for _ in 0..500 {
            if self.planted.load(Ordering::Relaxed) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the racing agent never got its traps in");
    }

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.planted.load(Ordering::Relaxed)
    }
}

fn features(names: &[&str]) -> BTreeSet<Feature> {
    names
        .iter()
        .map(|f| Feature::parse(engine("postgres"), f).expect("allowlisted"))
        .collect()
}

/// `template1`, where the daemon activates every feature too (so the databases the agent makes
/// have them), is the daemon's: the agent may connect to it, but every trap it would plant there
/// for that activation is refused, and `activated` is there, made by the superuser.
async fn template1_takes_nothing_from_the_agent(instance: &Instance, activated: &str) {
    let template1 = Instance {
        database: "template1".to_owned(),
        ..instance.clone()
    };
    let client = support::pg(&template1).await;
    let agent = &instance.agent.user;
    for plant in [
        "CREATE FUNCTION public.sbx_plant(a name, b name) RETURNS boolean \
         LANGUAGE sql AS 'SELECT true'"
            .to_owned(),
        "CREATE TABLE public.sbx_plant (id int)".to_owned(),
        "CREATE VIEW public.pg_roles AS SELECT * FROM pg_catalog.pg_roles".to_owned(),
        "CREATE FUNCTION extensions.sbx_plant() RETURNS int LANGUAGE sql AS 'SELECT 1'".to_owned(),
        "CREATE SCHEMA sbx_plant".to_owned(),
        "ALTER DATABASE template1 SET search_path = public, pg_catalog".to_owned(),
        format!("ALTER SCHEMA public OWNER TO \"{agent}\""),
    ] {
        let refused = client
            .batch_execute(&plant)
            .await
            .expect_err("the agent plants nothing in template1");
        assert_eq!(
            refused.code().map(|c| c.code()),
            Some("42501"),
            "{plant}: {refused:?}"
        );
    }
    let made_by: String = client
        .query_one(
            "SELECT r.rolname::text || ' in ' || n.nspname::text \
             FROM pg_catalog.pg_extension e \
             JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.extowner \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
             WHERE e.extname OPERATOR(pg_catalog.=) $1",
            &[&activated],
        )
        .await
        .unwrap_or_else(|err| panic!("{activated} is in template1: {err}"))
        .get(0);
    assert_eq!(
        made_by,
        format!("{} in extensions", instance.engine.admin_user),
        "the daemon made it there"
    );
}

/// In-place feature activation, the reset, and the reset's feature activation, each with the
/// traps planted and a racing agent; then the traps themselves are shown to be live.
async fn postgres_round(backend: &dyn Backend, instance: &mut Instance) {
    let client = support::pg(instance).await;
    let before = agent_privileges(&client).await;
    client
        .batch_execute(&postgres_traps(&instance.agent.user, &instance.database))
        .await
        .expect("the agent plants its traps");
    drop(client);

    // 1. A feature activated in place, the agent racing it.
    let racer = Racer::start(instance);
    racer.planted_once().await;
    backend
        .activate(instance, &features(&["pg_trgm"]))
        .await
        .expect("activation in place, beside the traps");
    racer.stop().await;
    assert_no_trap_fired(instance, &before, "activation in place").await;
    template1_takes_nothing_from_the_agent(instance, "pg_trgm").await;

    // 2. The agent makes its database switch any session to its own role: the daemon's
    // session stays the superuser's, so the next activation still works.
    support::pg(instance)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET role = \"{}\"",
            instance.database, instance.agent.user
        ))
        .await
        .expect("the agent sets its database's role");
    backend
        .activate(instance, &features(&["citext"]))
        .await
        .expect("activation with the database's role set to the agent's");
    assert_no_trap_fired(instance, &before, "activation under a database role").await;
    let owner: String = support::pg(instance)
        .await
        .query_one(
            "SELECT r.rolname::text FROM pg_catalog.pg_extension e \
             JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.extowner \
             WHERE e.extname OPERATOR(pg_catalog.=) 'citext'",
            &[],
        )
        .await
        .expect("citext is there")
        .get(0);
    assert_ne!(
        owner, instance.agent.user,
        "the daemon, not the agent, made it"
    );

    // 3. The reset, the agent racing it with a reconnect loop from before it starts.
    let racer = Racer::start(instance);
    racer.planted_once().await;
    backend
        .reset(instance, None)
        .await
        .expect("the reset, beside a racing agent");
    let planted = racer.stop().await;
    eprintln!("the racing agent planted its traps {planted} times");
    assert_no_trap_fired(instance, &before, "reset").await;

    // The traps are live: the agent trips over its own with its own session.
    let client = support::pg(instance).await;
    client
        .batch_execute(&postgres_traps(&instance.agent.user, &instance.database))
        .await
        .expect("planted again");
    drop(client);
    let client = support::pg(instance).await;
    client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'public'",
            &[],
        )
        .await
        .expect("the agent's own query");
    let log = trap_log(instance).await;
    assert!(
        log.iter()
            .any(|(tag, _, _)| tag.starts_with("op =") || tag.starts_with("view")),
        "the traps fire for the agent's own sessions: {log:?}"
    );
    assert!(
        log.iter()
            .all(|(_, who, su)| who == &instance.agent.user && !su),
        "every trap ran as the agent: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_traps_never_run_as_the_superuser_on_processes() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let mut instance = backend
                .provision(&support::request("postgres", &support::owner("rtp"), &[]))
                .await
                .expect("provision");
            postgres_round(&*backend, &mut instance).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_traps_never_run_as_the_superuser_on_docker() {
    const TAG: &str = "rtd";
    let Some(harness) = Harness::new(TAG, &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let mut instance =
                crate::docker::provision(&backend, "postgres", &harness_owner(TAG)).await;
            postgres_round(&*backend, &mut instance).await;
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_traps_never_run_as_the_superuser_on_kubernetes() {
    support::show_logs();
    let Some((backend, namespace)) = sandboxd_testkit::kube_or_skip("kube-redteam", |_| {}) else {
        return;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let mut instance = backend
            .provision(&support::request("postgres", &support::owner("rtk"), &[]))
            .await
            .expect("provision a Pod");
        postgres_round(&backend, &mut instance).await;
    }))
    .await;
    for listed in backend.list().await.expect("list") {
        backend
            .teardown(&listed.handle)
            .await
            .expect("cleanup teardown");
    }
    assert!(backend.list().await.expect("list").is_empty(), "Pods left");
    drop(namespace);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Whatever the agent made of roles and databases, a reset ends as handed out: a role the agent
/// created owning a database, a database made a template, the agent's own password and
/// settings changed. PostgreSQL 17 (Docker): the agent may create roles there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_undoes_every_role_and_database_the_agent_made_on_docker() {
    const TAG: &str = "rtroles";
    let Some(harness) = Harness::new(TAG, &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _docker| async move {
            let instance =
                crate::docker::provision(&backend, "postgres", &harness_owner(TAG)).await;
            let client = support::pg(&instance).await;
            let before = agent_privileges(&client).await;
            let agent = &instance.agent.user;
            for statement in [
                "CREATE ROLE maker CREATEROLE CREATEDB LOGIN PASSWORD 'x'".to_owned(),
                format!("GRANT maker TO \"{agent}\" WITH SET TRUE"),
                "CREATE DATABASE made_by_maker OWNER maker".to_owned(),
                "CREATE DATABASE made_a_template".to_owned(),
                "ALTER DATABASE made_a_template IS_TEMPLATE true".to_owned(),
                format!("ALTER ROLE \"{agent}\" SET work_mem = '1MB'"),
                format!("ALTER ROLE \"{agent}\" PASSWORD 'changed-by-the-agent'"),
            ] {
                client
                    .batch_execute(&statement)
                    .await
                    .unwrap_or_else(|e| panic!("the agent's {statement}: {e}"));
            }
            // A role made by the agent's role, and its session left open.
            let maker = {
                let mut config = tokio_postgres::Config::new();
                config
                    .host(&instance.host)
                    .port(instance.port)
                    .user("maker")
                    .password("x")
                    .dbname("made_by_maker");
                let (maker, connection) = config
                    .connect(tokio_postgres::NoTls)
                    .await
                    .expect("the made role logs in");
                tokio::spawn(connection);
                maker
            };
            maker
                .batch_execute("CREATE ROLE grandchild LOGIN; CREATE TABLE mine (id int)")
                .await
                .expect("a role of the role");

            backend.reset(&instance, None).await.expect("the reset");

            assert!(
                maker.simple_query("SELECT 1").await.is_err(),
                "its session ended"
            );
            let client = support::pg(&instance).await;
            let left: Vec<String> = client
                .query(
                    "SELECT rolname::text FROM pg_roles WHERE rolname IN \
                     ('maker', 'grandchild') UNION ALL SELECT datname::text FROM pg_database \
                     WHERE datname NOT IN ('postgres', 'template0', 'template1', 'sandbox')",
                    &[],
                )
                .await
                .expect("what is left")
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(left.is_empty(), "left after the reset: {left:?}");
            let settings: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r \
                     ON r.oid = s.setrole WHERE r.rolname = current_user",
                    &[],
                )
                .await
                .expect("role settings")
                .get(0);
            assert_eq!(settings, 0, "the agent's role settings are gone");
            assert_eq!(agent_privileges(&client).await, before);
            backend
                .teardown(&InstanceHandle::of(&instance))
                .await
                .expect("teardown");
        })
        .await;
}

/// A reset that cannot finish keeps the sandbox usable and says why in the server's words: here
/// a feature the instance is recorded with that the host lacks (pgvector is not installed for
/// the process backend's PostgreSQL), so activating it again fails after the rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reset_keeps_the_sandbox_usable_and_says_why() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let mut instance = backend
                .provision(&support::request(
                    "postgres",
                    &support::owner("rtfail"),
                    &[],
                ))
                .await
                .expect("provision");
            let client = support::pg(&instance).await;
            if client
                .query_opt(
                    "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'",
                    &[],
                )
                .await
                .expect("available extensions")
                .is_some()
            {
                eprintln!("skipped: this host has pgvector, the failure this test needs is absent");
                return;
            }
            client
                .batch_execute("CREATE TABLE before_the_reset (id int)")
                .await
                .expect("a table");
            drop(client);
            instance.features.extend(features(&["vector"]));
            let err = backend
                .reset(&instance, None)
                .await
                .expect_err("vector cannot be activated again");
            let text = err.to_string();
            assert!(text.contains("vector"), "names what failed: {text}");
            assert!(
                !text.contains("db error"),
                "the server's words, not the driver's: {text}"
            );
            let client = support::pg(&instance).await;
            client
                .batch_execute("CREATE TABLE after_the_reset (id int)")
                .await
                .expect("the sandbox is usable after a failed reset");
            let gone: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_tables WHERE tablename = 'before_the_reset'",
                    &[],
                )
                .await
                .expect("tables")
                .get(0);
            assert_eq!(gone, 0, "what the agent made is gone all the same");
        })
        .await;
}

/// Forged metadata never makes the root daemon signal anything but the instance: written by
/// the instance's uid it goes nowhere the daemon reads; written in the daemon's own place (as a
/// bug or a disk error would), the pid it names must still run as the instance's uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_metadata_never_makes_the_daemon_signal_another_process() {
    use nix::unistd::{User, geteuid};
    if !(geteuid().is_root() && User::from_name("sandboxd-i000").ok().flatten().is_some()) {
        eprintln!("skipped: needs root and the instance account pool (scripts/install-deps.sh)");
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let attacker = support::provision(&backend, "postgres", &support::owner("rtfa")).await;
            let other = support::provision(&backend, "postgres", &support::owner("rtfo")).await;
            let dir = std::path::PathBuf::from(&attacker.backend_id);
            let meta_path =
                sandboxd_backend::process::metadata_path(&dir).expect("a metadata path");
            let real: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&meta_path).expect("metadata"))
                    .expect("json");
            let run_as = real["run_as"].as_str().expect("run_as");
            let account = User::from_name(run_as).expect("passwd").expect("account");

            // A root-owned process in a group of its own: what the forgery aims at.
            let mut victim = tokio::process::Command::new("sleep")
                .arg("600")
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .expect("a victim process");
            let victim_pid = i32::try_from(victim.id().expect("pid")).expect("pid fits");
            let victim_ticks = proc_start_ticks(victim_pid);
            let other_meta: serde_json::Value = serde_json::from_slice(
                &std::fs::read(
                    sandboxd_backend::process::metadata_path(std::path::Path::new(
                        &other.backend_id,
                    ))
                    .expect("path"),
                )
                .expect("other's metadata"),
            )
            .expect("json");
            let other_pid = i32::try_from(other_meta["pid"].as_i64().expect("pid")).expect("pid");

            let forged = |pid: i32, ticks: u64| {
                let mut forged = real.clone();
                forged["pid"] = pid.into();
                forged["pid_start_ticks"] = ticks.into();
                serde_json::to_string(&forged).expect("json")
            };
            // As the instance's uid: its own directory takes a file, the daemon's place none.
            let as_tenant = |path: std::path::PathBuf, text: String| {
                let (uid, gid) = (account.uid.as_raw(), account.gid.as_raw());
                async move {
                    let mut cmd = tokio::process::Command::new("/bin/sh");
                    cmd.arg("-c")
                        .arg(format!("printf '%s' \"$1\" > '{}'", path.display()))
                        .arg("sh")
                        .arg(text)
                        .uid(uid)
                        .gid(gid)
                        .env_clear()
                        .current_dir("/");
                    cmd.status().await.expect("runs").success()
                }
            };
            assert!(
                as_tenant(dir.join("sandboxd.json"), forged(victim_pid, victim_ticks)).await,
                "the instance's uid writes in its own directory"
            );
            assert!(
                !as_tenant(meta_path.clone(), forged(victim_pid, victim_ticks)).await,
                "the instance's uid cannot write the daemon's metadata"
            );
            let kept: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&meta_path).expect("metadata"))
                    .expect("json");
            assert_eq!(kept, real, "the daemon's metadata is as it wrote it");

            // The daemon's own file made to name the victim (start time right, uid not).
            std::fs::write(&meta_path, forged(victim_pid, victim_ticks)).expect("forge");
            assert!(
                !backend
                    .is_live(&InstanceHandle::of(&attacker))
                    .await
                    .expect("is_live"),
                "a process of another uid is not the instance"
            );
            let other_ticks = proc_start_ticks(other_pid);
            std::fs::write(&meta_path, forged(other_pid, other_ticks)).expect("forge");
            backend
                .teardown(&InstanceHandle::of(&attacker))
                .await
                .expect("teardown");
            assert_eq!(
                proc_start_ticks(victim_pid),
                victim_ticks,
                "the victim lives"
            );
            assert!(
                victim.try_wait().expect("victim status").is_none(),
                "the victim was not signalled"
            );
            assert!(
                backend
                    .is_live(&InstanceHandle::of(&other))
                    .await
                    .expect("is_live"),
                "the other tenant's server lives"
            );
            support::pg(&other)
                .await
                .simple_query("SELECT 1")
                .await
                .expect("the other tenant answers");
            // The attacker's own server is gone all the same (its cgroup).
            support::assert_no_process_mentions(&attacker.backend_id).await;
            let _ = victim.kill().await;
        })
        .await;
}

fn proc_start_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    after
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("ticks")
}

/// MariaDB: definer- and invoker-rights objects, a trigger and an event that would grant the
/// agent everything when root runs them; the reset as root runs none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_objects_never_run_as_root_in_a_reset() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let instance = support::provision(&backend, "mariadb", &support::owner("rtm")).await;
            let mut conn = support::mysql(&instance).await;
            let grants_before: Vec<String> =
                conn.query("SHOW GRANTS").await.expect("grants before");
            let grant_all = "GRANT ALL PRIVILEGES ON *.* TO CURRENT_USER WITH GRANT OPTION";
            conn.query_drop(format!(
                "CREATE PROCEDURE escalate() SQL SECURITY INVOKER BEGIN {grant_all}; END; \
                 CREATE FUNCTION escalating() RETURNS int SQL SECURITY INVOKER \
                   BEGIN RETURN 1; END; \
                 CREATE SQL SECURITY INVOKER VIEW schemata AS SELECT escalating() AS x; \
                 CREATE TABLE t (id int); \
                 CREATE TRIGGER t_trap BEFORE INSERT ON t FOR EACH ROW SET @x = escalating(); \
                 CREATE EVENT e_trap ON SCHEDULE EVERY 1 SECOND DO CALL escalate()"
            ))
            .await
            .expect("the agent's objects");
            drop(conn);
            backend.reset(&instance, None).await.expect("reset");
            let mut conn = support::mysql(&instance).await;
            let grants_after: Vec<String> = conn.query("SHOW GRANTS").await.expect("grants");
            assert_eq!(
                grants_after, grants_before,
                "the agent's grants are as handed out"
            );
            let denied = conn
                .query_drop("SELECT * FROM mysql.user")
                .await
                .expect_err("still no access to the server's tables");
            assert!(denied.to_string().contains("denied"), "{denied}");
        })
        .await;
}

/// Redis: a function library the agent loaded is gone after a reset, and the agent's rights are
/// as handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_functions_are_flushed_and_rights_unchanged_by_a_reset() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let instance = support::provision(&backend, "redis", &support::owner("rtr")).await;
            let mut conn = support::redis(&instance).await;
            let _: String = redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("#!lua name=trap\nredis.register_function('trap', function() return redis.call('CONFIG', 'GET', 'dir') end)")
                .query_async(&mut conn)
                .await
                .expect("a function library");
            backend.reset(&instance, None).await.expect("reset");
            let mut conn = support::redis(&instance).await;
            let listed: redis::Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .expect("function list");
            assert_eq!(listed, redis::Value::Array(vec![]), "the library is gone");
            let denied: redis::RedisResult<redis::Value> = redis::cmd("CONFIG")
                .arg("SET")
                .arg("dir")
                .arg("/tmp")
                .query_async(&mut conn)
                .await;
            assert!(denied.is_err(), "CONFIG SET is still denied: {denied:?}");
        })
        .await;
}

/// A clone's reset makes it a clone again (schema, statistics, hand-over, settings, padding:
/// superuser statements in the agent's database) with the agent locked out the whole time,
/// however fast it reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_is_made_again_with_the_agent_locked_out() {
    use sandboxd_backend::clone::{Fidelity, provision_clone, take_snapshot};
    use sandboxd_domain::clone::Privacy;

    use crate::clone::Production;
    use crate::docker::POSTGRES18;

    const TAG: &str = "rtclone";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let production = Production::start(&docker, POSTGRES18, &harness_owner(TAG)).await;
            production
                .load(
                    "CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL, total int); \
                     INSERT INTO orders SELECT g, g % 100, g FROM generate_series(1, 20000) g; \
                     CREATE INDEX orders_customer ON orders (customer);",
                    &["VACUUM ANALYZE"],
                )
                .await;
            let snapshot = take_snapshot(
                &*backend,
                engine("postgres"),
                "shop",
                &production.reader_dsn(),
                Privacy::KeepValues,
            )
            .await
            .expect("a snapshot");
            let (clone, _) = provision_clone(
                &*backend,
                &support::request("postgres", &harness_owner(TAG), &[]),
                &snapshot,
                Fidelity::FULL,
            )
            .await
            .expect("a clone");
            let client = support::pg(&clone).await;
            let before = agent_privileges(&client).await;
            client
                .batch_execute(&postgres_traps(&clone.agent.user, &clone.database))
                .await
                .expect("the agent plants its traps");
            drop(client);

            let racer = Racer::start(&clone);
            racer.planted_once().await;
            backend
                .reset(&clone, Some(&snapshot))
                .await
                .expect("the clone made again, beside a racing agent");
            racer.stop().await;
            assert_no_trap_fired(&clone, &before, "re-clone").await;

            let client = support::pg(&clone).await;
            let row = client
                .query_one(
                    "SELECT c.reltuples::bigint, r.rolname::text FROM pg_catalog.pg_class c \
                     JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner \
                     WHERE c.oid OPERATOR(pg_catalog.=) 'public.orders'::regclass",
                    &[],
                )
                .await
                .expect("the clone's table is back");
            assert_eq!(row.get::<_, i64>(0), 20000, "its statistics are back");
            assert_eq!(
                row.get::<_, String>(1),
                clone.agent.user,
                "the agent owns it"
            );
            backend
                .teardown(&InstanceHandle::of(&clone))
                .await
                .expect("teardown");
            production.remove(&docker).await;
        })
        .await;
}
