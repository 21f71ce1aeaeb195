//! An engine's `ContainerRecipe` turned into the objects of one instance, with the hardening
//! every sandbox gets on Kubernetes. Pure: no I/O, so every object is unit-tested.
//!
//! Per instance, all named like the instance (`sandboxd-<engine>-<owner>-<maker>`):
//! - a ConfigMap, the **owner object**: every other object names it in its `ownerReferences`,
//!   so deleting it (or the cluster's garbage collector, after a crash) removes them all;
//! - a Secret holding the superuser's password, mounted into the Pod as a file
//!   (`<VAR>_FILE`), never an env var;
//! - the Pod: non-root (a uid of sandboxd's range, also its group and fsGroup), no privilege
//!   escalation, every capability dropped, the runtime's default seccomp profile, a read-only
//!   root with memory-backed `emptyDir`s (sized) where the recipe wants tmpfs, requests =
//!   limits, no service-account token, no restarts (a dead server is replaced, not revived);
//! - a NetworkPolicy admitting, on the engine's port only, the owner's Pods
//!   (`<agent_label>=<owner>` in a namespace labeled `<agent_namespace_label>=<owner>`: a Pod's
//!   labels are its creator's to choose, a namespace's only the cluster operators') and
//!   sandboxd (its Pods' labels, or its address ranges), and no egress at all (enforced only
//!   where the cluster's network plugin enforces policies);
//! - a ClusterIP Service, when agents are to reach instances by name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, KeyToPath,
    Pod, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, Secret,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sandboxd_domain::AgentSlug;
use sandboxd_domain::engine::ContainerRecipe;
use sandboxd_domain::space::tmpfs_ceiling_mb;
use secrecy::{ExposeSecret, SecretString};

/// Where the superuser's password is mounted, and its key in the Secret.
pub(super) const SECRET_DIR: &str = "/run/sandboxd-secret";
const SECRET_KEY: &str = "superuser";
/// `/tmp` on a read-only root, when the recipe does not size it.
const TMP_MB: u64 = 16;
/// The container's name in every Pod.
pub(super) const CONTAINER: &str = "server";

fn meta(
    name: &str,
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels.clone()),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..ObjectMeta::default()
    }
}

/// The owner object of one instance.
pub(super) fn owner_object(name: &str, labels: &BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, labels, None),
        data: Some(BTreeMap::from([(
            "purpose".to_owned(),
            "owns every object of this sandboxd instance: deleting it removes them".to_owned(),
        )])),
        ..ConfigMap::default()
    }
}

/// The reference every other object of the instance carries to its owner object.
pub(super) fn owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        block_owner_deletion: Some(true),
        controller: Some(true),
    }
}

