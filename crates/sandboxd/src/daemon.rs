//! Wiring the daemon: the state directory, the store and its key, the role book, the backends
//! and the broker. `serve` runs it behind HTTP; tests start it the same way.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rand::RngCore;
use sandboxd_backend::Backend;
use sandboxd_broker::{Backends, Broker, parse_switch};
use sandboxd_domain::roles::RoleBook;
use sandboxd_domain::{EngineRef, engines};
use sandboxd_store::{SecretCipher, Store, StoreKind};
use secrecy::SecretString;

use crate::backends;
use crate::config::Settings;

/// The environment variable that overrides the stored master switch (§2) while it is set.
pub const ENABLED_ENV: &str = sandboxd_broker::ENABLED_OVERRIDE_ENV;
/// Set by a restart in the re-executed image: the address the previous image listened on (it
/// wins over `--listen`, so a daemon started on port 0 comes back on the same port).
pub const RESTART_LISTEN_ENV: &str = "SANDBOXD_RESTART_LISTEN";
/// The environment variable that overrides the admin token file.
pub const ADMIN_TOKEN_ENV: &str = "SANDBOXD_ADMIN_TOKEN";

/// A started daemon core.
#[derive(Debug)]
pub struct Daemon {
    pub broker: Broker,
    pub admin_token: SecretString,
    /// Which backend provisions new sandboxes.
    pub primary: &'static str,
    /// The image each engine runs with on the provisioning backend (`engine=image`; empty for
    /// backends without images, and engines with no image present are left out).
    pub images: Vec<String>,
}

pub async fn start(settings: &Settings) -> Result<Daemon> {
    private_dir(&settings.state_dir)?;
    let admin_token = admin_token(settings)?;
    let cipher = SecretCipher::load_or_create(&settings.store_key_file())
        .context("loading the store key")?;
    let store = Store::open(&settings.store_url(), cipher)
        .await
        .context("opening the store")?;
    let enabled_override =
        match std::env::var(ENABLED_ENV) {
            Ok(value) => Some(parse_switch(&value).with_context(|| {
                format!("{ENABLED_ENV} must be true/false, 1/0, yes/no or on/off")
            })?),
            Err(_) => None,
        };
    // A PostgreSQL store may be shared by replicas: leases coordinate them. SQLite is one
    // daemon's file.
    let replicated = store.kind() == StoreKind::Postgres;
    let config = settings.broker_config(roles(settings)?, enabled_override, replicated)?;
    let backends = daemon_backends(settings).await?;
    let primary = backends.primary().kind().as_str();
    let mut images = Vec::new();
    for engine in engines::all() {
        if let Ok(Some(image)) = backends.primary().image_of(engine).await {
            images.push(format!("{}={image}", engine.name));
        }
    }
    let broker = Broker::start(config, store, backends)
        .await
        .context("starting the broker")?;
    Ok(Daemon {
        broker,
        admin_token,
        primary,
        images,
    })
}

/// Replaces this process's image with the daemon's binary again (same pid, arguments and
/// environment, plus [`RESTART_LISTEN_ENV`] naming `listening`). Returns only when that failed.
/// The binary is the one at the path this image was started from, so an upgrade installed
/// over it is what runs next; `/proc/self/exe` itself when that path is gone.
pub fn reexec(listening: std::net::SocketAddr) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    const SELF_EXE: &str = "/proc/self/exe";
    let exe = match std::fs::read_link(SELF_EXE) {
        Ok(path) => {
            // The kernel's mark of an image whose file was replaced or removed.
            let installed = path
                .to_str()
                .and_then(|text| text.strip_suffix(" (deleted)"))
                .map(std::path::PathBuf::from);
            match installed {
                Some(installed) if installed.is_file() => installed,
                Some(_) => std::path::PathBuf::from(SELF_EXE),
                None => path,
            }
        }
        Err(_) => std::path::PathBuf::from(SELF_EXE),
    };
    let mut argv = std::env::args_os();
    let arg0 = argv.next().unwrap_or_else(|| exe.clone().into_os_string());
    std::process::Command::new(&exe)
        .arg0(arg0)
        .args(argv)
        .env(RESTART_LISTEN_ENV, listening.to_string())
        .exec()
}

/// The children a previous image of this process left (instances of the process backend):
/// after a restart in place they are this image's children, but nothing here waits for them.
/// Listed before anything of this image starts a child.
pub fn inherited_children() -> Vec<nix::unistd::Pid> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) state ppid …`: the name may hold anything but ends at the last `)`.
            let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            after_name.split_whitespace().nth(1) == Some(me.as_str())
        })
        .map(nix::unistd::Pid::from_raw)
        .collect()
}

/// Waits for `children` (see [`inherited_children`]) as they end, so a torn-down instance does
/// not stay a zombie until the daemon exits; by pid, never any child, so the children this image
/// starts stay tokio's to wait for. Ends when all are reaped or at `shutdown`.
pub fn spawn_reaper(
    mut children: Vec<nix::unistd::Pid>,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
        while !children.is_empty() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            children.retain(|pid| {
                matches!(
                    waitpid(*pid, Some(WaitPidFlag::WNOHANG)),
                    Ok(WaitStatus::StillAlive)
                )
            });
        }
    })
}

/// The provisioning backend, plus every other available backend for liveness and reaping.
/// `auto` prefers Docker when it can run every engine the process backend could.
pub async fn daemon_backends(settings: &Settings) -> Result<Backends> {
    let quiet: sandboxd_backend::process::Progress = Arc::new(|m| tracing::info!("{m}"));
    let process = backends::process(settings, quiet.clone()).ok();
    let mut by_process: Vec<EngineRef> = Vec::new();
    if let Some(process) = &process {
        for engine in engines::all() {
            if process.supports(engine).await.is_ok() {
                by_process.push(engine);
            }
        }
    }
    let primary = backends::choose(settings, settings.backend, &by_process, quiet.clone())
        .await
        .context("choosing the backend")?;
    let others = backends::all(settings, quiet).await;
    Ok(Backends::new(primary, others))
}

/// The admin token: `SANDBOXD_ADMIN_TOKEN`, else the token file, created with a random token on
/// first start (mode 0600).
pub fn admin_token(settings: &Settings) -> Result<SecretString> {
    if let Ok(token) = std::env::var(ADMIN_TOKEN_ENV) {
        anyhow::ensure!(
            token.len() >= 16,
            "{ADMIN_TOKEN_ENV} must be at least 16 characters"
        );
        return Ok(SecretString::from(token));
    }
    let path = settings.admin_token_file();
    match std::fs::read_to_string(&path) {
        Ok(token) => Ok(SecretString::from(token.trim().to_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                private_dir(parent)?;
            }
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            let token = format!("sbxadm_{}", hex::encode(bytes));
            write_private(&path, &token)?;
            eprintln!("created the admin token file {}", path.display());
            Ok(SecretString::from(token))
        }
        Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
    }
}

/// The role book: the operator's roles file, or §3.1's defaults.
fn roles(settings: &Settings) -> Result<RoleBook> {
    let Some(path) = &settings.broker.roles_file else {
        return Ok(RoleBook::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the roles file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing the roles file {}", path.display()))
}

fn private_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if !path.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .with_context(|| format!("creating {}", path.display()))?;
    }
    Ok(())
}

fn write_private(path: &Path, content: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(content.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
