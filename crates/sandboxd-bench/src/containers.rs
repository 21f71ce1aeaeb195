//! The floor (`docker run` of the same image plus a readiness loop, then `docker rm -f`) and the
//! phase timeline of any container, read back from Docker after the fact.
//!
//! The floor runs the engine's own container recipe (the same image, environment contract,
//! command, user and tmpfs mounts sandboxd uses) with the port published on 127.0.0.1, but none
//! of the Docker backend's hardening (caps, limits, dropped capabilities): it is what anyone
//! would type by hand. Its readiness loop is `ready::wait_ready`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use sandboxd_backend::readiness::{Attempt, poll_until_ready};
use sandboxd_backend::wire::{self, Reach};
use sandboxd_domain::engine::{AdminAccess, AdminStep, ContainerRecipe};
use sandboxd_domain::{Credentials, EngineRef};
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::process::Command;

use crate::cleanup::BENCH_LABEL;
use crate::ready;

/// Tmpfs options as the Docker backend writes them (kept below a 512 MB memory cap).
pub fn tmpfs_options(size_mb: u64, mode: &str, uid: Option<u32>) -> String {
    let size = size_mb.clamp(1, 384);
    let owner = uid.map(|uid| format!(",uid={uid}")).unwrap_or_default();
    format!("rw,nosuid,nodev,noexec,size={size}m,mode={mode}{owner}")
}

/// Tmpfs mounts of a recipe as `path → options`.
pub fn tmpfs_of(recipe: &ContainerRecipe) -> BTreeMap<String, String> {
    recipe
        .tmpfs
        .iter()
        .map(|t| (t.path.to_owned(), tmpfs_options(t.size_mb, t.mode, t.uid)))
        .collect()
}

