//! Which OS user instances run as. When sandboxd runs as root (CI does), instances run as a
//! dedicated unprivileged system user, so a compromised instance holds no root privilege;
//! Postgres refuses root anyway.

use nix::unistd::{Gid, Uid, User, geteuid};

use super::files::Owner;
use crate::error::BackendError;

#[derive(Debug, Clone)]
pub struct Identity {
    /// The user instances run as.
    pub run_as: String,
    /// The user sandboxd runs as.
    pub daemon_user: String,
    /// Set when instances must switch to `run_as` (the daemon is root).
    switch_to: Owner,
}

impl Identity {
    /// `configured` is used only when the daemon runs as root; otherwise instances run as the
    /// daemon's own user.
    pub fn resolve(configured: &str) -> Result<Self, BackendError> {
        let euid = geteuid();
        let daemon_user = User::from_uid(euid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| euid.to_string());
        if !euid.is_root() {
            return Ok(Self {
                run_as: daemon_user.clone(),
                daemon_user,
                switch_to: None,
            });
        }
        let user = User::from_name(configured)
            .ok()
            .flatten()
            .ok_or_else(|| BackendError::Unavailable {
                backend: "process",
                detail: format!(
                    "sandboxd runs as root and starts instances as the unprivileged user \
                     `{configured}`, which does not exist; create it with `useradd --system \
                     --no-create-home --shell /usr/sbin/nologin {configured}` (scripts/install-deps.sh does)"
                ),
            })?;
        if user.uid.is_root() {
            return Err(BackendError::Unavailable {
                backend: "process",
                detail: format!("the instance user `{configured}` must not be root"),
            });
        }
        Ok(Self {
            run_as: user.name,
            daemon_user,
            switch_to: Some((user.uid, user.gid)),
        })
    }

    pub fn owner(&self) -> Owner {
        self.switch_to
    }

    pub fn raw_owner(&self) -> Option<(u32, u32)> {
        self.switch_to
            .map(|(u, g): (Uid, Gid)| (u.as_raw(), g.as_raw()))
    }

    /// Makes `cmd` run as the instance user, with a clean environment: the daemon's own
    /// environment may hold secrets (store keys, tokens) that an instance must never inherit.
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
