//! `run_experiment` end to end: the real daemon with the real guest in wasmtime, a real MCP
//! client, a real Postgres sandbox on the process backend.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};

use crate::support::{
    Agent, Home, Launch, TestDaemon, entry, spawn_daemon, spawn_daemon_with, stop_and_clean_up,
    unique,
};

fn script(source: &str) -> Value {
    json!({ "script": source })
}

fn message(envelope: &Value) -> &str {
    envelope["message"].as_str().unwrap_or_default()
}

fn output(envelope: &Value) -> &str {
    envelope["evidence"]["output"].as_str().unwrap_or_default()
}

/// A developer of a fresh postgres project holding a sandbox, and that sandbox's credentials.
pub(crate) async fn developer_with_sandbox(daemon: &TestDaemon) -> (Agent, Value) {
    let project = unique("exp");
    daemon.project(&project, &["postgres"]).await;
    daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;
    dev.ok("give_me_work", json!({})).await;
    let sandbox = dev.ok("request_sandbox", json!({})).await;
    (dev, sandbox)
}

async fn rows_of(url: &str, sql: &str) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect as the agent");
    tokio::spawn(connection);
    client
        .simple_query(sql)
        .await
        .expect("query")
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_experiment_loads_rows_and_explains_a_query_as_the_agent() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(load_and_explain(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

const LOAD_AND_EXPLAIN: &str = r#"
import time
sql("CREATE TABLE readings (id int PRIMARY KEY, sensor int, value float8)")
for batch in range(100):
    values = ", ".join(
        f"({batch * 100 + i}, {(batch * 100 + i) % 37}, {i * 0.5})" for i in range(100)
    )
    sql(f"INSERT INTO readings VALUES {values}")
sql("ANALYZE readings")
count = sql("SELECT count(*) AS n FROM readings")[0]["n"]
print("rows", count)
started = time.perf_counter()
plan = sql("EXPLAIN SELECT * FROM readings WHERE id = 4242")
print("plan", plan.columns, "|".join(row["QUERY PLAN"] for row in plan))
print("timed", time.perf_counter() - started >= 0)
"#;

async fn load_and_explain(daemon: &TestDaemon) {
    let project = unique("exp");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;
    dev.ok("give_me_work", json!({})).await;
    // Before a sandbox exists there is nothing for sql() to reach.
    let refused = dev.refused("run_experiment", script("print(1)")).await;
    assert_eq!(refused["error"], "out_of_order", "{refused}");

    let sandbox = dev.ok("request_sandbox", json!({})).await;
    let ran = dev.ok("run_experiment", script(LOAD_AND_EXPLAIN)).await;
    let printed = output(&ran);
    assert!(printed.contains("rows 10000"), "{ran}");
    assert!(printed.contains("plan ['QUERY PLAN'] Index Scan"), "{ran}");
    assert!(printed.contains("timed True"), "{ran}");
    let calls = ran["evidence"]["sql_calls"].as_array().expect("sql_calls");
    assert_eq!(calls.len(), 104, "{ran}");
    assert!(
        calls
            .iter()
            .all(|c| c["outcome"] == "ok" && c["elapsed_ms"].is_number())
    );
    assert_eq!(ran["evidence"]["service"], "postgres");
    assert_eq!(ran["evidence"]["limits"]["wall_ms"], 10_000, "{ran}");
    assert!(
        ran["evidence"]["fuel_used"].as_u64().is_some_and(|f| f > 0),
        "{ran}"
    );

    // The rows are the agent's own, in its own sandbox, owned by its own account.
    let url = entry(&sandbox, "postgres")["url"].as_str().expect("url");
    let user = entry(&sandbox, "postgres")["user"].as_str().expect("user");
    assert_eq!(
        rows_of(url, "SELECT count(*) FROM readings").await,
        ["10000"]
    );
    assert_eq!(
        rows_of(
            url,
            "SELECT tableowner FROM pg_tables WHERE tablename = 'readings'"
        )
        .await,
        [user]
    );

    // Only a Postgres service takes sql().
    let refused = dev
        .refused(
            "run_experiment",
            json!({"script": "print(1)", "service": "redis"}),
        )
        .await;
    assert_eq!(refused["error"], "invalid_argument", "{refused}");
    assert!(message(&refused).contains("postgres"), "{refused}");

    // Nothing of the credentials in the answers or the audit trail.
    let password = entry(&sandbox, "postgres")["password"]
        .as_str()
        .expect("password");
    let (status, audit) = daemon
        .admin(reqwest::Method::GET, "/v1/audit?limit=200", None)
        .await;
    assert_eq!(status, 200, "{audit}");
    let audit = audit.to_string();
    assert!(audit.contains("run_experiment"), "{audit}");
    for text in [ran.to_string(), refused.to_string(), audit] {
        assert!(!text.contains(password), "a password leaked: {text}");
    }
    let (status, metrics) = daemon.admin(reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);
    let metrics = metrics
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| metrics.to_string());
    assert!(
        metrics.contains("sandboxd_experiment_seconds_count{outcome=\"completed\"} 1"),
        "{metrics}"
    );
    dev.ok("release_sandbox", json!({})).await;
}

#[tokio::test]
async fn an_experiment_cannot_become_superuser_or_reach_another_sandbox() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(no_escape(&daemon)).catch_unwind().await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn no_escape(daemon: &TestDaemon) {
    let (dev, _) = developer_with_sandbox(daemon).await;
    let (other, theirs) = developer_with_sandbox(daemon).await;
    let their_url = entry(&theirs, "postgres")["url"]
        .as_str()
        .expect("url")
        .to_owned();
    rows_of(&their_url, "CREATE TABLE precious AS SELECT 1 AS x").await;
    let port = entry(&theirs, "postgres")["port"].as_u64().expect("port");
    let probe = format!(
        r#"
attempts = [
    "SET ROLE postgres",
    "ALTER ROLE CURRENT_USER SUPERUSER",
    "COPY (SELECT 1) TO PROGRAM 'id'",
    "CREATE EXTENSION dblink",
    "SELECT pg_read_file('/etc/passwd')",
    "DROP TABLE precious",
    "SELECT 1; SELECT 2",
]
for statement in attempts:
    try:
        sql(statement)
        print("WORKED", statement)
    except SqlError as refused:
        print("refused", statement)
print("super", sql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0]["rolsuper"])
try:
    import socket
    socket.create_connection(("127.0.0.1", {port}))
    print("WORKED socket")
except BaseException as e:
    print("no socket", type(e).__name__)
"#
    );
    let ran = dev.ok("run_experiment", script(&probe)).await;
    let printed = output(&ran);
    assert!(!printed.contains("WORKED"), "{printed}");
    assert_eq!(printed.matches("refused").count(), 7, "{printed}");
    assert!(printed.contains("super f"), "{printed}");
    assert!(printed.contains("no socket"), "{printed}");
    assert_eq!(rows_of(&their_url, "SELECT x FROM precious").await, ["1"]);
    for agent in [&dev, &other] {
        agent.ok("release_sandbox", json!({})).await;
    }
}

