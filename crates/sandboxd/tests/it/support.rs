//! `spawn_daemon()`: the real `sandboxd serve` on 127.0.0.1:0 with a fresh state directory and
//! process root, plus helpers to drive it as an operator (admin API) and as an agent (a real
//! MCP client). Dropping a daemon stops it; `teardown_everything` then tears down every instance
//! and checks none is left.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

pub use sandboxd_testkit::unique;

/// Where a daemon keeps its state, shared by successive daemons of one test (restarts).
pub struct Home {
    pub dir: tempfile::TempDir,
    /// The process root, when it is another home's (two daemons on one host).
    shared_instances: Option<PathBuf>,
    /// `SANDBOXD_*` settings on top of the common ones.
    extra_env: Vec<(String, String)>,
}

impl Home {
    pub fn new() -> Self {
        let dir = sandboxd_testkit::test_dir("sandboxd-test-");
        Self {
            dir,
            shared_instances: None,
            extra_env: Vec::new(),
        }
    }

    /// A home of its own (state, store, daemon id) whose instances live under `other`'s
    /// process root, as two daemons with default settings on one host.
    pub fn beside(other: &Home) -> Self {
        Self {
            shared_instances: Some(other.instances()),
            ..Self::new()
        }
    }

    /// A home whose daemons provision on Docker from the local images.
    pub fn on_docker() -> Self {
        let mut home = Self::new();
        home.set("SANDBOXD_BACKEND", "docker");
        for (engine, image) in sandboxd_testkit::local_images() {
            home.set(
                &format!("SANDBOXD_ENGINES__{}__IMAGE", engine.to_uppercase()),
                &image,
            );
        }
        home
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    pub fn instances(&self) -> PathBuf {
        self.shared_instances
            .clone()
            .unwrap_or_else(|| self.dir.path().join("instances"))
    }

    /// The `sandboxd` binary with the common environment of a test daemon in this home.
    pub fn sandboxd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandboxd"));
        cmd.env("SANDBOXD_STATE_DIR", self.dir.path().join("state"))
            .env("SANDBOXD_PROCESS__ROOT", self.instances())
            .env("SANDBOXD_BACKEND", "process")
            .env("SANDBOXD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("ROBOCO_SANDBOX_DB_ENABLED", "1")
            .env("SANDBOXD_BROKER__GRACE_SECS", "600")
            .env(
                "SANDBOXD_EXPERIMENTS__GUEST",
                sandboxd_testkit::experiment_guest(),
            )
            .env(
                "SANDBOXD_EXPERIMENTS__CACHE_DIR",
                sandboxd_testkit::experiment_cache(),
            )
            .env_remove("SANDBOXD_CONFIG");
        cmd.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

pub struct TestDaemon {
    child: Option<Child>,
    pub url: String,
    pub addr: String,
    http: reqwest::Client,
}

/// How a test daemon starts, beyond the common environment of its [`Home`].
pub struct Launch {
    /// `127.0.0.1:0` for a fresh port.
    pub listen: String,
    /// Global arguments before `serve` (`-vv`).
    pub args: Vec<String>,
    /// Extra environment (set after the common one, so it can override it).
    pub env: Vec<(String, String)>,
    /// Where its stderr (the log) goes; the test's own stderr when None.
    pub stderr: Option<std::fs::File>,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".to_owned(),
            args: vec![],
            env: vec![],
            stderr: None,
        }
    }
}

/// Starts `sandboxd serve` on `listen` (`127.0.0.1:0` for a fresh port) and waits for its
/// address line.
pub fn spawn_daemon_at(home: &Home, listen: &str) -> TestDaemon {
    spawn_daemon_with(
        home,
        Launch {
            listen: listen.to_owned(),
            ..Launch::default()
        },
    )
}

/// Starts `sandboxd serve` as `launch` says and waits for its address line.
pub fn spawn_daemon_with(home: &Home, launch: Launch) -> TestDaemon {
    let mut cmd = home.sandboxd();
    cmd.args(&launch.args)
        .args(["serve", "--listen", &launch.listen])
        .envs(launch.env)
        .stderr(match launch.stderr {
            Some(file) => Stdio::from(file),
            None => Stdio::inherit(),
        });
    spawn_serve(cmd)
}

/// Starts `cmd`, a `sandboxd … serve` command, and waits for its address line.
pub fn spawn_serve(mut cmd: Command) -> TestDaemon {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("start sandboxd serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the address line");
    let url = line
        .trim()
        .strip_prefix("sandboxd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    TestDaemon {
        child: Some(child),
        url,
        addr,
        http: reqwest::Client::new(),
    }
}

pub fn spawn_daemon(home: &Home) -> TestDaemon {
    spawn_daemon_at(home, "127.0.0.1:0")
}

impl TestDaemon {
    /// The daemon's process id (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running daemon").id()
    }