/// A free port on 127.0.0.1 for the floor to publish on (the floor asks nothing back of Docker).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// `docker run -d` of `engine`'s recipe under `name`; returns the published port.
async fn docker_run(
    engine: EngineRef,
    image: &str,
    name: &str,
    bench_pid: u32,
    admin: &Credentials,
    agent: &Credentials,
) -> Result<u16> {
    let recipe = engine.container(admin, agent, sandboxd_domain::DataSize::CONTAINER_DEFAULT);
    let port = free_port()?;
    let mut cmd = Command::new("docker");
    cmd.args(["run", "-d", "--name", name, "--label"])
        .arg(format!("{BENCH_LABEL}={bench_pid}"))
        .arg("-p")
        .arg(format!("127.0.0.1:{port}:{}", engine.port));
    for (path, options) in tmpfs_of(&recipe) {
        cmd.arg("--tmpfs").arg(format!("{path}:{options}"));
    }
    for (key, value) in &recipe.env {
        cmd.arg("-e").arg(format!("{key}={value}"));
    }
    // The floor is plain `docker run`: the superuser's password goes in the env as the images
    // document it. `-e KEY` takes the value from the docker CLI's environment, so it is on no
    // command line.
    if let Some(secret) = &recipe.secret {
        cmd.arg("-e")
            .arg(secret.var)
            .env(secret.var, secret.value.expose_secret());
    }
    if let Some(user) = recipe.user {
        cmd.args(["--user", user]);
    }
    cmd.arg(image).args(&recipe.command);
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = cmd.output().await.context("docker run")?;
    if !out.status.success() {
        bail!(
            "docker run {image}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(port)
}

/// One floor container: `docker run -d`, then the readiness loop. Returns the time to ready.
pub async fn floor_start(
    engine: EngineRef,
    image: &str,
    name: &str,
    bench_pid: u32,
) -> Result<Duration> {
    let admin = Credentials::generate(engine.admin_user);
    let agent = Credentials::generate(engine.agent_user);
    let started = Instant::now();
    let port = docker_run(engine, image, name, bench_pid, &admin, &agent).await?;
    ready::wait_ready(engine, "127.0.0.1", port, &admin).await?;
    Ok(started.elapsed())
}

/// A diagnostic, not a peer: a container started like the floor's, then brought up with
/// sandboxd's own steps through its public wire functions (superuser login polled, the
/// handed-out account created, the account's probe polled), each step marked. It shows what
/// sandboxd does after the server is up, step by step, without touching the backend.
pub async fn replay_start(
    engine: EngineRef,
    image: &str,
    name: &str,
    bench_pid: u32,
) -> Result<(Duration, Vec<(String, Duration)>)> {
    let admin = Credentials::generate(engine.admin_user);
    let agent = Credentials::generate(engine.agent_user);
    let started = Instant::now();
    let port = docker_run(engine, image, name, bench_pid, &admin, &agent).await?;
    let reach = Reach {
        host: "127.0.0.1",
        port,
    };
    let admin = AdminAccess::Password(admin);
    let deadline = engine.readiness_deadline;
    let mut marks = Vec::new();
    let facts = poll_until_ready(name, deadline, || async {
        wire::server_facts(engine.get(), &admin, reach)
            .await
            .map_err(|e| Attempt::NotYet(e.to_string()))
    })
    .await?;
    marks.push(("superuser login ok".to_owned(), started.elapsed()));
    for step in engine.setup(&agent, facts) {
        let label = step_label(&step);
        wire::run_step(engine.get(), Some(&admin), reach, &step)
            .await
            .map_err(|e| anyhow::anyhow!("setup step {label}: {e}"))?;
        marks.push((format!("account setup: {label}"), started.elapsed()));
    }
    poll_until_ready(name, deadline, || async {
        wire::probe(engine.get(), reach, &agent, engine.agent_database)
            .await
            .map_err(|e| Attempt::NotYet(e.to_string()))
    })
    .await?;
    Ok((started.elapsed(), marks))
}

/// A setup step named by its statement's first two words (`CREATE ROLE`): never its secrets.
fn step_label(step: &AdminStep) -> String {
    match step {
        AdminStep::Sql { statement, .. } => statement
            .expose_secret()
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" "),
        AdminStep::MongoCommand { .. } => "a MongoDB command".to_owned(),
        AdminStep::RedisCommand { words } => words
            .iter()
            .take(2)
            .map(|w| w.expose_secret())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `docker rm -f -v`, timed.
pub async fn docker_rm(names: &[String]) -> Result<Duration> {
    let started = Instant::now();
    let out = Command::new("docker")
        .args(["rm", "-f", "-v"])
        .args(names)
        .output()
        .await
        .context("docker rm")?;
    if !out.status.success() {
        bail!("docker rm: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(started.elapsed())
}

/// The phase of the server's own "ready" log line.
pub const SERVER_UP: &str = "server logged ready";
/// The last phase: the call returned, or the readiness loop passed.
pub const READY: &str = "ready (authenticated round trip)";

/// When the phases of one provision ended, as offsets from the call, in order.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub marks: Vec<(String, Duration)>,
}

fn since(t0: SystemTime, at: OffsetDateTime) -> Duration {
    let at = SystemTime::UNIX_EPOCH
        + Duration::from_nanos(u64::try_from(at.unix_timestamp_nanos()).unwrap_or(0));
    at.duration_since(t0).unwrap_or(Duration::ZERO)
}

/// Reads the timeline of container `name` from `docker inspect` and its timestamped logs:
/// created, started, the server's "ready" log line; then `extra` marks and `ready`.
pub async fn timeline(
    name: &str,
    engine: EngineRef,
    t0: SystemTime,
    extra: &[(String, Duration)],
    ready: Duration,
) -> Result<Timeline> {
    let out = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.Created}} {{.State.StartedAt}}",
            name,
        ])
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let (Some(created), Some(started)) = (parts.next(), parts.next()) else {
        bail!(
            "docker inspect {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut marks = vec![
        (
            "container created".to_owned(),
            since(t0, OffsetDateTime::parse(created, &Rfc3339)?),
        ),
        (
            "container started".to_owned(),
            since(t0, OffsetDateTime::parse(started, &Rfc3339)?),
        ),
    ];
    if let Some(marker) = ready::ready_log_line(engine) {
        let logs = Command::new("docker")
            .args(["logs", "--timestamps", name])
            .output()
            .await?;
        let all = [
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr),
        ];
        let server_up = all
            .iter()
            .flat_map(|stream| stream.lines())
            .filter(|line| line.contains(marker))
            .filter_map(|line| line.split_whitespace().next())
            .filter_map(|ts| OffsetDateTime::parse(ts, &Rfc3339).ok())
            .max();
        if let Some(at) = server_up {
            marks.push((SERVER_UP.to_owned(), since(t0, at)));
        }
    }
    marks.extend(extra.iter().cloned());
    marks.push((READY.to_owned(), ready));
    Ok(Timeline { marks })
}

/// Whether `image` is on the local engine (nothing is ever pulled).
pub async fn image_present(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .await
        .is_ok_and(|out| out.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_options_match_the_docker_backend() {
        assert_eq!(
            tmpfs_options(256, "1777", None),
            "rw,nosuid,nodev,noexec,size=256m,mode=1777"
        );
        assert_eq!(
            tmpfs_options(64, "1777", Some(999)),
            "rw,nosuid,nodev,noexec,size=64m,mode=1777,uid=999"
        );
    }
}
