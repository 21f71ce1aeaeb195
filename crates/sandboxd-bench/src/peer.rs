//! The testcontainers-rs peer (SPEC §6), run in a worker process: the harness re-executes itself
//! with `--tc-worker` and talks to it over stdin/stdout, one JSON line per request, so peer runs
//! interleave with sandboxd's and the floor's.
//!
//! Why a separate process: testcontainers reads the Engine API socket from `DOCKER_HOST` only,
//! and a process may not change its own environment safely (`unsafe_code` is forbidden here).
//!
//! Why a shim: testcontainers 0.28 talks bollard's default API version (1.53 for bollard 0.21)
//! without negotiating, and Docker 20.10 (API 1.41) refuses any request for a newer version
//! ("client version 1.53 is too new"). When the engine is older than the client, the worker puts
//! a unix-socket relay in front of the engine that rewrites the version in each request path
//! (`/v1.53/` → `/v1.41/`, same length, so no framing changes) and copies everything else as is.
//!
//! Pulls: testcontainers pulls only when `create` answers 404 (image missing). The images are
//! local (`sandboxd-local/...`), so nothing is pulled; a missing image fails like any 404 would.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::future::join_all;
use sandboxd_domain::engine::Protocol;
use sandboxd_domain::{Credentials, EngineRef};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use testcontainers::bollard::models::PortBinding;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::cleanup::BENCH_LABEL;
use crate::containers::tmpfs_of;
use crate::ready;

/// The Docker socket the shim relays to.
const ENGINE_SOCKET: &str = "/var/run/docker.sock";

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    /// Start one container per engine (in parallel) and wait until each answers.
    Start {
        engines: Vec<String>,
        images: Vec<String>,
        names: Vec<String>,
    },
    /// Remove every container started since the last `rm`.
    Rm,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default)]
    ms: f64,
    #[serde(default)]
    error: String,
}

/// The harness's side: a running worker.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The client/server API versions when the shim relays, for the report.
    pub shim: Option<(String, String)>,
}

