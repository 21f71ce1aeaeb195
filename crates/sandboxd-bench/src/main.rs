//! `sandboxd-bench`: measures sandboxd's operations beside peers run in the same process, on the
//! same machine and images (SPEC §6), and prints p50/p95/p99 per scenario as markdown (and JSON
//! plus markdown with `--json-out`). A harness, not a test: it asserts nothing, it reports,
//! including whether each target was met.
//!
//! Parts:
//! - `process`: provision-to-ready and teardown per engine on the process backend (issue 2).
//! - `docker`: Docker cold provision beside the floor and testcontainers-rs, teardown, and where
//!   the time goes (issue 3); `containers` runs the floor and reads container timelines; `peer`
//!   is the testcontainers-rs worker; `ready` is the peers' authenticated readiness loop.
//! - `images`: the local images every Docker scenario runs, and the Docker backend's settings.
//! - `broker`: cache hit, release and N concurrent agents through one in-process broker.
//! - `daemon`: the real `sandboxd serve` driven over its admin API and MCP; its memory.
//! - `pools`: warm-pool hand-outs beside cold provisions through the real daemon, idle pool
//!   memory, and the daemon's RSS with 100 live sandboxes.
//! - `experiments`: run_experiment over MCP, cold and warm, and 100 sql() calls beside 100
//!   sandbox_sql calls.
//! - `clones`: the snapshot of a 50-table source and a clone's cold hand-out beside a plain
//!   cold provision and a hand-out from a warm pool of clones (issue 12); plan agreement, the
//!   snapshot and the hand-out on each clone data set of the testkit (issue 32).
//! - `handout`: issue 30's hand-out bench through the real daemon with the official MCP Python
//!   SDK as the client: warm hand-out over both revisions beside the daemon's own time, 20
//!   agents at once, a steady 2/s with refill lag, the Python client library, a restart. Not in
//!   the default set (over 10 minutes).
//! - `kubernetes`: a cold provision of postgres+redis as Pods beside the Docker backend on the
//!   same images (issue 11).
//! - `cleanup`: everything started is found again by name/label and removed, also on Ctrl-C.
//! - `stats`: percentiles and the report.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::{Parser, ValueEnum};
use sandboxd_domain::{EngineRef, engines};

mod agreement;
mod broker;
mod cleanup;
mod clones;
mod containers;
mod daemon;
mod docker;
mod experiments;
mod handout;
mod images;
mod kubernetes;
mod peer;
mod pools;
mod process;
mod ready;
mod reset;
mod stats;

use cleanup::Cleanup;
use stats::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Provision-to-ready and teardown per engine on the process backend.
    Process,
    /// Docker cold provision and teardown beside the floor and testcontainers-rs.
    Docker,
    /// request_sandbox cold, as a cache hit, and its release, through the broker.
    Cache,
    /// N agents requesting postgres+redis at once through one broker.
    Agents,
    /// `sandboxd serve` with N agents over MCP: latency and the daemon's memory.
    Daemon,
    /// reset_sandbox's work on a full sandbox, both backends.
    Reset,
    /// Warm pools through the real daemon: hand-out beside cold, idle pair memory, the
    /// daemon's RSS with 100 live sandboxes.
    Pools,
    /// run_experiment over MCP: trivial script cold and warm, 100 sql() calls beside 100
    /// sandbox_sql calls.
    Experiments,
    /// Clones: a 50-table source's snapshot, a clone's cold hand-out beside a plain one.
    Clones,
    /// Kubernetes: cold provision and teardown of Pods beside Docker on the same images.
    Kubernetes,
    /// Issue 30's hand-out bench with the official Python MCP SDK as the client: warm, 20 at
    /// once, steady 2/s, the Python client library, a restart; both backends. Not in the
    /// default set: it takes over 10 minutes.
    Handout,
}

