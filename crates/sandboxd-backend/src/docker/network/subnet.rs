//! The subnets sandboxd's networks get: carved from its own pool (`subnet_pool`, each
//! `/subnet_prefix`, or `/instance_subnet_prefix` for an instance's own), never Docker's default
//! pools, and a bridge network created on one no network of the engine overlaps.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bollard::Docker;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use bollard::query_parameters::ListNetworksOptions;
use rand::Rng;

use crate::docker::client;
use crate::error::BackendError;

/// How many subnets a create tries before giving up (each overlap answer tries another at random).
const CREATE_ATTEMPTS: usize = 32;

/// The IPv4 range daemon networks' subnets are carved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::docker) struct SubnetPool {
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

/// Creates the bridge network `name` on a subnet of `pool` that overlaps none of `taken` (nor,
/// the engine checks, any it has); answers its id.
pub(super) async fn create_in_pool(
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
pub(super) async fn subnets_in_use(docker: &Docker) -> Result<Vec<(u32, u8)>, BackendError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