/// `1.41` from `docker version`.
pub async fn server_api_version() -> Result<String> {
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .output()
        .await?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || version.is_empty() {
        bail!(
            "docker version: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(version)
}

/// The API version testcontainers' bollard asks for.
pub fn client_api_version() -> String {
    let v = testcontainers::bollard::API_DEFAULT_VERSION;
    format!("{}.{}", v.major_version, v.minor_version)
}

fn newer(client: &str, server: &str) -> bool {
    let parse = |v: &str| -> (u32, u32) {
        let (a, b) = v.split_once('.').unwrap_or((v, "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    parse(client) > parse(server)
}

impl Peer {
    /// Starts the worker; `dir` holds the shim's socket.
    pub async fn spawn(dir: &Path, bench_pid: u32) -> Result<Self> {
        let server = server_api_version().await?;
        let client = client_api_version();
        let exe = std::env::current_exe().context("the harness's own path")?;
        let mut cmd = Command::new(exe);
        cmd.args(["--tc-worker", "--tc-label", &bench_pid.to_string()]);
        let shim = if newer(&client, &server) {
            let socket = dir.join("docker-shim.sock");
            cmd.arg("--tc-shim")
                .arg(&socket)
                .args(["--tc-api", &server])
                .env("DOCKER_HOST", format!("unix://{}", socket.display()));
            Some((client, server))
        } else {
            cmd.env("DOCKER_HOST", format!("unix://{ENGINE_SOCKET}"));
            None
        };
        cmd.env_remove("TESTCONTAINERS_COMMAND")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("starting the testcontainers worker")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("worker stdin"))?;
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| anyhow!("worker stdout"))?,
        );
        Ok(Self {
            child,
            stdin,
            stdout,
            shim,
        })
    }

    async fn ask(&mut self, request: &Request) -> Result<Duration> {
        let mut line = serde_json::to_string(request)?;
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let mut answer = String::new();
        if self.stdout.read_line(&mut answer).await? == 0 {
            let status = self.child.wait().await?;
            bail!("the testcontainers worker ended ({status})");
        }
        let reply: Reply = serde_json::from_str(answer.trim())
            .with_context(|| format!("worker answered {answer:?}"))?;
        if !reply.ok {
            bail!("testcontainers: {}", reply.error);
        }
        Ok(Duration::from_secs_f64(reply.ms / 1000.0))
    }

    /// Starts `engines` (in parallel) under `names`; the time until every one answers.
    pub async fn start(
        &mut self,
        engines: &[EngineRef],
        images: &[String],
        names: &[String],
    ) -> Result<Duration> {
        self.ask(&Request::Start {
            engines: engines.iter().map(|e| e.name.to_owned()).collect(),
            images: images.to_vec(),
            names: names.to_vec(),
        })
        .await
    }

    /// Removes what the last `start` started; the time `ContainerAsync::rm` took.
    pub async fn rm(&mut self) -> Result<Duration> {
        self.ask(&Request::Rm).await
    }
}

/// The worker's side: `--tc-worker`. Answers requests until stdin closes, then removes what is
/// left.
pub async fn worker(label: u32, shim: Option<PathBuf>, server_api: Option<String>) -> Result<()> {
    if let (Some(socket), Some(server)) = (shim, server_api) {
        let listener = UnixListener::bind(&socket)
            .with_context(|| format!("binding the shim at {}", socket.display()))?;
        let from = format!("/v{}/", client_api_version());
        let to = format!("/v{server}/");
        if from.len() != to.len() {
            bail!("cannot rewrite {from} to {to}: lengths differ");
        }
        tokio::spawn(relay(listener, from.into_bytes(), to.into_bytes()));
    }
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut running: Vec<ContainerAsync<GenericImage>> = Vec::new();
    while let Some(line) = lines.next_line().await? {
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Start {
                engines,
                images,
                names,
            }) => {
                let started = Instant::now();
                let outcomes = join_all(
                    engines
                        .iter()
                        .zip(&images)
                        .zip(&names)
                        .map(|((engine, image), name)| start_one(engine, image, name, label)),
                )
                .await;
                let elapsed = started.elapsed();
                let mut error = None;
                for outcome in outcomes {
                    match outcome {
                        Ok(container) => running.push(container),
                        Err(err) => {
                            error.get_or_insert(format!("{err:#}"));
                        }
                    }
                }
                reply(elapsed, error)
            }
            Ok(Request::Rm) => {
                let started = Instant::now();
                let outcomes = join_all(running.drain(..).map(ContainerAsync::rm)).await;
                let error = outcomes
                    .into_iter()
                    .find_map(|o| o.err())
                    .map(|e| e.to_string());
                reply(started.elapsed(), error)
            }
            Err(err) => reply(Duration::ZERO, Some(format!("bad request: {err}"))),
        };
        let mut text = serde_json::to_string(&reply)?;
        text.push('\n');
        stdout.write_all(text.as_bytes()).await?;
        stdout.flush().await?;
    }
    join_all(running.drain(..).map(ContainerAsync::rm)).await;
    Ok(())
}

fn reply(elapsed: Duration, error: Option<String>) -> Reply {
    Reply {
        ok: error.is_none(),
        ms: elapsed.as_secs_f64() * 1000.0,
        error: error.unwrap_or_default(),
    }
}

/// One container the way a testcontainers user would write it for this image: the image's
/// environment contract, command and user from the engine's recipe, the same tmpfs mounts as
/// the floor, the port published on 127.0.0.1, the community modules' log-line wait, then the
/// authenticated loop.
async fn start_one(
    engine: &str,
    image: &str,
    name: &str,
    label: u32,
) -> Result<ContainerAsync<GenericImage>> {
    let engine = EngineRef::parse(engine)?;
    let admin = Credentials::generate(engine.admin_user);
    let agent = Credentials::generate(engine.agent_user);
    let recipe = engine.container(&admin, &agent, sandboxd_domain::DataSize::CONTAINER_DEFAULT);
    let (repository, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
    let port = engine.port;
    let mut generic = GenericImage::new(repository, tag).with_exposed_port(port.tcp());
    if let Some(line) = ready::ready_log_line(engine) {
        // What testcontainers-modules waits for: Postgres logs on stderr, Redis on stdout.
        generic = generic.with_wait_for(match engine.protocol {
            Protocol::Postgres => WaitFor::message_on_stderr(line),
            _ => WaitFor::message_on_stdout(line),
        });
    }
    let tmpfs: HashMap<String, String> = tmpfs_of(&recipe).into_iter().collect();
    let port_key = format!("{port}/tcp");
    let mut request = generic
        .with_container_name(name)
        .with_label(BENCH_LABEL, label.to_string())
        .with_cmd(recipe.command.clone())
        .with_startup_timeout(engine.readiness_deadline)
        .with_host_config_modifier(move |host| {
            host.tmpfs = Some(tmpfs.clone());
            host.publish_all_ports = Some(false);
            host.port_bindings = Some(HashMap::from([(
                port_key.clone(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".to_owned()),
                    host_port: Some(String::new()),
                }]),
            )]));
        });
    for (key, value) in &recipe.env {
        request = request.with_env_var(key.clone(), value.clone());
    }
    // A peer runs the images as their documentation says: the password in the env.
    if let Some(secret) = &recipe.secret {
        request = request.with_env_var(secret.var, secret.value.expose_secret().to_owned());
    }
    if let Some(user) = recipe.user {
        request = request.with_user(user);
    }
    let container = request.start().await.context("testcontainers start")?;
    let host_port = container.get_host_port_ipv4(port.tcp()).await?;
    ready::wait_ready(engine, "127.0.0.1", host_port, &admin).await?;
    Ok(container)
}

