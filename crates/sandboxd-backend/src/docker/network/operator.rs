//! With a configured network (the operator's), it is only checked before anything joins it: a
//! missing network is a configuration error with a fix, not an engine message after the fact.

use bollard::Docker;

use crate::docker::client;
use crate::error::BackendError;

/// Succeeds when `network` exists on the engine.
pub(in crate::docker) async fn ensure_exists(
    docker: &Docker,
    network: &str,
) -> Result<(), BackendError> {
    match docker.inspect_network(network, None).await {
        Ok(_) => Ok(()),
        Err(err) if client::is_not_found(&err) => Err(missing(network)),
        Err(err) => Err(client::error(
            "inspecting",
            &format!("network {network}"),
            err,
        )),
    }
}

fn missing(network: &str) -> BackendError {
    BackendError::Docker {
        operation: "joining",
        name: format!("network {network}"),
        detail: format!(
            "the network does not exist; create it (`docker network create {network}`) and \
             attach the agents' containers to it, or unset [docker] network to publish ports on \
             127.0.0.1 instead"
        ),
    }
}

/// The fix `doctor` prints for a missing network.
pub(in crate::docker) fn fix(network: &str) -> String {
    format!("docker network create {network}, or unset [docker] network")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_network_names_it_and_the_fix() {
        let message = missing("agents").to_string();
        assert!(message.contains("network agents"), "{message}");
        assert!(
            message.contains("docker network create agents"),
            "{message}"
        );
    }
}
