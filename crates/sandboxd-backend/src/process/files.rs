//! Filesystem helpers: private directories owned by the instance user, and a tree copy that keeps
//! modes (Postgres insists its data directory is 0700).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::Path;

use nix::unistd::{Gid, Uid, chown};

/// The uid/gid files must belong to, when the daemon runs as root and instances do not.
pub type Owner = Option<(Uid, Gid)>;

pub fn give_to(path: &Path, owner: Owner) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        chown(path, Some(uid), Some(gid)).map_err(io::Error::from)?;
    }
    Ok(())
}

/// Creates a directory with `mode` (not subject to the umask) owned by `owner`.
pub fn private_dir(path: &Path, mode: u32, owner: Owner) -> io::Result<()> {
    fs::DirBuilder::new().mode(mode).create(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    give_to(path, owner)
}

/// Creates (or empties) `path` for writing, owned by `owner`, refusing a symlink in its place:
/// root writes it in a directory another account could write to first, so the mode and owner
/// are set on the open file, never by path.
pub fn fresh_file(path: &Path, mode: u32, owner: Owner) -> io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&file, Some(uid.as_raw()), Some(gid.as_raw()))?;
    }
    Ok(file)
}

/// Writes a file readable only by its owner.
pub fn private_file(path: &Path, content: &[u8], owner: Owner) -> io::Result<()> {
    let mut file = fresh_file(path, 0o600, owner)?;
    io::Write::write_all(&mut file, content)
}

/// Copies `src` into `dst`, keeping modes and symlinks, owned by `owner`. `dst` may already exist
/// as a directory (a mount point); it then takes `src`'s mode and `owner`.
pub fn copy_tree(src: &Path, dst: &Path, owner: Owner) -> io::Result<()> {
    let mode = fs::metadata(src)?.permissions().mode();
    if dst.is_dir() {
        fs::set_permissions(dst, fs::Permissions::from_mode(mode & 0o7777))?;
        give_to(dst, owner)?;
    } else {
        private_dir(dst, mode & 0o7777, owner)?;
    }
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&from, &to, owner)?;
        } else if kind.is_file() && to.is_file() {
            // Already there (copied into a nested mount point's parent before): overwrite.
            fs::copy(&from, &to)?;
            give_to(&to, owner)?;
        } else if kind.is_symlink() {
            symlink(fs::read_link(&from)?, &to)?;
        } else {
            fs::copy(&from, &to)?;
            give_to(&to, owner)?;
        }
    }
    Ok(())
}

/// Gives a finished template to root and closes it to everyone else: every entry root-owned,
/// nothing writable by group or others, the top directory 0700. Symlinks are not followed.
pub fn hand_to_root(dir: &Path) -> io::Result<()> {
    let root = Some((Uid::from_raw(0), Gid::from_raw(0)));
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::lchown(&path, Some(0), Some(0))?;
            continue;
        }
        if kind.is_dir() {
            hand_to_root(&path)?;
        }
        let mode = entry.metadata()?.permissions().mode() & 0o7755;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
        give_to(&path, root)?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    give_to(dir, root)
}

/// The last `lines` lines of a log file, for "it stopped while starting" errors. The file sits
/// in the instance's directory, which the instance's uid may change: a symlink is not followed
/// and only the file's last 64 KiB are read.
pub fn tail(path: &Path, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: u64 = 64 * 1024;
    let read = || -> io::Result<String> {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(String::new());
        }
        file.seek(SeekFrom::Start(meta.len().saturating_sub(MAX)))?;
        let mut bytes = Vec::new();
        file.take(MAX).read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    let text = read().unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_tree_keeps_modes_and_content() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src = tmp.path().join("src");
        private_dir(&src, 0o700, None).expect("src");
        private_dir(&src.join("sub"), 0o750, None).expect("sub");
        private_file(&src.join("sub/f"), b"hello", None).expect("file");
        symlink("sub/f", src.join("link")).expect("symlink");
        let dst = tmp.path().join("dst");
        copy_tree(&src, &dst, None).expect("copy");
        assert_eq!(fs::read(dst.join("link")).expect("via link"), b"hello");
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dst), 0o700);
        assert_eq!(mode(&dst.join("sub")), 0o750);
        assert_eq!(mode(&dst.join("sub/f")), 0o600);
    }

    #[test]
    fn a_planted_symlink_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let target = tmp.path().join("precious");
        fs::write(&target, b"keep me").expect("target");
        let planted = tmp.path().join("template.log");
        symlink(&target, &planted).expect("symlink");
        assert!(
            fresh_file(&planted, 0o644, None).is_err(),
            "a symlink is not followed"
        );
        assert!(private_file(&planted, b"x", None).is_err());
        assert_eq!(fs::read(&target).expect("target"), b"keep me");
        let fresh = tmp.path().join("fresh");
        fs::write(&fresh, b"old").expect("old");
        drop(fresh_file(&fresh, 0o600, None).expect("a regular file is emptied"));
        assert!(fs::read(&fresh).expect("fresh").is_empty());
        let mode = fs::metadata(&fresh).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
