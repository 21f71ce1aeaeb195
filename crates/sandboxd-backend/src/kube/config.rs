//! Settings of the Kubernetes backend. Every field has a documented default; it is the
//! `[kubernetes]` section of the binary's one settings tree as it stands (durations in whole
//! seconds there: `grace_secs`, `start_timeout_secs`), and the binary adds the per-engine images
//! and deadlines.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sandboxd_domain::EngineRef;
use serde::{Deserialize, Serialize};

use crate::duration_serde;
use crate::error::BackendError;

/// Settings of the Kubernetes backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeConfig {
    /// Build this backend even when it is not the one that provisions, so `ls`, `teardown`, the
    /// janitor and a restarted daemon see its instances. The binary decides on it; the backend
    /// itself does not read it.
    pub enabled: bool,
    /// A kubeconfig file. None: the cluster sandboxd runs in (its service account), else
    /// `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context; None: its current one.
    pub context: Option<String>,
    /// The namespace every object is made in; created before the first provision when it is
    /// missing (if sandboxd may create namespaces, else the error says to).
    pub namespace: String,
    /// Labels are `<prefix>/sandbox`, `<prefix>/owner`, `<prefix>/engine`, … (a DNS subdomain).
    pub label_prefix: String,
    /// Each Pod runs as a uid (and gid, and fsGroup) drawn from `uid_base .. uid_base +
    /// uid_count`; never root.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Memory request and limit per Pod (equal: the node never overcommits a sandbox's memory).
    pub memory_mb: u64,
    /// CPU limit per Pod.
    pub cpus: f64,
    /// CPU request per Pod: what the scheduler reserves. Below the limit, so a node holds more
    /// idle sandboxes than it has cores; set it equal to `cpus` for Guaranteed QoS.
    pub cpu_request: f64,
    /// Agents get a ClusterIP Service's name (`<pod>.<namespace>.svc`) instead of the Pod's
    /// address.
    pub service: bool,
    /// The label an agent's own Pods carry, valued with its slug: the NetworkPolicy admits
    /// only Pods with `<agent_label>=<owner>` (and sandboxd itself), and only in the owner's
    /// namespace (`agent_namespace_label`).
    pub agent_label: String,
    /// The label of the namespace an agent's Pods run in, valued with its slug: the
    /// NetworkPolicy admits the owner's Pods only from namespaces labeled
    /// `<agent_namespace_label>=<owner>`. Pod labels are set by whoever creates the Pod, so
    /// another tenant could put `<agent_label>=<owner>` on a Pod of its own; a namespace's
    /// labels only by whoever may change namespaces (the cluster's operators). With
    /// `kubernetes.io/metadata.name` (Kubernetes ≥ 1.21 sets it to the name, and no one can
    /// change it) an agent's namespace is the one named like its slug. Empty: Pods of
    /// sandboxd's own namespace are admitted by their label alone (forgeable by anyone who may
    /// create Pods there; `doctor` says so).
    pub agent_namespace_label: String,
    /// Labels of sandboxd's own Pods, when it runs in the cluster: the NetworkPolicy admits
    /// them (sandboxd proves readiness and activates features over the wire).
    pub daemon_pod_labels: BTreeMap<String, String>,
    /// Address ranges the NetworkPolicy admits besides those Pods: where sandboxd runs when it
    /// is outside the cluster.
    pub daemon_cidrs: Vec<String>,
    /// `IfNotPresent` (default), `Always` or `Never` (local images only).
    pub image_pull_policy: String,
    /// A same-named Pod younger than this is never cleared.
    #[serde(rename = "grace_secs", with = "duration_serde::secs")]
    pub grace: Duration,
    /// How long a Pod may take to be scheduled and started before the provision fails (the
    /// engine's readiness deadline starts after it).
    #[serde(rename = "start_timeout_secs", with = "duration_serde::secs")]
    pub start_timeout: Duration,
    /// Images per engine name, in the order they are tried (the first any node has runs; with
    /// none cached, the first is pulled); an engine not named here tries its own list. The
    /// binary fills them from `[engines]`.
    #[serde(skip)]
    pub images: BTreeMap<String, Vec<String>>,
    /// Readiness deadlines per engine name, overriding the engine's own (from `[engines]`).
    #[serde(skip)]
    pub deadlines: BTreeMap<String, Duration>,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            kubeconfig: None,
            context: None,
            namespace: "sandboxd".to_owned(),
            label_prefix: "sandboxd.dev".to_owned(),
            uid_base: 1_500_000_000,
            uid_count: 65_536,
            memory_mb: 512,
            cpus: 1.0,
            cpu_request: 0.1,
            service: false,
            agent_label: "sandboxd.dev/agent".to_owned(),
            agent_namespace_label: "sandboxd.dev/agent".to_owned(),
            daemon_pod_labels: BTreeMap::new(),
            daemon_cidrs: Vec::new(),
            image_pull_policy: "IfNotPresent".to_owned(),
            grace: Duration::from_secs(180),
            start_timeout: Duration::from_secs(120),
            images: BTreeMap::new(),
            deadlines: BTreeMap::new(),
        }
    }
}

