//! Kubernetes backend tests on a real cluster (`scripts/k8s-cluster.sh up`: an API server,
//! controller manager, scheduler and a kubelet running Pods on the local Docker Engine, from
//! the locally built images). `SANDBOXD_TEST_KUBECONFIG` names it; without it the tests skip,
//! unless `SANDBOXD_REQUIRE_KUBERNETES=1` (CI) makes that a failure. Each test works in a
//! namespace of its own, deleted with everything in it when the test ends, and checks that
//! nothing of its own is left before that.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{KillContainerOptions, ListContainersOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, PodSpec, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use sandboxd_backend::kube::KubeBackend;
use sandboxd_backend::{Backend, InstanceHandle, provision_set};
use sandboxd_domain::Instance;
use sandboxd_domain::engine::AdminAccess;
use secrecy::ExposeSecret;

use crate::support::{self, owner, pg_connect, request};

/// The test cluster's admin client in `namespace`.
async fn cluster(namespace: &str) -> kube::Client {
    let path = sandboxd_testkit::test_kubeconfig("kube").expect("a test cluster");
    let file = kube::config::Kubeconfig::read_from(path).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("a client config");
    let mut config = config;
    config.default_namespace = namespace.to_owned();
    kube::Client::try_from(config).expect("a client")
}

/// Runs `body` with a backend in a namespace of its own; afterwards tears down whatever the
/// backend still lists, asserts nothing of it is left, and removes the namespace.
async fn with_kube<F, Fut>(test: &str, body: F)
where
    F: FnOnce(KubeBackend, kube::Client) -> Fut,
    Fut: Future<Output = ()>,
{
    support::show_logs();
    let Some((backend, namespace)) = sandboxd_testkit::kube_or_skip(test, |_| {}) else {
        return;
    };
    let client = cluster(&namespace.name).await;
    let lister = KubeBackend::new(backend.config().clone()).expect("same settings");
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body(
        backend,
        client.clone(),
    )))
    .await;
    for listed in lister.list().await.expect("list") {
        lister
            .teardown(&listed.handle)
            .await
            .expect("cleanup teardown");
    }
    assert!(
        lister.list().await.expect("list").is_empty(),
        "instances left"
    );
    drop(namespace);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn admin_password(instance: &Instance) -> String {
    match &instance.admin {
        AdminAccess::Password(admin) => admin.password.expose_secret().to_owned(),
        other => panic!("a Pod's superuser logs in with a password: {other:?}"),
    }
}

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("read").is_none()
}

