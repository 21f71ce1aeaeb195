//! The runtime against the real guest (built by scripts/build-guest.sh) with no database behind
//! `sql()`: what the sandbox lets a script do, and how each limit ends a run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_domain::verbs::ExperimentLimits;
use sandboxd_experiments::{
    Ending, GuestFiles, Limit, Limits, Policy, Run, Runtime, SqlPort, SqlRefusal, SqlRows,
    Unavailable,
};

/// `sql()` with nothing behind it: every statement is refused by "the server".
struct NoDatabase;

#[async_trait::async_trait]
impl SqlPort for NoDatabase {
    async fn run(&mut self, statement: &str, _: usize, _: Duration) -> Result<SqlRows, SqlRefusal> {
        Err(SqlRefusal::Server(format!(
            "no database here ({} bytes)",
            statement.len()
        )))
    }
}

fn guest_files() -> GuestFiles {
    GuestFiles {
        component: sandboxd_testkit::experiment_guest(),
        cache_dir: sandboxd_testkit::experiment_cache(),
    }
}

async fn runtime() -> Arc<Runtime> {
    let runtime = Runtime::start(guest_files(), Policy::default()).expect("runtime");
    let started = Instant::now();
    runtime
        .wait_ready(Duration::from_secs(600))
        .await
        .expect("guest ready");
    eprintln!("guest ready in {:?}", started.elapsed());
    runtime
}

fn limits(request: ExperimentLimits) -> Limits {
    Policy::default().resolve(&request).expect("limits")
}

