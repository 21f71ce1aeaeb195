//! What a Pod's status says: where it answers, whether its server runs, why it does not.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::spec::CONTAINER;

/// Reasons a container waits that no amount of waiting fixes.
const HOPELESS: &[&str] = &[
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

fn server(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == CONTAINER)
}

pub(super) fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Unknown")
}

pub(super) fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// Running, its server container running, not being deleted.
pub(super) fn is_live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && phase(pod) == "Running"
        && server(pod).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// Whether a container of the Pod runs (as its last reported status says).
pub(super) fn runs_anything(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|statuses| {
            statuses
                .iter()
                .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Why the Pod will not run its server, when that is already certain: it ended (with its
/// exit code and reason, OOMKilled among them), or its container waits for something that
/// will not come (an image that is never pulled, a config error). None while it may still
/// start.
pub(super) fn failed(pod: &Pod) -> Option<String> {
    if let Some(container) = server(pod)
        && let Some(state) = &container.state
    {
        if let Some(ended) = &state.terminated {
            return Some(format!(
                "the server exited with code {} ({}){}",
                ended.exit_code,
                ended.reason.as_deref().unwrap_or("no reason given"),
                ended
                    .message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
        if let Some(waiting) = &state.waiting
            && let Some(reason) = waiting.reason.as_deref()
            && HOPELESS.contains(&reason)
        {
            return Some(format!(
                "the container cannot start: {reason}{}",
                waiting
                    .message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
    }
    match phase(pod) {
        "Failed" | "Succeeded" => Some(format!(
            "the Pod ended ({}){}",
            phase(pod),
            pod.status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
        _ => None,
    }
}

/// What the Pod waits for, as its conditions say (`0/1 nodes are available: 1 Insufficient
/// cpu.`), when one says so.
pub(super) fn why_waiting(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.status == "False" && c.message.is_some())
        .and_then(|c| {
            Some(format!(
                "{} ({})",
                c.message.as_deref()?,
                c.reason.as_deref().unwrap_or(&c.type_)
            ))
        })
}

/// `running`, `pending`, `oom-killed`, `exited`, … for listings.
pub(super) fn status(pod: &Pod) -> String {
    if pod.metadata.deletion_timestamp.is_some() {
        return "terminating".to_owned();
    }
    if let Some(ended) = server(pod)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
    {
        return match ended.reason.as_deref() {
            Some("OOMKilled") => "oom-killed".to_owned(),
            _ => "exited".to_owned(),
        };
    }
    phase(pod).to_ascii_lowercase()
}
