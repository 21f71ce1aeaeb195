//! Issue 30's hand-out bench, in one run, on the process and Docker backends, with the official
//! MCP Python SDK as the client (a long-lived process, `handout/driver.rs`):
//! 1. warm `request_sandbox` of postgres+redis, one fresh agent per run (its session opened and
//!    give_me_work called before the clock starts), the pools full again before each run,
//!    over the 2026-07-28 and the 2025-11-25 revisions; beside each, the daemon's own time of
//!    the same calls (the audit rows' `duration_ms`);
//! 2. 20 agents at once (asyncio.gather) from pools of `min_idle = 20`: pool hits from
//!    `/v1/pools`' counters, p95;
//! 3. a steady 2 hand-outs/s, each held ~1 s, from pools of `min_idle = 4, max_total = 12`:
//!    misses, p50/p99, and the refill lag (`/v1/pools` sampled every 100 ms);
//! 4. item 1 through sandboxd's own Python client library (`clients/python`), 2026-07-28;
//! 5. `POST /v1/restart` (what `sandboxd restart` sends) with pools configured, and the first
//!    `request_sandbox` after the new run answers: its time and whether a pool served it.
//!
//! Kubernetes is not measured here: the kubernetes scenario drives `KubeBackend` in process,
//! and the bench has no daemon-on-a-cluster path to reuse.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};

use crate::cleanup::Cleanup;
use crate::daemon::{Daemon, find_binary};
use crate::pools::{Backend, project, sized_settings, stop, until_idle};
use crate::stats::{Check, Measure, Report, Series};

mod driver;
mod restart;

use driver::{Driver, Timed, agent_token, counters, delta, refill_lag, server_times, venv_python};
use restart::{Restarted, restart};

/// Issue 30's targets.
const WARM_P50_MS: f64 = 10.0;
const WARM_P99_MS: f64 = 25.0;
const BURST: usize = 20;
const BURST_P95_MS: f64 = 60.0;
const STEADY_P99_MS: f64 = 50.0;
/// Pools of the warm series and the restart: like the pools scenario's.
const WARM_POOLS: (usize, usize) = (2, 4);
const STEADY_POOLS: (usize, usize) = (4, 12);
const LIBRARY_RUNS: usize = 20;

pub struct Options {
    /// Runs of each warm series (item 1); the library series runs at most 20.
    pub runs: usize,
    pub steady: Duration,
    /// Which backends to run (`--handout-backends`).
    pub process: bool,
    pub docker: bool,
}

/// The virtualenvs of the official SDK and of sandboxd's client library.
struct Pythons {
    sdk: PathBuf,
    library: Option<PathBuf>,
}

