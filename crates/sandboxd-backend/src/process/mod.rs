//! The process backend: engines as local child processes from the host's packages. The embedded
//! default for laptops and CI. It is weaker isolation than containers (instances share the host's
//! kernel, filesystem view and network namespace, reachable on 127.0.0.1 only); never call it
//! full isolation.
//!
//! Layout under `root` (a tmpfs-backed directory, `/dev/shm/sandboxd` by default):
//! `sandboxd-<engine>-<owner>/` (0700, the instance user) holding `data/`, `sock/` (the private
//! superuser socket), `server.log` and `sandboxd.json` (owner metadata, no credentials).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::Signal as NixSignal;
use sandboxd_domain::engine::{ProcessContext, ProcessRecipe, Signal};
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::{Credentials, EngineRef, engines};
use secrecy::ExposeSecret;

use crate::backend::{Backend, DoctorCheck, InstanceHandle, InstanceRequest, ListedInstance};
use crate::clock::{age, now_ms, unix_ms};
use crate::error::BackendError;
use crate::startup::{Startup, bring_up};
use crate::wire::Reach;

mod files;
mod identity;
mod limits;
mod liveness;
mod metadata;
mod programs;
mod template;

pub use identity::Identity;
use metadata::Metadata;

const HOST: &str = "127.0.0.1";
const LOG_FILE: &str = "server.log";
/// Attempts when another process grabbed the chosen port between our check and the bind.
const PORT_ATTEMPTS: usize = 3;

/// Settings of the process backend; every field has a documented default.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Where instance directories live: a tmpfs-backed directory.
    pub root: PathBuf,
    /// Where template data directories are cached.
    pub template_dir: PathBuf,
    /// The unprivileged user instances run as when sandboxd runs as root.
    pub run_as: String,
    /// Memory cap per instance.
    pub memory_limit_mb: u64,
    /// How long a graceful stop may take before the instance is killed.
    pub stop_timeout: Duration,
    /// A same-named instance younger than this is never replaced.
    pub grace: Duration,
    /// Readiness deadlines per engine name, overriding the engine's own.
    pub deadlines: BTreeMap<String, Duration>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        let is_root = nix::unistd::geteuid().is_root();
        let root = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm/sandboxd")
        } else {
            std::env::temp_dir().join("sandboxd")
        };
        let template_dir = if is_root {
            PathBuf::from("/var/cache/sandboxd/templates")
        } else {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir)
                .join("sandboxd/templates")
        };
        Self {
            root,
            template_dir,
            run_as: "sandboxd".to_owned(),
            memory_limit_mb: 2048,
            stop_timeout: Duration::from_secs(5),
            grace: Duration::from_secs(180),
            deadlines: BTreeMap::new(),
        }
    }
}

/// Reports long steps (building a template) to whoever shows progress.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

pub struct ProcessBackend {
    config: ProcessConfig,
    identity: Identity,
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

fn nix_signal(signal: Signal) -> NixSignal {
    match signal {
        Signal::Term => NixSignal::SIGTERM,
        Signal::Int => NixSignal::SIGINT,
    }
}

/// A free TCP port on 127.0.0.1, as the kernel hands it out for port 0.
fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind((HOST, 0))?;
    Ok(listener.local_addr()?.port())
}

