//! Settings of the Docker backend. Every field has a documented default; it is the `[docker]`
//! section of the binary's one settings tree as it stands (durations in whole seconds there:
//! `grace_secs`, `stop_timeout_secs`), and the binary adds the per-engine images and deadlines.

use std::collections::BTreeMap;
use std::time::Duration;

use sandboxd_domain::EngineRef;
use serde::{Deserialize, Serialize};

use crate::duration_serde;
use crate::error::BackendError;

/// Settings of the Docker backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// The Engine API socket: `unix:///var/run/docker.sock`, or Podman's compatible socket
    /// (`unix:///run/podman/podman.sock`). A bare path works too.
    pub socket: String,
    /// A network to attach instances to. None: the daemon's instances join its own bridge
    /// network, on which inter-container traffic is off (no container reaches another), and the
    /// engine port is published on 127.0.0.1 only. Some: the container joins it, nothing is
    /// published, and the host handed out is the container's name (the agent's container must
    /// be on the same network).
    pub network: Option<String>,
    /// The IPv4 range daemon networks' subnets are carved from (not Docker's default pools,
    /// which hold only ~31 bridge networks). Must not overlap the host's other networks.
    pub subnet_pool: String,
    /// The prefix length of each daemon network's subnet: /22 gives 1021 container addresses
    /// per daemon and room for 64 daemons' networks in a /16.
    pub subnet_prefix: u8,
    /// The prefix length of each instance's own network on an engine whose bridge networks
    /// cannot turn inter-container traffic off (Podman): /28 gives 4096 instances in a /16.
    pub instance_subnet_prefix: u8,
    /// A daemon network without containers is removed by the janitor only past this age: a
    /// provision may be between creating it and creating its first container. Not a setting.
    #[serde(skip)]
    pub network_settle: Duration,
    /// Labels are `<ns>.sandbox`, `<ns>.owner`, `<ns>.engine`, `<ns>.created`, …
    pub label_namespace: String,
    /// Each container runs as a uid (and gid) drawn from `uid_base .. uid_base + uid_count`,
    /// a range no host account uses, instead of the image's user (999 in the official `mysql`,
    /// `redis` and `mongo` images, the uid `useradd --system` hands out first on the host).
    /// 0 runs the image's own user.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Memory cap per container; swap is set equal, so the container cannot swap.
    pub memory_mb: u64,
    /// CPUs per container (`NanoCpus`).
    pub cpus: f64,
    /// Process/thread cap per container.
    pub pids_limit: i64,
    /// `RLIMIT_NOFILE` (soft = hard) in each container. Set explicitly because an engine's own
    /// default can exceed what the host lets it set: Podman asks for 1048576, and where the
    /// engine's hard limit is lower, runc fails every container ("error setting rlimit").
    pub nofile_limit: u64,
    /// `RLIMIT_NPROC` (soft = hard) in each container, for the same reason. It counts every
    /// process of the container's uid on the host, so it stays well above `pids_limit`.
    pub nproc_limit: u64,
    /// A same-named container younger than this is never cleared.
    #[serde(rename = "grace_secs", with = "duration_serde::secs")]
    pub grace: Duration,
    /// How long `docker stop` waits before the engine kills the container at teardown.
    #[serde(rename = "stop_timeout_secs", with = "duration_serde::secs")]
    pub stop_timeout: Duration,
    /// Images per engine name, in the order they are tried (the first present on the engine
    /// runs); an engine not named here tries its own list (`Engine::images`). The binary fills
    /// them from `[engines]`.
    #[serde(skip)]
    pub images: BTreeMap<String, Vec<String>>,
    /// Readiness deadlines per engine name, overriding the engine's own (from `[engines]`).
    #[serde(skip)]
    pub deadlines: BTreeMap<String, Duration>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            socket: "unix:///var/run/docker.sock".to_owned(),
            network: None,
            subnet_pool: "10.213.0.0/16".to_owned(),
            subnet_prefix: 22,
            instance_subnet_prefix: 28,
            network_settle: Duration::from_secs(60),
            label_namespace: "sandboxd".to_owned(),
            uid_base: 1_500_000_000,
            uid_count: 65_536,
            memory_mb: 512,
            cpus: 1.0,
            pids_limit: 256,
            // Redis's default 10000 clients fit (it keeps 32 descriptors for itself).
            nofile_limit: 10_240,
            nproc_limit: 8_192,
            grace: Duration::from_secs(180),
            stop_timeout: Duration::from_secs(2),
            images: BTreeMap::new(),
            deadlines: BTreeMap::new(),
        }
    }
}

impl DockerConfig {
    /// The images that may run `engine` at major version `major` (a clone runs its source's):
    /// [`Self::images`] with each tag's leading version replaced (`postgres:16-alpine` →
    /// `postgres:18-alpine`); an image whose tag starts with no version is left out.
    pub fn images_for_major(&self, engine: EngineRef, major: u32) -> Vec<String> {
        crate::image_tags::for_major(&self.images(engine), major)
    }

    /// The images that may run `engine`, in the order they are tried.
    pub fn images(&self, engine: EngineRef) -> Vec<String> {
        match self.images.get(engine.name) {
            Some(images) if !images.is_empty() => images.clone(),
            _ => engine.images.iter().map(|i| (*i).to_owned()).collect(),
        }
    }