    /// Kills the daemon with SIGKILL, as a crash or the OOM killer would: nothing of it runs
    /// on, no cleanup.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Stops the daemon with SIGTERM, as an operator or a supervisor would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            for _ in 0..100 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon's id: the maker of every sandbox it provisions.
    pub async fn daemon_id(&self) -> String {
        let (_, settings) = self.admin(reqwest::Method::GET, "/v1/settings", None).await;
        settings["daemon_id"]
            .as_str()
            .expect("daemon_id")
            .to_owned()
    }

    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("admin request");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn project(&self, slug: &str, services: &[&str]) {
        let (status, body) = self
            .admin(
                reqwest::Method::PUT,
                &format!("/v1/projects/{slug}"),
                Some(json!({"sandbox_services": services})),
            )
            .await;
        assert!(status < 300, "{status} {body}");
    }

    pub async fn task(&self, project: &str) -> String {
        let (status, body) = self
            .admin(
                reqwest::Method::POST,
                "/v1/tasks",
                Some(json!({"project": project, "title": unique("task"), "description": "work"})),
            )
            .await;
        assert!(status < 300, "{status} {body}");
        body["id"].as_str().expect("task id").to_owned()
    }

    /// Spawns an agent; returns its token and the spawn answer.
    pub async fn spawn_agent(&self, role: &str, project: &str) -> (String, Value) {
        self.spawn_agent_as(&unique(&role.replace('_', "-")), role, project)
            .await
    }