impl ProcessBackend {
    pub fn new(config: ProcessConfig) -> Result<Self, BackendError> {
        let identity = Identity::resolve(&config.run_as)?;
        Ok(Self {
            config,
            identity,
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
            .unwrap_or_else(|| engine.readiness_deadline)
    }

    /// The instance directory for a handle, recomputed from its validated engine and owner:
    /// a handle read back from a store can never point teardown at another path.
    fn dir_of(&self, handle: &InstanceHandle) -> PathBuf {
        self.config
            .root
            .join(instance_name(handle.engine, &handle.owner))
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

    /// Clears a leftover same-named instance unless it is younger than the grace window.
    async fn clear_stale(&self, handle: &InstanceHandle, dir: &Path) -> Result<(), BackendError> {
        if !dir.exists() {
            return Ok(());
        }
        let meta = Metadata::read(dir);
        let created = meta.as_ref().map_or(0, |m| m.created_at_ms);
        let live = meta.is_some_and(|m| liveness::is_alive(m.pid, m.pid_start_ticks));
        if live && age(created) < self.config.grace {
            return Err(BackendError::YoungConflict {
                name: handle.name.clone(),
                grace: self.config.grace,
            });
        }
        self.teardown(handle).await
    }

    async fn provision_once(
        &self,
        request: &InstanceRequest,
        recipe: &ProcessRecipe,
        programs: &BTreeMap<&'static str, PathBuf>,
        template: Option<&Path>,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let name = instance_name(engine, &request.owner);
        let dir = self.config.root.join(&name);
        let handle = InstanceHandle {
            engine,
            owner: request.owner.clone(),
            backend: BackendKind::Process,
            backend_id: dir.display().to_string(),
            name: name.clone(),
        };
        self.clear_stale(&handle, &dir).await?;
        let outcome = self
            .start(request, recipe, programs, template, &dir, &name)
            .await;
        if outcome.is_err() {
            let _ = self.teardown(&handle).await;
        }
        outcome
    }

    async fn start(
        &self,
        request: &InstanceRequest,
        recipe: &ProcessRecipe,
        programs: &BTreeMap<&'static str, PathBuf>,
        template: Option<&Path>,
        dir: &Path,
        name: &str,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let owner = self.identity.owner();
        let io = |op: &'static str, path: &Path| {
            let path = path.display().to_string();
            move |e| BackendError::io(op, path, e)
        };
        let data_dir = dir.join("data");
        let socket_dir = dir.join("sock");
        check_socket_room(&socket_dir)?;
        files::private_dir(dir, 0o700, owner).map_err(io("creating", dir))?;
        match template {
            Some(template) => {
                let (src, dst) = (template.to_path_buf(), data_dir.clone());
                tokio::task::spawn_blocking(move || files::copy_tree(&src, &dst, owner))
                    .await
                    .map_err(|e| {
                        BackendError::io("copying template", name, std::io::Error::other(e))
                    })?
                    .map_err(io("copying template to", &data_dir))?;
            }
            None => {
                files::private_dir(&data_dir, 0o700, owner).map_err(io("creating", &data_dir))?
            }
        }
        files::private_dir(&socket_dir, 0o700, owner).map_err(io("creating", &socket_dir))?;

        let admin = Credentials::generate(engine.admin_user);
        let agent = Credentials::generate(engine.agent_user);
        let port = free_port().map_err(io("choosing a port for", dir))?;
        let ctx = ProcessContext {
            programs,
            data_dir: &data_dir,
            socket_dir: &socket_dir,
            instance_dir: dir,
            port,
            run_as: &self.identity.run_as,
            daemon_user: &self.identity.daemon_user,
            admin: &admin,
            agent: &agent,
        };
        let (command, planned) = (recipe.launch)(&ctx);
        for file in &planned {
            let path = dir.join(file.relative_path);
            files::private_file(&path, file.content.expose_secret().as_bytes(), owner)
                .map_err(io("writing", &path))?;
        }
        let limits = limits::plan(
            name,
            self.config.memory_limit_mb * 1024 * 1024,
            self.identity.raw_owner(),
        );
        let log_path = dir.join(LOG_FILE);
        let log = std::fs::File::create(&log_path).map_err(io("creating", &log_path))?;
        files::give_to(&log_path, owner).map_err(io("chown", &log_path))?;
        let log_err = log.try_clone().map_err(io("opening", &log_path))?;

        let mut argv: Vec<String> = limits.wrapper.clone();
        argv.push(command.program.display().to_string());
        argv.extend(command.args.iter().cloned());
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group: a Ctrl-C aimed at the CLI never reaches an instance, and
            // teardown can kill every process the server forked.
            .process_group(0);
        self.identity.apply(&mut cmd);
        let mut child = cmd.spawn().map_err(io("starting", &command.program))?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| BackendError::ExitedEarly {
                name: name.to_owned(),
                detail: "exited before its pid could be read".into(),
            })?;
        let start_ticks = liveness::stat(pid).map(|(_, t)| t).unwrap_or(0);
        // Reap the child whenever it exits, so it never lingers as a zombie in a long-running
        // daemon. A short-lived CLI simply leaves it to init.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });

        let mut meta = Metadata {
            format: Metadata::FORMAT,
            name: name.to_owned(),
            engine,
            owner: request.owner.clone(),
            pid,
            pid_start_ticks: start_ticks,
            host: HOST.to_owned(),
            port,
            database: engine.agent_database.to_owned(),
            user: agent.user.clone(),
            created_at_ms: now_ms(),
            run_as: self.identity.run_as.clone(),
            limits: limits.applied,
            features: vec![],
        };
        meta.write(dir).map_err(io("writing metadata in", dir))?;

        let admin_access = (recipe.admin)(&ctx);
        let bootstrap = recipe.bootstrap.map(|b| b(&ctx)).unwrap_or_default();
        let startup = Startup {
            engine,
            name,
            reach: Reach { host: HOST, port },
            admin: &admin_access,
            agent: &agent,
            database: engine.agent_database,
            bootstrap,
            deadline: self.deadline(engine),
        };
        let still_running = || {
            let log_path = log_path.clone();
            async move {
                if liveness::is_alive(pid, start_ticks) {
                    Ok(())
                } else {
                    Err(BackendError::ExitedEarly {
                        name: name.to_owned(),
                        detail: files::tail(&log_path, 6),
                    })
                }
            }
        };
        bring_up(startup, still_running).await?;

        let mut instance = Instance {
            engine,
            owner: request.owner.clone(),
            backend: BackendKind::Process,
            backend_id: dir.display().to_string(),
            name: name.to_owned(),
            host: HOST.to_owned(),
            port,
            database: engine.agent_database.to_owned(),
            agent,
            admin: admin_access,
            features: BTreeSet::new(),
            created_at_ms: meta.created_at_ms,
        };
        self.activate(&mut instance, &request.features).await?;
        meta.features = instance
            .features
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        meta.write(dir).map_err(io("writing metadata in", dir))?;
        Ok(instance)
    }
}

/// Unix socket paths hold at most 107 bytes; a server whose socket path is longer cannot start.
/// Room is kept for the longest socket file name a recipe uses (`.s.PGSQL.65535`).
fn check_socket_room(socket_dir: &Path) -> Result<(), BackendError> {
    const SUN_PATH_MAX: usize = 107;
    const LONGEST_SOCKET_FILE: usize = "/.s.PGSQL.65535".len();
    let length = socket_dir.as_os_str().len() + LONGEST_SOCKET_FILE;
    if length > SUN_PATH_MAX {
        return Err(BackendError::Unavailable {
            backend: "process",
            detail: format!(
                "the instance socket path {} is {length} bytes, beyond the {SUN_PATH_MAX} a unix \
                 socket allows; set a shorter process.root",
                socket_dir.display()
            ),
        });
    }
    Ok(())
}

fn is_port_clash(err: &BackendError) -> bool {
    match err {
        BackendError::ExitedEarly { detail, .. } => {
            let detail = detail.to_ascii_lowercase();
            detail.contains("address already in use") || detail.contains("bind on tcp/ip port")
        }
        _ => false,
    }
}

#[async_trait]
impl Backend for ProcessBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Process
    }

    async fn ping(&self) -> Result<(), BackendError> {
        self.ensure_root()
    }

    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError> {
        let recipe = Self::recipe(engine)?;
        Self::programs(engine, &recipe).map(drop)
    }

    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let recipe = Self::recipe(engine)?;
        let programs = Self::programs(engine, &recipe)?;
        self.ensure_root()?;
        let template = self
            .templates
            .ensure(
                &self.config.template_dir,
                engine,
                &recipe,
                &programs,
                &self.identity,
                &*self.progress,
            )
            .await?;
        let mut attempt = 1;
        loop {
            match self
                .provision_once(request, &recipe, &programs, template.as_deref())
                .await
            {
                Err(err) if is_port_clash(&err) && attempt < PORT_ATTEMPTS => attempt += 1,
                outcome => return outcome,
            }
        }
    }

    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError> {
        Ok(Metadata::read(&self.dir_of(handle))
            .is_some_and(|m| liveness::is_alive(m.pid, m.pid_start_ticks)))
    }

    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        let dir = self.dir_of(handle);
        if !dir.exists() {
            return Ok(());
        }
        if let Some(meta) = Metadata::read(&dir) {
            let signal = handle
                .engine
                .process()
                .map(|r| r.graceful_signal)
                .unwrap_or(Signal::Term);
            liveness::stop(
                meta.pid,
                meta.pid_start_ticks,
                nix_signal(signal),
                self.config.stop_timeout,
            )
            .await;
            limits::release(&meta.limits);
        }
        let path = dir.clone();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        })
        .await
        .map_err(|e| BackendError::io("removing", handle.name.clone(), std::io::Error::other(e)))?
        .map_err(|e| BackendError::io("removing", dir.display().to_string(), e))
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError> {
        let entries = match std::fs::read_dir(&self.config.root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(err) => {
                return Err(BackendError::io(
                    "listing",
                    self.config.root.display().to_string(),
                    err,
                ));
            }
        };
        let mut listed = Vec::new();
        for entry in entries.flatten() {
            let dir = entry.path();
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if !file_name.starts_with("sandboxd-") {
                continue;
            }
            match Metadata::read(&dir) {
                Some(meta) if meta.name == file_name => {
                    let live = liveness::is_alive(meta.pid, meta.pid_start_ticks);
                    listed.push(ListedInstance {
                        handle: InstanceHandle {
                            engine: meta.engine,
                            owner: meta.owner.clone(),
                            backend: BackendKind::Process,
                            backend_id: dir.display().to_string(),
                            name: meta.name.clone(),
                        },
                        host: meta.host.clone(),
                        port: meta.port,
                        created_at_ms: meta.created_at_ms,
                        live,
                        status: if live { "running" } else { "exited" }.to_owned(),
                    });
                }
                _ => {
                    if let Some(handle) = handle_from_dir_name(&file_name, &dir) {
                        // A directory without metadata: a provision that crashed half-way.
                        let created_at_ms = entry
                            .metadata()
                            .ok()
                            .and_then(|m| m.modified().ok())
                            .map_or(0, unix_ms);
                        listed.push(ListedInstance {
                            handle,
                            host: HOST.to_owned(),
                            port: 0,
                            created_at_ms,
                            live: false,
                            status: "incomplete".to_owned(),
                        });
                    }
                }
            }
        }
        listed.sort_by(|a, b| a.handle.name.cmp(&b.handle.name));
        Ok(listed)
    }

    async fn doctor(&self) -> Vec<DoctorCheck> {
        let mut checks = vec![DoctorCheck::ok(
            "process backend",
            format!(
                "instances under {} run as `{}`",
                self.config.root.display(),
                self.identity.run_as
            ),
        )];
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

/// Recovers engine and owner from `sandboxd-<engine>-<owner>`.
fn handle_from_dir_name(file_name: &str, dir: &Path) -> Option<InstanceHandle> {
    let rest = file_name.strip_prefix("sandboxd-")?;
    engines::all().find_map(|engine| {
        let owner = rest.strip_prefix(engine.name)?.strip_prefix('-')?;
        let owner = sandboxd_domain::AgentSlug::parse(owner).ok()?;
        Some(InstanceHandle {
            engine,
            owner,
            backend: BackendKind::Process,
            backend_id: dir.display().to_string(),
            name: file_name.to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths_beyond_the_kernel_limit_are_refused_clearly() {
        assert!(
            check_socket_room(Path::new("/dev/shm/sandboxd/sandboxd-postgres-dev-1/sock")).is_ok()
        );
        let long = format!("/dev/shm/{}/sock", "x".repeat(100));
        let err = check_socket_room(Path::new(&long)).expect_err("too long");
        assert!(err.to_string().contains("process.root"), "{err}");
    }
}