/// Accepts connections on the shim socket and relays each to the engine.
async fn relay(listener: UnixListener, from: Vec<u8>, to: Vec<u8>) {
    while let Ok((client, _)) = listener.accept().await {
        let (from, to) = (from.clone(), to.clone());
        tokio::spawn(async move {
            if let Ok(engine) = UnixStream::connect(ENGINE_SOCKET).await {
                let (mut client_read, mut client_write) = client.into_split();
                let (engine_read, mut engine_write) = engine.into_split();
                let upstream = async {
                    let _ = rewrite(&mut client_read, &mut engine_write, &from, &to).await;
                    let _ = engine_write.shutdown().await;
                };
                let downstream = async {
                    let mut engine_read = engine_read;
                    let _ = tokio::io::copy(&mut engine_read, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                };
                tokio::join!(upstream, downstream);
            }
        });
    }
}

/// Copies `reader` to `writer`, replacing every `from` with `to` (same length). A chunk's tail
/// that could be the start of `from` is held back until the next chunk decides it.
async fn rewrite<R, W>(
    reader: &mut R,
    writer: &mut W,
    from: &[u8],
    to: &[u8],
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            writer.write_all(&pending).await?;
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        replace_all(&mut pending, from, to);
        let keep = partial_suffix(&pending, from);
        let flush = pending.len() - keep;
        writer.write_all(&pending[..flush]).await?;
        pending.drain(..flush);
    }
}

fn replace_all(data: &mut [u8], from: &[u8], to: &[u8]) {
    let mut i = 0;
    while i + from.len() <= data.len() {
        if &data[i..i + from.len()] == from {
            data[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
}

/// The length of the longest proper suffix of `data` that is a prefix of `pattern`.
fn partial_suffix(data: &[u8], pattern: &[u8]) -> usize {
    (1..pattern.len())
        .rev()
        .find(|&k| k <= data.len() && data[data.len() - k..] == pattern[..k])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_shim_rewrites_versions_split_across_reads() {
        let input = b"GET /v1.53/containers/json HTTP/1.1\r\n\r\nPOST /v1.53/x HTTP/1.1\r\n\r\n";
        for split in 0..input.len() {
            let (a, b) = input.split_at(split);
            let mut reader = tokio_test_reader(a, b);
            let mut out = Vec::new();
            rewrite(&mut reader, &mut out, b"/v1.53/", b"/v1.41/")
                .await
                .expect("copy");
            assert_eq!(
                out, b"GET /v1.41/containers/json HTTP/1.1\r\n\r\nPOST /v1.41/x HTTP/1.1\r\n\r\n",
                "split at {split}"
            );
        }
    }

    /// A reader that yields `a`, then `b`.
    fn tokio_test_reader(a: &[u8], b: &[u8]) -> impl tokio::io::AsyncRead + Unpin {
        tokio::io::AsyncReadExt::chain(
            std::io::Cursor::new(a.to_vec()),
            std::io::Cursor::new(b.to_vec()),
        )
    }

    #[test]
    fn a_request_ending_in_a_non_prefix_is_flushed_whole() {
        assert_eq!(partial_suffix(b"HTTP/1.1\r\n\r\n", b"/v1.53/"), 0);
        assert_eq!(partial_suffix(b"GET /v1", b"/v1.53/"), 3);
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(newer("1.53", "1.41"));
        assert!(!newer("1.41", "1.41"));
        assert!(!newer("1.9", "1.41"));
    }
}