pub async fn handout(
    binary: Option<&Path>,
    options: Options,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let Some(binary) = find_binary(binary) else {
        report.not_measured.push((
            "hand-out".into(),
            "no sandboxd binary: build it first (cargo build --release -p sandboxd)".into(),
        ));
        return Ok(());
    };
    let Some(sdk) = venv_python("mcp-2.3.0") else {
        report.not_measured.push((
            "hand-out".into(),
            "no mcp-2.3.0 virtualenv: run scripts/python-sdks.sh".into(),
        ));
        return Ok(());
    };
    let library = venv_python("client");
    if library.is_none() {
        report.not_measured.push((
            "hand-out through the Python client library".into(),
            "no `client` virtualenv: run scripts/python-sdks.sh".into(),
        ));
    }
    report.not_measured.push((
        "hand-out on Kubernetes".into(),
        "skipped: the kubernetes scenario drives KubeBackend in process; the bench has no \
         `sandboxd serve` on a cluster to reuse"
            .into(),
    ));
    let pythons = Pythons { sdk, library };
    let docker = tokio::process::Command::new("docker")
        .args(["info"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    let mut backends = Vec::new();
    if options.process {
        backends.push(Backend::Process);
    }
    if !options.docker {
        report.not_measured.push((
            "hand-out on docker".into(),
            "not asked for (--handout-backends)".into(),
        ));
    } else if docker {
        backends.push(Backend::Docker);
    } else {
        eprintln!("handout: skipping Docker, no Docker engine answers");
        report.not_measured.push((
            "hand-out on docker".into(),
            "skipped: no Docker engine answers".into(),
        ));
    }
    let mut failed = Vec::new();
    for backend in backends {
        let on = Run {
            binary: &binary,
            backend,
            pythons: &pythons,
            cleanup,
        };
        if let Err(err) = on.all(&options, report).await {
            eprintln!("handout on {}: {err:#}", backend.name());
            failed.push(format!("{}: {err:#}", backend.name()));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}

/// One backend's part of the scenario.
struct Run<'a> {
    binary: &'a Path,
    backend: Backend,
    pythons: &'a Pythons,
    cleanup: &'a Cleanup,
}

impl Run<'_> {
    /// A short tag (a process instance's socket path must stay within 107 bytes).
    fn tag(&self, what: &str) -> String {
        format!("{what}{}", &self.backend.name()[..1])
    }

    fn subject(&self, what: &str) -> String {
        format!("postgres+redis ({}), {what}", self.backend.name())
    }

    /// A daemon with pools of `sizes`, `work` run against it, the daemon stopped after.
    async fn with_daemon<T>(
        &self,
        name: &str,
        sizes: (usize, usize),
        work: impl AsyncFnOnce(&Daemon) -> Result<T>,
    ) -> Result<T> {
        let env = sized_settings(self.backend, self.cleanup, Some(sizes));
        let daemon = Daemon::spawn(self.binary, self.cleanup, &self.tag(name), &env).await?;
        let outcome = work(&daemon).await;
        stop(daemon, self.binary, &env).await?;
        outcome
    }

    fn driver(&self, python: &Path, daemon: &Daemon, name: &str) -> Result<Driver> {
        Driver::spawn(python, &self.cleanup.path(&self.tag(name))?, daemon)
    }

    async fn all(&self, options: &Options, report: &mut Report) -> Result<()> {
        eprintln!("handout: {} backend", self.backend.name());
        self.with_daemon("h1", WARM_POOLS, async |daemon| {
            let mut sdk = self.driver(&self.pythons.sdk, daemon, "py1")?;
            for (mode, tag) in [("2026-07-28", "wm"), ("legacy", "wl")] {
                let tag = self.tag(tag);
                let warm = warm(daemon, &mut sdk, mode, options.runs, &tag, self.cleanup).await?;
                self.warm_report(&warm, "official Python SDK", report);
            }
            if let Some(python) = &self.pythons.library {
                let mut library = self.driver(python, daemon, "py2")?;
                let runs = options.runs.min(LIBRARY_RUNS);
                let tag = self.tag("wc");
                let warm = warm(daemon, &mut library, "library", runs, &tag, self.cleanup).await;
                library.quit().await;
                self.warm_report(&warm?, "sandboxd Python client library", report);
            }
            let restarted = restart(daemon, &mut sdk, &self.tag("rs"), self.cleanup).await;
            sdk.quit().await;
            self.restart_report(restarted?, report);
            Ok(())
        })
        .await?;
        self.with_daemon("h2", (BURST, BURST), async |daemon| {
            let mut sdk = self.driver(&self.pythons.sdk, daemon, "py3")?;
            let outcome = self.burst(daemon, &mut sdk, report).await;
            sdk.quit().await;
            outcome
        })
        .await?;
        self.with_daemon("h3", STEADY_POOLS, async |daemon| {
            let mut sdk = self.driver(&self.pythons.sdk, daemon, "py4")?;
            let outcome = self.steady(daemon, &mut sdk, options.steady, report).await;
            sdk.quit().await;
            outcome
        })
        .await
    }

    fn warm_report(&self, warm: &Warm, client: &str, report: &mut Report) {
        let client = format!("{client}, {}", warm.protocol);
        let subject = self.subject(&client);
        let series = Series::from_samples(
            "warm request_sandbox over MCP, client-timed",
            &subject,
            warm.client.clone(),
        )
        .with_target(WARM_P50_MS);
        let server = Series::from_samples(
            "warm request_sandbox, daemon-side (audit duration_ms, whole ms)",
            &subject,
            warm.server.clone(),
        );
        report.checks.push(Check {
            target: format!(
                "warm request_sandbox postgres+redis over MCP, {client} ({}): p50 ≤ {WARM_P50_MS} ms, p99 ≤ {WARM_P99_MS} ms",
                self.backend.name()
            ),
            holds: series.p50_ms <= WARM_P50_MS && series.p99_ms <= WARM_P99_MS,
            measured: format!(
                "client p50 {:.1} / p95 {:.1} / p99 {:.1} ms over {} runs; daemon-side p50 {:.0} / p99 {:.0} ms",
                series.p50_ms, series.p95_ms, series.p99_ms, series.runs, server.p50_ms, server.p99_ms
            ),
        });
        report.series.push(series);
        report.series.push(server);
    }

    fn restart_report(&self, restarted: Restarted, report: &mut Report) {
        let series = Series::from_samples(
            "first request_sandbox after a restart, client-timed",
            &self.subject(&format!("official Python SDK, {}", restarted.protocol)),
            vec![restarted.first],
        );
        report.checks.push(Check {
            target: format!(
                "a restart with pools configured: the first hand-out after it is warm ({})",
                self.backend.name()
            ),
            holds: restarted.warm,
            measured: format!(
                "{:.1} ms, {}; restart took {:.1} s until the new run answered",
                series.p50_ms,
                restarted.detail,
                restarted.restart.as_secs_f64()
            ),
        });
        report.series.push(series);
    }

    /// Item 2: `BURST` agents ask at once from pools of `min_idle = BURST`.
    async fn burst(&self, daemon: &Daemon, sdk: &mut Driver, report: &mut Report) -> Result<()> {
        let name = self.cleanup.owner(&self.tag("b"));
        project(daemon, &name, &["postgres", "redis"]).await?;
        let mut ids = Vec::with_capacity(BURST);
        for i in 0..BURST {
            let id = format!("{name}-{i}");
            let token = agent_token(daemon, &name, &id).await?;
            sdk.open(&id, &token, "2026-07-28").await?;
            ids.push(id);
        }
        until_idle(daemon, BURST as u64, Duration::from_secs(600)).await?;
        let before = counters(daemon).await?;
        let timed = sdk.request(&ids).await?;
        let after = counters(daemon).await?;
        let server = server_times(daemon, &name).await?;
        sdk.done(&ids).await?;
        fail_on(&timed, "burst")?;
        let moved = delta(&before, &after);
        let served = moved.values().map(|(out, _)| *out).min().unwrap_or(0);
        let misses: u64 = moved.values().map(|(_, m)| *m).sum();
        let per_pool = pool_text(&moved);
        let subject = self.subject(&format!(
            "{BURST} agents at once, official Python SDK 2026-07-28"
        ));
        let series = Series::from_samples(
            "N agents at once from pools of N, each agent's latency (client)",
            &subject,
            timed.samples,
        );
        report.series.push(Series::from_samples(
            "N agents at once from pools of N, daemon-side (audit, whole ms)",
            &subject,
            server,
        ));
        report.checks.push(Check {
            target: format!(
                "{BURST} agents at once ({}): every one from a pool, p95 ≤ {BURST_P95_MS} ms",
                self.backend.name()
            ),
            holds: served >= BURST as u64 && misses == 0 && series.p95_ms <= BURST_P95_MS,
            measured: format!(
                "{served}/{BURST} from every pool ({per_pool}); p50 {:.1} / p95 {:.1} ms",
                series.p50_ms, series.p95_ms
            ),
        });
        report.series.push(series);
        Ok(())
    }

    /// Item 3: 2 hand-outs per second for `length`, each sandbox held ~1 s.
    async fn steady(
        &self,
        daemon: &Daemon,
        sdk: &mut Driver,
        length: Duration,
        report: &mut Report,
    ) -> Result<()> {
        const INTERVAL: Duration = Duration::from_millis(500);
        const HOLD: Duration = Duration::from_secs(1);
        let name = self.cleanup.owner(&self.tag("s"));
        project(daemon, &name, &["postgres", "redis"]).await?;
        let n = (length.as_millis() / INTERVAL.as_millis()).max(1) as usize;
        let mut tokens = Vec::with_capacity(n);
        for i in 0..n {
            tokens.push(agent_token(daemon, &name, &format!("{name}-{i}")).await?);
        }
        until_idle(daemon, STEADY_POOLS.0 as u64, Duration::from_secs(300)).await?;
        let before = counters(daemon).await?;
        let done = AtomicBool::new(false);
        let (timed, lags) = tokio::join!(
            async {
                let timed = sdk.steady(&tokens, "2026-07-28", INTERVAL, HOLD).await;
                done.store(true, Ordering::Relaxed);
                timed
            },
            refill_lag(daemon, &done),
        );
        let timed = timed?;
        let after = counters(daemon).await?;
        let server = server_times(daemon, &name).await?;
        fail_on(&timed, "steady")?;
        let moved = delta(&before, &after);
        let misses: u64 = moved.values().map(|(_, m)| *m).sum();
        let subject = self.subject(&format!(
            "2/s for {} s, held 1 s, pools {}/{}",
            length.as_secs(),
            STEADY_POOLS.0,
            STEADY_POOLS.1
        ));
        let series = Series::from_samples(
            "steady hand-outs, client-timed (official Python SDK 2026-07-28)",
            &subject,
            timed.samples,
        );
        report.series.push(Series::from_samples(
            "steady hand-outs, daemon-side (audit, whole ms)",
            &subject,
            server,
        ));
        for (pool, lag) in &lags {
            report.measures.push(Measure {
                subject: format!("refill lag, {pool} pool ({})", self.backend.name()),
                value: lag.total.as_secs_f64(),
                unit: "s below min_idle".into(),
                note: format!(
                    "longest stretch {:.1} s; over {} s of 2 hand-outs/s (sampled every 100 ms)",
                    lag.longest.as_secs_f64(),
                    length.as_secs()
                ),
            });
        }
        report.checks.push(Check {
            target: format!(
                "steady 2/s for {} s ({}): 0 misses, p99 ≤ {STEADY_P99_MS} ms",
                length.as_secs(),
                self.backend.name()
            ),
            holds: misses == 0 && series.p99_ms <= STEADY_P99_MS,
            measured: format!(
                "{misses} misses ({}); p50 {:.1} / p99 {:.1} ms over {} hand-outs",
                pool_text(&moved),
                series.p50_ms,
                series.p99_ms,
                series.runs
            ),
        });
        report.series.push(series);
        Ok(())
    }
}

fn fail_on(timed: &Timed, what: &str) -> Result<()> {
    match timed.errors.first() {
        Some(first) => bail!(
            "{what}: {} calls failed, first: {first}",
            timed.errors.len()
        ),
        None => Ok(()),
    }
}

fn pool_text(moved: &std::collections::BTreeMap<String, (u64, u64)>) -> String {
    moved
        .iter()
        .map(|(pool, (out, misses))| format!("{pool}: {out} handed out, {misses} misses"))
        .collect::<Vec<_>>()
        .join("; ")
}

struct Warm {
    protocol: String,
    client: Vec<Duration>,
    server: Vec<Duration>,
}

/// Item 1 (and 4): `runs` fresh agents one after the other; each opened and holding a task,
/// the pools full again, then its request_sandbox timed, then i_am_done.
async fn warm(
    daemon: &Daemon,
    driver: &mut Driver,
    mode: &str,
    runs: usize,
    tag: &str,
    cleanup: &Cleanup,
) -> Result<Warm> {
    let name = cleanup.owner(tag);
    project(daemon, &name, &["postgres", "redis"]).await?;
    let mut protocol = String::new();
    let mut client = Vec::with_capacity(runs);
    for i in 0..runs {
        let id = format!("{name}-{i}");
        let token = agent_token(daemon, &name, &id).await?;
        protocol = driver.open(&id, &token, mode).await?;
        until_idle(daemon, WARM_POOLS.0 as u64, Duration::from_secs(300)).await?;
        let timed = driver.request(std::slice::from_ref(&id)).await?;
        driver.done(&[id]).await?;
        fail_on(&timed, "warm request_sandbox")?;
        client.extend(timed.samples);
    }
    let server = server_times(daemon, &name).await?;
    Ok(Warm {
        protocol,
        client,
        server,
    })
}