    pub fn deadline(&self, engine: EngineRef) -> Duration {
        self.deadlines
            .get(engine.name)
            .copied()
            .unwrap_or_else(|| engine.readiness_deadline)
    }

    /// The uids containers run as, or None when they run as their image's user.
    pub fn uids(&self) -> Option<std::ops::Range<u32>> {
        (self.uid_base != 0).then(|| self.uid_base..self.uid_base + self.uid_count)
    }

    /// The socket path without its `unix://` scheme.
    pub fn socket_path(&self) -> &str {
        self.socket
            .strip_prefix("unix://")
            .unwrap_or(self.socket.as_str())
    }

    /// Refuses settings that would make labels, names or limits meaningless.
    pub fn validate(&self) -> Result<(), BackendError> {
        let invalid = |detail: String| BackendError::Unavailable {
            backend: "docker",
            detail,
        };
        let ns = &self.label_namespace;
        let ns_ok = !ns.is_empty()
            && ns.len() <= 64
            && ns.as_bytes()[0].is_ascii_lowercase()
            && ns
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !ns_ok {
            return Err(invalid(
                "label_namespace must be 1 to 64 characters: lowercase letters, digits, '.' and \
                 '-', starting with a letter"
                    .into(),
            ));
        }
        if !self.socket_path().starts_with('/') {
            return Err(invalid(format!(
                "socket must be a unix socket (unix:///path or /path), got {:?}",
                self.socket
            )));
        }
        if let Some(network) = &self.network {
            let ok = !network.is_empty()
                && network
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !ok {
                return Err(invalid(format!("network name {network:?} is not valid")));
            }
        }
        let pool = super::network::SubnetPool::parse(&self.subnet_pool, self.subnet_prefix)
            .map_err(invalid)?;
        if pool.len() == 0 {
            return Err(invalid(
                "subnet_pool holds no subnet of subnet_prefix".into(),
            ));
        }
        super::network::SubnetPool::parse(&self.subnet_pool, self.instance_subnet_prefix)
            .map_err(|detail| invalid(format!("instance_{detail}")))?;
        if self.uid_base != 0
            && (self.uid_base < 65_536
                || self.uid_count == 0
                || self
                    .uid_base
                    .checked_add(self.uid_count)
                    .is_none_or(|end| end > 0x7FFF_FFFF))
        {
            return Err(invalid(
                "uid_base must be 0 (the image's user) or at least 65536, with uid_count above 0 \
                 and the range below 2147483648"
                    .into(),
            ));
        }
        if self.memory_mb < 64 {
            return Err(invalid("memory_mb must be at least 64".into()));
        }
        if !(self.cpus > 0.0 && self.cpus <= 1024.0) {
            return Err(invalid("cpus must be above 0".into()));
        }
        if self.pids_limit < 16 {
            return Err(invalid("pids_limit must be at least 16".into()));
        }
        if self.nofile_limit < 64 {
            return Err(invalid("nofile_limit must be at least 64".into()));
        }
        if self.nproc_limit < 64 {
            return Err(invalid("nproc_limit must be at least 64".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented() {
        let config = DockerConfig::default();
        config.validate().expect("defaults are valid");
        assert_eq!(config.memory_mb, 512);
        assert_eq!(config.socket_path(), "/var/run/docker.sock");
        let pg = EngineRef::parse("postgres").expect("registered");
        assert_eq!(
            config.images(pg),
            ["postgres:16-alpine", "sandboxd-local/postgres:17"]
        );
        let configured = DockerConfig {
            images: [("postgres".to_owned(), vec!["mine/pg:1".to_owned()])].into(),
            ..DockerConfig::default()
        };
        assert_eq!(configured.images(pg), ["mine/pg:1"]);
        assert_eq!(configured.images_for_major(pg, 18), ["mine/pg:18"]);
        assert_eq!(
            DockerConfig::default().images_for_major(pg, 18),
            ["postgres:18-alpine", "sandboxd-local/postgres:18"]
        );
        assert_eq!(config.deadline(pg), Duration::from_secs(60));
    }

    #[test]
    fn odd_settings_are_refused() {
        for config in [
            DockerConfig {
                label_namespace: "Bad NS".into(),
                ..DockerConfig::default()
            },
            DockerConfig {
                socket: "tcp://1.2.3.4:2375".into(),
                ..DockerConfig::default()
            },
            DockerConfig {
                network: Some("a b".into()),
                ..DockerConfig::default()
            },
            DockerConfig {
                subnet_pool: "10.213.0.0/33".into(),
                ..DockerConfig::default()
            },
            DockerConfig {
                subnet_pool: "10.213.0.0/24".into(),
                subnet_prefix: 31,
                ..DockerConfig::default()
            },
            DockerConfig {
                cpus: 0.0,
                ..DockerConfig::default()
            },
            DockerConfig {
                instance_subnet_prefix: 30,
                ..DockerConfig::default()
            },
            DockerConfig {
                nofile_limit: 8,
                ..DockerConfig::default()
            },
            DockerConfig {
                uid_base: 999,
                ..DockerConfig::default()
            },
            DockerConfig {
                uid_base: 0x7FFF_0000,
                uid_count: 0x10_0000,
                ..DockerConfig::default()
            },
        ] {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