    /// Spawns the agent `slug`; returns its token and the spawn answer.
    pub async fn spawn_agent_as(&self, slug: &str, role: &str, project: &str) -> (String, Value) {
        let (status, body) = self
            .admin(
                reqwest::Method::POST,
                "/v1/agents",
                Some(json!({"slug": slug, "role": role, "project": project})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        (body["token"].as_str().expect("token").to_owned(), body)
    }

    /// A fresh agent of `role` in `project`, connected over MCP.
    pub async fn agent(&self, role: &str, project: &str) -> Agent {
        let (token, _) = self.spawn_agent(role, project).await;
        self.client(&token).await
    }

    /// A real MCP client speaking streamable HTTP with `token`.
    pub async fn client(&self, token: &str) -> Agent {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", self.url))
                .auth_header(token.to_owned()),
        );
        Agent {
            service: ().serve(transport).await.expect("MCP initialize"),
        }
    }

    pub async fn sandboxes(&self) -> Vec<Value> {
        let (status, body) = self
            .admin(reqwest::Method::GET, "/v1/sandboxes", None)
            .await;
        assert_eq!(status, 200, "{body}");
        body.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An agent's MCP session.
pub struct Agent {
    pub service: RunningService<RoleClient, ()>,
}

impl Agent {
    pub async fn tools(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .service
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    pub async fn call_raw(&self, verb: &str, args: Value) -> CallToolResult {
        let arguments = match args {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let mut params = CallToolRequestParams::new(verb.to_owned());
        params.arguments = arguments;
        self.service.call_tool(params).await.expect("tools/call")
    }

    /// A verb call without arguments that may fail at the transport (the daemon died).
    pub async fn call_raw_result(&self, verb: &str) -> Result<CallToolResult, rmcp::ServiceError> {
        self.service
            .call_tool(CallToolRequestParams::new(verb.to_owned()))
            .await
    }

    /// The envelope of a verb call, and whether it was flagged a tool error.
    pub async fn call(&self, verb: &str, args: Value) -> (Value, bool) {
        let result = self.call_raw(verb, args).await;
        (
            result
                .structured_content
                .clone()
                .expect("structured content"),
            result.is_error.unwrap_or(false),
        )
    }

    pub async fn ok(&self, verb: &str, args: Value) -> Value {
        let (envelope, is_error) = self.call(verb, args).await;
        assert!(!is_error, "{verb}: {envelope}");
        assert_eq!(envelope["status"], "ok", "{verb}: {envelope}");
        envelope
    }

    pub async fn refused(&self, verb: &str, args: Value) -> Value {
        let (envelope, is_error) = self.call(verb, args).await;
        assert!(is_error, "{verb} should be refused: {envelope}");
        assert!(envelope["error"].is_string(), "{envelope}");
        envelope
    }
}

/// The evidence entry of `service` in an envelope.
pub fn entry<'a>(envelope: &'a Value, service: &str) -> &'a Value {
    envelope["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .find(|e| e["service"] == service)
        .unwrap_or_else(|| panic!("{service} in {envelope}"))
}

/// Instance directories left under a process root.
pub fn instance_dirs(home: &Home) -> Vec<PathBuf> {
    std::fs::read_dir(home.instances())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|path| !path.ends_with(sandboxd_backend::process::METADATA_DIR))
                .collect()
        })
        .unwrap_or_default()
}

/// The instance directories of sandboxes: not those a pool slot owns (warm-pool members and a
/// daemon's feature probes, which come and go on their own).
pub fn sandbox_dirs(home: &Home) -> Vec<PathBuf> {
    instance_dirs(home)
        .into_iter()
        .filter(|dir| {
            // Named after its first owner: a pool slot's keeps that name when it is handed out,
            // and then its metadata names the agent.
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            let slot = sandboxd_domain::instance::parse_instance_name(&name)
                .is_some_and(|(_, owner, _)| owner.is_pool_slot());
            let meta = std::fs::read_to_string(
                sandboxd_backend::process::metadata_path(dir).unwrap_or_default(),
            )
            .unwrap_or_default();
            let owner = serde_json::from_str::<Value>(&meta).unwrap_or_default()["owner"]
                .as_str()
                .and_then(|owner| sandboxd_domain::AgentSlug::parse(owner).ok());
            match owner {
                Some(owner) => !owner.is_pool_slot(),
                None => !slot,
            }
        })
        .collect()
}

/// Tears down whatever a test left (through a fresh CLI, from metadata) and asserts the root
/// is empty.
pub fn teardown_everything(home: &Home) {
    for dir in instance_dirs(home) {
        let name = dir
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::read_to_string(
            sandboxd_backend::process::metadata_path(&dir).unwrap_or_default(),
        )
        .unwrap_or_default();
        let meta = serde_json::from_str::<Value>(&meta).unwrap_or_default();
        let owner = meta["owner"].as_str().map(str::to_owned);
        let maker = meta["daemon"].as_str().unwrap_or("cli").to_owned();
        if let Some(owner) = owner {
            let _ = home
                .sandboxd()
                .args(["teardown", "--owner", &owner, "--maker", &maker])
                .output();
        } else {
            eprintln!("removing {name} without metadata");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    assert!(
        instance_dirs(home).is_empty(),
        "instances left: {:?}",
        instance_dirs(home)
    );
}

/// The python of the virtualenv `name` that `scripts/python-sdks.sh` makes, or None (after saying
/// why) where it has not run; CI fails instead.
pub fn python_venv(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("SANDBOXD_PYTHON_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/sandboxd-python"));
    let python = cache.join(name).join("bin/python");
    if python.exists() {
        return Some(python);
    }
    let why = format!(
        "no virtualenv {} (run scripts/python-sdks.sh)",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// Removes whatever the daemon `maker` left on Docker the way an operator would
/// (`sandboxd teardown --maker`, every owner), and asserts its network went with it.
pub fn teardown_maker_on_docker(home: &Home, maker: &str) {
    let out = home
        .sandboxd()
        .args(["teardown", "--maker", maker])
        .output()
        .expect("sandboxd teardown --maker");
    assert!(out.status.success(), "{out:?}");
    assert!(
        !sandboxd_testkit::daemon_network_left(maker),
        "the network of {maker} outlived every sandbox of its daemon: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// After a test's body ran (`outcome`): stops its daemon, tears down whatever it left, then
/// passes on the body's panic, if any.
pub fn stop_and_clean_up(mut daemon: TestDaemon, home: &Home, outcome: std::thread::Result<()>) {
    daemon.stop();
    clean_up(home, outcome);
}

/// After a test's body ran (`outcome`): tears down whatever it left under `home`, then passes
/// on the body's panic, if any.
pub fn clean_up(home: &Home, outcome: std::thread::Result<()>) {
    teardown_everything(home);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
