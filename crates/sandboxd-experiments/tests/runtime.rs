//! The runtime against the real guest (built by scripts/build-guest.sh) with no database behind
//! `sql()`: what the sandbox lets a script do, and how each limit ends a run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_domain::verbs::ExperimentLimits;
use sandboxd_experiments::{
    Capacity, Ending, Full, GuestFiles, Limit, Limits, Policy, Run, Runtime, SqlParam, SqlPort,
    SqlRefusal, SqlRows, Unavailable,
};

/// `sql()` with nothing behind it: every statement is refused by "the server".
struct NoDatabase;

#[async_trait::async_trait]
impl SqlPort for NoDatabase {
    async fn run(
        &mut self,
        statement: &str,
        _: &[SqlParam],
        _: usize,
        _: Duration,
    ) -> Result<SqlRows, SqlRefusal> {
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
    runtime_with(Capacity::default()).await
}

async fn runtime_with(capacity: Capacity) -> Arc<Runtime> {
    let runtime = Runtime::start_with(guest_files(), Policy::default(), capacity).expect("runtime");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_traceback_comes_back_cut_like_output() {
    let runtime = runtime().await;
    let run = run_one(
        &runtime,
        "print('before')\nraise Exception('y' * 50_000_000 + ' the end')",
    )
    .await;
    let Ending::ScriptError { traceback } = &run.ending else {
        panic!("{:?}", run.ending);
    };
    let chars = traceback.chars().count();
    let cap = limits(ExperimentLimits::default()).output_chars as usize;
    assert!(chars <= cap + 80, "a traceback of {chars} characters");
    assert!(traceback.starts_with("Traceback"), "{}", &traceback[..200]);
    assert!(traceback.contains("characters left out"));
    assert!(
        traceback.trim_end().ends_with(" the end"),
        "the error's own end is kept"
    );
    assert_eq!(run.report.output, "before\n");

    // A script's own exit code and a limit's text are cut the same way.
    let exited = run_one(&runtime, "import sys\nsys.exit('z' * 10_000_000)").await;
    let Ending::ScriptError { traceback } = &exited.ending else {
        panic!("{:?}", exited.ending);
    };
    assert!(traceback.chars().count() <= cap + 80, "{}", traceback.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_script_makes_the_interpreter_answer_is_bounded() {
    let runtime = runtime().await;
    // The script reaches into the interpreter's own capture: its answer is 100 MB.
    let inflated = run_one(
        &runtime,
        "import json\njson.dumps = lambda *a, **k: 'x' * 100_000_000\nprint('hi')",
    )
    .await;
    let Ending::ScriptError { traceback } = &inflated.ending else {
        panic!("{:?}", inflated.ending);
    };
    assert!(traceback.contains("100000000 bytes"), "{traceback}");
    assert!(traceback.len() < 1024, "{traceback}");
    assert!(inflated.report.output.is_empty());

    // A 10 MB statement is refused without being read; the script goes on.
    let long = run_one(
        &runtime,
        "try:\n    sql('SELECT ' + 'x' * 10_000_000)\nexcept SqlError as e:\n    print(e)",
    )
    .await;
    assert_eq!(long.ending, Ending::Completed, "{:?}", long.ending);
    assert!(
        long.report.output.contains("10000007 bytes"),
        "{}",
        long.report.output
    );

    // Calls past the first thousand are counted, not listed.
    let many = run(
        &runtime,
        "for i in range(1500):\n    try:\n        sql('SELECT 1')\n    except SqlError:\n        pass",
        ExperimentLimits {
            sql_calls: Some(5000),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(many.ending, Ending::Completed, "{:?}", many.ending);
    assert_eq!(many.report.sql_calls.len(), 1000);
    assert_eq!(many.report.sql_calls_dropped, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_the_capacity_are_refused_naming_the_cap() {
    const MIB: u64 = 1024 * 1024;
    let runtime = runtime_with(Capacity {
        max_runs: 2,
        memory_budget_bytes: 600 * MIB,
        wait: Duration::from_millis(300),
        threads: 1,
    })
    .await;
    let busy = |memory_mb: u64| {
        let runtime = runtime.clone();
        async move {
            runtime
                .run(
                    "while True:\n    pass",
                    limits(ExperimentLimits {
                        wall_ms: Some(2_000),
                        memory_bytes: Some(memory_mb * MIB),
                        ..Default::default()
                    }),
                    Box::new(NoDatabase),
                )
                .await
        }
    };
    // Too much memory for the whole budget: refused at once.
    let never = busy(1024).await.expect_err("over the budget");
    assert!(
        matches!(never, Unavailable::Full(Full::MemoryNeverFits { .. })),
        "{never:?}"
    );
    let first = tokio::spawn(busy(512));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // 512 + 128 MiB is over the 600 MiB budget: waits 300 ms, then is refused.
    let started = Instant::now();
    let memory = busy(128).await.expect_err("over the budget");
    assert!(
        matches!(memory, Unavailable::Full(Full::Memory { .. })),
        "{memory:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_millis(1_500));
    let second = tokio::spawn(busy(64));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let runs = busy(64).await.expect_err("two are running");
    assert!(
        matches!(runs, Unavailable::Full(Full::Runs { max: 2, .. })),
        "{runs:?}"
    );
    for handle in [first, second] {
        let ran = handle.await.expect("joined").expect("ran");
        assert!(
            matches!(
                ran.ending,
                Ending::LimitHit {
                    limit: Limit::WallMs,
                    ..
                }
            ),
            "{:?}",
            ran.ending
        );
    }
    // Room again once they ended.
    let again = runtime
        .run(
            "print(3)",
            limits(ExperimentLimits::default()),
            Box::new(NoDatabase),
        )
        .await
        .expect("room again");
    assert_eq!(again.report.output, "3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_guests_leave_the_callers_threads_free() {
    let runtime = runtime().await;
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                runtime
                    .run(
                        "while True:\n    pass",
                        limits(ExperimentLimits {
                            wall_ms: Some(3_000),
                            ..Default::default()
                        }),
                        Box::new(NoDatabase),
                    )
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A task of the caller's runtime with many await points, as a verb has: each one gives
    // its worker back, and here each comes back at once.
    let took = tokio::spawn(async {
        let started = Instant::now();
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        started.elapsed()
    })
    .await
    .expect("joined");
    eprintln!("50 turns of the caller's runtime beside 8 busy guests: {took:?}");
    assert!(took < Duration::from_millis(200), "{took:?}");
    for run in runs {
        let ran = run.await.expect("joined").expect("ran");
        assert!(
            matches!(
                ran.ending,
                Ending::LimitHit {
                    limit: Limit::WallMs,
                    ..
                }
            ),
            "{:?}",
            ran.ending
        );
    }
}

/// `sql()` that answers its params back as one row (`p1`, `p2`, …), as the server had them.
struct Echo;

#[async_trait::async_trait]
impl SqlPort for Echo {
    async fn run(
        &mut self,
        _: &str,
        params: &[SqlParam],
        _: usize,
        _: Duration,
    ) -> Result<SqlRows, SqlRefusal> {
        let value = |param: &SqlParam| match param {
            SqlParam::Null => serde_json::Value::Null,
            SqlParam::Bool(b) => format!("bool {b}").into(),
            SqlParam::Int(n) => format!("int {n}").into(),
            SqlParam::Float(f) => format!("float {f}").into(),
            SqlParam::Text(text) => format!("text {text}").into(),
        };
        Ok(SqlRows {
            columns: (1..=params.len()).map(|n| format!("p{n}")).collect(),
            rows: vec![params.iter().map(value).collect()],
            affected: None,
            truncated: false,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_reach_the_port_as_typed_values_apart_from_the_statement() {
    let runtime = runtime().await;
    let script = r#"
row = sql("SELECT $1, $2, $3, $4, $5", ["it's'; drop table x; --", 7, 2.5, True, None])[0]
print(row["p1"])
print(row["p2"], row["p3"], row["p4"], row["p5"])
print(len(sql("SELECT 1")))
for wrong in ({"a": 1}, [object()], [2**64]):
    try:
        sql("SELECT $1", wrong)
    except TypeError as e:
        print("refused:", e)
"#;
    let run = runtime
        .run(script, limits(ExperimentLimits::default()), Box::new(Echo))
        .await
        .expect("the runtime ran it");
    assert_eq!(run.ending, Ending::Completed, "{run:?}");
    let lines: Vec<&str> = run.report.output.lines().collect();
    assert_eq!(lines[0], "text it's'; drop table x; --", "{lines:?}");
    assert_eq!(lines[1], "int 7 float 2.5 bool true None", "{lines:?}");
    assert_eq!(lines[2], "1", "{lines:?}");
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(
        lines[3..].iter().all(|l| l.starts_with("refused: ")),
        "{lines:?}"
    );
    // The statement the evidence shows is the statement: no value was spliced into it.
    assert_eq!(
        run.report.sql_calls[0].statement,
        "SELECT $1, $2, $3, $4, $5"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceback_starts_at_the_script_and_shows_none_of_the_guest() {
    let runtime = runtime().await;
    let run = run_one(&runtime, "def load():\n    sql('SELEC 1')\n\nload()").await;
    let Ending::ScriptError { traceback } = &run.ending else {
        panic!("{run:?}");
    };
    let frames: Vec<&str> = traceback
        .lines()
        .filter(|l| l.trim_start().starts_with("File "))
        .collect();
    assert_eq!(frames.len(), 2, "{traceback}");
    assert!(frames[0].contains("line 4"), "{traceback}");
    assert!(
        frames.iter().all(|f| f.contains("<experiment>")),
        "{traceback}"
    );
    assert!(!traceback.contains("app.py"), "{traceback}");
    assert!(
        traceback
            .trim_end()
            .ends_with("SqlError: no database here (7 bytes)"),
        "{traceback}"
    );
}