/// The Secret holding the superuser's password.
pub(super) fn secret(
    name: &str,
    labels: &BTreeMap<String, String>,
    owner: &OwnerReference,
    password: &SecretString,
) -> Secret {
    Secret {
        metadata: meta(name, labels, Some(owner)),
        type_: Some("Opaque".to_owned()),
        string_data: Some(BTreeMap::from([(
            SECRET_KEY.to_owned(),
            password.expose_secret().to_owned(),
        )])),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// Everything the Pod is made of.
pub(super) struct PodInput<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub recipe: &'a ContainerRecipe,
    pub port: u16,
    pub labels: &'a BTreeMap<String, String>,
    pub owner: &'a OwnerReference,
    /// The uid, gid and fsGroup it runs as.
    pub run_as: u32,
    pub memory_mb: u64,
    pub cpus: f64,
    pub cpu_request: f64,
    pub pull_policy: &'a str,
}

fn mebibytes(mb: u64) -> Quantity {
    Quantity(format!("{mb}Mi"))
}

pub(super) fn pod(input: &PodInput<'_>) -> Pod {
    let recipe = input.recipe;
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut memory_dir = |path: &str, size_mb: u64| {
        let volume = format!("tmpfs-{}", volumes.len());
        // tmpfs pages count against the memory limit: no one mount may take most of it.
        let size = size_mb.clamp(1, tmpfs_ceiling_mb(input.memory_mb));
        volumes.push(Volume {
            name: volume.clone(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(mebibytes(size)),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: volume,
            mount_path: path.to_owned(),
            ..VolumeMount::default()
        });
    };
    for tmpfs in &recipe.tmpfs {
        memory_dir(tmpfs.path, tmpfs.size_mb);
    }
    if !recipe.tmpfs.iter().any(|t| t.path == "/tmp") {
        memory_dir("/tmp", TMP_MB);
    }
    let mut env: Vec<EnvVar> = recipe
        .env
        .iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            ..EnvVar::default()
        })
        .collect();
    if let Some(secret) = &recipe.secret {
        env.push(EnvVar {
            name: secret.file_var(),
            value: Some(format!("{SECRET_DIR}/{SECRET_KEY}")),
            ..EnvVar::default()
        });
        volumes.push(Volume {
            name: "superuser".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(input.name.to_owned()),
                items: Some(vec![KeyToPath {
                    key: SECRET_KEY.to_owned(),
                    path: SECRET_KEY.to_owned(),
                    mode: None,
                }]),
                // Readable by the Pod's group (its fsGroup) only.
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "superuser".to_owned(),
            mount_path: SECRET_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let uid = i64::from(input.run_as);
    let seccomp = || {
        Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        })
    };
    let cpu = |cpus: f64| Quantity(format!("{}m", (cpus * 1000.0).round().max(1.0) as u64));
    let resources = |cpus: f64| {
        BTreeMap::from([
            ("memory".to_owned(), mebibytes(input.memory_mb)),
            ("cpu".to_owned(), cpu(cpus)),
        ])
    };
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(input.image.to_owned()),
        image_pull_policy: Some(input.pull_policy.to_owned()),
        args: Some(recipe.command.clone()),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            container_port: i32::from(input.port),
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            limits: Some(resources(input.cpus)),
            requests: Some(resources(input.cpu_request)),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: Some(uid),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: Some(
                    recipe
                        .capabilities
                        .iter()
                        .map(|c| (*c).to_owned())
                        .collect(),
                )
                .filter(|added: &Vec<String>| !added.is_empty()),
            }),
            seccomp_profile: seccomp(),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    Pod {
        metadata: meta(input.name, input.labels, Some(input.owner)),
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(volumes),
            restart_policy: Some("Never".to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            termination_grace_period_seconds: Some(2),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(uid),
                run_as_group: Some(uid),
                fs_group: Some(uid),
                seccomp_profile: seccomp(),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Who the NetworkPolicy admits.
pub(super) struct Admitted<'a> {
    /// The agents' Pod label and the owner it must name (a pool member's slot names no agent).
    pub agent_label: &'a str,
    /// The label the owner's namespace carries, valued with the owner; empty: the Pod label
    /// alone, in the policy's own namespace.
    pub agent_namespace_label: &'a str,
    pub owner: &'a AgentSlug,
    pub daemon_pod_labels: &'a BTreeMap<String, String>,
    pub daemon_cidrs: &'a [String],
}

/// The ingress rule's peers: the owner's Pods, sandboxd's Pods, sandboxd's address ranges.
///
/// The owner's peer pairs a namespace selector with a Pod selector in one peer, which
/// Kubernetes reads as *and*: a Pod labeled for the owner, in a namespace labeled for the
/// owner. A tenant that labels a Pod of its own namespace with another agent's slug is not
/// admitted, since it cannot label its namespace so (namespaces are cluster objects).
pub(super) fn admitted_peers(admitted: &Admitted<'_>) -> Vec<NetworkPolicyPeer> {
    let mut peers = Vec::new();
    if !admitted.owner.is_pool_slot() {
        let owned_by = |label: &str| LabelSelector {
            match_labels: Some(BTreeMap::from([(
                label.to_owned(),
                admitted.owner.to_string(),
            )])),
            ..LabelSelector::default()
        };
        peers.push(NetworkPolicyPeer {
            namespace_selector: (!admitted.agent_namespace_label.is_empty())
                .then(|| owned_by(admitted.agent_namespace_label)),
            pod_selector: Some(owned_by(admitted.agent_label)),
            ..NetworkPolicyPeer::default()
        });
    }
    if !admitted.daemon_pod_labels.is_empty() {
        peers.push(NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(admitted.daemon_pod_labels.clone()),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        });
    }
    for cidr in admitted.daemon_cidrs {
        peers.push(NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.clone(),
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        });
    }
    peers
}

/// The instance's policy. With no peer to admit (a pool member of a sandboxd configured with
/// neither Pod labels nor address ranges), it admits nothing: an empty `from` would admit all.
pub(super) fn network_policy(
    name: &str,
    labels: &BTreeMap<String, String>,
    instance: BTreeMap<String, String>,
    owner: &OwnerReference,
    port: u16,
    admitted: &Admitted<'_>,
) -> NetworkPolicy {
    let peers = admitted_peers(admitted);
    let ingress = if peers.is_empty() {
        vec![]
    } else {
        vec![NetworkPolicyIngressRule {
            from: Some(peers),
            ports: Some(vec![NetworkPolicyPort {
                port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".to_owned()),
                end_port: None,
            }]),
        }]
    };
    NetworkPolicy {
        metadata: meta(name, labels, Some(owner)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(instance),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(ingress),
            // A database sandbox dials nothing.
            egress: Some(vec![]),
        }),
    }
}