/// What runs when `--scenarios` is not given: everything but `handout` (over 10 minutes).
const ALL: [Scenario; 10] = [
    Scenario::Process,
    Scenario::Reset,
    Scenario::Cache,
    Scenario::Agents,
    Scenario::Daemon,
    Scenario::Pools,
    Scenario::Experiments,
    Scenario::Clones,
    Scenario::Kubernetes,
    Scenario::Docker,
];

#[derive(Debug, Parser)]
#[command(about = "sandboxd's benchmark harness")]
struct Args {
    /// Scenarios to run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenarios: Vec<Scenario>,
    /// Runs per series (process backend, cache hits).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Runs per series on Docker (each run starts every subject once per peer).
    #[arg(long, default_value_t = 10)]
    docker_runs: usize,
    /// Concurrent agents (the agents and daemon scenarios).
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Runs of each warm series of the handout scenario (the client library's: at most 20).
    #[arg(long, default_value_t = 50)]
    handout_runs: usize,
    /// Backends of the handout scenario (Docker is skipped anyway when no engine answers).
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("process"), String::from("docker")])]
    handout_backends: Vec<String>,
    /// Length of the handout scenario's steady 2 hand-outs/s, in seconds.
    #[arg(long, default_value_t = 300)]
    steady_secs: u64,
    /// Rounds of N concurrent agents through the broker.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// A smoke run: 5 runs, 3 on Docker, one round of 4 agents.
    #[arg(long)]
    quick: bool,
    /// Engines of the process scenario (default: every registered engine the backend can run).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Skip the testcontainers-rs peer.
    #[arg(long)]
    no_testcontainers: bool,
    /// The `sandboxd` binary of the daemon scenario (default: next to this one, else
    /// target/release, else target/debug).
    #[arg(long)]
    sandboxd_bin: Option<PathBuf>,
    /// The cluster of the kubernetes scenario (default: `SANDBOXD_TEST_KUBECONFIG`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Also write the results as JSON (and markdown beside it, `.md`).
    #[arg(long)]
    json_out: Option<PathBuf>,

    #[arg(long, hide = true)]
    tc_worker: bool,
    #[arg(long, hide = true)]
    tc_shim: Option<PathBuf>,
    #[arg(long, hide = true)]
    tc_api: Option<String>,
    #[arg(long, hide = true, default_value_t = 0)]
    tc_label: u32,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let outcome = if args.tc_worker {
        peer::worker(args.tc_label, args.tc_shim, args.tc_api).await
    } else {
        harness(args).await
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("sandboxd-bench: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn harness(mut args: Args) -> Result<()> {
    if args.quick {
        args.runs = args.runs.min(5);
        args.docker_runs = args.docker_runs.min(3);
        args.rounds = 1;
        args.agents = args.agents.min(4);
    }
    let cleanup = Cleanup::new()?;
    let mut report = Report {
        generated_at: now(),
        machine: machine().await,
        ..Report::default()
    };

    let outcome = tokio::select! {
        outcome = run(&args, &cleanup, &mut report) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let mut swept = cleanup.sweep().await;
    if outcome.is_err() {
        // A provision cut short may still be creating its container: look once more.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        swept += cleanup.sweep().await;
    }
    if swept > 0 {
        eprintln!("removed {swept} leftover instance(s)");
    }
    if let Err(err) = &outcome {
        report.notes.push(format!("incomplete run: {err:#}"));
    }

    let markdown = report.markdown();
    println!("{markdown}");
    if let Some(path) = &args.json_out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        std::fs::write(path.with_extension("md"), &markdown)?;
        eprintln!(
            "wrote {} and {}",
            path.display(),
            path.with_extension("md").display()
        );
    }
    outcome
}

/// Runs the chosen scenarios in order. A scenario that fails is noted and the next one runs.
async fn run(args: &Args, cleanup: &Cleanup, report: &mut Report) -> Result<()> {
    let scenarios = if args.scenarios.is_empty() {
        ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    let set: Vec<EngineRef> = vec![engines::lookup("postgres")?, engines::lookup("redis")?];
    let mut failed = Vec::new();
    for scenario in scenarios {
        eprintln!("== {scenario:?}");
        let outcome = match scenario {
            Scenario::Process => {
                let engines = if args.engines.is_empty() {
                    engines::all().collect()
                } else {
                    engines::parse_list(&args.engines.join(","))?
                };
                process::provision_to_ready(args.runs, &engines, cleanup)
                    .await
                    .map(|series| report.series.extend(series))
            }
            Scenario::Docker => {
                docker::cold_provision(args.docker_runs, !args.no_testcontainers, cleanup, report)
                    .await
            }
            Scenario::Cache => {
                let agents = 5.min(args.runs).max(1);
                let hits = (args.runs / agents).max(1);
                broker::cache_hit(agents, hits, &set, cleanup, report).await
            }
            Scenario::Agents => {
                broker::concurrent_agents(args.agents, args.rounds, &set, cleanup, report).await
            }
            Scenario::Reset => reset::reset(args.runs, cleanup, report).await,
            Scenario::Clones => clones::clones(args.docker_runs, cleanup, report).await,
            Scenario::Kubernetes => {
                kubernetes::kubernetes(args.kubeconfig.clone(), args.docker_runs, cleanup, report)
                    .await
            }
            Scenario::Pools => {
                pools::pools_scenario(
                    args.sandboxd_bin.as_deref(),
                    args.runs,
                    args.docker_runs,
                    cleanup,
                    report,
                )
                .await
            }
            Scenario::Handout => {
                let options = handout::Options {
                    runs: args.handout_runs.max(1),
                    steady: std::time::Duration::from_secs(args.steady_secs.max(1)),
                    docker: args.handout_backends.iter().any(|b| b == "docker"),
                    process: args.handout_backends.iter().any(|b| b == "process"),
                };
                handout::handout(args.sandboxd_bin.as_deref(), options, cleanup, report).await
            }
            Scenario::Experiments => {
                experiments::experiments(args.sandboxd_bin.as_deref(), args.runs, cleanup, report)
                    .await
            }
            Scenario::Daemon => {
                daemon::memory(
                    args.sandboxd_bin.as_deref(),
                    args.agents,
                    &set,
                    cleanup,
                    report,
                )
                .await
            }
        };
        if let Err(err) = outcome {
            eprintln!("{scenario:?} failed: {err:#}");
            report
                .notes
                .push(format!("scenario {scenario:?} failed: {err:#}"));
            failed.push(format!("{scenario:?}"));
        }
        cleanup.sweep().await;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("failed scenarios: {}", failed.join(", ")))
    }
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// What the numbers were measured on.
async fn machine() -> Vec<(String, String)> {
    let mut facts = Vec::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    facts.push(("cpu".to_owned(), format!("{cores} cores, {cpu}")));
    if let Some(mem) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    }) {
        facts.push((
            "memory".to_owned(),
            format!("{:.0} GiB", mem / 1024.0 / 1024.0),
        ));
    }
    if let Ok(kernel) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        facts.push(("kernel".to_owned(), kernel.trim().to_owned()));
    }
    if let Ok(out) = tokio::process::Command::new("docker")
        .args([
            "info",
            "--format",
            "{{.Driver}} storage, cgroup v{{.CgroupVersion}}",
        ])
        .output()
        .await
        && out.status.success()
    {
        facts.push((
            "docker".to_owned(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        ));
    }
    if let Ok(out) = tokio::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .await
        && out.status.success()
    {
        facts.push((
            "sandboxd commit".to_owned(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        ));
    }
    facts.push((
        "harness build".to_owned(),
        if cfg!(debug_assertions) {
            "debug (numbers are not representative)".to_owned()
        } else {
            "release".to_owned()
        },
    ));
    facts
}
