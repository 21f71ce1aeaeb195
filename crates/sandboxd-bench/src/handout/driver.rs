//! The hand-out scenario's tools: the Python agents process (`python/handout_agent.py`, run by
//! a virtualenv's interpreter and driven one JSON line at a time), and what the daemon says
//! about the same calls: the audit's `duration_ms` of each `request_sandbox`, the pools'
//! hand-out and miss counters, and how long a pool spends below its `min_idle`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::daemon::Daemon;
use crate::pools::pools;

const SCRIPT: &str = include_str!("../../python/handout_agent.py");

/// The virtualenv `scripts/python-sdks.sh` made under `SANDBOXD_PYTHON_CACHE` (default
/// `/var/cache/sandboxd-python`), if its interpreter is there.
pub fn venv_python(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("SANDBOXD_PYTHON_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/sandboxd-python"));
    Some(cache.join(name).join("bin/python")).filter(|p| p.is_file())
}

/// One long-lived Python process holding open agents.
pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// Client-timed `request_sandbox` calls and the errors of those that failed.
pub struct Timed {
    pub samples: Vec<Duration>,
    pub errors: Vec<String>,
}

fn timed(answer: &Value) -> Timed {
    let list = |key: &str| answer[key].as_array().cloned().unwrap_or_default();
    Timed {
        samples: list("ms")
            .iter()
            .filter_map(Value::as_f64)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .collect(),
        errors: list("errors")
            .iter()
            .map(|e| e.as_str().unwrap_or_default().to_owned())
            .collect(),
    }
}

