//! The daemon's memory: the real `sandboxd serve` (process backend, a fresh state directory),
//! driven as an operator through its admin API and as N agents through MCP, with its resident
//! memory read from `/proc/<pid>/status` when idle and after every agent got a sandbox.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::future::join_all;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use sandboxd_domain::EngineRef;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cleanup::Cleanup;
use crate::stats::{Measure, Report, Series};

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";

/// `sandboxd` next to the harness (same profile), else the other profile's.
pub fn find_binary(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_owned());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let target = dir.parent()?;
    [
        dir.join("sandboxd"),
        target.join("release/sandboxd"),
        target.join("debug/sandboxd"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

pub fn rss_kib(pid: u32, key: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow!("{key} not in /proc/{pid}/status"))
}

pub struct Daemon {
    child: Child,
    url: String,
    http: reqwest::Client,
}

impl Daemon {
    /// `sandboxd serve` on a fresh port with a fresh state directory and process root under
    /// `cleanup`'s `name`, the process backend unless `env` says otherwise.
    pub async fn spawn(
        binary: &Path,
        cleanup: &Cleanup,
        name: &str,
        env: &[(String, String)],
    ) -> Result<Self> {
        let home = cleanup.path(name)?;
        let root = cleanup.process_root(name)?;
        let mut child = Command::new(binary)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("SANDBOXD_STATE_DIR", home.join("state"))
            .env("SANDBOXD_PROCESS__ROOT", &root)
            .env("SANDBOXD_BACKEND", "process")
            .env("SANDBOXD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("ROBOCO_SANDBOX_DB_ENABLED", "1")
            .env_remove("SANDBOXD_CONFIG")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("daemon stdout")?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .context("the daemon did not print its address in 30 s")??;
        let url = line
            .trim()
            .strip_prefix("sandboxd listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(Self {
            child,
            url,
            http: reqwest::Client::new(),
        })
    }

    /// `http://127.0.0.1:<port>`, the address the daemon printed.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn admin(&self, method: reqwest::Method, path: &str, body: Value) -> Result<Value> {
        let response = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("{path}: {status} {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn client(&self, token: &str) -> Result<RunningService<RoleClient, ()>> {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", self.url))
                .auth_header(token.to_owned()),
        );
        Ok(().serve(transport).await?)
    }

    /// A fresh developer `slug` of `project` holding a task, connected over MCP.
    pub async fn working_agent(
        &self,
        project: &str,
        slug: &str,
    ) -> Result<RunningService<RoleClient, ()>> {
        self.admin(
            reqwest::Method::POST,
            "/v1/tasks",
            json!({"project": project, "title": format!("task of {slug}"), "description": "bench"}),
        )
        .await?;
        let spawned = self
            .admin(
                reqwest::Method::POST,
                "/v1/agents",
                json!({"slug": slug, "role": "developer", "project": project}),
            )
            .await?;
        let token = spawned["token"].as_str().context("agent token")?;
        let agent = self.client(token).await?;
        call(&agent, "give_me_work").await?;
        Ok(agent)
    }

    pub fn pid(&self) -> Result<u32> {
        self.child.id().context("the daemon has exited")
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

pub async fn call(agent: &RunningService<RoleClient, ()>, verb: &str) -> Result<Value> {
    call_with(agent, verb, json!({})).await
}

/// One verb with `args`; an error unless it answered an ok envelope.
pub async fn call_with(
    agent: &RunningService<RoleClient, ()>,
    verb: &str,
    args: Value,
) -> Result<Value> {
    let mut params = CallToolRequestParams::new(verb.to_owned());
    params.arguments = Some(args.as_object().cloned().unwrap_or_default());
    let result = agent.call_tool(params).await?;
    let envelope = result.structured_content.clone().unwrap_or(Value::Null);
    if result.is_error.unwrap_or(false) || envelope["status"] != "ok" {
        bail!("{verb}: {envelope}");
    }
    Ok(envelope)
}

pub async fn memory(
    binary: Option<&Path>,
    n: usize,
    services: &[EngineRef],
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let Some(binary) = find_binary(binary) else {
        report.not_measured.push((
            "daemon memory".into(),
            "no sandboxd binary: build it first (cargo build --release -p sandboxd)".into(),
        ));
        return Ok(());
    };
    let daemon = Daemon::spawn(&binary, cleanup, "daemon", &[]).await?;
    let outcome = drive(&daemon, &binary, n, services, report).await;
    daemon.stop().await;
    // The daemon leaves sandboxes running across restarts by design: `root` is the cleanup's,
    // so the sweep after this scenario removes them.
    outcome
}

async fn drive(
    daemon: &Daemon,
    binary: &Path,
    n: usize,
    services: &[EngineRef],
    report: &mut Report,
) -> Result<()> {
    let pid = daemon.pid()?;
    let project = format!("bench-{}", std::process::id());
    let names: Vec<&str> = services.iter().map(|e| e.name).collect();
    daemon
        .admin(
            reqwest::Method::PUT,
            &format!("/v1/projects/{project}"),
            json!({"sandbox_services": names}),
        )
        .await?;
    let idle = rss_kib(pid, "VmRSS:")?;

    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let agent = daemon
            .working_agent(&project, &format!("{project}-a{i}"))
            .await?;
        agents.push(agent);
    }
    let with_sessions = rss_kib(pid, "VmRSS:")?;

    let started = Instant::now();
    let outcomes = join_all(agents.iter().map(|agent| async move {
        let started = Instant::now();
        call(agent, "request_sandbox")
            .await
            .map(|_| started.elapsed())
    }))
    .await;
    let wall = started.elapsed();
    let each: Vec<Duration> = outcomes.into_iter().collect::<Result<_>>()?;
    let after = rss_kib(pid, "VmRSS:")?;
    let peak = rss_kib(pid, "VmHWM:")?;
    for agent in agents {
        let _ = agent.cancel().await;
    }

    let set = names.join("+");
    let profile = if binary.components().any(|c| c.as_os_str() == "release") {
        "release"
    } else {
        "debug"
    };
    let subject = format!("{n} agents × {set} (process backend)");
    report.series.push(Series::from_samples(
        "daemon over MCP: N agents at once, all answered (wall)",
        &subject,
        vec![wall],
    ));
    report.series.push(Series::from_samples(
        "daemon over MCP: N agents at once, each agent's latency",
        &subject,
        each,
    ));
    let note = format!(
        "`{}` serve ({profile} build), process backend",
        binary.display()
    );
    for (subject, kib) in [
        ("daemon RSS, idle (one project)", idle),
        (
            &*format!("daemon RSS, {n} agents with MCP sessions"),
            with_sessions,
        ),
        (&*format!("daemon RSS, after {n} agents got {set}"), after),
        ("daemon peak RSS (VmHWM)", peak),
    ] {
        report.measures.push(Measure {
            subject: subject.to_owned(),
            value: kib / 1024.0,
            unit: "MiB".into(),
            note: note.clone(),
        });
    }
    Ok(())
}
