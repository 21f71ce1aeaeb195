//! An engine's `ContainerRecipe` turned into the Engine API's create body, with the hardening
//! every sandbox gets: a read-only root filesystem with tmpfs data (and `/tmp`), no volumes,
//! memory (= swap), CPU and pids caps, `no-new-privileges`, every capability dropped but the
//! recipe's, never privileged, no binds, a uid of sandboxd's range instead of the image's user,
//! explicit open-file and process rlimits, a network sandboxd made (the daemon's, inter-container
//! traffic off; or, on Podman, the instance's own) with the engine port published on 127.0.0.1
//! only (or the operator's named network and nothing published).
//!
//! Pure: no I/O, so the whole spec is unit-tested. The body holds no secret: the superuser's
//! password reaches the entrypoint through `<VAR>_FILE=/dev/stdin` (see `provision`).

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, PortBinding, ResourcesUlimits, RestartPolicy,
    RestartPolicyNameEnum,
};
use sandboxd_domain::engine::ContainerRecipe;
use sandboxd_domain::space::tmpfs_ceiling_mb;

use super::client::Flavor;

/// Where the published port listens on the host: loopback only, never 0.0.0.0.
pub(super) const PUBLISH_IP: &str = "127.0.0.1";
/// A tmpfs for an image-declared volume the recipe does not cover.
const EXTRA_VOLUME_MB: u64 = 64;
/// `/tmp` on a read-only root, when the recipe does not size it.
const TMP_MB: u64 = 16;
/// Where an entrypoint reads its `<VAR>_FILE` secret: the container's stdin, written once at
/// start and closed.
pub(super) const SECRET_FILE: &str = "/dev/stdin";

/// Resource caps of one container.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids_limit: i64,
    pub nofile: u64,
    pub nproc: u64,
}

/// Everything the create body is made of.
pub(super) struct Spec<'a> {
    pub image: &'a str,
    pub recipe: &'a ContainerRecipe,
    /// The engine's port inside the container.
    pub port: u16,
    pub labels: HashMap<String, String>,
    pub limits: Limits,
    pub network: Attach<'a>,
    /// `VOLUME`s the image declares. Each gets a tmpfs (unless the recipe mounts one there
    /// already), so the engine never creates an anonymous volume.
    pub image_volumes: &'a [String],
    /// The uid (and gid) the container runs as, owning the recipe's tmpfs mounts; None: the
    /// image's own user from the recipe.
    pub run_as: Option<u32>,
    /// Which engine creates it: Podman wants tmpfs ownership said otherwise and mounts
    /// unsized tmpfs of its own unless told where.
    pub flavor: Flavor,
}

impl std::fmt::Debug for Spec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("image", &self.image)
            .field("port", &self.port)
            .field("network", &self.network)
            .finish_non_exhaustive()
    }
}