impl Driver {
    /// Writes the script into `dir` and starts it with `python` against `daemon`'s MCP endpoint.
    pub fn spawn(python: &Path, dir: &Path, daemon: &Daemon) -> Result<Self> {
        let script = dir.join("handout_agent.py");
        std::fs::write(&script, SCRIPT)?;
        let mut child = Command::new(python)
            .arg(&script)
            .arg(format!("{}/mcp", daemon.url()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", python.display()))?;
        let stdin = child.stdin.take().context("driver stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("driver stdout")?).lines();
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    async fn ask(&mut self, command: Value) -> Result<Value> {
        let mut line = serde_json::to_string(&command)?;
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let answer = self
            .stdout
            .next_line()
            .await?
            .context("the Python driver exited")?;
        let answer: Value = serde_json::from_str(&answer)
            .with_context(|| format!("the Python driver answered {answer:?}"))?;
        if answer["ok"] != true {
            bail!(
                "{} in the Python driver: {}",
                command["op"],
                answer["error"]
            );
        }
        Ok(answer)
    }

    /// Opens agent `id` (`mode`: `2026-07-28`, `legacy` or `library`) and calls give_me_work;
    /// answers the protocol it speaks.
    pub async fn open(&mut self, id: &str, token: &str, mode: &str) -> Result<String> {
        let answer = self
            .ask(json!({"op": "open", "id": id, "token": token, "mode": mode}))
            .await?;
        Ok(answer["protocol"].as_str().unwrap_or_default().to_owned())
    }

    /// request_sandbox by every agent of `ids` at once, each timed by the client.
    pub async fn request(&mut self, ids: &[String]) -> Result<Timed> {
        Ok(timed(
            &self.ask(json!({"op": "request", "ids": ids})).await?,
        ))
    }

    pub async fn done(&mut self, ids: &[String]) -> Result<()> {
        let answer = self.ask(json!({"op": "done", "ids": ids})).await?;
        match answer["errors"].as_array() {
            Some(errors) if !errors.is_empty() => bail!("i_am_done: {errors:?}"),
            _ => Ok(()),
        }
    }

    /// One agent per token every `interval`, each holding its sandbox for `hold`.
    pub async fn steady(
        &mut self,
        tokens: &[String],
        mode: &str,
        interval: Duration,
        hold: Duration,
    ) -> Result<Timed> {
        let command = json!({"op": "steady", "tokens": tokens, "mode": mode,
            "interval": interval.as_secs_f64(), "hold": hold.as_secs_f64()});
        Ok(timed(&self.ask(command).await?))
    }

    pub async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"op\": \"quit\"}\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A fresh developer `slug` of `project` with a task to take: its token.
pub async fn agent_token(daemon: &Daemon, project: &str, slug: &str) -> Result<String> {
    daemon
        .admin(
            reqwest::Method::POST,
            "/v1/tasks",
            json!({"project": project, "title": format!("task of {slug}"), "description": "bench"}),
        )
        .await?;
    let spawned = daemon
        .admin(
            reqwest::Method::POST,
            "/v1/agents",
            json!({"slug": slug, "role": "developer", "project": project}),
        )
        .await?;
    Ok(spawned["token"].as_str().context("agent token")?.to_owned())
}

/// The daemon's own time of every successful `request_sandbox` about `project`: the audit
/// row's `duration_ms` (whole milliseconds, the verb from its start to its row).
pub async fn server_times(daemon: &Daemon, project: &str) -> Result<Vec<Duration>> {
    let mut samples = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut path = format!("/v1/audit?project={project}&outcome=ok&limit=1000");
        if let Some(cursor) = &before {
            path.push_str(&format!("&before={cursor}"));
        }
        let page = daemon
            .admin(reqwest::Method::GET, &path, Value::Null)
            .await?;
        for entry in page["entries"].as_array().context("audit entries")? {
            if entry["action"] == "request_sandbox"
                && let Some(ms) = entry["duration_ms"].as_u64()
            {
                samples.push(Duration::from_millis(ms));
            }
        }
        match page["next_before"].as_str() {
            Some(cursor) => before = Some(cursor.to_owned()),
            None => return Ok(samples),
        }
    }
}

/// Each pool's `(handed_out, misses)` since the daemon started.
pub async fn counters(daemon: &Daemon) -> Result<BTreeMap<String, (u64, u64)>> {
    Ok(pools(daemon)
        .await?
        .iter()
        .map(|p| {
            let n = |key: &str| p[key].as_u64().unwrap_or(0);
            (
                p["pool"].as_str().unwrap_or_default().to_owned(),
                (n("handed_out"), n("misses")),
            )
        })
        .collect())
}

/// Per pool: hand-outs and misses between `before` and `after`.
pub fn delta(
    before: &BTreeMap<String, (u64, u64)>,
    after: &BTreeMap<String, (u64, u64)>,
) -> BTreeMap<String, (u64, u64)> {
    after
        .iter()
        .map(|(pool, (out, misses))| {
            let (out0, misses0) = before.get(pool).copied().unwrap_or((0, 0));
            (
                pool.clone(),
                (out.saturating_sub(out0), misses.saturating_sub(misses0)),
            )
        })
        .collect()
}

/// How long one pool held fewer idle members than its `min_idle`.
#[derive(Debug, Default, Clone)]
pub struct Lag {
    pub total: Duration,
    pub longest: Duration,
    current: Duration,
}

/// Samples `/v1/pools` every 100 ms until `stop`: per pool, the time spent below `min_idle`
/// (in all, and the longest stretch). A failed sample is skipped.
pub async fn refill_lag(daemon: &Daemon, stop: &AtomicBool) -> BTreeMap<String, Lag> {
    let mut lags: BTreeMap<String, Lag> = BTreeMap::new();
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Ok(pools) = pools(daemon).await else {
            continue;
        };
        let now = Instant::now();
        let step = now - last;
        last = now;
        for pool in &pools {
            let lag = lags
                .entry(pool["pool"].as_str().unwrap_or_default().to_owned())
                .or_default();
            if pool["idle"].as_u64() < pool["min_idle"].as_u64() {
                lag.total += step;
                lag.current += step;
                lag.longest = lag.longest.max(lag.current);
            } else {
                lag.current = Duration::ZERO;
            }
        }
    }
    lags
}
