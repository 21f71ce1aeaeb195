//! Template data directories: initialized once per engine and installation (initdb,
//! mariadb-install-db), then copied for every instance, which is what makes a process instance
//! start in milliseconds instead of seconds.
//!
//! A template is built under a leased pool account (the tools refuse root), then handed to root
//! and closed (0700): no instance uid can read or change it, so a tenant cannot plant anything in
//! every future instance. Each instance gets a private copy owned by its own uid.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use sandboxd_domain::engine::{ProcessContext, ProcessRecipe};
use sandboxd_domain::{Credentials, EngineRef};
use secrecy::ExposeSecret;
use template_key::stable_key;
use tokio::sync::Mutex;

use super::ProcessConfig;
use super::files::{self, Owner};
use super::identity::{Identity, Tenant};
use crate::error::BackendError;

/// Template builds in flight, one lock per template key: concurrent provisions of the same engine
/// wait for one build instead of racing it.
#[derive(Debug, Default)]
pub struct Templates {
    building: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl Templates {
    /// The template data directory for `engine`, built first if needed.
    pub async fn ensure(
        &self,
        config: &ProcessConfig,
        engine: EngineRef,
        recipe: &ProcessRecipe,
        programs: &BTreeMap<&'static str, PathBuf>,
        identity: &Identity,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Option<PathBuf>, BackendError> {
        let Some(plan_template) = recipe.template else {
            return Ok(None);
        };
        let root = config.template_dir.as_path();
        let key = format!(
            "{}-{}",
            engine.name,
            stable_key(engine.name, programs, identity)
        );
        let final_dir = root.join(&key);
        let data = final_dir.join("data");
        if data.is_dir() {
            return Ok(Some(data));
        }
        let lock = {
            let mut building = self
                .building
                .lock()
                .expect("the template lock map is never poisoned: no code panics under it");
            building.entry(key.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        if data.is_dir() {
            return Ok(Some(data));
        }
        progress(&format!(
            "building the {} template data directory (once per installation)…",
            engine.title
        ));
        std::fs::create_dir_all(root)
            .map_err(|e| BackendError::io("creating", root.display().to_string(), e))?;
        let build_dir = root.join(format!(".build-{key}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&build_dir);
        let builder = identity.lease(&build_dir).await?;
        let owner = builder.owner();
        let result = async {
            files::private_dir(&build_dir, 0o755, owner)
                .map_err(|e| BackendError::io("creating", build_dir.display().to_string(), e))?;
            build(
                &build_dir,
                plan_template,
                programs,
                config,
                identity,
                &builder,
            )
            .await?;
            if owner.is_some() {
                let dir = build_dir.clone();
                tokio::task::spawn_blocking(move || files::hand_to_root(&dir))
                    .await
                    .map_err(|e| {
                        BackendError::io("closing template", &key, std::io::Error::other(e))
                    })?
                    .map_err(|e| {
                        BackendError::io("closing template", build_dir.display().to_string(), e)
                    })?;
            }
            Ok(())
        }
        .await;
        identity.release(&build_dir);
        if let Err(err) = result {
            let _ = std::fs::remove_dir_all(&build_dir);
            return Err(err);
        }
        if let Err(err) = std::fs::rename(&build_dir, &final_dir) {
            let _ = std::fs::remove_dir_all(&build_dir);
            // Another sandboxd process finished the same template first: use that one.
            if !data.is_dir() {
                return Err(BackendError::io(
                    "installing template",
                    final_dir.display().to_string(),
                    err,
                ));
            }
        }
        progress(&format!("{} template ready", engine.title));
        Ok(Some(data))
    }
}

async fn build(
    build_dir: &Path,
    plan_template: fn(&ProcessContext<'_>) -> sandboxd_domain::engine::TemplatePlan,
    programs: &BTreeMap<&'static str, PathBuf>,
    config: &ProcessConfig,
    identity: &Identity,
    builder: &Tenant,
) -> Result<(), BackendError> {
    let owner: Owner = builder.owner();
    let data = build_dir.join("data");
    // Template steps never see real credentials: every instance gets its own after the copy.
    let placeholder = Credentials::generate("template");
    let ctx = ProcessContext {
        programs,
        data_dir: &data,
        socket_dir: build_dir,
        instance_dir: build_dir,
        port: 0,
        run_as: &builder.user,
        daemon_user: &identity.daemon_user,
        admin: &placeholder,
        agent: &placeholder,
        memory_limit_mb: config.memory_limit_mb,
        data_limit_mb: config.data_limit_mb,
        wal_limit_mb: config.wal_limit_mb,
    };
    let plan = plan_template(&ctx);
    let log_path = build_dir.join("template.log");
    // Steps run as the builder account in a directory it writes: a name it made (a symlink)
    // must not make root write or chown another file.
    let open = |path: &Path| {
        files::fresh_file(path, 0o644, owner)
            .map_err(|e| BackendError::io("creating", path.display().to_string(), e))
    };
    let steps = plan
        .outputs
        .iter()
        .map(|output| (&output.command, Some(build_dir.join(output.file))))
        .chain(plan.commands.iter().map(|command| (command, None)));
    for (command, output) in steps {
        let log = open(&log_path)?;
        let stdout = match &output {
            Some(path) => open(path)?,
            None => log
                .try_clone()
                .map_err(|e| BackendError::io("opening", log_path.display().to_string(), e))?,
        };
        let mut cmd = tokio::process::Command::new(&command.program);
        cmd.args(&command.args)
            .current_dir(build_dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log);
        builder.apply(&mut cmd);
        let status = cmd
            .status()
            .await
            .map_err(|e| BackendError::io("running", command.program.display().to_string(), e))?;
        if !status.success() {
            return Err(BackendError::ExitedEarly {
                name: format!("template step {}", command.program.display()),
                detail: format!("{status}: {}", files::tail(&log_path, 8)),
            });
        }
    }
    // Inputs of the steps only: the template keeps its data directory.
    for output in &plan.outputs {
        let path = build_dir.join(output.file);
        std::fs::remove_file(&path)
            .map_err(|e| BackendError::io("removing", path.display().to_string(), e))?;
    }
    for file in &plan.files {
        let path = data.join(file.relative_path);
        files::private_file(&path, file.content.expose_secret().as_bytes(), owner)
            .map_err(|e| BackendError::io("writing", path.display().to_string(), e))?;
    }
    Ok(())
}

/// A short key that changes whenever the installation or the identities baked into a template
/// change, so an upgraded server never boots an old template.
mod template_key {
    use std::collections::BTreeMap;
    use std::hash::{DefaultHasher, Hash, Hasher};
    use std::path::{Path, PathBuf};
    use std::time::UNIX_EPOCH;

    use super::Identity;

    pub fn stable_key(
        engine: &str,
        programs: &BTreeMap<&'static str, PathBuf>,
        identity: &Identity,
    ) -> String {
        /// Bumped whenever what a template holds changes (2: peer-authenticated superuser,
        /// root-owned, built under a pool account; 3: MariaDB's zone tables).
        const FORMAT: u32 = 3;
        /// The host's compiled locales: initdb makes each one a collation, so a locale generated
        /// later (`en_US.UTF-8` by scripts/install-deps.sh) means a new template.
        const LOCALES: &[&str] = &["/usr/lib/locale/locale-archive", "/usr/lib/locale"];
        let mut hasher = DefaultHasher::new();
        FORMAT.hash(&mut hasher);
        engine.hash(&mut hasher);
        identity.separates_instances().hash(&mut hasher);
        identity.daemon_user.hash(&mut hasher);
        let stamp = |path: &Path, hasher: &mut DefaultHasher| {
            if let Ok(meta) = path.metadata() {
                meta.len().hash(hasher);
                meta.modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs())
                    .hash(hasher);
            }
        };
        for (name, path) in programs {
            name.hash(&mut hasher);
            path.hash(&mut hasher);
            stamp(path, &mut hasher);
        }
        for locales in LOCALES {
            stamp(Path::new(locales), &mut hasher);
        }
        format!("{:016x}", hasher.finish())
    }
}
