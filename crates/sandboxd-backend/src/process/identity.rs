//! Which OS user each instance runs as.
//!
//! When sandboxd runs as root (CI does), every live instance runs under a uid of its own, leased
//! from a pool of dedicated system accounts (`sandboxd-i000`, … created by
//! scripts/install-deps.sh; PostgreSQL refuses a uid without a passwd entry). One instance
//! therefore cannot signal, trace or read another, and a compromised server holds no root
//! privilege. A lease is an `O_EXCL` file per account in a host-wide directory (`lease_dir`), so
//! concurrent provisions and several daemons on one host (each with its own `root`) never hand
//! out one uid twice. A lease names the directory it was taken for (its holder); it is freed at
//! teardown, and reclaimed by the next acquirer once its holder directory is gone (or belongs to
//! another uid) and the process that took it is gone or the lease is older than
//! [`FRESH_LEASE`].
//!
//! When sandboxd is not root it cannot switch users: instances run as the daemon's own user, as
//! before, with no separation between instances (`doctor` says so).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Gid, Uid, User, geteuid};
use sandboxd_domain::clock::{age_of, now_ms};
use serde::{Deserialize, Serialize};

use super::ProcessConfig;
use super::files::Owner;
use super::liveness;
use crate::error::BackendError;

/// A lease younger than this is never reclaimed while its taker lives: it covers the moment
/// between taking a lease and creating (and chowning) its holder directory.
const FRESH_LEASE: Duration = Duration::from_secs(120);
const LOCK_FILE: &str = ".lock";

#[derive(Debug, Clone)]
pub struct Identity {
    /// The user sandboxd runs as.
    pub daemon_user: String,
    mode: Mode,
}

#[derive(Debug, Clone)]
enum Mode {
    /// The daemon is not root: instances run as the daemon's own user.
    Shared,
    /// The daemon is root: one pool account per live instance.
    Pool {
        accounts: Vec<Account>,
        lease_dir: PathBuf,
        prefix: String,
    },
}

#[derive(Debug, Clone)]
struct Account {
    name: String,
    uid: Uid,
    gid: Gid,
}

/// The user one instance (or one template build) runs as, while its lease is held.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// The account's name.
    pub user: String,
    /// Set when processes must switch to the account (the daemon is root).
    switch_to: Owner,
}

/// What a lease file holds. No credential.
#[derive(Debug, Serialize, Deserialize)]
struct LeaseRecord {
    /// The directory the account was leased for (an instance or a template build).
    holder: PathBuf,
    pid: i32,
    pid_start_ticks: u64,
    created_at_ms: i64,
}

impl Identity {
    pub fn resolve(config: &ProcessConfig) -> Result<Self, BackendError> {
        let euid = geteuid();
        let daemon_user = User::from_uid(euid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| euid.to_string());
        if !euid.is_root() {
            return Ok(Self {
                daemon_user,
                mode: Mode::Shared,
            });
        }
        let prefix = &config.uid_pool_prefix;
        let accounts: Vec<Account> = (0..config.uid_pool_size)
            .filter_map(|i| User::from_name(&format!("{prefix}{i:03}")).ok().flatten())
            .filter(|user| !user.uid.is_root())
            .map(|user| Account {
                name: user.name,
                uid: user.uid,
                gid: user.gid,
            })
            .collect();
        if accounts.is_empty() {
            return Err(BackendError::Unavailable {
                backend: "process",
                detail: format!(
                    "sandboxd runs as root and starts every instance under its own account \
                     `{prefix}000`…, but none exists; run scripts/install-deps.sh (it creates \
                     {} of them) or set process.uid_pool_prefix",
                    config.uid_pool_size
                ),
            });
        }
        Ok(Self {
            daemon_user,
            mode: Mode::Pool {
                accounts,
                lease_dir: config.lease_dir.clone(),
                prefix: prefix.clone(),
            },
        })
    }

    /// True when each instance runs under its own uid.
    pub fn separates_instances(&self) -> bool {
        matches!(self.mode, Mode::Pool { .. })
    }

    /// One line for `doctor`.
    pub fn describe(&self) -> String {
        match &self.mode {
            Mode::Shared => format!(
                "sandboxd is not root: every instance runs as `{}`, the daemon's own user, so \
                 instances are not separated from each other or from the daemon below the \
                 database (run as root for one uid per instance)",
                self.daemon_user
            ),
            Mode::Pool {
                accounts,
                lease_dir,
                prefix,
            } => format!(
                "one uid per live instance from {} accounts `{prefix}*` (leases in {}); \
                 superuser connections admit only `{}`",
                accounts.len(),
                lease_dir.display(),
                self.daemon_user
            ),
        }
    }

    /// Leases an account for `holder` (the directory about to be created for it).
    pub async fn lease(&self, holder: &Path) -> Result<Tenant, BackendError> {
        let Mode::Pool {
            accounts,
            lease_dir,
            ..
        } = &self.mode
        else {
            return Ok(Tenant {
                user: self.daemon_user.clone(),
                switch_to: None,
            });
        };
        let (accounts, lease_dir, holder) =
            (accounts.clone(), lease_dir.clone(), holder.to_path_buf());
        tokio::task::spawn_blocking(move || acquire(&accounts, &lease_dir, &holder))
            .await
            .map_err(|e| BackendError::io("leasing a uid", "pool", std::io::Error::other(e)))?
    }

