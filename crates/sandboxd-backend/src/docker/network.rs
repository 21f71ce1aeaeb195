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
//! The network is labeled (`<ns>.sandbox-network=1`, daemon, created) and owned like the
//! containers: only the daemon that made it removes it, when none of its containers is left —
//! by the janitor's `sweep` once it has been unused for `network_settle`, or at once by
//! `sweep_now` (the CLI's teardown, a daemon's clean stop). It is not removed with every last
//! container, so sandboxes coming and going do not churn networks. The engine does not refuse a
//! second network of one name, so two processes of one maker (two `sandboxd provision` CLIs)
//! can make two at once; a lookup by that name is then "ambiguous", and only then are the
//! maker's networks listed: a provision settles on the oldest (containers attach by id) and
//! removes an unused duplicate, and the sweep removes each of the maker's. (The listing is not
//! the usual lookup: while other networks are created and removed, the engine's list can miss
//! one.)
//!
//! Podman's bridge networks have no inter-container switch (netavark lets the containers of one
//! network talk; its compatible API ignores the option with a warning) but drop traffic between
//! networks. On Podman (`client::Isolation::NetworkPerInstance`) each container therefore gets
//! a network of its own, `sandboxd-inet-<daemon>-<random>` (a `/instance_subnet_prefix` of the
//! same pool), named in the container's labels: teardown removes it after the container, and
//! the sweep removes any of the maker's that no container names once it has settled.
//!
//! With a configured network (the operator's), it is only checked before anything joins it: a
//! missing network is a configuration error with a fix, not an engine message after the fact.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions};
use rand::Rng;
use sandboxd_domain::DaemonId;
use sandboxd_domain::clock::{age_of, now_ms};
use tokio::sync::Mutex;

use super::client;
use super::labels::Labels;
use crate::error::BackendError;

/// How many subnets a create tries before giving up (each overlap answer tries another at random).
const CREATE_ATTEMPTS: usize = 32;

/// The network the containers `maker` makes join.
pub(super) fn daemon_network_name(maker: &DaemonId) -> String {
    format!("sandboxd-net-{maker}")
}

/// The option that turns inter-container traffic off on a bridge network.
const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

/// The IPv4 range daemon networks' subnets are carved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SubnetPool {
    base: u32,
    pool_prefix: u8,
    prefix: u8,
}

impl SubnetPool {
    /// `10.213.0.0/16` carved into `/prefix` subnets.
    pub fn parse(pool: &str, prefix: u8) -> Result<Self, String> {
        let (base, pool_prefix) = parse_cidr(pool).ok_or_else(|| {
            format!("subnet_pool {pool:?} is not an IPv4 CIDR like 10.213.0.0/16")
        })?;
        if !(pool_prefix..=29).contains(&prefix) {
            return Err(format!(
                "subnet_prefix must be between the pool's /{pool_prefix} and /29, got /{prefix}"
            ));
        }
        Ok(Self {
            base: base & mask(pool_prefix),
            pool_prefix,
            prefix,
        })
    }

    /// How many subnets the pool holds.
    pub fn len(&self) -> u32 {
        1u32.checked_shl(u32::from(self.prefix - self.pool_prefix))
            .unwrap_or(u32::MAX)
    }

