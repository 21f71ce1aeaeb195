//! `sandboxd-bench`: measures sandboxd's operations and prints p50/p95/p99 per scenario as a
//! markdown table (and JSON with `--json-out`). A harness, not a test: it asserts nothing, it
//! reports, including whether each target was met.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use sandboxd_domain::engines;

mod process;
mod stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Provision-to-ready and teardown per engine on the process backend.
    Process,
}

#[derive(Debug, Parser)]
#[command(about = "sandboxd's benchmark harness")]
struct Args {
    /// Scenarios to run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenarios: Vec<Scenario>,
    /// Runs per series.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Engines (default: every registered engine the backend can run).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Also write the results as JSON (and markdown beside it, `.md`).
    #[arg(long)]
    json_out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let scenarios = if args.scenarios.is_empty() {
        vec![Scenario::Process]
    } else {
        args.scenarios.clone()
    };
    let engines = if args.engines.is_empty() {
        engines::all().collect()
    } else {
        engines::parse_list(&args.engines.join(","))?
    };
    let mut series = Vec::new();
    for scenario in scenarios {
        match scenario {
            Scenario::Process => {
                series.extend(process::provision_to_ready(args.runs, &engines).await?)
            }
        }
    }
    let table = stats::markdown(&series);
    println!("{table}");
    if let Some(path) = args.json_out {
        std::fs::write(&path, serde_json::to_string_pretty(&series)?)?;
        std::fs::write(path.with_extension("md"), &table)?;
    }
    Ok(())
}
