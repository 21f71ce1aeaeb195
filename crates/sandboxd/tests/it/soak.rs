//! Restarts as agents see them, through the official MCP Python SDK 2.x: the daemon is killed
//! (SIGKILL) and started again on the same port and state while agents work.
//!
//! - One agent's 2025-11-25 session outlives two crashes as the SDK sees it: no new
//!   `initialize`, one session id throughout; a call in flight during a crash fails with the
//!   "answer is lost" error (never waits forever), and the same call made again works; a
//!   repeated `i_am_done` answers the same success.
//! - A soak: agents loop through tasks (claim, sandbox, SQL, done) while the daemon is crashed
//!   and restarted three times; no call hangs, every call succeeds (made again where the SDK
//!   reported a restart), agents finish tasks after every restart, and no sandbox is left.

use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use serde_json::Value;

use crate::support::{
    Home, TestDaemon, python_venv, sandbox_dirs, spawn_daemon, spawn_daemon_at, stop_and_clean_up,
    unique,
};

const RESTART_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_restart.py");
const SOAK_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_soak.py");

/// Kills the daemon with SIGKILL and starts it again on the same address and state.
fn crash_and_restart(daemon: &mut TestDaemon, home: &Home) {
    let addr = daemon.addr.clone();
    daemon.crash();
    *daemon = spawn_daemon_at(home, &addr);
}