#[tokio::test]
async fn script_errors_and_limits_answer_envelopes_that_say_which() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(errors_and_limits(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn errors_and_limits(daemon: &TestDaemon) {
    let (dev, sandbox) = developer_with_sandbox(daemon).await;

    let raised = dev
        .refused(
            "run_experiment",
            script("print('so far')\nrows = sql('SELECT 1 AS one')\nrows[5]"),
        )
        .await;
    assert_eq!(raised["error"], "script_error", "{raised}");
    assert_eq!(raised["retryable"], false);
    assert!(message(&raised).contains("line 3"), "{raised}");
    assert!(message(&raised).contains("IndexError"), "{raised}");
    assert!(message(&raised).contains("so far"), "{raised}");

    let started = Instant::now();
    let spun = dev
        .refused(
            "run_experiment",
            json!({"script": "while True:\n    pass", "limits": {"wall_ms": 1000}}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(spun["error"], "limit_exceeded", "{spun}");
    assert!(message(&spun).contains("wall_ms"), "{spun}");
    assert!(
        spun["remediate"]
            .as_str()
            .is_some_and(|r| r.contains("60000")),
        "{spun}"
    );

    let slow = dev
        .refused(
            "run_experiment",
            json!({"script": "sql('SELECT pg_sleep(5)')", "limits": {"sql_ms": 300}}),
        )
        .await;
    assert_eq!(slow["error"], "limit_exceeded", "{slow}");
    assert!(message(&slow).contains("sql_ms"), "{slow}");

    let bomb = dev
        .refused(
            "run_experiment",
            json!({"script": "x = 'y' * (2 ** 30)", "limits": {"memory_bytes": 134217728}}),
        )
        .await;
    assert_eq!(bomb["error"], "limit_exceeded", "{bomb}");
    assert!(message(&bomb).contains("memory_bytes"), "{bomb}");

    // Rows past `sql_rows` are cut, and the answer says so.
    let cut = dev
        .ok(
            "run_experiment",
            json!({
                "script": "rows = sql('SELECT g FROM generate_series(1, 100) g')\nprint(len(rows), rows[-1]['g'])",
                "limits": {"sql_rows": 7}
            }),
        )
        .await;
    assert_eq!(output(&cut).trim(), "7 7", "{cut}");
    assert_eq!(cut["evidence"]["limits"]["sql_rows"], 7, "{cut}");
    assert_eq!(cut["evidence"]["limits_met"], json!(["sql_rows"]), "{cut}");
    assert!(
        cut["context_briefing"]
            .as_str()
            .is_some_and(|b| b.contains("sql_rows")),
        "{cut}"
    );

    // Bad input: refused naming what is allowed, and nothing runs.
    for (bad, names) in [
        (
            json!({"script": "sql('CREATE TABLE nope (x int)')", "limits": {"wall_ms": 999999999}}),
            "60000",
        ),
        (
            json!({"script": "sql('CREATE TABLE nope (x int)')", "limits": {"walltime": 5}}),
            "wall_ms",
        ),
        (json!({"script": ""}), "script"),
        (
            json!({"script": "sql('CREATE TABLE nope (x int)')", "service": "mongo"}),
            "postgres",
        ),
    ] {
        let refused = dev.refused("run_experiment", bad.clone()).await;
        assert_eq!(refused["error"], "invalid_argument", "{bad}: {refused}");
        assert!(refused.to_string().contains(names), "{bad}: {refused}");
    }
    let url = entry(&sandbox, "postgres")["url"].as_str().expect("url");
    assert!(
        rows_of(url, "SELECT to_regclass('nope')::text")
            .await
            .is_empty()
            || rows_of(url, "SELECT coalesce(to_regclass('nope')::text, 'absent')").await
                == ["absent"]
    );

    let (status, metrics) = daemon.admin(reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);
    let metrics = metrics
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| metrics.to_string());
    for limit in ["wall_ms", "sql_ms", "memory_bytes"] {
        assert!(
            metrics.contains(&format!(
                "sandboxd_experiment_limit_hits_total{{limit=\"{limit}\"}} 1"
            )),
            "{limit}: {metrics}"
        );
    }
    dev.ok("release_sandbox", json!({})).await;
}

#[tokio::test]
async fn eight_agents_experiment_at_once_each_within_its_own_limits() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(eight_at_once(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn eight_at_once(daemon: &TestDaemon) {
    let mut agents = Vec::new();
    for _ in 0..8 {
        agents.push(developer_with_sandbox(daemon).await.0);
    }
    let runs = agents.iter().enumerate().map(|(i, agent)| async move {
        let started = Instant::now();
        let (envelope, _) = if i % 2 == 0 {
            agent
                .call(
                    "run_experiment",
                    json!({"script": "while True:\n    pass", "limits": {"wall_ms": 700 + 100 * i}}),
                )
                .await
        } else {
            let source = format!(
                "sql('CREATE TABLE mine AS SELECT generate_series(1, {n}) AS g')\n\
                 print(sql('SELECT count(*) AS n FROM mine')[0]['n'])",
                n = 1000 * i
            );
            agent.call("run_experiment", script(&source)).await
        };
        (i, envelope, started.elapsed())
    });
    for (i, envelope, took) in futures::future::join_all(runs).await {
        if i % 2 == 0 {
            assert_eq!(envelope["error"], "limit_exceeded", "{i}: {envelope}");
            let wall = Duration::from_millis(700 + 100 * i as u64);
            assert!(
                took >= wall && took < wall + Duration::from_millis(1_500),
                "{i}: {took:?}"
            );
        } else {
            assert_eq!(envelope["status"], "ok", "{i}: {envelope}");
            assert_eq!(
                output(&envelope).trim(),
                (1000 * i).to_string(),
                "{i}: {envelope}"
            );
        }
    }
    for agent in &agents {
        agent.ok("release_sandbox", json!({})).await;
    }
}

#[tokio::test]
async fn a_missing_guest_is_a_retryable_runtime_failure() {
    let mut home = Home::new();
    home.set(
        "SANDBOXD_EXPERIMENTS__GUEST",
        "/nonexistent/sandboxd/experiment.wasm",
    );
    let daemon = spawn_daemon_with(&home, Launch::default());
    let outcome = AssertUnwindSafe(async {
        let (dev, _) = developer_with_sandbox(&daemon).await;
        let refused = dev.refused("run_experiment", script("print(1)")).await;
        assert_eq!(refused["error"], "runtime_unavailable", "{refused}");
        assert_eq!(refused["retryable"], true, "{refused}");
        assert!(
            message(&refused).contains("/nonexistent/sandboxd/experiment.wasm"),
            "{refused}"
        );
        dev.ok("release_sandbox", json!({})).await;
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

#[tokio::test]
async fn bound_params_round_trip_as_data_and_tracebacks_start_at_the_script() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(bound_params(&daemon)).catch_unwind().await;
    stop_and_clean_up(daemon, &home, outcome);
}

const BOUND_PARAMS: &str = r#"
sql("CREATE TABLE notes (id int PRIMARY KEY, body text, score float8, ok bool, at timestamptz)")
tricky = "it's'; drop table notes; --"
made = sql("INSERT INTO notes VALUES ($1, $2, $3, $4, $5)", [1, tricky, 0.25, True, "2026-01-02 03:04:05+00"])
print("affected", made.affected)
sql("INSERT INTO notes (id, body) VALUES ($1, $2)", [2, None])
row = sql("SELECT id, body, score, ok, at, body = $1 AS same FROM notes WHERE id = $2", [tricky, 1])[0]
print("row", row["id"], row["body"] == tricky, row["score"], row["ok"], row["same"])
print("nulls", sql("SELECT body IS NULL AS empty FROM notes WHERE id = $1", [2])[0]["empty"])
print("tables", sql("SELECT count(*) AS n FROM pg_tables WHERE tablename = $1", ["notes"])[0]["n"])
plain = sql("SELECT 1 AS one")
print("select affected", plain.affected)
try:
    sql("SELECT $1, $2", [1])
except SqlError as e:
    print("refused", e)
"#;

async fn bound_params(daemon: &TestDaemon) {
    let (dev, sandbox) = developer_with_sandbox(daemon).await;
    let ran = dev.ok("run_experiment", script(BOUND_PARAMS)).await;
    let printed = output(&ran);
    assert!(printed.contains("affected 1\n"), "{printed}");
    // Text as the simple protocol shows it, whatever the statement binds.
    assert!(printed.contains("row 1 True 0.25 t t\n"), "{printed}");
    assert!(printed.contains("nulls t\n"), "{printed}");
    assert!(printed.contains("tables 1\n"), "{printed}");
    assert!(printed.contains("select affected None\n"), "{printed}");
    assert!(
        printed.contains("refused the statement has 2 placeholder(s)"),
        "{printed}"
    );
    // The value was data: the table is there, holding it as written.
    let url = entry(&sandbox, "postgres")["url"].as_str().expect("url");
    assert_eq!(
        rows_of(url, "SELECT body FROM notes WHERE id = 1").await,
        ["it's'; drop table notes; --"]
    );
    // The statements the evidence shows hold placeholders, not values.
    let calls = ran["evidence"]["sql_calls"].as_array().expect("sql_calls");
    assert!(
        calls
            .iter()
            .all(|c| !c["statement"].as_str().unwrap_or_default().contains("drop")),
        "{ran}"
    );

    // A statement the server refuses, raised in a function of the script: the traceback is
    // the script's frames only, from its first line.
    let refused = dev
        .refused(
            "run_experiment",
            script("def load():\n    sql('SELEC 1')\n\nload()"),
        )
        .await;
    assert_eq!(refused["error"], "script_error", "{refused}");
    let text = message(&refused);
    let frames: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("File "))
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    assert!(
        frames[0].contains("<experiment>") && frames[0].contains("line 4"),
        "{text}"
    );
    assert!(!text.contains("app.py"), "{text}");
    assert!(text.contains("SqlError: "), "{text}");
    dev.ok("release_sandbox", json!({})).await;
}
