//! Provisioning one process instance, in the step names the Docker backend uses too:
//! `clear_stale` (a leftover same-named instance) → `create` (a uid leased for the instance; the
//! instance directory, a size-capped tmpfs of its own owned by that uid: data copied from the
//! template, a private socket directory, the recipe's files) → `start` (the
//! server under its resource caps, in its own process group, metadata written) → `bring_up` (the
//! flow every backend shares: superuser login, setup steps, the handed-out account's own round
//! trip) → `activate` (features). When any step after `clear_stale` fails, the process and the
//! directory are removed before the error is returned, so nothing is left behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sandboxd_domain::clock::{age_of, now_ms};
use sandboxd_domain::engine::{AdminAccess, ProcessContext, ProcessRecipe};
use sandboxd_domain::instance::{BackendKind, Instance, instance_name};
use sandboxd_domain::space::memory_cap_mb;
use sandboxd_domain::{Credentials, DataSize, EngineRef};
use secrecy::ExposeSecret;

use super::identity::{Identity, Tenant};
use super::metadata::Metadata;
use super::{HOST, ProcessBackend, files, limits, liveness, space};
use crate::backend::Backend;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest};
use crate::startup::{Account, Startup, bring_up};
use crate::wire::Reach;

const LOG_FILE: &str = "server.log";
/// Attempts when another process grabbed the chosen port between our check and the bind.
const PORT_ATTEMPTS: usize = 3;

/// What every attempt at one engine's instance shares, resolved once per provision.
struct Plan<'a> {
    recipe: &'a ProcessRecipe,
    programs: &'a BTreeMap<&'static str, PathBuf>,
    template: Option<&'a Path>,
    account: Account,
    /// The data space: the request's size, else `data_limit_mb`.
    data_mb: u64,
    /// `memory_limit_mb`, grown by what the data space grew beyond `data_limit_mb` (its tmpfs
    /// pages count against the memory cgroup).
    memory_mb: u64,
}

/// An instance directory ready for its server, and the accounts the server will know.
struct Created {
    name: String,
    dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    admin: Credentials,
    agent: Credentials,
    /// The account the instance runs as, leased for its directory.
    tenant: Tenant,
}

impl Created {
    fn context<'a>(
        &'a self,
        plan: &'a Plan<'_>,
        identity: &'a Identity,
        config: &super::ProcessConfig,
    ) -> ProcessContext<'a> {
        // The caps are the plan's (sized per request); the WAL's is the backend's.
        ProcessContext {
            programs: plan.programs,
            data_dir: &self.data_dir,
            socket_dir: &self.socket_dir,
            instance_dir: &self.dir,
            port: self.port,
            run_as: &self.tenant.user,
            daemon_user: &identity.daemon_user,
            admin: &self.admin,
            agent: &self.agent,
            memory_limit_mb: plan.memory_mb,
            data_limit_mb: plan.data_mb,
            wal_limit_mb: config.wal_limit_mb,
        }
    }
}

/// A server process that was started, and the metadata that finds it again.
struct Started {
    pid: i32,
    start_ticks: u64,
    log_path: PathBuf,
    meta: Metadata,
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BackendError {
    let path = path.display().to_string();
    move |e| BackendError::io(op, path, e)
}

impl ProcessBackend {
    pub(super) async fn provision_instance(
        &self,
        request: &InstanceRequest,
        account: Account,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let recipe = Self::recipe(engine)?;
        let programs = Self::programs(engine, &recipe)?;
        self.ensure_root()?;
        let template = self
            .templates
            .ensure(
                &self.config,
                engine,
                &recipe,
                &programs,
                &self.identity,
                &*self.progress,
            )
            .await?;
        let default = self.default_size();
        let size = request.size.unwrap_or(default);
        let plan = Plan {
            recipe: &recipe,
            programs: &programs,
            template: template.as_deref(),
            account,
            data_mb: size.mb(),
            memory_mb: memory_cap_mb(self.config.memory_limit_mb, default, size),
        };
        let mut attempt = 1;
        loop {
            match self.provision_one(request, &plan).await {
                Err(err) if is_port_clash(&err) && attempt < PORT_ATTEMPTS => attempt += 1,
                outcome => return outcome,
            }
        }
    }