pub(super) fn service(
    name: &str,
    labels: &BTreeMap<String, String>,
    instance: BTreeMap<String, String>,
    owner: &OwnerReference,
    port: u16,
) -> Service {
    Service {
        metadata: meta(name, labels, Some(owner)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(instance),
            ports: Some(vec![ServicePort {
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_domain::instance::instance_name;
    use sandboxd_domain::{Credentials, DaemonId, DataSize, engines};

    use super::*;
    use crate::kube::labels::Labels;

    fn built(engine: &str) -> (Pod, Credentials) {
        let engine = engines::lookup(engine).expect("registered");
        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let recipe = engine.container(&admin, &agent, DataSize::CONTAINER_DEFAULT);
        let owner = AgentSlug::parse("dev-1").expect("slug");
        let maker = DaemonId::parse("abc123").expect("id");
        let name = instance_name(engine, &owner, &maker);
        let labels = Labels::new("sandboxd.dev").for_instance(&name, engine, &owner, &maker, 42);
        let pod = pod(&PodInput {
            name: &name,
            image: "sandboxd-local/postgres:17",
            recipe: &recipe,
            port: engine.port,
            labels: &labels,
            owner: &owner_reference(&name, "uid-1"),
            run_as: 1_500_000_123,
            memory_mb: 512,
            cpus: 1.0,
            cpu_request: 0.1,
            pull_policy: "Never",
        });
        (pod, admin)
    }

    #[test]
    fn the_pod_is_hardened_and_holds_no_secret() {
        let (pod, admin) = built("postgres");
        let text = serde_json::to_string(&pod).expect("json");
        assert!(!text.contains(admin.password.expose_secret()), "{text}");
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let pod_security = spec.security_context.as_ref().expect("pod security");
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(pod_security.fs_group, Some(1_500_000_123));
        let container = &spec.containers[0];
        let security = container.security_context.as_ref().expect("security");
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(
            security.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()])
        );
        assert_eq!(
            security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault")
        );
        let resources = container.resources.as_ref().expect("resources");
        let get = |set: &Option<BTreeMap<String, Quantity>>, key: &str| {
            set.as_ref().and_then(|s| s.get(key)).cloned()
        };
        for set in [&resources.limits, &resources.requests] {
            assert_eq!(
                get(set, "memory"),
                Some(Quantity("512Mi".into())),
                "{resources:?}"
            );
        }
        assert_eq!(
            get(&resources.limits, "cpu"),
            Some(Quantity("1000m".into()))
        );
        assert_eq!(
            get(&resources.requests, "cpu"),
            Some(Quantity("100m".into()))
        );
        // The password is a file from the Secret; its env var only names the file.
        let env = container.env.as_ref().expect("env");
        let file = env
            .iter()
            .find(|e| e.name == "POSTGRES_PASSWORD_FILE")
            .expect("the _FILE variable");
        assert_eq!(
            file.value.as_deref(),
            Some("/run/sandboxd-secret/superuser")
        );
        assert!(
            env.iter().all(|e| e.value_from.is_none()),
            "no secretKeyRef env"
        );
        let volumes = spec.volumes.as_ref().expect("volumes");
        let memory: Vec<&Volume> = volumes.iter().filter(|v| v.empty_dir.is_some()).collect();
        assert!(memory.len() >= 2, "{memory:?}");
        for volume in memory {
            let dir = volume.empty_dir.as_ref().expect("emptyDir");
            assert_eq!(dir.medium.as_deref(), Some("Memory"));
            assert!(dir.size_limit.is_some(), "sized: {volume:?}");
        }
        let mounts = container.volume_mounts.as_ref().expect("mounts");
        assert!(mounts.iter().any(|m| m.mount_path == "/tmp"));
        assert!(
            pod.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o[0].kind == "ConfigMap"),
            "owned by the owner object"
        );
    }

    #[test]
    fn the_policy_admits_the_owner_and_sandboxd_on_the_port_and_no_egress() {
        let owner = AgentSlug::parse("dev-1").expect("slug");
        let daemon = BTreeMap::from([("app".to_owned(), "sandboxd".to_owned())]);
        let cidrs = vec!["172.17.0.1/32".to_owned()];
        let policy = network_policy(
            "n",
            &BTreeMap::new(),
            Labels::new("sandboxd.dev").instance("n"),
            &owner_reference("n", "u"),
            5432,
            &Admitted {
                agent_label: "sandboxd.dev/agent",
                agent_namespace_label: "sandboxd.dev/agent",
                owner: &owner,
                daemon_pod_labels: &daemon,
                daemon_cidrs: &cidrs,
            },
        );
        let spec = policy.spec.expect("spec");
        assert_eq!(spec.egress, Some(vec![]));
        let rule = &spec.ingress.expect("ingress")[0];
        let from = rule.from.as_ref().expect("from");
        assert_eq!(from.len(), 3, "{from:?}");
        let agent = from[0].pod_selector.as_ref().expect("agent pods");
        assert_eq!(
            agent
                .match_labels
                .as_ref()
                .and_then(|l| l.get("sandboxd.dev/agent")),
            Some(&"dev-1".to_owned())
        );
        let namespace = from[0]
            .namespace_selector
            .as_ref()
            .expect("agent namespace");
        assert_eq!(
            namespace.match_labels,
            Some(BTreeMap::from([(
                "sandboxd.dev/agent".to_owned(),
                "dev-1".to_owned()
            )]))
        );
        // sandboxd's own Pods are in its namespace: no namespace selector there.
        assert!(from[1].namespace_selector.is_none(), "{from:?}");
        assert_eq!(
            from[2].ip_block.as_ref().map(|b| b.cidr.as_str()),
            Some("172.17.0.1/32")
        );
        assert_eq!(
            rule.ports.as_ref().and_then(|p| p[0].port.clone()),
            Some(IntOrString::Int(5432))
        );
        // A pool member admits no agent until it is handed out.
        let slot = AgentSlug::pool_slot();
        let peers = admitted_peers(&Admitted {
            agent_label: "sandboxd.dev/agent",
            agent_namespace_label: "sandboxd.dev/agent",
            owner: &slot,
            daemon_pod_labels: &BTreeMap::new(),
            daemon_cidrs: &cidrs,
        });
        assert_eq!(peers.len(), 1);
        assert!(peers[0].ip_block.is_some());
        // Nobody to admit: no rule at all (an empty `from` would admit everyone).
        let closed = network_policy(
            "n",
            &BTreeMap::new(),
            BTreeMap::new(),
            &owner_reference("n", "u"),
            5432,
            &Admitted {
                agent_label: "sandboxd.dev/agent",
                agent_namespace_label: "sandboxd.dev/agent",
                owner: &slot,
                daemon_pod_labels: &BTreeMap::new(),
                daemon_cidrs: &[],
            },
        );
        assert_eq!(closed.spec.and_then(|s| s.ingress), Some(vec![]));
    }

    /// The policy's owner peer, as the API server receives it.
    fn owner_peer(admitted: &Admitted<'_>) -> serde_json::Value {
        serde_json::to_value(&admitted_peers(admitted)[0]).expect("json")
    }

    #[test]
    fn a_pod_label_alone_never_admits_a_pod_of_another_namespace() {
        let owner = AgentSlug::parse("dev-1").expect("slug");
        let none = BTreeMap::new();
        let admitted = |namespace_label| Admitted {
            agent_label: "sandboxd.dev/agent",
            agent_namespace_label: namespace_label,
            owner: &owner,
            daemon_pod_labels: &none,
            daemon_cidrs: &[],
        };
        // One peer holding both selectors: Kubernetes ANDs them. Two peers would OR them, and
        // a forged Pod label anywhere would do.
        assert_eq!(
            owner_peer(&admitted("sandboxd.dev/agent")),
            serde_json::json!({
                "namespaceSelector": {"matchLabels": {"sandboxd.dev/agent": "dev-1"}},
                "podSelector": {"matchLabels": {"sandboxd.dev/agent": "dev-1"}},
            })
        );
        // Namespaces named like their agent (the API server sets this label; none can forge
        // it).
        assert_eq!(
            owner_peer(&admitted("kubernetes.io/metadata.name"))["namespaceSelector"],
            serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": "dev-1"}})
        );
        // Configured off: the Pod label in sandboxd's own namespace only (no namespace
        // selector is that namespace, never "every namespace").
        assert_eq!(
            owner_peer(&admitted("")),
            serde_json::json!({"podSelector": {"matchLabels": {"sandboxd.dev/agent": "dev-1"}}})
        );
    }
}
