//! One agent's cost to the daemon is bounded (issue 27): the real daemon, a real MCP client,
//! real Postgres sandboxes on the process backend, and the daemon's own memory read from
//! `/proc/<pid>/status`. A 250 MB value through `sandbox_sql` and three 900 MB experiments leave
//! its peak within budget, a 50 MB traceback comes back cut, the per-agent and global caps
//! answer `limit_exceeded` naming their setting, and another agent's cheap verb stays fast
//! while one agent's experiments spin.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};

use crate::experiments::developer_with_sandbox;
use crate::support::{
    Home, Launch, TestDaemon, entry, spawn_daemon, spawn_daemon_with, stop_and_clean_up,
};

const MIB: u64 = 1024 * 1024;

/// A `/proc/<pid>/status` field of the daemon, bytes.
fn status_bytes(daemon: &TestDaemon, field: &str) -> u64 {
    sandboxd_testkit::proc_status_bytes(daemon.pid(), field)
}

/// Resets the daemon's peak resident memory to what it holds now, and answers that.
fn reset_peak(daemon: &TestDaemon) -> u64 {
    let path = format!("/proc/{}/clear_refs", daemon.pid());
    std::fs::write(&path, "5").unwrap_or_else(|e| panic!("{path}: {e}"));
    status_bytes(daemon, "VmRSS:")
}

fn message(envelope: &Value) -> &str {
    envelope["message"].as_str().unwrap_or_default()
}

fn daemon_with(home: &Home, env: &[(&str, &str)]) -> TestDaemon {
    spawn_daemon_with(
        home,
        Launch {
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Launch::default()
        },
    )
}

#[tokio::test]
async fn a_250_mb_value_through_sandbox_sql_leaves_the_daemons_peak_within_budget() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(huge_value(&daemon)).catch_unwind().await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn huge_value(daemon: &TestDaemon) {
    let (dev, sandbox) = developer_with_sandbox(daemon).await;
    let sql = |statement: &str| json!({"service": "postgres", "statement": statement});
    dev.ok("sandbox_sql", sql("SELECT 1")).await;

    let before = reset_peak(daemon);
    let huge = "SELECT repeat('x', 250000000)";
    let (first, second) = tokio::join!(
        dev.refused("sandbox_sql", sql(huge)),
        dev.refused("sandbox_sql", sql(huge))
    );
    let growth = status_bytes(daemon, "VmHWM:").saturating_sub(before);
    eprintln!(
        "two 250 MB values at once raised the daemon's peak by {} KiB",
        growth / 1024
    );
    for refused in [&first, &second] {
        assert_eq!(refused["error"], "limit_exceeded", "{refused}");
        assert!(message(refused).contains("max_bytes"), "{refused}");
        assert!(message(refused).contains("1048576"), "{refused}");
    }
    // Before the cut while arriving, each call added about 715 MiB.
    assert!(
        growth < 64 * MIB,
        "the daemon's peak grew by {} MiB",
        growth / MIB
    );

    // Many rows past the byte limit: the rows that fit, said to be cut there.
    let many = dev
        .ok(
            "sandbox_sql",
            sql("SELECT g, repeat('y', 2000) AS pad FROM generate_series(1, 100000) g"),
        )
        .await;
    let rows = many["evidence"]["rows"].as_array().map_or(0, Vec::len);
    assert!(rows > 100 && rows < 1000, "{rows} rows");
    assert_eq!(
        many["evidence"]["truncated"], true,
        "{}",
        many["evidence"]["cut_at"]
    );
    assert_eq!(many["evidence"]["cut_at"], "max_bytes");

    // An experiment's sql() is cut the same way (at 4 MiB), and the next sql() reconnects.
    dev.ok("run_experiment", json!({"script": "print(1)"}))
        .await;
    let before = reset_peak(daemon);
    let script = "try:\n    sql(\"SELECT repeat('x', 250000000)\")\nexcept SqlError as e:\n    \
                  print('refused:', e)\nprint('then', sql('SELECT 7 AS seven')[0]['seven'])";
    let ran = dev.ok("run_experiment", json!({"script": script})).await;
    let growth = status_bytes(daemon, "VmHWM:").saturating_sub(before);
    eprintln!(
        "a 250 MB value in an experiment raised the daemon's peak by {} KiB",
        growth / 1024
    );
    let printed = ran["evidence"]["output"].as_str().unwrap_or_default();
    assert!(printed.contains("refused:"), "{ran}");
    assert!(printed.contains("4194304 bytes"), "{ran}");
    assert!(printed.contains("then 7"), "{ran}");
    assert!(
        growth < 64 * MIB,
        "the daemon's peak grew by {} MiB",
        growth / MIB
    );

    let password = entry(&sandbox, "postgres")["password"]
        .as_str()
        .expect("password");
    for text in [
        first.to_string(),
        second.to_string(),
        many.to_string(),
        ran.to_string(),
    ] {
        assert!(!text.contains(password), "a password leaked: {text}");
    }
    dev.ok("release_sandbox", json!({})).await;
}

