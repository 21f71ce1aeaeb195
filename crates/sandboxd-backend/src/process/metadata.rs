//! The owner metadata of every instance, so a later process can list, check and reap instances
//! after a crash. It never holds a credential.
//!
//! It is what a root daemon decides on (which pid to signal, whose instance it is, who made
//! it), so it lives where no instance can write: not in the instance's own directory (its uid
//! owns that) but in [`DIR_NAME`] beside the instance directories, a directory of the daemon's
//! own user, mode 0700. A file there is trusted only when it is a regular file of that user.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::geteuid;
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};
use serde::{Deserialize, Serialize};

/// The directory under the process root that holds every instance's metadata file.
pub const DIR_NAME: &str = ".sandboxd-metadata";
/// Metadata is small; anything larger is not ours.
const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    pub format: u32,
    pub name: String,
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// The maker (a daemon's store id, or `cli`); `unknown` in metadata written before it was
    /// recorded.
    #[serde(rename = "daemon", default = "DaemonId::unknown")]
    pub maker: DaemonId,
    pub pid: i32,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so a
    /// recycled pid is never mistaken for the instance.
    pub pid_start_ticks: u64,
    /// The uid the server runs as: a signal goes only to a process of that uid.
    #[serde(default)]
    pub uid: Option<u32>,
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub created_at_ms: i64,
    pub run_as: String,
    pub limits: super::limits::Applied,
    #[serde(default)]
    pub features: Vec<String>,
}

/// Where the metadata of the instance at `instance_dir` lives: `<root>/.sandboxd-metadata/
/// <instance name>.json`.
pub fn path_of(instance_dir: &Path) -> Option<PathBuf> {
    let root = instance_dir.parent()?;
    let name = instance_dir.file_name()?.to_str()?;
    Some(root.join(DIR_NAME).join(format!("{name}.json")))
}

impl Metadata {
    pub const FORMAT: u32 = 2;

    /// The metadata of the instance at `instance_dir`, when a trusted file holds it: a regular
    /// file (a symlink is not followed) owned by this process's user.
    pub fn read(instance_dir: &Path) -> Option<Self> {
        let path = path_of(instance_dir)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        let stat = file.metadata().ok()?;
        if !stat.is_file() || stat.uid() != geteuid().as_raw() || stat.len() > MAX_BYTES {
            return None;
        }
        let mut text = String::new();
        file.read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Written to a temporary file and renamed, so a reader never sees half of it.
    pub fn write(&self, instance_dir: &Path) -> std::io::Result<()> {
        let path = path_of(instance_dir).ok_or_else(|| {
            std::io::Error::other("an instance directory has a parent and a name")
        })?;
        let dir = path
            .parent()
            .ok_or_else(|| std::io::Error::other("the metadata path has a parent"))?;
        ensure_private_dir(dir)?;
        let tmp = dir.join(format!(".{}.tmp", self.name));
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut file| std::io::Write::write_all(&mut file, &json))?;
        std::fs::rename(tmp, path)
    }

    /// The server process as recorded.
    pub fn server(&self) -> super::liveness::Recorded {
        super::liveness::Recorded {
            pid: self.pid,
            start_ticks: self.pid_start_ticks,
            uid: self.uid,
        }
    }

    /// Removes the metadata of the instance at `instance_dir`. Idempotent.
    pub fn remove(instance_dir: &Path) {
        if let Some(path) = path_of(instance_dir) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The metadata directory: created 0700 for this process's user, and refused when something
/// else sits at its path (a symlink, another user's directory).
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    let stat = std::fs::symlink_metadata(dir)?;
    if !stat.is_dir() || stat.uid() != geteuid().as_raw() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of sandboxd's own user",
            dir.display()
        )));
    }
    if stat.permissions().mode() & 0o022 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lives_beside_the_instance_directory_not_in_it() {
        let path = path_of(Path::new("/dev/shm/sandboxd/sandboxd-postgres-a-cli")).expect("path");
        assert_eq!(
            path,
            Path::new("/dev/shm/sandboxd/.sandboxd-metadata/sandboxd-postgres-a-cli.json")
        );
    }

    #[test]
    fn a_symlink_in_place_of_the_file_is_not_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let instance = tmp.path().join("sandboxd-postgres-a-cli");
        std::fs::create_dir(&instance).expect("instance dir");
        let meta_dir = tmp.path().join(DIR_NAME);
        std::fs::create_dir(&meta_dir).expect("metadata dir");
        let elsewhere = tmp.path().join("forged.json");
        std::fs::write(&elsewhere, "{}").expect("forged");
        std::os::unix::fs::symlink(&elsewhere, meta_dir.join("sandboxd-postgres-a-cli.json"))
            .expect("symlink");
        assert!(Metadata::read(&instance).is_none());
    }
}