fn python(venv: &Path, script: &str, args: &[&str]) -> Command {
    let mut command = Command::new(venv);
    command
        .arg(script)
        .args(args)
        .env_remove("SANDBOXD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// Reads `child`'s stdout to its end and waits for it, killing it past `limit` (a client that
/// hangs fails the test instead of holding it); its last line, as JSON.
fn report_of(mut child: Child, lines: &mut impl Iterator<Item = String>, limit: Duration) -> Value {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let finished = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            while !finished.load(Ordering::SeqCst) {
                if started.elapsed() > limit {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let mut last = String::new();
    for line in lines.by_ref() {
        last = line;
    }
    let status = child.wait().expect("python");
    finished.store(true, Ordering::SeqCst);
    watchdog.join().expect("watchdog");
    assert!(
        status.success(),
        "the Python client failed or was killed past {limit:?}: {status}"
    );
    serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

fn call<'a>(report: &'a Value, index: usize, verb: &str) -> &'a Value {
    let call = &report["calls"][index];
    assert_eq!(call["verb"], verb, "{report}");
    call
}

fn ok(call: &Value) {
    assert_eq!(call["is_error"], false, "{call}");
    assert_eq!(call["structured"]["status"], "ok", "{call}");
}

#[tokio::test]
async fn an_sdk_session_outlives_daemon_crashes_and_a_call_cut_by_one_fails_instead_of_hanging() {
    let Some(sdk) = python_venv("mcp-2.3.0") else {
        return;
    };
    let home = Home::new();
    let mut daemon = spawn_daemon(&home);
    let project = unique("restart");
    daemon.project(&project, &["postgres"]).await;
    daemon.task(&project).await;
    let (token, _) = daemon.spawn_agent("developer", &project).await;
    let url = format!("{}/mcp", daemon.url);
    let outcome = AssertUnwindSafe(async {
        let mut child = python(&sdk, RESTART_SCRIPT, &[&url])
            .env("SANDBOXD_AGENT_TOKEN", &token)
            .spawn()
            .expect("python");
        let mut stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut lines = stdout.lines().map_while(Result::ok);
        for _ in 0..2 {
            let line = lines.next().expect("the client asks for a crash");
            assert_eq!(line, "kill");
            crash_and_restart(&mut daemon, &home);
            writeln!(stdin, "back").expect("tell the client");
        }
        let report = tokio::task::spawn_blocking(move || {
            report_of(child, &mut lines, Duration::from_secs(120))
        })
        .await
        .expect("join");
        assert_eq!(report["protocol"], "2025-11-25", "{report}");
        ok(call(&report, 0, "give_me_work"));
        ok(call(&report, 1, "request_sandbox"));
        ok(call(&report, 2, "sandbox_sql"));
        let cut = call(&report, 3, "sandbox_sql");
        assert!(
            cut["mcp_error"]
                .as_str()
                .is_some_and(|m| m.contains("answer is lost")),
            "the call in flight during the crash: {cut}"
        );
        ok(call(&report, 4, "sandbox_sql"));
        let done = call(&report, 5, "i_am_done");
        ok(done);
        let again = call(&report, 6, "i_am_done");
        ok(again);
        assert_eq!(again["structured"]["next"], done["structured"]["next"]);
        assert_eq!(
            again["structured"]["task_id"],
            done["structured"]["task_id"]
        );

        let sent = report["sent"].as_array().expect("sent");
        let initializes = sent.iter().filter(|s| s["method"] == "initialize").count();
        assert_eq!(initializes, 1, "the SDK opened a new session: {sent:?}");
        let sessions: std::collections::BTreeSet<&str> =
            sent.iter().filter_map(|s| s["session"].as_str()).collect();
        assert_eq!(sessions.len(), 1, "one session throughout: {sessions:?}");
        assert!(daemon.sandboxes().await.is_empty(), "i_am_done released it");
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// Agents, the seconds they work, and when the daemon is crashed (seconds after they start).
const AGENTS: usize = 4;
const SOAK_SECONDS: u64 = 50;
const CRASHES_AT: [u64; 3] = [10, 22, 34];
const TASKS: usize = 1000;

#[tokio::test]
async fn agents_working_through_three_daemon_crashes_see_no_hung_call_no_failure_and_leave_nothing()
{
    let Some(sdk) = python_venv("mcp-2.3.0") else {
        return;
    };
    let home = Home::new();
    let mut daemon = spawn_daemon(&home);
    let project = unique("soak");
    daemon.project(&project, &["postgres"]).await;
    // More than the agents finish in SOAK_SECONDS (they did 200 in ~25 s once audit rows
    // left the answer path): an agent that runs out of work stops, and would look like one
    // that could not go on after a crash.
    for _ in 0..TASKS {
        daemon.task(&project).await;
    }
    let mut tokens = Vec::new();
    for _ in 0..AGENTS {
        tokens.push(daemon.spawn_agent("developer", &project).await.0);
    }
    let outcome = AssertUnwindSafe(async {
        let mut child = python(&sdk, SOAK_SCRIPT, &[&daemon.url, &SOAK_SECONDS.to_string()])
            .env("SANDBOXD_SOAK_TOKENS", tokens.join(","))
            .spawn()
            .expect("python");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let started = Instant::now();
        let mut crashes = Vec::new();
        for at in CRASHES_AT {
            let wait = Duration::from_secs(at).saturating_sub(started.elapsed());
            tokio::time::sleep(wait).await;
            crash_and_restart(&mut daemon, &home);
            crashes.push(now());
        }
        let report = tokio::task::spawn_blocking(move || {
            let mut lines = stdout.lines().map_while(Result::ok);
            report_of(child, &mut lines, Duration::from_secs(SOAK_SECONDS + 90))
        })
        .await
        .expect("join");
        eprintln!("soak: {report}");
        let agents = report["agents"].as_array().expect("agents");
        assert_eq!(agents.len(), AGENTS);
        for agent in agents {
            assert_eq!(agent["hung"], serde_json::json!([]), "hung calls: {agent}");
            assert_eq!(
                agent["failures"],
                serde_json::json!([]),
                "failed calls: {agent}"
            );
        }
        let finished: Vec<f64> = agents
            .iter()
            .flat_map(|a| a["cycles"].as_array().expect("cycles").clone())
            .filter_map(|at| at.as_f64())
            .collect();
        assert!(
            finished.len() < TASKS,
            "the agents finished all {TASKS} tasks: the soak ran out of work, seed more"
        );
        for (crash, at) in crashes.iter().zip(CRASHES_AT) {
            assert!(
                finished.iter().any(|done| done > crash),
                "no task finished after the crash at {at} s: {report}"
            );
        }
        let last = crashes.last().expect("crashes");
        for agent in agents {
            assert!(
                agent["cycles"]
                    .as_array()
                    .expect("cycles")
                    .iter()
                    .any(|done| done.as_f64().is_some_and(|done| done > *last)),
                "an agent finished no task after the last crash: {agent}"
            );
        }
        assert!(
            daemon.sandboxes().await.is_empty(),
            "every sandbox released: {:?}",
            daemon.sandboxes().await
        );
        daemon.stop();
        assert_eq!(
            sandbox_dirs(&home),
            Vec::<std::path::PathBuf>::new(),
            "no instance left behind"
        );
    })
    .catch_unwind()
    .await;
    stop_and_clean_up(daemon, &home, outcome);
}