/// A DNS-1123 label: lowercase letters, digits and '-', 1 to 63, starting and ending
/// alphanumeric.
fn dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

/// A label key: an optional DNS subdomain prefix and '/', then a name of at most 63
/// alphanumerics, '-', '_' and '.', starting and ending alphanumeric.
fn label_key(value: &str) -> bool {
    let (prefix, name) = match value.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(dns_label))
}

impl KubeConfig {
    /// The images that may run `engine`, in the order they are tried.
    pub fn images(&self, engine: EngineRef) -> Vec<String> {
        match self.images.get(engine.name) {
            Some(images) if !images.is_empty() => images.clone(),
            _ => engine.images.iter().map(|i| (*i).to_owned()).collect(),
        }
    }

    /// The images that may run `engine` at major version `major` (a clone runs its source's).
    pub fn images_for_major(&self, engine: EngineRef, major: u32) -> Vec<String> {
        crate::image_tags::for_major(&self.images(engine), major)
    }

    pub fn deadline(&self, engine: EngineRef) -> Duration {
        self.deadlines
            .get(engine.name)
            .copied()
            .unwrap_or(engine.readiness_deadline)
    }

    pub fn uids(&self) -> std::ops::Range<u32> {
        self.uid_base..self.uid_base + self.uid_count
    }