/// Which network a container joins.
#[derive(Debug, Clone, Copy)]
pub(super) enum Attach<'a> {
    /// A network sandboxd made for its containers: the daemon's (inter-container traffic off)
    /// or the instance's own (`client::Isolation`); the port is published on 127.0.0.1.
    Private(&'a str),
    /// The operator's network; nothing is published.
    Named(&'a str),
}

/// `5432/tcp`
pub(super) fn port_key(port: u16) -> String {
    format!("{port}/tcp")
}

/// `rw,nosuid,nodev,noexec,size=256m,mode=1777`, the size kept below the memory cap (tmpfs
/// pages count against it: `tmpfs_ceiling_mb`).
/// The mount belongs to `uid`: Docker hands `uid=` to the kernel; Podman refuses that option
/// and chowns the mount to the user the container runs as on `U` (the recipe's owner is that
/// user: `run_as`, or the image user it names).
fn tmpfs_options(
    size_mb: u64,
    mode: &str,
    uid: Option<u32>,
    flavor: Flavor,
    memory_mb: u64,
) -> String {
    let size = size_mb.clamp(1, tmpfs_ceiling_mb(memory_mb));
    let owner = match (uid, flavor) {
        (None, _) => String::new(),
        (Some(uid), Flavor::Docker) => format!(",uid={uid}"),
        (Some(_), Flavor::Podman) => ",U".to_owned(),
    };
    format!("rw,nosuid,nodev,noexec,size={size}m,mode={mode}{owner}")
}

/// An rlimit with soft = hard.
fn ulimit(name: &str, value: u64) -> ResourcesUlimits {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    ResourcesUlimits {
        name: Some(name.to_owned()),
        soft: Some(value),
        hard: Some(value),
    }
}

fn mb(value: u64) -> i64 {
    i64::try_from(value.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX)
}

pub(super) fn create_body(spec: &Spec<'_>) -> ContainerCreateBody {
    let recipe = spec.recipe;
    let limits = spec.limits;
    let mut tmpfs: HashMap<String, String> = recipe
        .tmpfs
        .iter()
        .map(|t| {
            (
                t.path.to_owned(),
                tmpfs_options(
                    t.size_mb,
                    t.mode,
                    spec.run_as.or(t.uid),
                    spec.flavor,
                    limits.memory_mb,
                ),
            )
        })
        .collect();
    // `/tmp` on a read-only root, and what the engine would mount unsized by itself.
    for path in std::iter::once("/tmp").chain(spec.flavor.implicit_tmpfs().iter().copied()) {
        if !tmpfs.contains_key(path) {
            tmpfs.insert(
                path.to_owned(),
                tmpfs_options(TMP_MB, "1777", None, spec.flavor, limits.memory_mb),
            );
        }
    }
    for volume in spec.image_volumes {
        let path = volume.trim_end_matches('/');
        let path = if path.is_empty() { "/" } else { path };
        if !tmpfs.contains_key(path) {
            tmpfs.insert(
                path.to_owned(),
                tmpfs_options(EXTRA_VOLUME_MB, "1777", None, spec.flavor, limits.memory_mb),
            );
        }
    }
    let (network_mode, port_bindings) = match spec.network {
        Attach::Named(network) => (network, None),
        Attach::Private(network) => (
            network,
            Some(HashMap::from([(
                port_key(spec.port),
                Some(vec![PortBinding {
                    host_ip: Some(PUBLISH_IP.to_owned()),
                    // Empty: the engine picks a free host port, read back by inspect.
                    host_port: Some(String::new()),
                }]),
            )])),
        ),
    };
    let host_config = HostConfig {
        memory: Some(mb(limits.memory_mb)),
        memory_swap: Some(mb(limits.memory_mb)),
        // Whole nano-CPUs: 1.0 CPU = 1e9.
        nano_cpus: Some((limits.cpus * 1e9).round() as i64),
        pids_limit: Some(limits.pids_limit),
        ulimits: Some(vec![
            ulimit("nofile", limits.nofile),
            ulimit("nproc", limits.nproc),
        ]),
        security_opt: Some(vec!["no-new-privileges:true".to_owned()]),
        cap_drop: Some(vec!["ALL".to_owned()]),
        cap_add: Some(
            recipe
                .capabilities
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
        ),
        privileged: Some(false),
        readonly_rootfs: Some(true),
        publish_all_ports: Some(false),
        tmpfs: Some(tmpfs),
        binds: Some(vec![]),
        mounts: Some(vec![]),
        port_bindings,
        network_mode: Some(network_mode.to_owned()),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        auto_remove: Some(false),
        ..HostConfig::default()
    };
    ContainerCreateBody {
        image: Some(spec.image.to_owned()),
        cmd: Some(recipe.command.clone()),
        env: Some(
            recipe
                .env
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .chain(
                    recipe
                        .secret
                        .as_ref()
                        .map(|secret| format!("{}={SECRET_FILE}", secret.file_var())),
                )
                .collect(),
        ),
        // The secret's only way in: written once to stdin at start, then closed (`stdin_once`).
        open_stdin: Some(recipe.secret.is_some()),
        stdin_once: Some(recipe.secret.is_some()),
        attach_stdin: Some(recipe.secret.is_some()),
        user: match spec.run_as {
            Some(uid) => Some(format!("{uid}:{uid}")),
            None => recipe.user.map(str::to_owned),
        },
        labels: Some(spec.labels.clone()),
        exposed_ports: Some(vec![port_key(spec.port)]),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_domain::engine::AdminStep;
    use sandboxd_domain::{Credentials, DataSize, EngineRef, engines};
    use secrecy::ExposeSecret;

    use super::*;

    const SET: Attach<'static> = Attach::Private("sandboxd-net-cli");

    const LIMITS: Limits = Limits {
        memory_mb: 512,
        cpus: 1.0,
        pids_limit: 256,
        nofile: 10_240,
        nproc: 8_192,
    };

    fn body(
        engine: &str,
        network: Attach<'_>,
        volumes: &[String],
    ) -> (ContainerCreateBody, Credentials, Credentials) {
        let engine = EngineRef::parse(engine).expect("registered");
        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let recipe = engine.container(&admin, &agent, DataSize::CONTAINER_DEFAULT);
        let spec = Spec {
            image: engine.default_image(),
            recipe: &recipe,
            port: engine.port,
            labels: HashMap::from([("sandboxd.sandbox".to_owned(), "1".to_owned())]),
            limits: LIMITS,
            network,
            image_volumes: volumes,
            run_as: Some(1_500_000_123),
            flavor: Flavor::Docker,
        };
        (create_body(&spec), admin, agent)
    }

    fn env_of(body: &ContainerCreateBody) -> HashMap<String, String> {
        body.env
            .iter()
            .flatten()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn every_engine_is_hardened_and_capped() {
        for engine in engines::all() {
            let (body, _, _) = body(engine.name, SET, &[]);
            let host = body.host_config.expect("host config");
            assert_eq!(host.memory, Some(512 * 1024 * 1024), "{engine}");
            assert_eq!(host.memory_swap, host.memory, "{engine}");
            assert_eq!(host.nano_cpus, Some(1_000_000_000));
            assert_eq!(host.pids_limit, Some(256));
            let rlimits: Vec<_> = host
                .ulimits
                .iter()
                .flatten()
                .map(|u| (u.name.as_deref(), u.soft, u.hard))
                .collect();
            assert_eq!(
                rlimits,
                [
                    (Some("nofile"), Some(10_240), Some(10_240)),
                    (Some("nproc"), Some(8_192), Some(8_192))
                ],
                "{engine}: rlimits the engine can set, soft = hard"
            );
            assert_eq!(
                host.security_opt,
                Some(vec!["no-new-privileges:true".to_owned()])
            );
            assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
            assert_eq!(host.privileged, Some(false));
            assert_eq!(host.readonly_rootfs, Some(true), "{engine}");
            assert_eq!(
                host.network_mode.as_deref(),
                Some("sandboxd-net-cli"),
                "{engine} joins the daemon's network"
            );
            assert_eq!(host.binds, Some(vec![]));
            assert_eq!(host.mounts, Some(vec![]));
            assert_eq!(
                body.user.as_deref(),
                Some("1500000123:1500000123"),
                "{engine} runs as the uid sandboxd chose, not its image's user"
            );
            let tmpfs = host.tmpfs.expect("tmpfs");
            assert!(
                tmpfs.contains_key("/tmp"),
                "{engine}: /tmp on a read-only root"
            );
            for (path, options) in &tmpfs {
                assert!(options.starts_with("rw,nosuid,nodev"), "{options}");
                if path != "/tmp" || engine.name == "mariadb" {
                    assert!(
                        options.ends_with(",uid=1500000123"),
                        "{engine}: {path} owned by the container's uid: {options}"
                    );
                }
                let size: u64 = options
                    .split(',')
                    .find_map(|o| o.strip_prefix("size="))
                    .and_then(|s| s.strip_suffix('m'))
                    .and_then(|s| s.parse().ok())
                    .expect("a size in MiB");
                assert!(
                    size < 512,
                    "{engine}: tmpfs {size}m is not below the memory cap"
                );
            }
            let bindings = host.port_bindings.expect("published");
            let key = port_key(engine.port);
            let binding = &bindings[&key].as_ref().expect("one binding")[0];
            assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
            assert_eq!(binding.host_port.as_deref(), Some(""));
            assert_eq!(bindings.len(), 1);
            assert_eq!(body.exposed_ports, Some(vec![key]));
        }
    }

    #[test]
    fn no_password_is_ever_in_the_container_spec() {
        for engine in engines::all() {
            let (body, admin, agent) = body(engine.name, SET, &[]);
            let json = serde_json::to_string(&body).expect("serializes");
            for (who, secret) in [("agent", &agent.password), ("superuser", &admin.password)] {
                assert!(
                    !json.contains(secret.expose_secret()),
                    "{engine}: the {who}'s password is in the create body"
                );
            }
            // An image that needs the superuser's password reads it from stdin.
            let recipe = engine.container(&admin, &agent, DataSize::CONTAINER_DEFAULT);
            if let Some(secret) = &recipe.secret {
                let env = env_of(&body);
                assert_eq!(env[&secret.file_var()], SECRET_FILE, "{engine}");
                assert!(!env.contains_key(secret.var), "{engine}");
                assert_eq!(body.open_stdin, Some(true));
                assert_eq!(body.stdin_once, Some(true));
            }
        }
    }

    #[test]
    fn redis_carries_only_password_hashes() {
        let (body, admin, _) = body("redis", SET, &[]);
        let json = serde_json::to_string(&body).expect("serializes");
        assert!(!json.contains(admin.password.expose_secret()));
        let cmd = body.cmd.expect("command").join(" ");
        assert!(cmd.contains(&format!(
            "#{}",
            sandboxd_domain::credentials::sha256_hex(&admin.password)
        )));
        assert!(body.env.expect("env").is_empty());
    }

    #[test]
    fn on_a_named_network_nothing_is_published() {
        let (body, _, _) = body("postgres", Attach::Named("agents"), &[]);
        let host = body.host_config.expect("host config");
        assert_eq!(host.network_mode.as_deref(), Some("agents"));
        assert!(host.port_bindings.is_none());
        assert_eq!(host.publish_all_ports, Some(false));
    }

    #[test]
    fn on_podman_a_tmpfs_goes_to_the_containers_user_and_every_writable_path_is_sized() {
        for engine in engines::all() {
            let admin = Credentials::generate(engine.admin_user);
            let agent = Credentials::generate(engine.agent_user);
            let recipe = engine.container(&admin, &agent, DataSize::CONTAINER_DEFAULT);
            let body = create_body(&Spec {
                image: engine.default_image(),
                recipe: &recipe,
                port: engine.port,
                labels: HashMap::new(),
                limits: LIMITS,
                network: SET,
                image_volumes: &[],
                run_as: Some(1_500_000_123),
                flavor: Flavor::Podman,
            });
            let host = body.host_config.expect("host config");
            let tmpfs = host.tmpfs.expect("tmpfs");
            let owned: Vec<_> = tmpfs.values().filter(|o| o.ends_with(",U")).collect();
            assert!(!owned.is_empty(), "{engine}: {tmpfs:?}");
            assert!(
                tmpfs.values().all(|o| !o.contains("uid=")),
                "{engine}: Podman refuses uid=: {tmpfs:?}"
            );
            for path in ["/run", "/var/tmp"] {
                assert!(
                    tmpfs.get(path).is_some_and(|o| o.contains("size=")),
                    "{engine}: Podman's own {path} would be unsized: {tmpfs:?}"
                );
            }
        }
    }

    #[test]
    fn image_volumes_get_a_tmpfs_so_no_anonymous_volume_is_created() {
        let volumes = vec!["/var/lib/postgresql/data".to_owned(), "/extra/".to_owned()];
        let (body, _, _) = body("postgres", SET, &volumes);
        let tmpfs = body.host_config.expect("host").tmpfs.expect("tmpfs");
        // The recipe's own mount is kept as is; the undeclared one is added.
        assert!(tmpfs["/var/lib/postgresql/data"].contains("size=256m"));
        assert!(tmpfs["/extra"].contains("size=64m"));
    }

    #[test]
    fn mongo_container_spec() {
        let (body, admin, _) = body("mongo", SET, &[]);
        let env = env_of(&body);
        assert_eq!(env["MONGO_INITDB_ROOT_USERNAME"], admin.user);
        assert_eq!(env["MONGO_INITDB_ROOT_PASSWORD_FILE"], SECRET_FILE);
        let cmd = body.cmd.clone().expect("command");
        assert_eq!(cmd[0], "mongod");
        assert!(cmd.contains(&"--noscripting".to_owned()), "{cmd:?}");
        let cache = cmd
            .iter()
            .position(|a| a == "--wiredTigerCacheSizeGB")
            .expect("cache size set");
        assert_eq!(cmd[cache + 1], "0.25");
        let host = body.host_config.expect("host");
        assert!(host.tmpfs.expect("tmpfs").contains_key("/data/db"));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(body.user.as_deref(), Some("1500000123:1500000123"));
        assert_eq!(body.exposed_ports, Some(vec!["27017/tcp".to_owned()]));
    }

    #[test]
    fn mongo_agent_user_can_manage_databases_but_holds_no_admin_role() {
        let mongo = EngineRef::parse("mongo").expect("registered");
        let agent = Credentials::generate(mongo.agent_user);
        let steps = mongo.setup(&agent, Default::default());
        assert_eq!(steps.len(), 1);
        let AdminStep::MongoCommand { database, command } = &steps[0] else {
            panic!("a mongo command");
        };
        assert_eq!(database, "admin");
        let command: serde_json::Value =
            serde_json::from_str(command.expose_secret()).expect("json");
        assert_eq!(command["createUser"], agent.user);
        let roles: Vec<&str> = command["roles"]
            .as_array()
            .expect("roles")
            .iter()
            .filter_map(|r| r["role"].as_str())
            .collect();
        assert!(roles.contains(&"readWriteAnyDatabase"), "{roles:?}");
        assert!(roles.contains(&"dbAdminAnyDatabase"), "{roles:?}");
        for forbidden in [
            "root",
            "clusterAdmin",
            "userAdminAnyDatabase",
            "dbOwner",
            "__system",
        ] {
            assert!(!roles.contains(&forbidden), "{forbidden} in {roles:?}");
        }
    }
}
