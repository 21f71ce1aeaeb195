//! The size cap of an instance's files: when sandboxd runs as root, each instance directory is a
//! tmpfs mount of its own (`size=`, mode 0700, owned by the instance's uid), and a recipe's
//! write-ahead log directory (Postgres `pg_wal`) a second, smaller one inside it. Its inode count
//! follows its size ([`inodes_for`]). A tenant that fills its space gets `ENOSPC` in its own
//! server, never a full host `/dev/shm`; the pages (and the inodes' kernel memory) count against
//! the instance's memory cgroup as well. Mounts carry the source name [`SOURCE`] so leak
//! checks find them; teardown unmounts everything under the instance directory, found from
//! `/proc/self/mountinfo` rather than from metadata, so a crash half-way leaves nothing mounted.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::unistd::geteuid;

use super::files::Owner;

/// The source field of every mount sandboxd makes (`/proc/mounts` column 1).
pub const SOURCE: &str = "sandboxd-instance";

/// True when this process may mount: root with `CAP_SYS_ADMIN` (root inside an unprivileged
/// container lacks it; instances then share the root directory's filesystem, as `doctor` says).
pub fn available() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0);
    geteuid().is_root() && effective & (1 << CAP_SYS_ADMIN) != 0
}

/// Bytes of a tmpfs per inode it holds. Postgres keeps a file per relation fork and most of them
/// are empty, so a test suite's space runs out of inodes long before bytes: Django's full suite
/// with `--parallel 2` makes ~41k files holding 32 MB. One inode per 2 KiB is 262,144 for the
/// default 512 MB (a fixed 65,536 before). Each costs the kernel about 1 KiB, charged to the
/// instance's memory cgroup (where the host has none, the ratio alone bounds it).
pub const BYTES_PER_INODE: u64 = 2048;

/// The inode count of a tmpfs of `size_mb`: one per [`BYTES_PER_INODE`], never fewer than the
/// 65,536 every mount had before.
pub fn inodes_for(size_mb: u64) -> u64 {
    (size_mb.saturating_mul(1024 * 1024) / BYTES_PER_INODE).max(65_536)
}

/// Mounts a tmpfs of `size_mb` at the existing directory `path`, mode 0700, owned by `owner`,
/// with [`inodes_for`] its size.
pub fn mount_tmpfs(path: &Path, size_mb: u64, owner: Owner) -> io::Result<()> {
    let mut options = format!(
        "size={size_mb}m,mode=0700,nr_inodes={}",
        inodes_for(size_mb)
    );
    if let Some((uid, gid)) = owner {
        options.push_str(&format!(",uid={uid},gid={gid}"));
    }
    mount(
        Some(SOURCE),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(io::Error::from)
}

/// Unmounts every mount at or under `dir`, deepest first. Best effort; lazily detached when busy
/// (the processes using it are being killed anyway).
pub fn unmount_under(dir: &Path) {
    let mut points = mounts_under(dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    for point in points {
        if umount2(&point, MntFlags::empty()).is_err() {
            let _ = umount2(&point, MntFlags::MNT_DETACH);
        }
    }
}

/// Mount points at or under `dir`, from `/proc/self/mountinfo`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = (bytes[i] == b'\\' && i + 4 <= bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 4]).ok())
            .flatten()
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        if let Some(code) = code {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inode_count_follows_the_size() {
        assert_eq!(inodes_for(512), 262_144);
        assert_eq!(inodes_for(2048), 1_048_576);
        assert_eq!(inodes_for(64), 65_536, "never fewer than before");
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn the_root_mount_is_found_under_slash() {
        assert!(mounts_under(Path::new("/")).contains(&PathBuf::from("/")));
        assert!(mounts_under(Path::new("/no/such/dir/anywhere")).is_empty());
    }
}