    #[tracing::instrument(
        name = "provision_instance",
        skip_all,
        fields(engine = request.engine.name, agent = %request.owner, backend = "process")
    )]
    async fn provision_one(
        &self,
        request: &InstanceRequest,
        plan: &Plan<'_>,
    ) -> Result<Instance, BackendError> {
        let name = instance_name(request.engine, &request.owner, &request.maker);
        let handle = InstanceHandle {
            engine: request.engine,
            owner: request.owner.clone(),
            maker: request.maker.clone(),
            backend: BackendKind::Process,
            backend_id: self.config.root.join(&name).display().to_string(),
            name,
        };
        self.clear_stale(&handle).await?;
        let outcome = self.provision_steps(request, plan, &handle.name).await;
        if outcome.is_err() {
            let _ = self.remove(&handle).await;
        }
        outcome
    }

    /// `create` → `start` → `bring_up` → `activate`; the caller cleans up after a failure.
    async fn provision_steps(
        &self,
        request: &InstanceRequest,
        plan: &Plan<'_>,
        name: &str,
    ) -> Result<Instance, BackendError> {
        let engine = request.engine;
        let created = self.create(engine, plan, name).await?;
        let ctx = created.context(plan, &self.identity, &self.config);
        let mut started = self.start(request, plan, &created, &ctx)?;
        let admin = (plan.recipe.admin)(&ctx);
        self.bring_up(engine, plan, &created, &started, &admin)
            .await?;

        let Created {
            name,
            dir,
            port,
            agent,
            ..
        } = created;
        let mut instance = Instance {
            engine,
            owner: request.owner.clone(),
            maker: request.maker.clone(),
            backend: BackendKind::Process,
            backend_id: dir.display().to_string(),
            name,
            host: HOST.to_owned(),
            port,
            database: engine.agent_database.to_owned(),
            agent,
            admin,
            features: BTreeSet::new(),
            created_at_ms: started.meta.created_at_ms,
            clone: None,
            size: engine
                .data_on_disk
                .then_some(DataSize::from_mb(plan.data_mb)),
        };
        self.activate(&mut instance, &request.features).await?;
        started.meta.features = instance
            .features
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        started
            .meta
            .write(&dir)
            .map_err(io_error("writing metadata in", &dir))?;
        Ok(instance)
    }

    /// Clears a leftover same-named instance unless it is younger than the grace window.
    async fn clear_stale(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        let dir = self.dir_of(handle);
        if !dir.exists() {
            return Ok(());
        }
        let meta = Metadata::read(&dir);
        let created = meta.as_ref().map_or(0, |m| m.created_at_ms);
        let live = meta.is_some_and(|m| m.server().is_alive());
        if live && age_of(created) < self.config.grace {
            return Err(BackendError::YoungConflict {
                name: handle.name.clone(),
                grace: self.config.grace,
            });
        }
        self.remove(handle).await
    }

    /// The instance directory (0700, owned by a uid leased for this instance alone, a tmpfs of
    /// the plan's data space when sandboxd is root): the data directory copied from the template (or
    /// empty, its WAL directory on a mount of its own), the private socket directory, fresh
    /// accounts and a free port.
    async fn create(
        &self,
        engine: EngineRef,
        plan: &Plan<'_>,
        name: &str,
    ) -> Result<Created, BackendError> {
        let dir = self.config.root.join(name);
        let data_dir = dir.join("data");
        let socket_dir = dir.join("sock");
        check_socket_room(&socket_dir)?;
        let tenant = self.identity.lease(&dir).await?;
        let owner = tenant.owner();
        files::private_dir(&dir, 0o700, owner).map_err(io_error("creating", &dir))?;
        let capped = self.capped_space;
        if capped {
            space::mount_tmpfs(&dir, plan.data_mb, owner)
                .map_err(io_error("mounting the size-capped tmpfs at", &dir))?;
        }
        files::private_dir(&data_dir, 0o700, owner).map_err(io_error("creating", &data_dir))?;
        if let (true, Some(wal)) = (capped, plan.recipe.wal_dir) {
            let wal_dir = data_dir.join(wal);
            files::private_dir(&wal_dir, 0o700, owner).map_err(io_error("creating", &wal_dir))?;
            space::mount_tmpfs(&wal_dir, self.config.wal_limit_mb, owner)
                .map_err(io_error("mounting the size-capped tmpfs at", &wal_dir))?;
        }
        if let Some(template) = plan.template {
            let (src, dst) = (template.to_path_buf(), data_dir.clone());
            tokio::task::spawn_blocking(move || files::copy_tree(&src, &dst, owner))
                .await
                .map_err(|e| BackendError::io("copying template", name, std::io::Error::other(e)))?
                .map_err(io_error("copying template to", &data_dir))?;
        }
        files::private_dir(&socket_dir, 0o700, owner).map_err(io_error("creating", &socket_dir))?;
        let port = free_port().map_err(io_error("choosing a port for", &dir))?;
        Ok(Created {
            name: name.to_owned(),
            dir,
            data_dir,
            socket_dir,
            port,
            admin: Credentials::generate(engine.admin_user),
            agent: Credentials::generate(engine.agent_user),
            tenant,
        })
    }

    /// Writes the recipe's files and starts the server under its caps, as the instance user, in
    /// its own process group; records the metadata that finds it after any restart.
    fn start(
        &self,
        request: &InstanceRequest,
        plan: &Plan<'_>,
        created: &Created,
        ctx: &ProcessContext<'_>,
    ) -> Result<Started, BackendError> {
        let owner = created.tenant.owner();
        let dir = &created.dir;
        let (command, planned) = (plan.recipe.launch)(ctx);
        for file in &planned {
            let path = dir.join(file.relative_path);
            files::private_file(&path, file.content.expose_secret().as_bytes(), owner)
                .map_err(io_error("writing", &path))?;
        }
        let limits = limits::plan(
            &created.name,
            plan.memory_mb * 1024 * 1024,
            self.config.pids_limit,
            created.tenant.raw_owner(),
        );
        let log_path = dir.join(LOG_FILE);
        let log = std::fs::File::create(&log_path).map_err(io_error("creating", &log_path))?;
        files::give_to(&log_path, owner).map_err(io_error("chown", &log_path))?;
        let log_err = log.try_clone().map_err(io_error("opening", &log_path))?;

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
        created.tenant.apply(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(io_error("starting", &command.program))?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| BackendError::ExitedEarly {
                name: created.name.clone(),
                detail: "exited before its pid could be read".into(),
            })?;
        let start_ticks = liveness::stat(pid).map(|(_, t)| t).unwrap_or(0);
        // Reap the child whenever it exits, so it never lingers as a zombie in a long-running
        // daemon. A short-lived CLI simply leaves it to init.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });

        let engine = request.engine;
        let meta = Metadata {
            format: Metadata::FORMAT,
            name: created.name.clone(),
            engine,
            owner: request.owner.clone(),
            maker: request.maker.clone(),
            pid,
            pid_start_ticks: start_ticks,
            uid: Some(
                created
                    .tenant
                    .raw_owner()
                    .map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid),
            ),
            host: HOST.to_owned(),
            port: created.port,
            database: engine.agent_database.to_owned(),
            user: created.agent.user.clone(),
            created_at_ms: now_ms(),
            run_as: created.tenant.user.clone(),
            limits: limits.applied,
            features: vec![],
        };
        meta.write(dir)
            .map_err(io_error("writing metadata in", dir))?;
        Ok(Started {
            pid,
            start_ticks,
            log_path,
            meta,
        })
    }

    /// The shared startup flow, asking after every failed attempt whether the server still runs
    /// so a dead one is reported with its log at once.
    async fn bring_up(
        &self,
        engine: EngineRef,
        plan: &Plan<'_>,
        created: &Created,
        started: &Started,
        admin: &AdminAccess,
    ) -> Result<(), BackendError> {
        let ctx = created.context(plan, &self.identity, &self.config);
        let bootstrap = plan.recipe.bootstrap.map(|b| b(&ctx)).unwrap_or_default();
        let startup = Startup {
            engine,
            name: &created.name,
            reach: Reach {
                host: HOST,
                port: created.port,
            },
            admin,
            agent: &created.agent,
            database: engine.agent_database,
            bootstrap,
            account: plan.account,
            deadline: self.deadline(engine),
        };
        let (pid, start_ticks) = (started.pid, started.start_ticks);
        let still_running = || async move {
            if liveness::is_alive(pid, start_ticks) {
                Ok(())
            } else {
                Err(BackendError::ExitedEarly {
                    name: created.name.clone(),
                    detail: files::tail(&started.log_path, 6),
                })
            }
        };
        bring_up(startup, still_running).await.map(drop)
    }
}

/// A free TCP port on 127.0.0.1, as the kernel hands it out for port 0.
fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind((HOST, 0))?;
    Ok(listener.local_addr()?.port())
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
