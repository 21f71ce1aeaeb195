//! What the engine says about one container: does it exist, is it running, was it OOM-killed,
//! and, when it stopped while starting, its exit code and last log lines.

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use bollard::query_parameters::LogsOptions;
use futures::StreamExt;
use secrecy::{ExposeSecret, SecretString};

use super::client;
use crate::error::BackendError;

/// Log lines quoted in "stopped while starting" errors.
const TAIL_LINES: usize = 6;

/// The container named `name`, or None when there is none.
pub(super) async fn inspect(
    docker: &Docker,
    name: &str,
) -> Result<Option<ContainerInspectResponse>, BackendError> {
    match client::read_settled(|| docker.inspect_container(name, None)).await {
        Ok(found) => Ok(Some(found)),
        Err(err) if client::is_not_found(&err) => Ok(None),
        Err(err) => Err(client::error("inspecting", name, err)),
    }
}

pub(super) fn is_running(found: &ContainerInspectResponse) -> bool {
    found
        .state
        .as_ref()
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// The container's IP address on `network`, once it is attached and running.
pub(super) fn address_on(found: &ContainerInspectResponse, network: &str) -> Option<String> {
    found
        .network_settings
        .as_ref()?
        .networks
        .as_ref()?
        .get(network)?
        .ip_address
        .clone()
        .filter(|address| !address.is_empty())
}

pub(super) fn oom_killed(found: &ContainerInspectResponse) -> bool {
    found
        .state
        .as_ref()
        .and_then(|s| s.oom_killed)
        .unwrap_or(false)
}

/// Running and never OOM-killed: a container whose server lost a process to the OOM killer is
/// not trusted with a test suite any more.
pub(super) fn is_live(found: &ContainerInspectResponse) -> bool {
    is_running(found) && !oom_killed(found)
}

/// True when the container has stopped for good (exited or dead), as opposed to being created,
/// starting or running.
pub(super) fn has_ended(found: &ContainerInspectResponse) -> bool {
    matches!(
        found.state.as_ref().and_then(|s| s.status),
        Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::DEAD)
    )
}

/// "exited with code 1 (oom-killed); last log lines: … | …", with any of `secrets` blanked out
/// in case a server echoed one.
pub(super) async fn exit_detail(
    docker: &Docker,
    name: &str,
    found: Option<&ContainerInspectResponse>,
    secrets: &[&SecretString],
) -> String {
    let mut detail = match found.and_then(|f| f.state.as_ref()) {
        Some(state) => {
            let mut text = format!(
                "container {}",
                state.status.map(|s| s.to_string()).unwrap_or_default()
            );
            if let Some(code) = state.exit_code {
                text.push_str(&format!(" with code {code}"));
            }
            if state.oom_killed == Some(true) {
                text.push_str(" (oom-killed)");
            }
            if let Some(error) = state.error.as_ref().filter(|e| !e.is_empty()) {
                text.push_str(&format!(": {error}"));
            }
            text
        }
        None => "container removed".to_owned(),
    };
    let tail = tail(docker, name).await;
    if !tail.is_empty() {
        detail.push_str("; last log lines: ");
        detail.push_str(&tail);
    }
    redact(&detail, secrets)
}

/// The last lines the container wrote, joined with ` | `.
async fn tail(docker: &Docker, name: &str) -> String {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: TAIL_LINES.to_string(),
        ..LogsOptions::default()
    };
    let chunks: Vec<_> = docker.logs(name, Some(options)).collect().await;
    let text: String = chunks
        .into_iter()
        .filter_map(Result::ok)
        .map(|chunk| chunk.to_string())
        .collect();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join(" | ")
}

pub(super) fn redact(text: &str, secrets: &[&SecretString]) -> String {
    secrets
        .iter()
        .map(|s| s.expose_secret())
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |acc, secret| {
            acc.replace(secret, "[redacted]")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_blanks_every_secret() {
        let a = SecretString::from("aaaa1111");
        let b = SecretString::from("bbbb2222");
        let text = redact("FATAL: pw aaaa1111 and bbbb2222", &[&a, &b]);
        assert_eq!(text, "FATAL: pw [redacted] and [redacted]");
    }
}