async fn run(runtime: &Runtime, script: &str, request: ExperimentLimits) -> Run {
    runtime
        .run(script, limits(request), Box::new(NoDatabase))
        .await
        .expect("the runtime ran it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_prints_and_its_output_comes_back() {
    let runtime = runtime().await;
    let run = run(
        &runtime,
        "import math\nprint(1)\nprint(math.sqrt(16))",
        ExperimentLimits::default(),
    )
    .await;
    assert_eq!(run.ending, Ending::Completed, "{run:?}");
    assert_eq!(run.report.output, "1\n4.0\n");
    for _ in 0..5 {
        let started = Instant::now();
        let again = try_run(&runtime, "print(1)").await.expect("ran");
        eprintln!(
            "warm run: {:?} ({:?})",
            started.elapsed(),
            again.report.fuel_used
        );
    }
}

/// Runs `script` with a 1 s wall time and checks it was stopped there, within the margin.
async fn stopped_at_one_second(script: &str) {
    let runtime = runtime().await;
    let started = Instant::now();
    let run = run(
        &runtime,
        script,
        ExperimentLimits {
            wall_ms: Some(1_000),
            ..Default::default()
        },
    )
    .await;
    let took = started.elapsed();
    assert!(
        matches!(
            run.ending,
            Ending::LimitHit {
                limit: Limit::WallMs,
                ..
            }
        ),
        "{run:?}"
    );
    assert!(took < Duration::from_millis(1_300), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_loop_stops_at_the_wall_time() {
    stopped_at_one_second("while True:\n    pass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_past_the_wall_time_is_stopped_at_it() {
    // A blocking host call (WASI's poll), which epoch interruption alone would not stop.
    stopped_at_one_second("import time\nprint('before')\ntime.sleep(30)\nprint('after')").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_has_no_files_network_environment_or_processes() {
    let runtime = runtime().await;
    let script = r#"
import os
for name, attempt in [
    ("open", lambda: open("/etc/passwd").read()),
    ("listdir", lambda: os.listdir("/")),
    ("socket", lambda: __import__("socket").socket().connect(("127.0.0.1", 5432))),
    ("subprocess", lambda: __import__("subprocess").run(["ls"])),
    ("system", lambda: os.system("ls")),
    ("fork", lambda: os.fork()),
]:
    try:
        attempt()
        print(name, "WORKED")
    except BaseException as e:
        print(name, "failed", type(e).__name__)
print("environ", dict(os.environ))
"#;
    let run = run(&runtime, script, ExperimentLimits::default()).await;
    assert_eq!(run.ending, Ending::Completed, "{run:?}");
    eprintln!("{}", run.report.output);
    assert!(
        !run.report.output.contains("WORKED"),
        "{}",
        run.report.output
    );
    assert!(
        run.report.output.contains("environ {}"),
        "{}",
        run.report.output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_is_stopped_at_the_memory_limit() {
    let runtime = runtime().await;
    let run = run(
        &runtime,
        "blocks = []\nwhile True:\n    blocks.append('x' * (16 * 1024 * 1024))",
        ExperimentLimits {
            memory_bytes: Some(128 * 1024 * 1024),
            ..Default::default()
        },
    )
    .await;
    assert!(
        matches!(
            run.ending,
            Ending::LimitHit {
                limit: Limit::MemoryBytes,
                ..
            }
        ),
        "{run:?}"
    );
    assert!(
        run.report.memory_peak_bytes <= 128 * 1024 * 1024,
        "{:?}",
        run.report
    );
    let big = run_one(&runtime, "s = 'x' * (1024 ** 3)\nprint(len(s))").await;
    assert!(
        matches!(
            big.ending,
            Ending::LimitHit {
                limit: Limit::MemoryBytes,
                ..
            }
        ),
        "{big:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_is_bounded_by_fuel() {
    let runtime = runtime().await;
    let run = run(
        &runtime,
        "n = 0\nwhile True:\n    n += 1",
        ExperimentLimits {
            fuel: Some(50_000_000),
            ..Default::default()
        },
    )
    .await;
    assert!(
        matches!(
            run.ending,
            Ending::LimitHit {
                limit: Limit::Fuel,
                ..
            }
        ),
        "{run:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_and_huge_output_are_bounded() {
    let runtime = runtime().await;
    let deep = run_one(&runtime, "def f(n):\n    return f(n + 1)\nf(0)").await;
    let Ending::ScriptError { traceback } = &deep.ending else {
        panic!("{deep:?}");
    };
    assert!(
        traceback.contains("RecursionError") || traceback.contains("stack"),
        "{traceback}"
    );
    let c_deep = run_one(
        &runtime,
        "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1)\nf(0)",
    )
    .await;
    // Python's frames live on its heap: with the recursion limit lifted, memory runs out first.
    assert!(
        matches!(
            c_deep.ending,
            Ending::ScriptError { .. }
                | Ending::LimitHit {
                    limit: Limit::MemoryBytes,
                    ..
                }
        ),
        "{c_deep:?}"
    );

    let loud = run(
        &runtime,
        "for i in range(100000):\n    print('line', i)",
        ExperimentLimits {
            output_chars: Some(1000),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(loud.ending, Ending::Completed, "{loud:?}");
    assert_eq!(loud.report.output.chars().count(), 1000);
    assert!(
        loud.report.output_dropped > 1_000_000,
        "{:?}",
        loud.report.output_dropped
    );
    assert!(loud.report.limits_met.contains(&Limit::OutputChars));
    // Lifting the guest's own cap does not lift the host's.
    let sneaky = run(
        &runtime,
        "import sys\nsys.stdout.limit = 10**9\nprint('y' * 100000)",
        ExperimentLimits {
            output_chars: Some(1000),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        sneaky.report.output.chars().count(),
        1000,
        "{:?}",
        sneaky.ending
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_answers_its_traceback_and_output_so_far() {
    let runtime = runtime().await;
    let run = run_one(&runtime, "print('so far')\nx = {}\nx['missing']").await;
    let Ending::ScriptError { traceback } = &run.ending else {
        panic!("{run:?}");
    };
    assert!(traceback.contains("line 3"), "{traceback}");
    assert!(traceback.contains("x['missing']"), "{traceback}");
    assert!(traceback.contains("KeyError"), "{traceback}");
    assert!(!traceback.contains("app.py"), "{traceback}");
    assert_eq!(run.report.output, "so far\n");
    let refused = run_one(
        &runtime,
        "try:\n    sql('SELECT 1')\nexcept SqlError as e:\n    print('refused:', e)",
    )
    .await;
    assert_eq!(refused.ending, Ending::Completed, "{refused:?}");
    assert!(
        refused.report.output.contains("no database here"),
        "{:?}",
        refused.report
    );
    assert_eq!(refused.report.sql_calls.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_calls_are_counted_and_stopped_at_their_limit() {
    let runtime = runtime().await;
    let run = run(
        &runtime,
        "for i in range(10):\n    try:\n        sql('SELECT 1')\n    except Exception:\n        pass",
        ExperimentLimits { sql_calls: Some(3), ..Default::default() },
    )
    .await;
    assert!(
        matches!(
            run.ending,
            Ending::LimitHit {
                limit: Limit::SqlCalls,
                ..
            }
        ),
        "{run:?}"
    );
    assert_eq!(run.report.sql_calls.len(), 4, "{:?}", run.report.sql_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_runs_each_keep_their_own_limits() {
    let runtime = runtime().await;
    let runs = (0..8).map(|i| {
        let runtime = runtime.clone();
        async move {
            let (script, wall) = if i % 2 == 0 {
                ("while True:\n    pass".to_owned(), 500 + 100 * i)
            } else {
                (format!("print(sum(range({i} * 1000)))"), 10_000)
            };
            let started = Instant::now();
            let run = runtime
                .run(
                    &script,
                    limits(ExperimentLimits {
                        wall_ms: Some(wall),
                        ..Default::default()
                    }),
                    Box::new(NoDatabase),
                )
                .await
                .expect("ran");
            (i, wall, run, started.elapsed())
        }
    });
    for (i, wall, run, took) in futures::future::join_all(runs).await {
        if i % 2 == 0 {
            assert!(
                matches!(
                    run.ending,
                    Ending::LimitHit {
                        limit: Limit::WallMs,
                        ..
                    }
                ),
                "{i}: {run:?}"
            );
            assert!(took >= Duration::from_millis(wall), "{i}: {took:?}");
            assert!(took < Duration::from_millis(wall + 400), "{i}: {took:?}");
        } else {
            assert_eq!(run.ending, Ending::Completed, "{i}: {run:?}");
            let expected: u64 = (0..i * 1000).sum();
            assert_eq!(run.report.output.trim(), expected.to_string());
        }
    }
}

/// A run with the default limits, as the runtime answered it.
async fn try_run(runtime: &Runtime, script: &str) -> Result<Run, Unavailable> {
    runtime
        .run(
            script,
            limits(ExperimentLimits::default()),
            Box::new(NoDatabase),
        )
        .await
}

async fn run_one(runtime: &Runtime, script: &str) -> Run {
    run(runtime, script, ExperimentLimits::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_compiled_guest_is_a_retryable_failure_and_is_compiled_again() {
    // A cache of its own, seeded with the shared cache's compiled guest, then damaged.
    let shared = guest_files();
    runtime().await; // the shared cache holds a compiled guest
    let cache = tempfile::tempdir().expect("tempdir");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&shared.cache_dir).expect("shared cache") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        let copy = cache.path().join(&name);
        std::fs::copy(&path, &copy).expect("copy");
        if path.extension().is_some_and(|e| e == "cwasm") {
            let mut bytes = std::fs::read(&copy).expect("read");
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
            std::fs::write(&copy, bytes).expect("damage");
            damaged += 1;
        }
    }
    assert!(
        damaged > 0,
        "no compiled guest in {}",
        shared.cache_dir.display()
    );
    let files = GuestFiles {
        component: shared.component.clone(),
        cache_dir: cache.path().to_owned(),
    };
    let runtime = Runtime::start(files, Policy::default()).expect("runtime");
    let first = try_run(&runtime, "print(1)")
        .await
        .expect_err("a damaged guest cannot run");
    assert!(
        matches!(first, Unavailable::GuestCorrupt { .. }),
        "{first:?}"
    );
    assert!(first.to_string().contains("compiled again"), "{first}");
    // The next run compiles it again (answering "being compiled" while that takes longer than
    // its wall time), then runs.
    let started = Instant::now();
    let ran = loop {
        match try_run(&runtime, "print(2)").await {
            Ok(run) => break run,
            Err(Unavailable::Compiling { .. }) if started.elapsed() < Duration::from_secs(600) => {}
            Err(other) => panic!("{other:?}"),
        }
    };
    assert_eq!(ran.report.output, "2\n");
    drop(runtime);

    let missing = GuestFiles {
        component: cache.path().join("no-such-guest.wasm"),
        cache_dir: cache.path().to_owned(),
    };
    let runtime = Runtime::start(missing, Policy::default()).expect("runtime");
    let err = try_run(&runtime, "print(1)").await.expect_err("no guest");
    assert!(matches!(err, Unavailable::GuestMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-guest.wasm"), "{err}");
}