    /// The `index`th subnet, as (network address, prefix).
    fn nth(&self, index: u32) -> (u32, u8) {
        let size = 1u64 << (32 - u32::from(self.prefix));
        let offset = u64::from(index % self.len()) * size;
        (self.base.wrapping_add(offset as u32), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn parse_cidr(cidr: &str) -> Option<(u32, u8)> {
    let (address, prefix) = cidr.split_once('/')?;
    let address: Ipv4Addr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    (prefix <= 32).then_some((u32::from(address), prefix))
}

fn overlaps(a: (u32, u8), b: (u32, u8)) -> bool {
    let m = mask(a.1.min(b.1));
    a.0 & m == b.0 & m
}

fn cidr((address, prefix): (u32, u8)) -> String {
    format!("{}/{prefix}", Ipv4Addr::from(address))
}

/// A free subnet of `pool`, starting the search at `start` (random, so two daemons sharing an
/// engine rarely race for the same one), or None when every one overlaps `taken`.
fn free_subnet(pool: &SubnetPool, taken: &[(u32, u8)], start: u32) -> Option<(u32, u8)> {
    (0..pool.len())
        .map(|i| pool.nth(start.wrapping_add(i)))
        .find(|candidate| !taken.iter().any(|t| overlaps(*t, *candidate)))
}

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
pub(super) async fn ensure_daemon_network(
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

/// Creates the bridge network `name` on a subnet of `pool` that overlaps none of `taken` (nor,
/// the engine checks, any it has); answers its id.
async fn create_in_pool(
    docker: &Docker,
    pool: &SubnetPool,
    mut taken: Vec<(u32, u8)>,
    name: &str,
    labels: HashMap<String, String>,
    options: HashMap<String, String>,
) -> Result<String, BackendError> {
    for _ in 0..CREATE_ATTEMPTS {
        // A fresh random start each try, not the next subnet: a refusal means a network of the
        // engine's covers this one, and a daemon network's /22 covers 64 /28s in a row.
        let start = rand::rng().random_range(0..pool.len());
        let Some(subnet) = free_subnet(pool, &taken, start) else {
            break;
        };
        let request = NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".to_owned()),
            internal: Some(false),
            attachable: Some(false),
            ipam: Some(Ipam {
                driver: Some("default".to_owned()),
                config: Some(vec![IpamConfig {
                    subnet: Some(cidr(subnet)),
                    ..IpamConfig::default()
                }]),
                options: None,
            }),
            options: Some(options.clone()),
            labels: Some(labels.clone()),
            ..NetworkCreateRequest::default()
        };
        match docker.create_network(request).await {
            Ok(created) => {
                tracing::debug!(network = %name, subnet = %cidr(subnet), "created a network");
                return Ok(created.id);
            }
            // Another daemon took that subnet since the listing: try the next free one.
            Err(err) if is_overlap(&err) => taken.push(subnet),
            Err(err) => return Err(client::error("creating", &format!("network {name}"), err)),
        }
    }
    Err(BackendError::Docker {
        operation: "creating",
        name: format!("network {name}"),
        detail: format!(
            "no free /{} subnet found in [docker] subnet_pool {} in {CREATE_ATTEMPTS} tries; widen \
             the pool or remove unused networks",
            pool.prefix,
            cidr((pool.base, pool.pool_prefix))
        ),
    })
}

/// A new network for one instance of `maker` (on an engine that keeps networks, not
/// containers, apart: `client::Isolation::NetworkPerInstance`); answers its name. The
/// container records it in its labels, so its teardown and the sweep find it again.
pub(super) async fn create_instance_network(
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
pub(super) async fn remove_instance_network(docker: &Docker, name: &str) {
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
pub(super) async fn sweep_instance_networks(
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

/// The engine's answer to a lookup by a name two networks share.
fn is_ambiguous(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError { message, .. }
            if message.contains("ambiguous")
    )
}

/// Docker says the subnet "overlaps", Podman that it "is already used".
fn is_overlap(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError { message, .. }
            if message.contains("overlap")
                || (message.contains("subnet") && message.contains("already used"))
    )
}

/// Every IPv4 subnet any network on the engine uses (ours, the operator's, Docker's own).
async fn subnets_in_use(docker: &Docker) -> Result<Vec<(u32, u8)>, BackendError> {
    let networks = docker
        .list_networks(None::<ListNetworksOptions>)
        .await
        .map_err(|err| client::error("listing", "networks", err))?;
    Ok(networks
        .iter()
        .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
        .flatten()
        .filter_map(|c| parse_cidr(c.subnet.as_deref()?))
        .collect())
}

/// Removes `maker`'s network when none of its containers is left and it is older than
/// `settle` (a younger one may belong to a provision between network and container creation).
/// Quiet when it is gone, still in use, or not ours; true when it was removed.
pub(super) async fn sweep(
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

/// Every container `maker` made, running or not.
async fn containers_of(
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

/// How often, and how far apart, `sweep` looks again at a network whose endpoints linger.
const ENDPOINT_RETRIES: usize = 25;
const ENDPOINT_PAUSE: Duration = Duration::from_millis(200);

/// Succeeds when `network` exists on the engine.
pub(super) async fn ensure_exists(docker: &Docker, network: &str) -> Result<(), BackendError> {
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
pub(super) fn fix(network: &str) -> String {
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

    #[test]
    fn the_pool_is_carved_into_small_subnets() {
        let pool = SubnetPool::parse("10.213.0.0/16", 28).expect("valid");
        assert_eq!(pool.len(), 4096);
        assert_eq!(cidr(pool.nth(0)), "10.213.0.0/28");
        assert_eq!(cidr(pool.nth(1)), "10.213.0.16/28");
        assert_eq!(cidr(pool.nth(4095)), "10.213.255.240/28");
        assert_eq!(cidr(pool.nth(4096)), "10.213.0.0/28", "wraps around");
        // A base with host bits set is normalized.
        assert_eq!(SubnetPool::parse("10.213.7.9/16", 28).expect("valid"), pool);
        assert!(SubnetPool::parse("10.213.0.0/16", 30).is_err());
        assert!(SubnetPool::parse("10.213.0.0/16", 8).is_err());
        assert!(SubnetPool::parse("fd00::/64", 28).is_err());
    }

    #[test]
    fn a_free_subnet_overlaps_nothing_in_use() {
        let pool = SubnetPool::parse("10.213.0.0/24", 28).expect("valid");
        let taken = [
            parse_cidr("10.213.0.0/28").expect("cidr"),
            parse_cidr("10.213.0.16/28").expect("cidr"),
            // A wider network covering four of ours.
            parse_cidr("10.213.0.64/26").expect("cidr"),
            parse_cidr("172.17.0.0/16").expect("cidr"),
        ];
        assert_eq!(
            free_subnet(&pool, &taken, 0).map(cidr).as_deref(),
            Some("10.213.0.32/28")
        );
        assert_eq!(
            free_subnet(&pool, &taken, 4).map(cidr).as_deref(),
            Some("10.213.0.128/28"),
            "the search starts where asked and skips the wide one"
        );
        // A network covering the whole pool leaves nothing.
        let all = [parse_cidr("10.0.0.0/8").expect("cidr")];
        assert_eq!(free_subnet(&pool, &all, 3), None);
    }
}