/// Polls `done` every 200 ms for up to `within`.
async fn eventually<F, Fut>(within: Duration, what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_hardened_serve_the_agent_and_go_with_their_teardown() {
    with_kube("kube-pods", |backend, client| async move {
        let who = owner("kpods");
        let requests = [request("postgres", &who, &[]), request("redis", &who, &[])];
        let instances = provision_set(&backend, &requests).await.expect("provision");
        let (pg, redis) = (&instances[0], &instances[1]);

        // The agent's own account works and is no superuser.
        let password = pg.agent.password.expose_secret().to_owned();
        let db = pg_connect(pg, &password).await.expect("the agent connects");
        db.batch_execute("CREATE TABLE mine (x int); INSERT INTO mine VALUES (1)")
            .await
            .expect("the agent owns its database");
        let row = db
            .query_one(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .await
            .expect("query");
        assert!(!row.get::<_, bool>(0), "not a superuser");
        let redis_url = format!(
            "redis://{}:{}@{}:{}",
            redis.agent.user,
            redis.agent.password.expose_secret(),
            redis.host,
            redis.port
        );
        let mut conn = redis::Client::open(redis_url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("the agent connects to redis");
        let pong: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("ping");
        assert_eq!(pong, "PONG");

        for instance in &instances {
            assert!(
                backend
                    .is_live(&InstanceHandle::of(instance))
                    .await
                    .expect("live")
            );
        }
        let listed = backend.list().await.expect("list");
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(
            listed.iter().all(|l| l.live && l.status == "running"),
            "{listed:?}"
        );
        assert!(listed.iter().all(|l| l.handle.owner == who), "{listed:?}");

        // Read back as the cluster has them.
        let pods: Api<Pod> = Api::default_namespaced(client.clone());
        let secrets: Api<Secret> = Api::default_namespaced(client.clone());
        let owners: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let policies: Api<NetworkPolicy> = Api::default_namespaced(client.clone());
        let pod = pods.get(&pg.name).await.expect("the Pod");
        let text = serde_json::to_string(&pod).expect("json");
        for secret in [admin_password(pg), password.clone()] {
            assert!(!text.contains(&secret), "a password in the Pod: {text}");
        }
        let spec = pod.spec.as_ref().expect("spec");
        let container = &spec.containers[0];
        let security = container
            .security_context
            .as_ref()
            .expect("security context");
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(
            security.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()])
        );
        assert_eq!(
            security.seccomp_profile.as_ref().map(|p| p.type_.clone()),
            Some("RuntimeDefault".to_owned())
        );
        let uid = security.run_as_user.expect("a uid");
        assert!(uid >= 1_500_000_000, "{uid}");
        let resources = container.resources.as_ref().expect("resources");
        let memory =
            |set: &Option<BTreeMap<String, _>>| set.as_ref().and_then(|s| s.get("memory")).cloned();
        assert!(memory(&resources.limits).is_some(), "{resources:?}");
        assert_eq!(memory(&resources.limits), memory(&resources.requests));
        assert!(
            resources
                .limits
                .as_ref()
                .is_some_and(|l| l.contains_key("cpu")),
            "{resources:?}"
        );
        let env = container.env.clone().unwrap_or_default();
        assert!(
            env.iter().any(|e| e.name == "POSTGRES_PASSWORD_FILE"),
            "the password is a file: {env:?}"
        );
        assert!(env.iter().all(|e| e.value_from.is_none()), "{env:?}");
        let memory_dirs: Vec<_> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.empty_dir.as_ref())
            .collect();
        assert!(
            !memory_dirs.is_empty()
                && memory_dirs
                    .iter()
                    .all(|d| d.medium.as_deref() == Some("Memory") && d.size_limit.is_some()),
            "{memory_dirs:?}"
        );
        let owner_object = owners.get(&pg.name).await.expect("the owner object");
        let owner_uid = owner_object.metadata.uid.clone().expect("uid");
        let secret = secrets.get(&pg.name).await.expect("the Secret");
        let policy = policies.get(&pg.name).await.expect("the NetworkPolicy");
        for references in [
            &pod.metadata.owner_references,
            &secret.metadata.owner_references,
            &policy.metadata.owner_references,
        ] {
            let references = references.as_ref().expect("owned");
            assert_eq!(references[0].uid, owner_uid);
            assert_eq!(references[0].kind, "ConfigMap");
        }
        let policy_spec = policy.spec.expect("spec");
        // Egress governed, and no rule allows any: the server dials nothing.
        assert!(
            policy_spec
                .policy_types
                .as_ref()
                .is_some_and(|t| t.iter().any(|t| t == "Egress")),
            "{policy_spec:?}"
        );
        assert!(
            policy_spec.egress.as_ref().is_none_or(Vec::is_empty),
            "no egress: {policy_spec:?}"
        );
        let from = policy_spec.ingress.expect("ingress")[0]
            .from
            .clone()
            .expect("peers");
        assert_eq!(
            from[0]
                .pod_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(BTreeMap::from([(
                "sandboxd.dev/agent".to_owned(),
                who.to_string()
            )]))
        );
        // Inside the running container: no capability, no new privileges, its own uid.
        let docker = Docker::connect_with_unix_defaults()
            .expect("docker")
            .negotiate_version()
            .await
            .expect("docker answers");
        let status = container_file(&docker, &pg.name, "/proc/1/status").await;
        assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        assert!(status.contains(&format!("Uid:\t{uid}")), "{status}");

        for instance in &instances {
            let handle = InstanceHandle::of(instance);
            backend.teardown(&handle).await.expect("teardown");
            backend.teardown(&handle).await.expect("idempotent");
            assert!(!backend.is_live(&handle).await.expect("asked"));
        }
        assert!(backend.list().await.expect("list").is_empty());
        for instance in &instances {
            assert!(gone(&owners, &instance.name).await, "the owner object");
            assert!(gone(&secrets, &instance.name).await, "the Secret");
            assert!(gone(&policies, &instance.name).await, "the NetworkPolicy");
        }
    })
    .await;
}

