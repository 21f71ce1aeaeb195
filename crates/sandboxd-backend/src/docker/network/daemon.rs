//! The daemon network, `sandboxd-net-<daemon>`. It is labeled (`<ns>.sandbox-network=1`,
//! daemon, created) and owned like the containers: only the daemon that made it removes it, when
//! none of its containers is left — by the janitor's `sweep` once it has been unused for
//! `network_settle`, or at once by `sweep_now` (the CLI's teardown, a daemon's clean stop). It is
//! not removed with every last container, so sandboxes coming and going do not churn networks.
//! The engine does not refuse a second network of one name, so two processes of one maker (two
//! `sandboxd provision` CLIs) can make two at once; a lookup by that name is then "ambiguous",
//! and only then are the maker's networks listed: a provision settles on the oldest (containers
//! attach by id) and removes an unused duplicate, and the sweep removes each of the maker's.
//! (The listing is not the usual lookup: while other networks are created and removed, the
//! engine's list can miss one.)

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::ListNetworksOptions;
use sandboxd_domain::DaemonId;
use sandboxd_domain::clock::{age_of, now_ms};
use tokio::sync::Mutex;

use super::containers_of;
use super::subnet::{SubnetPool, create_in_pool, subnets_in_use};
use crate::docker::client;
use crate::docker::labels::Labels;
use crate::error::BackendError;

/// The network the containers `maker` makes join.
fn daemon_network_name(maker: &DaemonId) -> String {
    format!("sandboxd-net-{maker}")
}

/// The option that turns inter-container traffic off on a bridge network.
const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

/// One of `maker`'s networks of its daemon network's name.
#[derive(Debug)]
struct Ours {
    id: String,
    created_ms: i64,
    icc_off: bool,
}

impl Ours {
    /// The network `id` with these labels and options, when `maker` made it.
    fn of(
        labels: &Labels,
        maker: &DaemonId,
        id: Option<String>,
        network_labels: Option<&HashMap<String, String>>,
        options: Option<&HashMap<String, String>>,
    ) -> Option<Self> {
        Some(Self {
            created_ms: labels.parse_daemon_network(network_labels, maker)?,
            id: id.unwrap_or_default(),
            icc_off: options
                .and_then(|o| o.get(ICC_OPTION))
                .is_some_and(|v| v == "false"),
        })
    }
}

/// `maker`'s networks named `name`, oldest first (then by id), and whether a network of that
/// name is someone else's. More than one of ours only when two processes of one maker (two
/// `sandboxd provision` CLIs) created it at the same moment: the engine does not refuse a
/// second network of a name.
async fn daemon_networks(
    docker: &Docker,
    labels: &Labels,
    maker: &DaemonId,
    name: &str,
) -> Result<(Vec<Ours>, bool), BackendError> {
    let listed = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([("name".to_owned(), vec![name.to_owned()])])),
        }))
        .await
        .map_err(|err| client::error("listing", "networks", err))?;
    let mut ours = Vec::new();
    let mut foreign = false;
    // The engine's name filter matches substrings.
    for network in listed
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
    {
        match Ours::of(
            labels,
            maker,
            network.id,
            network.labels.as_ref(),
            network.options.as_ref(),
        ) {
            Some(one) => ours.push(one),
            None => foreign = true,
        }
    }
    ours.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    Ok((ours, foreign))
}

/// The refusal when a network of the daemon network's name is not the daemon's.
fn not_ours(name: &str) -> BackendError {
    BackendError::Docker {
        operation: "creating",
        name: format!("network {name}"),
        detail: "a network with this name exists that this daemon did not make; remove or rename \
                 it"
        .into(),
    }
}

/// Keeps the oldest of `ours` and removes the others that nothing uses yet (another process of
/// the same maker that attached to one moves to the oldest when its next create finds it gone).
/// Returns the id of the one kept.
async fn keep_oldest(docker: &Docker, name: &str, ours: Vec<Ours>) -> Result<String, BackendError> {
    let mut ours = ours.into_iter();
    let Some(keeper) = ours.next() else {
        return Err(BackendError::Docker {
            operation: "creating",
            name: format!("network {name}"),
            detail: "the network vanished while it was being created".into(),
        });
    };
    if !keeper.icc_off {
        return Err(BackendError::Docker {
            operation: "creating",
            name: format!("network {name}"),
            detail: "a network with this name has inter-container traffic on; remove or rename it"
                .into(),
        });
    }
    for duplicate in ours {
        match docker.remove_network(&duplicate.id).await {
            Ok(()) => {
                tracing::debug!(network = %name, id = %duplicate.id, "removed a duplicate daemon network")
            }
            Err(err) => {
                tracing::debug!(network = %name, id = %duplicate.id, error = %err, "a duplicate daemon network stays for now")
            }
        }
    }
    Ok(keeper.id)
}

