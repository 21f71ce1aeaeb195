//! The process backend: engines as local child processes from the host's packages. The embedded
//! default for laptops and CI. It is weaker isolation than containers (instances share the host's
//! kernel, filesystem view and network namespace, reachable on 127.0.0.1 only); never call it
//! full isolation.
//!
//! Layout under `root` (a tmpfs-backed directory, `/dev/shm/sandboxd` by default):
//! `sandboxd-<engine>-<owner>/` (0700, owned by the instance's own uid; when sandboxd is root a
//! size-capped tmpfs of its own) holding `data/`, `sock/` (the private superuser socket) and
//! `server.log`; `.sandboxd-metadata/<name>.json` (owner metadata, no credentials), in a
//! directory only the daemon's user can write, since a root daemon decides on it. Outside
//! `root`: the host-wide uid leases (`lease_dir`) and the instance's cgroups
//! (`sandboxd/<name>`).
//!
//! Parts, split the way the Docker backend is:
//! - [`config`]: `ProcessConfig`, every default documented.
//! - `provision`, `list`, `teardown`: the lifecycle verbs, in the step names both backends use.
//! - `template`: the template data directory built once per engine and server version.
//! - `identity`, `limits`, `space`, `liveness`, `metadata`, `files`, `programs`: which uid each
//!   instance runs as (a leased pool account), its memory/pids caps, its size-capped tmpfs, how a
//!   pid is known to still be the instance, the metadata file beside each instance, private
//!   files, and where the engines' programs are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sandboxd_domain::engine::ProcessRecipe;
use sandboxd_domain::instance::{BackendKind, Instance, instance_name, parse_instance_name};
use sandboxd_domain::{AgentSlug, DataSize, EngineRef, engines};

use crate::backend::Backend;
use crate::doctor::DoctorCheck;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest, ListedInstance};
use crate::idle::IdleMember;
use crate::startup::Account;

pub mod config;
mod files;
mod identity;
mod limits;
mod list;
mod liveness;
mod metadata;
mod programs;
mod provision;
mod space;
mod teardown;
mod template;

pub use config::ProcessConfig;
pub use identity::Identity;
use metadata::Metadata;
pub use metadata::{DIR_NAME as METADATA_DIR, path_of as metadata_path};
pub use space::SOURCE as MOUNT_SOURCE;

const HOST: &str = "127.0.0.1";
/// Debian's record of installed packages: it changes whenever one is installed or removed.
const PACKAGE_DATABASE: &str = "/var/lib/dpkg/status";

/// Reports long steps (building a template) to whoever shows progress.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

pub struct ProcessBackend {
    config: ProcessConfig,
    identity: Identity,
    /// Whether each instance directory gets a size-capped tmpfs (root with `CAP_SYS_ADMIN`),
    /// read once: capabilities do not change under a running daemon.
    capped_space: bool,
    templates: template::Templates,
    progress: Progress,
}