    /// Refuses settings the cluster would refuse later, or that would run anything as root.
    pub fn validate(&self) -> Result<(), BackendError> {
        let invalid = |detail: String| BackendError::Unavailable {
            backend: "kubernetes",
            detail,
        };
        if !dns_label(&self.namespace) {
            return Err(invalid(format!(
                "namespace {:?} is not a DNS label (lowercase letters, digits, '-')",
                self.namespace
            )));
        }
        if self.label_prefix.len() > 200 || !self.label_prefix.split('.').all(dns_label) {
            return Err(invalid(format!(
                "label_prefix {:?} must be a DNS subdomain (lowercase letters, digits, '-', '.')",
                self.label_prefix
            )));
        }
        if !label_key(&self.agent_label) {
            return Err(invalid(format!(
                "agent_label {:?} is not a label key",
                self.agent_label
            )));
        }
        if !self.agent_namespace_label.is_empty() && !label_key(&self.agent_namespace_label) {
            return Err(invalid(format!(
                "agent_namespace_label {:?} is not a label key (or empty: admit the owner's \
                 Pods by their label in sandboxd's namespace)",
                self.agent_namespace_label
            )));
        }
        if let Some(key) = self.daemon_pod_labels.keys().find(|k| !label_key(k)) {
            return Err(invalid(format!(
                "daemon_pod_labels: {key:?} is not a label key"
            )));
        }
        if let Some(cidr) = self
            .daemon_cidrs
            .iter()
            .find(|c| c.parse::<ipnet_lite::Cidr>().is_err())
        {
            return Err(invalid(format!(
                "daemon_cidrs: {cidr:?} is not an address range (a.b.c.d/n)"
            )));
        }
        if !["IfNotPresent", "Always", "Never"].contains(&self.image_pull_policy.as_str()) {
            return Err(invalid(format!(
                "image_pull_policy {:?}: allowed: IfNotPresent, Always, Never",
                self.image_pull_policy
            )));
        }
        if self.uid_base < 65_536
            || self.uid_count == 0
            || self
                .uid_base
                .checked_add(self.uid_count)
                .is_none_or(|end| end > 0x7FFF_FFFF)
        {
            return Err(invalid(
                "uid_base must be at least 65536, with uid_count above 0 and the range below \
                 2147483648"
                    .into(),
            ));
        }
        if self.memory_mb < 64 {
            return Err(invalid("memory_mb must be at least 64".into()));
        }
        if !(self.cpus > 0.0 && self.cpus <= 1024.0) {
            return Err(invalid("cpus must be above 0".into()));
        }
        if !(self.cpu_request > 0.0 && self.cpu_request <= self.cpus) {
            return Err(invalid(
                "cpu_request must be above 0 and at most cpus".into(),
            ));
        }
        Ok(())
    }
}

/// An IPv4 or IPv6 range as `address/prefix`, checked only for its shape.
mod ipnet_lite {
    use std::net::IpAddr;
    use std::str::FromStr;

    pub struct Cidr;

    impl FromStr for Cidr {
        type Err = ();

        fn from_str(value: &str) -> Result<Self, ()> {
            let (address, prefix) = value.split_once('/').ok_or(())?;
            let address: IpAddr = address.parse().map_err(drop)?;
            let prefix: u8 = prefix.parse().map_err(drop)?;
            let most = if address.is_ipv4() { 32 } else { 128 };
            (prefix <= most).then_some(Cidr).ok_or(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        KubeConfig::default()
            .validate()
            .expect("defaults are valid");
    }

    #[test]
    fn odd_settings_are_refused_naming_the_rule() {
        type Tweak = fn(&mut KubeConfig);
        let cases: [(Tweak, &str); 9] = [
            (|c| c.namespace = "Sandboxd".into(), "DNS label"),
            (|c| c.label_prefix = "sandboxd_dev".into(), "DNS subdomain"),
            (|c| c.agent_label = "-agent".into(), "label key"),
            (
                |c| c.agent_namespace_label = "agent namespace".into(),
                "agent_namespace_label",
            ),
            (
                |c| c.daemon_cidrs = vec!["10.0.0.0".into()],
                "address range",
            ),
            (|c| c.image_pull_policy = "Sometimes".into(), "IfNotPresent"),
            (|c| c.uid_base = 0, "65536"),
            (|c| c.memory_mb = 8, "memory_mb"),
            (|c| c.cpu_request = 2.0, "cpu_request"),
        ];
        for (tweak, names) in cases {
            let mut config = KubeConfig::default();
            tweak(&mut config);
            let err = config.validate().expect_err(names).to_string();
            assert!(err.contains(names), "{err}");
        }
        let fine = KubeConfig {
            daemon_cidrs: vec!["172.17.0.1/32".into(), "fd00::/8".into()],
            agent_label: "example.com/agent-slug".into(),
            agent_namespace_label: "kubernetes.io/metadata.name".into(),
            ..KubeConfig::default()
        };
        fine.validate().expect("valid");
        let shared = KubeConfig {
            agent_namespace_label: String::new(),
            ..KubeConfig::default()
        };
        shared
            .validate()
            .expect("valid: pod labels alone, which doctor flags");
    }
}