/// The server container of Pod `pod` on the node's Docker Engine.
async fn server_container(docker: &Docker, pod: &str) -> String {
    let filters = std::collections::HashMap::from([(
        "label".to_owned(),
        vec![
            format!("io.kubernetes.pod.name={pod}"),
            "io.kubernetes.container.name=server".to_owned(),
        ],
    )]);
    let found = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..ListContainersOptions::default()
        }))
        .await
        .expect("list containers");
    found
        .first()
        .and_then(|c| c.id.clone())
        .unwrap_or_else(|| panic!("the server container of {pod}"))
}

/// A file of the Pod's server container, read through the node's Docker Engine.
async fn container_file(docker: &Docker, pod: &str, path: &str) -> String {
    let id = server_container(docker, pod).await;
    let out = std::process::Command::new("docker")
        .args(["exec", &id, "cat", path])
        .output()
        .expect("docker exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_out_of_band_is_dead_and_an_owner_object_takes_everything_with_it() {
    with_kube("kube-kill", |backend, client| async move {
        let who = owner("kkill");
        let killed = backend
            .provision(&request("postgres", &who, &[]))
            .await
            .expect("provision");
        let handle = InstanceHandle::of(&killed);
        let docker = Docker::connect_with_unix_defaults()
            .expect("docker")
            .negotiate_version()
            .await
            .expect("docker answers");
        let id = server_container(&docker, &killed.name).await;
        docker
            .kill_container(&id, None::<KillContainerOptions>)
            .await
            .expect("kill the server");
        eventually(Duration::from_secs(30), "the kill is seen", || async {
            !backend.is_live(&handle).await.expect("asked")
        })
        .await;
        let listed = backend.list().await.expect("list");
        let entry = listed
            .iter()
            .find(|l| l.handle.name == killed.name)
            .expect("still listed until torn down");
        assert!(!entry.live && entry.status == "exited", "{entry:?}");
        backend.teardown(&handle).await.expect("teardown");

        // A crash between objects: whatever the owner object owns goes with it.
        let orphan = backend
            .provision(&request("postgres", &owner("korphan"), &[]))
            .await
            .expect("provision");
        let owners: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let pods: Api<Pod> = Api::default_namespaced(client.clone());
        let secrets: Api<Secret> = Api::default_namespaced(client.clone());
        owners
            .delete(&orphan.name, &DeleteParams::background())
            .await
            .expect("delete the owner object");
        eventually(
            Duration::from_secs(90),
            "the garbage collector removes the Pod and the Secret",
            || async { gone(&pods, &orphan.name).await && gone(&secrets, &orphan.name).await },
        )
        .await;
        assert!(
            !backend
                .is_live(&InstanceHandle::of(&orphan))
                .await
                .expect("asked")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_member_is_handed_out_with_its_owner_relabeled_and_admitted() {
    with_kube("kube-pool", |backend, client| async move {
        let slot = sandboxd_domain::AgentSlug::pool_slot();
        let member = backend
            .provision_idle(&request("postgres", &slot, &[]))
            .await
            .expect("a pool member");
        let name = member.instance.name.clone();
        let policies: Api<NetworkPolicy> = Api::default_namespaced(client.clone());
        let idle = policies.get(&name).await.expect("policy");
        let idle_from = idle.spec.and_then(|s| s.ingress).expect("ingress")[0]
            .from
            .clone()
            .expect("peers");
        assert_eq!(idle_from.len(), 1, "only sandboxd's range: {idle_from:?}");

        let who = owner("kpool");
        let instance = backend.hand_out(member, &who).await.expect("hand out");
        let password = instance.agent.password.expose_secret().to_owned();
        pg_connect(&instance, &password)
            .await
            .expect("the new owner connects")
            .batch_execute("CREATE TABLE mine (x int)")
            .await
            .expect("and owns its database");
        let listed = backend.list().await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].handle.owner, who, "the owner label was rewritten");
        let handed = policies.get(&name).await.expect("policy");
        let from = handed.spec.and_then(|s| s.ingress).expect("ingress")[0]
            .from
            .clone()
            .expect("peers");
        assert!(
            from.iter().any(|peer| peer
                .pod_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .and_then(|l| l.get("sandboxd.dev/agent"))
                == Some(&who.to_string())
                && peer
                    .namespace_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .and_then(|l| l.get("sandboxd.dev/agent"))
                    == Some(&who.to_string())),
            "the new owner's Pods, in its own namespace, are admitted: {from:?}"
        );
        assert!(
            backend
                .is_live(&InstanceHandle::of(&instance))
                .await
                .expect("asked")
        );

        // The clone tooling reaches into the Pod: a file padded sparsely to a length.
        let path = "/tmp/sandboxd-pad-test";
        backend
            .extend_files(&instance, &[(path.to_owned(), 81_920)])
            .await
            .expect("padded");
        let docker = Docker::connect_with_unix_defaults()
            .expect("docker")
            .negotiate_version()
            .await
            .expect("docker answers");
        let id = server_container(&docker, &name).await;
        let out = std::process::Command::new("docker")
            .args(["exec", &id, "stat", "-c", "%s", path])
            .output()
            .expect("docker exec");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "81920");
    })
    .await;
}

/// `selector` as a label-selector query (`k=v,…`); only `matchLabels` is expected.
fn selector_text(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    assert!(selector.match_expressions.is_none(), "{selector:?}");
    selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The Pods (`namespace/name`) the ingress peers of `policy` select, the API server matching
/// their selectors against the cluster's real namespaces and Pods: what an enforcing network
/// plugin admits (address ranges aside). The test cluster's plugin enforces nothing, so this
/// is how the policy's reach is checked here.
async fn admitted_pods(client: &kube::Client, policy: &NetworkPolicy) -> BTreeSet<String> {
    let home = policy.metadata.namespace.clone().expect("namespaced");
    let mut admitted = BTreeSet::new();
    let rules = policy.spec.as_ref().and_then(|s| s.ingress.clone());
    for peer in rules.iter().flatten().flat_map(|r| r.from.iter().flatten()) {
        if peer.ip_block.is_some() {
            continue;
        }
        let namespaces = match &peer.namespace_selector {
            // No namespace selector: the policy's own namespace (never "all").
            None => vec![home.clone()],
            Some(selector) => {
                let all: Api<Namespace> = Api::all(client.clone());
                let query = ListParams::default().labels(&selector_text(Some(selector)));
                all.list(&query)
                    .await
                    .expect("list namespaces")
                    .items
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .collect()
            }
        };
        for namespace in namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let query = ListParams::default().labels(&selector_text(peer.pod_selector.as_ref()));
            for pod in pods.list(&query).await.expect("list pods").items {
                admitted.insert(format!(
                    "{namespace}/{}",
                    pod.metadata.name.unwrap_or_default()
                ));
            }
        }
    }
    admitted
}

/// A Pod in `namespace` labeled `<label>=<value>`, kept Pending (no node matches its
/// selector): only its labels matter, and it goes at once with its namespace.
async fn labeled_pod(client: &kube::Client, namespace: &str, name: &str, label: &str, value: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(label.to_owned(), value.to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "agent".to_owned(),
                image: Some("sandboxd-local/pause:3.2".to_owned()),
                image_pull_policy: Some("Never".to_owned()),
                ..Container::default()
            }],
            node_selector: Some(BTreeMap::from([(
                "sandboxd.dev/no-such-node".to_owned(),
                "1".to_owned(),
            )])),
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {namespace}/{name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_admits_the_owners_pods_only_from_the_owners_namespace() {
    with_kube("kube-netpol", |backend, client| async move {
        let config = backend.config().clone();
        let (label, namespace_label) = (&config.agent_label, &config.agent_namespace_label);
        let who = owner("knetpol");
        let other = owner("knetpol");
        // The operator gives each agent a namespace of its own and labels it; a tenant cannot
        // label a namespace (a cluster object), but it sets any label on its own Pods.
        let own = sandboxd_testkit::KubeNamespace::create("knp-own");
        let tenant = sandboxd_testkit::KubeNamespace::create("knp-tenant");
        for (namespace, agent) in [(&own.name, &who), (&tenant.name, &other)] {
            sandboxd_testkit::kubectl(&[
                "label",
                "namespace",
                namespace,
                &format!("{namespace_label}={agent}"),
            ])
            .expect("label the agent's namespace");
        }
        let who_text = who.to_string();
        labeled_pod(&client, &own.name, "agent", label, &who_text).await;
        // Pods claiming to be `who`'s: in another tenant's namespace, and in sandboxd's own.
        labeled_pod(&client, &tenant.name, "forged", label, &who_text).await;
        labeled_pod(&client, &config.namespace, "squatter", label, &who_text).await;
        labeled_pod(&client, &tenant.name, "tenant", label, &other.to_string()).await;
        let expected = BTreeSet::from([format!("{}/agent", own.name)]);

        let instance = backend
            .provision(&request("postgres", &who, &[]))
            .await
            .expect("provision");
        let policies: Api<NetworkPolicy> = Api::default_namespaced(client.clone());
        let policy = policies.get(&instance.name).await.expect("the policy");
        assert_eq!(
            admitted_pods(&client, &policy).await,
            expected,
            "only the owner's Pod in the owner's namespace: {policy:?}"
        );
        backend
            .teardown(&InstanceHandle::of(&instance))
            .await
            .expect("teardown");

        // A pool member handed to `who` is opened to the same Pods, and to none before.
        let member = backend
            .provision_idle(&request(
                "postgres",
                &sandboxd_domain::AgentSlug::pool_slot(),
                &[],
            ))
            .await
            .expect("a pool member");
        let idle = policies.get(&member.instance.name).await.expect("policy");
        assert!(admitted_pods(&client, &idle).await.is_empty());
        let handed = backend.hand_out(member, &who).await.expect("hand out");
        let policy = policies.get(&handed.name).await.expect("policy");
        assert_eq!(admitted_pods(&client, &policy).await, expected);
        backend
            .teardown(&InstanceHandle::of(&handed))
            .await
            .expect("teardown");

        // With the namespace label configured off, a Pod label alone decides, in sandboxd's
        // namespace: the squatter gets in (what doctor warns of).
        let shared = KubeBackend::new(sandboxd_backend::kube::KubeConfig {
            agent_namespace_label: String::new(),
            ..config.clone()
        })
        .expect("valid settings");
        let weak = shared
            .provision(&request("postgres", &who, &[]))
            .await
            .expect("provision");
        let policy = policies.get(&weak.name).await.expect("policy");
        assert_eq!(
            admitted_pods(&client, &policy).await,
            BTreeSet::from([format!("{}/squatter", config.namespace)])
        );
        shared
            .teardown(&InstanceHandle::of(&weak))
            .await
            .expect("teardown");
        let checks = shared.doctor().await;
        let reach = checks
            .iter()
            .find(|c| c.subject == "kubernetes network policies")
            .expect("a policy line");
        assert!(!reach.ok && reach.detail.contains("creator"), "{reach:?}");
        drop((own, tenant));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_cluster_permissions_images_and_policy_reach() {
    with_kube("kube-doctor", |backend, _client| async move {
        let checks = backend.doctor().await;
        let line = |subject: &str| {
            checks
                .iter()
                .find(|c| c.subject == subject)
                .unwrap_or_else(|| panic!("a {subject} line in {checks:?}"))
                .clone()
        };
        let api = line("kubernetes backend");
        assert!(
            api.ok && api.detail.starts_with("Kubernetes v1."),
            "{api:?}"
        );
        assert!(api.detail.contains(&backend.config().namespace), "{api:?}");
        let permissions = line("kubernetes permissions");
        assert!(
            permissions.ok,
            "the test cluster's admin may do it all: {permissions:?}"
        );
        for engine in ["postgres", "redis", "mariadb"] {
            let image = line(&format!("{engine} (kubernetes)"));
            assert!(
                image.ok && image.detail.contains("present on a node"),
                "{image:?}"
            );
        }
        let policies = line("kubernetes network policies");
        assert!(policies.ok, "{policies:?}");
        assert!(policies.detail.contains("network plugin"), "{policies:?}");
        assert!(
            policies
                .detail
                .contains("in a namespace labeled sandboxd.dev/agent=<agent>"),
            "{policies:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_no_node_holds_is_refused_before_anything_is_made() {
    support::show_logs();
    let Some((backend, _namespace)) = sandboxd_testkit::kube_or_skip("kube-noimage", |config| {
        config.images.insert(
            "redis".to_owned(),
            vec!["sandboxd-local/no-such-redis:0".to_owned()],
        );
    }) else {
        return;
    };
    let err = backend
        .provision(&request("redis", &owner("knoimage"), &[]))
        .await
        .expect_err("no node holds the image and none is pulled");
    let text = err.to_string();
    assert!(text.contains("sandboxd-local/no-such-redis:0"), "{text}");
    assert!(text.contains("image_pull_policy is Never"), "{text}");
    assert!(
        backend.list().await.expect("list").is_empty(),
        "nothing was made"
    );
    let checks = backend.doctor().await;
    let redis = checks
        .iter()
        .find(|c| c.subject == "redis (kubernetes)")
        .expect("a redis line");
    assert!(!redis.ok && redis.fix.is_some(), "{redis:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_does_not_exist_yet_is_created_on_the_first_provision() {
    support::show_logs();
    let Some((backend, _existing)) = sandboxd_testkit::kube_or_skip("kube-ns", |config| {
        config.namespace.push_str("-new");
    }) else {
        return;
    };
    // Deleted with everything in it when the test ends, however it ends.
    let fresh = sandboxd_testkit::KubeNamespace {
        name: backend.config().namespace.clone(),
    };
    let namespaces: Api<Namespace> = Api::all(cluster(&fresh.name).await);
    assert!(
        gone(&namespaces, &fresh.name).await,
        "{} does not exist before the test",
        fresh.name
    );

    let provisioned = backend
        .provision(&request("redis", &owner("kns"), &[]))
        .await;
    let made = !gone(&namespaces, &fresh.name).await;
    if let Ok(instance) = &provisioned {
        backend
            .teardown(&InstanceHandle::of(instance))
            .await
            .expect("teardown");
    }
    let instance = provisioned.expect("provisioned into the namespace it made");
    assert!(made, "the backend created namespace {}", fresh.name);
    assert!(
        instance.host.parse::<std::net::IpAddr>().is_ok(),
        "a Pod's address: {}",
        instance.host
    );
    assert!(
        backend.list().await.expect("list").is_empty(),
        "nothing of the instance is left"
    );
}