/// `maker`'s network, created when missing; answers its id (its name can be shared for a
/// moment by a duplicate, see [`daemon_networks`]). `lock` serializes creation in this
/// process: the instances of a set are provisioned in parallel.
pub(in crate::docker) async fn ensure_daemon_network(
    docker: &Docker,
    labels: &Labels,
    pool: &SubnetPool,
    lock: &Mutex<()>,
    maker: &DaemonId,
) -> Result<String, BackendError> {
    let name = daemon_network_name(maker);
    let _turn = lock.lock().await;
    // Looked up by name (the engine's listing can miss a network while others are created and
    // removed around it); listed only when the name is ambiguous.
    match docker.inspect_network(&name, None).await {
        Ok(found) => {
            let one = Ours::of(
                labels,
                maker,
                found.id,
                found.labels.as_ref(),
                found.options.as_ref(),
            )
            .ok_or_else(|| not_ours(&name))?;
            return keep_oldest(docker, &name, vec![one]).await;
        }
        Err(err) if client::is_not_found(&err) => {}
        Err(err) if is_ambiguous(&err) => {
            let (ours, foreign) = daemon_networks(docker, labels, maker, &name).await?;
            if foreign {
                return Err(not_ours(&name));
            }
            return keep_oldest(docker, &name, ours).await;
        }
        Err(err) => return Err(client::error("inspecting", &format!("network {name}"), err)),
    }
    let taken = subnets_in_use(docker).await?;
    create_in_pool(
        docker,
        pool,
        taken,
        &name,
        labels.for_daemon_network(maker, now_ms()),
        HashMap::from([(ICC_OPTION.to_owned(), "false".to_owned())]),
    )
    .await
}

/// The engine's answer to a lookup by a name two networks share.
fn is_ambiguous(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError { message, .. }
            if message.contains("ambiguous")
    )
}

/// Removes `maker`'s network when none of its containers is left and it is older than
/// `settle` (a younger one may belong to a provision between network and container creation).
/// Quiet when it is gone, still in use, or not ours; true when it was removed.
pub(in crate::docker) async fn sweep(
    docker: &Docker,
    labels: &Labels,
    lock: &Mutex<()>,
    maker: &DaemonId,
    settle: Duration,
) -> Result<bool, BackendError> {
    let name = daemon_network_name(maker);
    let ours = match docker.inspect_network(&name, None).await {
        Ok(found) => match Ours::of(
            labels,
            maker,
            found.id,
            found.labels.as_ref(),
            found.options.as_ref(),
        ) {
            Some(one) => vec![one],
            None => return Ok(false),
        },
        Err(err) if client::is_not_found(&err) => return Ok(false),
        // Someone else's network of that name is not listed among ours: never swept.
        Err(err) if is_ambiguous(&err) => daemon_networks(docker, labels, maker, &name).await?.0,
        Err(err) => return Err(client::error("inspecting", &format!("network {name}"), err)),
    };
    let mut removed = false;
    for network in ours {
        if age_of(network.created_ms) < settle {
            continue;
        }
        removed |= remove_unused(docker, labels, lock, maker, &name, &network.id, settle).await?;
    }
    Ok(removed)
}

/// Removes the network `id` when no container of `maker` is left (looking again for a while
/// when `settle` is zero).
async fn remove_unused(
    docker: &Docker,
    labels: &Labels,
    lock: &Mutex<()>,
    maker: &DaemonId,
    name: &str,
    id: &str,
    settle: Duration,
) -> Result<bool, BackendError> {
    // A container just removed can keep its endpoint on the network for a while on a busy
    // engine: with no container of ours left, a stop or teardown (`settle` zero) looks again
    // for a few seconds before giving up; the janitor's pass leaves it to its next tick. The
    // lock is held only for a look and a removal, never across a pause, so provisions in this
    // process do not wait on it.
    let retries = if settle.is_zero() {
        ENDPOINT_RETRIES
    } else {
        0
    };
    for attempt in 0..=retries {
        if attempt > 0 {
            tokio::time::sleep(ENDPOINT_PAUSE).await;
        }
        let _turn = lock.lock().await;
        let members = containers_of(docker, labels, maker).await?;
        if !members.is_empty() {
            return Ok(false);
        }
        match docker.remove_network(id).await {
            Ok(()) => {
                tracing::info!(network = %name, "removed the daemon network: none of its sandboxes is left");
                return Ok(true);
            }
            Err(err) if client::is_not_found(&err) => return Ok(false),
            // Active endpoints: a lingering one, or a container that joined since the look.
            Err(err) if matches!(client::status(&err), Some(403 | 409)) => {
                tracing::debug!(network = %name, attempt, "the daemon network still has endpoints");
            }
            Err(err) => return Err(client::error("removing", &format!("network {name}"), err)),
        }
    }
    tracing::warn!(network = %name, "the daemon network still has endpoints; a later sweep removes it");
    Ok(false)
}

/// How often, and how far apart, `sweep` looks again at a network whose endpoints linger.
const ENDPOINT_RETRIES: usize = 25;
const ENDPOINT_PAUSE: Duration = Duration::from_millis(200);
