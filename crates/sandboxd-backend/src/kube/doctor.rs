//! `sandboxd doctor` for the Kubernetes backend: the API answers, the namespace exists, sandboxd
//! may do what provisioning needs there (asked of the API server itself), each engine's image
//! is on some node, and what the NetworkPolicies will and will not do (whom they admit, and
//! whether that rests on anything a tenant cannot forge).

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use sandboxd_domain::engines;

use super::KubeBackend;
use crate::doctor::DoctorCheck;

/// What provisioning does in the namespace: (API group, resource, verbs).
const NEEDED: &[(&str, &str, &[&str])] = &[
    ("", "pods", &["create", "get", "list", "delete", "patch"]),
    ("", "pods/exec", &["create"]),
    ("", "secrets", &["create", "get", "delete"]),
    ("", "configmaps", &["create", "get", "delete", "patch"]),
    ("", "services", &["create", "get", "delete"]),
    (
        "networking.k8s.io",
        "networkpolicies",
        &["create", "get", "delete", "patch"],
    ),
];

impl KubeBackend {
    pub(super) async fn checks(&self) -> Vec<DoctorCheck> {
        let subject = "kubernetes backend";
        let namespace = &self.config.namespace;
        let version = match self.server_version().await {
            Ok(version) => version,
            Err(err) => {
                return vec![DoctorCheck::missing(
                    subject,
                    err.to_string(),
                    "point [kubernetes] kubeconfig (and context) at a cluster sandboxd may use, \
                     or run sandboxd in the cluster with a service account",
                )];
            }
        };
        let mut checks = Vec::new();
        let client = match self.client.get().await {
            Ok(client) => client.clone(),
            Err(err) => {
                return vec![DoctorCheck::missing(
                    subject,
                    err.to_string(),
                    "point [kubernetes] kubeconfig (and context) at a cluster sandboxd may use",
                )];
            }
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        checks.push(match namespaces.get_opt(namespace).await {
            Ok(Some(_)) => DoctorCheck::ok(subject, format!("{version}, namespace {namespace}")),
            Ok(None) => DoctorCheck::missing(
                subject,
                format!("{version}: namespace {namespace} does not exist"),
                format!("kubectl create namespace {namespace}"),
            ),
            // Reading namespaces may not be allowed; the permissions below say what is.
            Err(_) => DoctorCheck::ok(subject, format!("{version}, namespace {namespace}")),
        });
        checks.push(self.permissions(&client).await);
        let cached = self.cached_images().await;
        for engine in engines::all() {
            let subject = format!("{} (kubernetes)", engine.name);
            let candidates = self.config.images(engine);
            checks.push(match (&cached, self.resolve_image(engine, None).await) {
                (Some(cached), Ok(image))
                    if cached.iter().any(|name| super::names_image(name, &image)) =>
                {
                    DoctorCheck::ok(subject, format!("runs image {image}, present on a node"))
                }
                (_, Ok(image)) => DoctorCheck::ok(
                    subject,
                    format!(
                        "runs image {image}, pulled by the nodes (none is known to hold it; \
                         image_pull_policy {})",
                        self.config.image_pull_policy
                    ),
                ),
                // An engine without an image is only not offered; the others still run.
                (_, Err(err)) => DoctorCheck::unavailable(
                    subject,
                    err.to_string(),
                    format!(
                        "load one of {} onto the nodes, or let them pull it (image_pull_policy)",
                        candidates.join(", ")
                    ),
                ),
            });
        }
        checks.push(self.policy_reach());
        checks
    }

    /// Whom the NetworkPolicies admit: missing when sandboxd itself is not admitted, or when
    /// the owner's Pods are recognized by a label alone, which any tenant may put on a Pod.
    fn policy_reach(&self) -> DoctorCheck {
        let subject = "kubernetes network policies";
        let config = &self.config;
        if config.daemon_pod_labels.is_empty() && config.daemon_cidrs.is_empty() {
            return DoctorCheck::missing(
                subject,
                "neither daemon_pod_labels nor daemon_cidrs is set: where the network plugin \
                 enforces NetworkPolicies, sandboxd itself cannot reach its instances",
                "set [kubernetes] daemon_pod_labels (sandboxd in the cluster) or daemon_cidrs \
                 (outside it)",
            );
        }
        if config.agent_namespace_label.is_empty() {
            return DoctorCheck::missing(
                subject,
                format!(
                    "each instance admits Pods labeled {}=<agent> in {}: a Pod's labels are \
                     its creator's to choose, so anyone who may create Pods there can reach \
                     any agent's instance",
                    config.agent_label, config.namespace
                ),
                "set [kubernetes] agent_namespace_label and run each agent's Pods in a \
                 namespace of its own labeled <label>=<agent>",
            );
        }
        DoctorCheck::ok(
            subject,
            format!(
                "each instance admits, on its port, only Pods labeled {}=<agent> in a namespace \
                 labeled {}=<agent> (namespace labels are the cluster operators' to set), and \
                 sandboxd; it dials nothing; enforced only where the cluster's network plugin \
                 enforces NetworkPolicies",
                config.agent_label, config.agent_namespace_label
            ),
        )
    }

    /// Asks the API server, for each verb provisioning uses, whether sandboxd may.
    async fn permissions(&self, client: &kube::Client) -> DoctorCheck {
        let subject = "kubernetes permissions";
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let mut refused = Vec::new();
        for (group, resource, verbs) in NEEDED {
            let (resource, subresource) = match resource.split_once('/') {
                Some((resource, sub)) => (resource, Some(sub.to_owned())),
                None => (*resource, None),
            };
            for verb in *verbs {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            namespace: Some(self.config.namespace.clone()),
                            group: Some((*group).to_owned()),
                            resource: Some(resource.to_owned()),
                            subresource: subresource.clone(),
                            verb: Some((*verb).to_owned()),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let allowed = reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .ok()
                    .and_then(|r| r.status)
                    .is_some_and(|s| s.allowed);
                if !allowed {
                    let name = match &subresource {
                        Some(sub) => format!("{resource}/{sub}"),
                        None => resource.to_owned(),
                    };
                    refused.push(format!("{verb} {name}"));
                }
            }
        }
        if refused.is_empty() {
            DoctorCheck::ok(
                subject,
                format!(
                    "may create, read, change and remove Pods, Secrets, ConfigMaps, Services and \
                     NetworkPolicies in {}",
                    self.config.namespace
                ),
            )
        } else {
            DoctorCheck::missing(
                subject,
                format!(
                    "not allowed in {}: {}",
                    self.config.namespace,
                    refused.join(", ")
                ),
                "grant sandboxd's account a Role with these verbs in the namespace",
            )
        }
    }
}