#[tokio::test]
async fn three_900_mb_experiments_leave_the_daemons_peak_within_the_memory_budget() {
    let home = Home::new();
    // One GiB for every experiment together, and room to wait for it.
    let daemon = daemon_with(
        &home,
        &[
            ("SANDBOXD_EXPERIMENTS__MEMORY_BUDGET_MB", "1024"),
            ("SANDBOXD_EXPERIMENTS__ADMISSION_WAIT_MS", "60000"),
        ],
    );
    let outcome = AssertUnwindSafe(three_big_experiments(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn three_big_experiments(daemon: &TestDaemon) {
    let mut agents = Vec::new();
    for _ in 0..3 {
        agents.push(developer_with_sandbox(daemon).await.0);
    }
    // The guest compiles on the first run; its peak is not an experiment's.
    agents[0]
        .ok("run_experiment", json!({"script": "print(1)"}))
        .await;
    let before = reset_peak(daemon);
    let big = json!({
        "script": "b = bytearray(900_000_000)\nprint(len(b))",
        "limits": {"memory_bytes": 1024 * MIB, "wall_ms": 60_000},
    });
    let runs = agents
        .iter()
        .map(|agent| agent.call("run_experiment", big.clone()));
    let answers = futures::future::join_all(runs).await;
    let growth = status_bytes(daemon, "VmHWM:").saturating_sub(before);
    eprintln!(
        "three 900 MB experiments raised the daemon's peak by {} MiB",
        growth / MIB
    );
    for (envelope, _) in &answers {
        assert_eq!(envelope["status"], "ok", "{envelope}");
        assert_eq!(
            envelope["evidence"]["output"].as_str().map(str::trim),
            Some("900000000"),
            "{envelope}"
        );
    }
    // One at a time within the 1 GiB budget (at once they added 2.6 GiB).
    assert!(
        growth < (1024 + 192) * MIB,
        "the daemon's peak grew by {} MiB",
        growth / MIB
    );
    for agent in &agents {
        agent.ok("release_sandbox", json!({})).await;
    }
}

#[tokio::test]
async fn a_50_mb_traceback_comes_back_cut() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(async {
        let (dev, _) = developer_with_sandbox(&daemon).await;
        let raised = dev
            .refused(
                "run_experiment",
                json!({"script": "print('so far')\nraise Exception('y' * 50_000_000)"}),
            )
            .await;
        let text = raised.to_string();
        let start: String = text.chars().take(500).collect();
        assert_eq!(raised["error"], "script_error", "{start}");
        eprintln!("a 50 MB traceback answered {} bytes", text.len());
        // Output's default cap (64 Ki characters) and the envelope's own words.
        assert!(text.len() < 80 * 1024, "{} bytes", text.len());
        assert!(message(&raised).contains("characters left out"), "{start}");
        assert!(message(&raised).contains("so far"));
        dev.ok("release_sandbox", json!({})).await;
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

#[tokio::test]
async fn caps_met_answer_limit_exceeded_naming_their_setting() {
    let home = Home::new();
    let daemon = daemon_with(
        &home,
        &[
            ("SANDBOXD_EXPERIMENTS__MAX_CONCURRENT", "2"),
            ("SANDBOXD_EXPERIMENTS__MAX_CONCURRENT_PER_AGENT", "1"),
            ("SANDBOXD_EXPERIMENTS__ADMISSION_WAIT_MS", "300"),
            ("SANDBOXD_BROKER__MAX_HEAVY_CALLS_PER_AGENT", "2"),
        ],
    );
    let outcome = AssertUnwindSafe(caps_met(&daemon)).catch_unwind().await;
    stop_and_clean_up(daemon, &home, outcome);
}

fn assert_cap(envelope: &Value, setting: &str) {
    assert_eq!(envelope["error"], "limit_exceeded", "{envelope}");
    assert_eq!(envelope["retryable"], true, "{envelope}");
    assert!(message(envelope).contains(setting), "{envelope}");
}

async fn caps_met(daemon: &TestDaemon) {
    let (a, sandbox) = developer_with_sandbox(daemon).await;
    let (b, _) = developer_with_sandbox(daemon).await;
    let (c, _) = developer_with_sandbox(daemon).await;
    let (d, _) = developer_with_sandbox(daemon).await;
    a.ok("run_experiment", json!({"script": "print(1)"})).await;
    // The most fuel allowed, so the wall clock is what stops the spin on any CPU.
    let spin = json!({
        "script": "while True:\n    pass",
        "limits": {"wall_ms": 3000, "fuel": 200_000_000_000u64},
    });
    let sleep = json!({"service": "postgres", "statement": "SELECT pg_sleep(3)"});

    let a_spins = a.call("run_experiment", spin.clone());
    let b_spins = b.call("run_experiment", spin.clone());
    let c_sleeps = async {
        tokio::join!(
            c.call("sandbox_sql", sleep.clone()),
            c.call("sandbox_sql", sleep.clone())
        )
    };
    let refusals = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let per_agent = a.refused("run_experiment", spin.clone()).await;
        let started = Instant::now();
        let global = d.refused("run_experiment", spin.clone()).await;
        let waited = started.elapsed();
        let heavy = c.refused("sandbox_sql", sleep.clone()).await;
        (per_agent, global, waited, heavy)
    };
    let (a_ran, b_ran, (c1, c2), (per_agent, global, waited, heavy)) =
        tokio::join!(a_spins, b_spins, c_sleeps, refusals);

    assert_cap(&per_agent, "experiments.max_concurrent_per_agent = 1");
    assert_cap(&global, "experiments.max_concurrent = 2");
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    // C's two statements under way fill its heavy calls.
    assert_cap(&heavy, "broker.max_heavy_calls_per_agent = 2");
    for (envelope, _) in [a_ran, b_ran] {
        assert_eq!(envelope["error"], "limit_exceeded", "{envelope}");
        assert!(message(&envelope).contains("wall_ms"), "{envelope}");
    }
    for (envelope, _) in [c1, c2] {
        assert_eq!(envelope["status"], "ok", "{envelope}");
    }
    // Nothing stays counted: each agent has its room back.
    a.ok("run_experiment", json!({"script": "print(2)"})).await;
    c.ok(
        "sandbox_sql",
        json!({"service": "postgres", "statement": "SELECT 1"}),
    )
    .await;
    let password = entry(&sandbox, "postgres")["password"]
        .as_str()
        .expect("password");
    for text in [per_agent.to_string(), global.to_string(), heavy.to_string()] {
        assert!(!text.contains(password), "a password leaked: {text}");
    }
    for agent in [&a, &b, &c, &d] {
        agent.ok("release_sandbox", json!({})).await;
    }
}

#[tokio::test]
async fn another_agents_cheap_verb_stays_fast_beside_busy_experiments() {
    let home = Home::new();
    // Caps out of the way: what is measured is that busy guests never hold the daemon's own
    // threads.
    let daemon = daemon_with(
        &home,
        &[
            ("SANDBOXD_EXPERIMENTS__MAX_CONCURRENT", "8"),
            ("SANDBOXD_EXPERIMENTS__MAX_CONCURRENT_PER_AGENT", "8"),
            ("SANDBOXD_BROKER__MAX_HEAVY_CALLS_PER_AGENT", "8"),
        ],
    );
    let outcome = AssertUnwindSafe(cheap_beside_busy(&daemon))
        .catch_unwind()
        .await;
    stop_and_clean_up(daemon, &home, outcome);
}

async fn cheap_beside_busy(daemon: &TestDaemon) {
    let (busy, _) = developer_with_sandbox(daemon).await;
    let (other, _) = developer_with_sandbox(daemon).await;
    busy.ok("run_experiment", json!({"script": "print(1)"}))
        .await;
    let timed = || async {
        let mut took = Vec::new();
        for _ in 0..7 {
            let started = Instant::now();
            other.ok("sandbox_info", json!({})).await;
            took.push(started.elapsed());
        }
        took.sort();
        took
    };
    let quiet = timed().await;
    // The most fuel allowed, so the wall clock is what stops the spin on any CPU (20e9, the
    // default, ran out first on a quiet machine).
    let spin = json!({
        "script": "while True:\n    pass",
        "limits": {"wall_ms": 10_000, "fuel": 200_000_000_000u64},
    });
    let spinning =
        futures::future::join_all((0..8).map(|_| busy.call("run_experiment", spin.clone())));
    let measured = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        timed().await
    };
    let (spun, loaded) = tokio::join!(spinning, measured);
    eprintln!("sandbox_info alone: {quiet:?}; beside 8 busy experiments: {loaded:?}");
    for (envelope, _) in &spun {
        assert_eq!(envelope["error"], "limit_exceeded", "{envelope}");
        assert!(message(envelope).contains("wall_ms"), "{envelope}");
    }
    // All but the slowest of seven: one scheduling hiccup of a shared machine is not the
    // daemon's (busy guests on the daemon's own threads made most calls take seconds).
    assert!(
        loaded[5] < Duration::from_millis(200),
        "sandbox_info took {:?} beside 8 busy experiments",
        loaded
    );
    for agent in [&busy, &other] {
        agent.ok("release_sandbox", json!({})).await;
    }
}