impl std::fmt::Debug for ProcessBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessBackend")
            .field("config", &self.config)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl ProcessBackend {
    pub fn new(config: ProcessConfig) -> Result<Self, BackendError> {
        let identity = Identity::resolve(&config)?;
        Ok(Self {
            config,
            identity,
            capped_space: space::available(),
            templates: template::Templates::default(),
            progress: Arc::new(|message| tracing::info!("{message}")),
        })
    }

    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    fn recipe(engine: EngineRef) -> Result<ProcessRecipe, BackendError> {
        engine.process().ok_or(BackendError::NotInstalled {
            engine: engine.name,
            missing: "a process recipe".into(),
            package: "(none: this engine runs only in containers)",
            alternative: "; use the docker backend",
        })
    }

    fn programs(
        engine: EngineRef,
        recipe: &ProcessRecipe,
    ) -> Result<BTreeMap<&'static str, PathBuf>, BackendError> {
        programs::resolve(recipe).map_err(|missing| BackendError::NotInstalled {
            engine: engine.name,
            missing: format!("`{missing}`"),
            package: recipe.package,
            alternative: ", or use the docker backend (--backend docker)",
        })
    }

    fn deadline(&self, engine: EngineRef) -> Duration {
        self.config
            .deadlines
            .get(engine.name)
            .copied()
            .unwrap_or(engine.readiness_deadline)
    }

    /// The instance directory for a handle, recomputed from its validated engine and owner:
    /// a handle read back from a store can never point teardown at another path.
    /// A handed-out pool member keeps its pool slot's directory: that one is taken only when
    /// the name is the same engine's and maker's and the metadata there records the handle's
    /// owner.
    fn dir_of(&self, handle: &InstanceHandle) -> PathBuf {
        let canonical =
            self.config
                .root
                .join(instance_name(handle.engine, &handle.owner, &handle.maker));
        let Some((engine, slot, maker)) = parse_instance_name(&handle.name) else {
            return canonical;
        };
        if slot == handle.owner
            || !slot.is_pool_slot()
            || engine != handle.engine
            || maker != handle.maker
        {
            return canonical;
        }
        let pooled = self.config.root.join(&handle.name);
        match Metadata::read(&pooled) {
            Some(meta) if meta.owner == handle.owner => pooled,
            _ => canonical,
        }
    }

    fn ensure_root(&self) -> Result<(), BackendError> {
        let root = &self.config.root;
        if !root.is_dir() {
            std::fs::create_dir_all(root)
                .map_err(|e| BackendError::io("creating", root.display().to_string(), e))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| BackendError::io("chmod", root.display().to_string(), e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Backend for ProcessBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Process
    }

    /// `data_limit_mb`: the instance directory's tmpfs.
    fn default_size(&self) -> DataSize {
        DataSize::from_mb(self.config.data_limit_mb)
    }

    async fn ping(&self) -> Result<(), BackendError> {
        self.ensure_root()
    }

    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError> {
        let recipe = Self::recipe(engine)?;
        Self::programs(engine, &recipe).map(drop)
    }

    /// The server programs with their modification times, and the host's package database's:
    /// installing an extension's package changes no program, but it changes that.
    async fn provider(&self, engine: EngineRef) -> Result<String, BackendError> {
        let recipe = Self::recipe(engine)?;
        let programs = Self::programs(engine, &recipe)?;
        let stamp = |path: &Path| {
            path.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos())
        };
        let mut identity: Vec<String> = programs
            .values()
            .map(|path| format!("{}@{}", path.display(), stamp(path)))
            .collect();
        identity.push(format!("dpkg@{}", stamp(Path::new(PACKAGE_DATABASE))));
        identity.extend(
            programs::feature_libraries(engine)
                .map(|path| format!("{path}@{}", stamp(Path::new(path)))),
        );
        Ok(identity.join(" "))
    }

    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError> {
        if let Some(major) = request.major {
            return Err(BackendError::Unsupported {
                operation: "provisioning a given major version",
                detail: format!(
                    "the process backend runs this host's {} only; an instance of major \
                     version {major} (a clone) needs the Docker backend",
                    request.engine.name
                ),
            });
        }
        self.provision_instance(request, Account::Now).await
    }

    async fn provision_idle(&self, request: &InstanceRequest) -> Result<IdleMember, BackendError> {
        let instance = self.provision_instance(request, Account::AtHandOut).await?;
        IdleMember::hold(self, instance).await
    }

    /// The directory keeps its name (a mounted tmpfs cannot be renamed): its metadata says
    /// whose it is now.
    async fn record_owner(
        &self,
        instance: &Instance,
        owner: &AgentSlug,
    ) -> Result<String, BackendError> {
        let dir = PathBuf::from(&instance.backend_id);
        let mut meta = Metadata::read(&dir).ok_or_else(|| {
            BackendError::io(
                "reading the metadata of",
                &instance.name,
                std::io::Error::other("it is missing or unreadable"),
            )
        })?;
        meta.owner = owner.clone();
        meta.write(&dir)
            .map_err(|e| BackendError::io("writing metadata in", dir.display().to_string(), e))?;
        Ok(instance.name.clone())
    }

    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError> {
        Ok(Metadata::read(&self.dir_of(handle)).is_some_and(|m| m.server().is_alive()))
    }

    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        self.remove(handle).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError> {
        list::instances(&self.config.root)
    }

    async fn doctor(&self) -> Vec<DoctorCheck> {
        let instances = format!(
            "instances under {}: {}",
            self.config.root.display(),
            self.identity.describe()
        );
        // Not being root is a supported mode (a laptop), reported plainly rather than failed.
        let mut checks = vec![DoctorCheck::ok("process backend", instances)];
        let memory = self.config.memory_limit_mb * 1024 * 1024;
        checks.push(DoctorCheck::ok(
            "process caps",
            format!(
                "{}; data size: {}",
                limits::in_force(memory, self.config.pids_limit),
                if self.capped_space {
                    format!(
                        "a tmpfs of {} MiB and {} inodes per instance unless its project sizes \
                         it (WAL on its own {} MiB)",
                        self.config.data_limit_mb,
                        space::inodes_for(self.config.data_limit_mb),
                        self.config.wal_limit_mb
                    )
                } else {
                    "none (not root, or no CAP_SYS_ADMIN to mount: instances share the root \
                     directory's filesystem)"
                        .to_owned()
                }
            ),
        ));
        for engine in engines::all() {
            let Some(recipe) = engine.process() else {
                continue;
            };
            checks.push(match programs::resolve(&recipe) {
                Ok(found) => DoctorCheck::ok(
                    format!("{} (process)", engine.name),
                    found
                        .values()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                Err(missing) => DoctorCheck::missing(
                    format!("{} (process)", engine.name),
                    format!("`{missing}` not found"),
                    format!("install {}", recipe.package),
                ),
            });
        }
        checks
    }

    async fn offered_version(&self, engine: EngineRef) -> Option<String> {
        programs::server_version(&engine.process()?).await
    }

    fn feature_location(&self, engine: EngineRef) -> String {
        match engine.process() {
            Some(recipe) => format!(
                "this host's {} installation (process backend)",
                recipe.package
            ),
            None => "the process backend".to_owned(),
        }
    }
}