    /// Frees every lease taken for `holder`. Idempotent, best effort.
    pub fn release(&self, holder: &Path) {
        let Mode::Pool { lease_dir, .. } = &self.mode else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(lease_dir) else {
            return;
        };
        for entry in entries.flatten() {
            if read_lease(&entry.path()).is_some_and(|lease| lease.holder == holder) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Tenant {
    pub fn owner(&self) -> Owner {
        self.switch_to
    }

    pub fn raw_owner(&self) -> Option<(u32, u32)> {
        self.switch_to
            .map(|(u, g): (Uid, Gid)| (u.as_raw(), g.as_raw()))
    }

    /// Makes `cmd` run as this account, with a clean environment: the daemon's own environment
    /// may hold secrets (store keys, tokens) that an instance must never inherit. Supplementary
    /// groups are dropped by the standard library when a root parent sets a uid.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("LANG", "C.UTF-8")
            .env("TZ", "UTC");
        if let Some((uid, gid)) = self.switch_to {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
    }
}

fn read_lease(path: &Path) -> Option<LeaseRecord> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Takes the first free account, starting at a random one so concurrent daemons rarely contend.
/// Runs under an exclusive `flock` of the lease directory, so reclaiming a stale lease and taking
/// it again is one step for every sandboxd on the host.
fn acquire(accounts: &[Account], lease_dir: &Path, holder: &Path) -> Result<Tenant, BackendError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |e: std::io::Error| BackendError::io(op, path, e)
    };
    if !lease_dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(lease_dir)
            .map_err(io("creating", lease_dir))?;
    }
    let lock_path = lease_dir.join(LOCK_FILE);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(io("opening", &lock_path))?;
    let _locked = Flock::lock(lock, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io("locking", &lock_path)(std::io::Error::from(errno)))?;

    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let record = LeaseRecord {
        holder: holder.to_path_buf(),
        pid: me,
        pid_start_ticks: liveness::stat(me).map_or(0, |(_, ticks)| ticks),
        created_at_ms: now_ms(),
    };
    let json = serde_json::to_vec(&record).map_err(std::io::Error::other);
    let json = json.map_err(io("encoding a lease for", holder))?;
    let start = usize::try_from(now_ms().unsigned_abs()).unwrap_or(0) % accounts.len();
    for offset in 0..accounts.len() {
        let account = &accounts[(start + offset) % accounts.len()];
        let path = lease_dir.join(&account.name);
        if path.exists() && is_stale(&path, account) {
            let _ = std::fs::remove_file(&path);
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(&json).map_err(io("writing", &path))?;
                return Ok(Tenant {
                    user: account.name.clone(),
                    switch_to: Some((account.uid, account.gid)),
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(io("creating", &path)(err)),
        }
    }
    Err(BackendError::Unavailable {
        backend: "process",
        detail: format!(
            "all {} instance accounts are leased (see {}); tear sandboxes down or create more \
             accounts (process.uid_pool_size, scripts/install-deps.sh)",
            accounts.len(),
            lease_dir.display()
        ),
    })
}

/// A lease whose holder directory is gone (or now belongs to another uid), taken by a process
/// that is gone or long enough ago that its holder would exist by now.
fn is_stale(path: &Path, account: &Account) -> bool {
    let Some(lease) = read_lease(path) else {
        // Unreadable or half-written: only trust its age.
        return std::fs::metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > FRESH_LEASE);
    };
    let holder_is_ours =
        std::fs::metadata(&lease.holder).is_ok_and(|m| m.uid() == account.uid.as_raw());
    if holder_is_ours {
        return false;
    }
    !liveness::is_alive(lease.pid, lease.pid_start_ticks)
        || age_of(lease.created_at_ms) > FRESH_LEASE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(uid: u32) -> Account {
        Account {
            name: format!("test-{uid}"),
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(uid),
        }
    }

    #[test]
    fn leases_are_exclusive_freed_by_holder_and_stale_ones_reclaimed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let leases = tmp.path().join("leases");
        let accounts = [account(4_000_001), account(4_000_002)];
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        let first = acquire(&accounts, &leases, &a).expect("first");
        let second = acquire(&accounts, &leases, &b).expect("second");
        assert_ne!(first.user, second.user, "one account per holder");
        // A fresh lease of a live taker holds even before its holder directory exists.
        let full = acquire(&accounts, &leases, &tmp.path().join("c"));
        assert!(full.is_err(), "the pool is exhausted");

        let identity = Identity {
            daemon_user: "root".into(),
            mode: Mode::Pool {
                accounts: accounts.to_vec(),
                lease_dir: leases.clone(),
                prefix: "test-".into(),
            },
        };
        identity.release(&a);
        let third = acquire(&accounts, &leases, &tmp.path().join("c")).expect("freed");
        assert_eq!(third.user, first.user);

        // A lease whose taker is gone and whose holder does not exist is reclaimed.
        let stale = LeaseRecord {
            holder: tmp.path().join("gone"),
            pid: i32::MAX,
            pid_start_ticks: 1,
            created_at_ms: now_ms(),
        };
        std::fs::write(
            leases.join(&second.user),
            serde_json::to_vec(&stale).expect("json"),
        )
        .expect("overwrite");
        let fourth = acquire(&accounts, &leases, &tmp.path().join("d")).expect("reclaimed");
        assert_eq!(fourth.user, second.user);
    }
}
