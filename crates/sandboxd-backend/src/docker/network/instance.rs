//! Podman's bridge networks have no inter-container switch (netavark lets the containers of one
//! network talk; its compatible API ignores the option with a warning) but drop traffic between
//! networks. On Podman (`client::Isolation::NetworkPerInstance`) each container therefore gets
//! a network of its own, `sandboxd-inet-<daemon>-<random>` (a `/instance_subnet_prefix` of the
//! same pool), named in the container's labels: teardown removes it after the container, and
//! the sweep removes any of the maker's that no container names once it has settled.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::ListNetworksOptions;
use rand::Rng;
use sandboxd_domain::DaemonId;
use sandboxd_domain::clock::{age_of, now_ms};
use tokio::sync::Mutex;

use super::containers_of;
use super::subnet::{SubnetPool, create_in_pool};
use crate::docker::client;
use crate::docker::labels::Labels;
use crate::error::BackendError;

/// A new network for one instance of `maker` (on an engine that keeps networks, not
/// containers, apart: `client::Isolation::NetworkPerInstance`); answers its name. The
/// container records it in its labels, so its teardown and the sweep find it again.
pub(in crate::docker) async fn create_instance_network(
    docker: &Docker,
    labels: &Labels,
    pool: &SubnetPool,
    lock: &Mutex<()>,
    maker: &DaemonId,
) -> Result<String, BackendError> {
    let name = format!(
        "sandboxd-inet-{maker}-{:012x}",
        rand::rng().random::<u64>() & 0xffff_ffff_ffff
    );
    // No listing of the engine's networks first: Podman's takes seconds once there are dozens
    // (it inspects every container for every network), and it refuses a subnet in use itself,
    // so a random subnet tried again after each refusal finds a free one. Creations in this
    // process take turns, so its own instances do not race for one subnet.
    let _turn = lock.lock().await;
    create_in_pool(
        docker,
        pool,
        Vec::new(),
        &name,
        labels.for_instance_network(maker, now_ms()),
        HashMap::new(),
    )
    .await?;
    Ok(name)
}

/// Removes an instance's own network once its container is gone; quiet when it is gone
/// already. A network still in use (a container attached since) stays for the sweep.
pub(in crate::docker) async fn remove_instance_network(docker: &Docker, name: &str) {
    match docker.remove_network(name).await {
        Ok(()) => tracing::debug!(network = %name, "removed an instance's network"),
        Err(err) if client::is_not_found(&err) => {}
        Err(err) => {
            tracing::debug!(network = %name, error = %err, "an instance's network stays for the sweep")
        }
    }
}

/// Removes `maker`'s instance networks that no container of `maker` names and that are older
/// than `settle` (a younger one may belong to a provision between network and container
/// creation). Answers how many were removed.
pub(in crate::docker) async fn sweep_instance_networks(
    docker: &Docker,
    labels: &Labels,
    maker: &DaemonId,
    settle: Duration,
) -> Result<usize, BackendError> {
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(labels.instance_networks_filter(maker)),
        }))
        .await
        .map_err(|err| client::error("listing", "networks", err))?;
    if networks.is_empty() {
        return Ok(0);
    }
    let members = containers_of(docker, labels, maker).await?;
    let used: Vec<String> = members
        .iter()
        .filter_map(|c| labels.instance_network_of(c.labels.as_ref()))
        .collect();
    let mut removed = 0;
    for network in networks {
        let Some(name) = network.name else { continue };
        let Some(created_ms) = labels.parse_instance_network(network.labels.as_ref(), maker) else {
            continue;
        };
        if used.contains(&name) || age_of(created_ms) < settle {
            continue;
        }
        match docker.remove_network(&name).await {
            Ok(()) => {
                tracing::info!(network = %name, "removed an instance network: its sandbox is gone");
                removed += 1;
            }
            Err(err) if client::is_not_found(&err) => {}
            Err(err) => tracing::debug!(network = %name, error = %err, "an instance network stays"),
        }
    }
    Ok(removed)
}
