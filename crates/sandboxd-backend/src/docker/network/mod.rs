//! Networks. Without a configured network, every container a daemon makes joins that daemon's
//! own bridge network, `sandboxd-net-<daemon>`, created with inter-container traffic off
//! (`com.docker.network.bridge.enable_icc=false`): the engine drops every packet from one
//! container to another on it, so no tenant's container reaches another's, whatever networks
//! come and go meanwhile. (A network per sandbox set was tried first: Docker's rules between
//! bridge networks have short gaps while it reprograms them as other networks are created and
//! removed, and 3 probes of 100 got through during such churn; the rule inside one network held
//! for every probe.) Its subnet comes from sandboxd's own pool (`subnet_pool`, `/subnet_prefix`
//! each), not Docker's default pools, which run out after ~31 networks.
//!
//! Parts: `daemon.rs` the daemon network (made, kept, swept), `instance.rs` an instance's own
//! network on Podman, `operator.rs` the operator's configured network, `subnet.rs` the pool the
//! subnets come from and the creation of a bridge network on a free one.

use bollard::Docker;
use bollard::query_parameters::ListContainersOptions;
use sandboxd_domain::DaemonId;

use super::client;
use super::labels::Labels;
use crate::error::BackendError;

mod daemon;
mod instance;
mod operator;
mod subnet;

pub(super) use daemon::{ensure_daemon_network, sweep};
pub(super) use instance::{
    create_instance_network, remove_instance_network, sweep_instance_networks,
};
pub(super) use operator::{ensure_exists, fix};
pub(super) use subnet::SubnetPool;

/// Every container `maker` made, running or not.
pub(super) async fn containers_of(
    docker: &Docker,
    labels: &Labels,
    maker: &DaemonId,
) -> Result<Vec<bollard::models::ContainerSummary>, BackendError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(labels.made_by_filter(maker)),
        ..ListContainersOptions::default()
    };
    client::read_settled(|| docker.list_containers(Some(options.clone())))
        .await
        .map_err(|err| client::error("listing", "containers", err))
}
