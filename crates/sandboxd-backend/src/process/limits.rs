//! Resource caps for instance processes: a cgroup v2 group when the host delegates one to us, a
//! cgroup v1 memory group plus a pids group (under `sandboxd/`) on v1 hosts, otherwise rlimits
//! through util-linux's `prlimit`. What was applied is recorded in metadata; the groups are named
//! after the instance, so teardown finds them even when a crash left no metadata.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The v1 hierarchies sandboxd uses, each mounted at `/sys/fs/cgroup/<controller>`.
const V1_CONTROLLERS: [&str; 2] = ["memory", "pids"];
/// Every group sandboxd makes lives under this parent, in each hierarchy.
pub const PARENT: &str = "sandboxd";
const PRLIMIT: &str = "/usr/bin/prlimit";
const OPEN_FILES: u64 = 4096;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Applied {
    /// `cgroup-v2`, `cgroup-v1`, `rlimit` or `none`.
    pub mechanism: String,
    pub memory_bytes: Option<u64>,
    pub open_files: Option<u64>,
    pub pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// The v1 groups (memory, pids) the instance was placed in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups_v1: Vec<PathBuf>,
}

/// How to wrap an instance's command so its limits apply from its first instruction.
#[derive(Debug)]
pub struct Plan {
    pub applied: Applied,
    /// Program and leading arguments to put before the server's own command line.
    pub wrapper: Vec<String>,
}

/// Chooses and prepares the mechanism for one instance. `owner_uid`/`gid` own the cgroup so the
/// instance's own wrapper can move itself into it.
pub fn plan(name: &str, memory_bytes: u64, pids: u64, owner: Option<(u32, u32)>) -> Plan {
    if let Some(plan) = cgroup_v2(name, memory_bytes, pids, owner) {
        return plan;
    }
    if let Some(plan) = cgroup_v1(name, memory_bytes, pids, owner) {
        return plan;
    }
    if Path::new(PRLIMIT).exists() {
        return Plan {
            applied: Applied {
                mechanism: "rlimit".into(),
                memory_bytes: Some(memory_bytes),
                open_files: Some(OPEN_FILES),
                pids: None,
                cgroup: None,
                cgroups_v1: vec![],
            },
            wrapper: vec![
                PRLIMIT.into(),
                format!("--as={memory_bytes}"),
                format!("--nofile={OPEN_FILES}"),
                "--core=0".into(),
                "--".into(),
            ],
        };
    }
    Plan {
        applied: Applied {
            mechanism: "none".into(),
            memory_bytes: None,
            open_files: None,
            pids: None,
            cgroup: None,
            cgroups_v1: vec![],
        },
        wrapper: vec![],
    }
}

fn cgroup_v2(name: &str, memory_bytes: u64, pids: u64, owner: Option<(u32, u32)>) -> Option<Plan> {
    if !v2_memory_controller() {
        return None;
    }
    let parent = Path::new(CGROUP_ROOT).join(PARENT);
    std::fs::create_dir_all(&parent).ok()?;
    let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
    let group = parent.join(name);
    std::fs::create_dir_all(&group).ok()?;
    std::fs::write(group.join("memory.max"), memory_bytes.to_string()).ok()?;
    std::fs::write(group.join("memory.swap.max"), "0").ok();
    std::fs::write(group.join("pids.max"), pids.to_string()).ok()?;
    std::fs::write(group.join("cpu.max"), "100000 100000").ok();
    if let Some((uid, gid)) = owner {
        let procs = group.join("cgroup.procs");
        nix::unistd::chown(
            &procs,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .ok()?;
    }
    let procs = group.join("cgroup.procs").display().to_string();
    Some(Plan {
        applied: Applied {
            mechanism: "cgroup-v2".into(),
            memory_bytes: Some(memory_bytes),
            open_files: None,
            pids: Some(pids),
            cgroup: Some(group),
            cgroups_v1: vec![],
        },
        wrapper: join_then_exec(&[procs]),
    })
}

/// True on a cgroup v2 host whose root offers the memory controller.
fn v2_memory_controller() -> bool {
    std::fs::read_to_string(Path::new(CGROUP_ROOT).join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
}

/// The shell moves itself into the groups, then becomes the server: nothing it forks can escape
/// the limits. It runs as the instance user, who owns only its own groups' `cgroup.procs`.
fn join_then_exec(procs: &[String]) -> Vec<String> {
    let joins: Vec<String> = procs.iter().map(|p| format!("echo $$ > '{p}'")).collect();
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("{} && exec \"$@\"", joins.join(" && ")),
        "sandboxd-instance".into(),
    ]
}

/// The v1 group of `name` in `controller`'s hierarchy, when that hierarchy is mounted.
fn v1_group(controller: &str, name: &str) -> Option<PathBuf> {
    let hierarchy = Path::new(CGROUP_ROOT).join(controller);
    hierarchy
        .join("cgroup.procs")
        .exists()
        .then(|| hierarchy.join(PARENT).join(name))
}

/// cgroup v1: a memory group (`memory.limit_in_bytes`, swap included where accounted, the
/// kernel's OOM killer confined to the group) and a pids group. Both or neither.
fn cgroup_v1(name: &str, memory_bytes: u64, pids: u64, owner: Option<(u32, u32)>) -> Option<Plan> {
    let memory = v1_group("memory", name)?;
    let pid_group = v1_group("pids", name)?;
    let made = (|| -> std::io::Result<()> {
        for group in [&memory, &pid_group] {
            std::fs::create_dir_all(group)?;
        }
        std::fs::write(
            memory.join("memory.limit_in_bytes"),
            memory_bytes.to_string(),
        )?;
        // Only where swap accounting is on; there is no swap to escape to otherwise.
        let _ = std::fs::write(
            memory.join("memory.memsw.limit_in_bytes"),
            memory_bytes.to_string(),
        );
        std::fs::write(pid_group.join("pids.max"), pids.to_string())?;
        if let Some((uid, gid)) = owner {
            for group in [&memory, &pid_group] {
                nix::unistd::chown(
                    &group.join("cgroup.procs"),
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )?;
            }
        }
        Ok(())
    })();
    if made.is_err() {
        release_groups(&[memory, pid_group]);
        return None;
    }
    let procs = [&memory, &pid_group].map(|g| g.join("cgroup.procs").display().to_string());
    Some(Plan {
        applied: Applied {
            mechanism: "cgroup-v1".into(),
            memory_bytes: Some(memory_bytes),
            open_files: None,
            pids: Some(pids),
            cgroup: None,
            cgroups_v1: vec![memory, pid_group],
        },
        wrapper: join_then_exec(&procs),
    })
}

/// What caps an instance started now would get on this host, for `doctor`.
pub fn in_force(memory_bytes: u64, pids: u64) -> String {
    let root = nix::unistd::geteuid().is_root();
    let v2 = v2_memory_controller();
    let mib = memory_bytes / (1024 * 1024);
    if v2 && root {
        format!("cgroup v2: memory {mib} MiB, pids {pids}, 1 CPU")
    } else if root && V1_CONTROLLERS.iter().all(|c| v1_group(c, "x").is_some()) {
        format!("cgroup v1: memory {mib} MiB (swap included where accounted), pids {pids}")
    } else if Path::new(PRLIMIT).exists() {
        format!(
            "rlimits only (no writable cgroup): address space {mib} MiB, {OPEN_FILES} open \
             files; no pids cap"
        )
    } else {
        "none: no writable cgroup and no prlimit".to_owned()
    }
}

/// Removes an instance's groups once its server is stopped: whatever process is still inside
/// (a helper that left the process group) is killed first, since a group with members cannot be
/// removed. Finds the groups by name, so it works without metadata. Best effort.
pub fn release(name: &str) {
    let mut groups: Vec<PathBuf> = V1_CONTROLLERS
        .iter()
        .filter_map(|c| v1_group(c, name))
        .collect();
    groups.push(Path::new(CGROUP_ROOT).join(PARENT).join(name));
    release_groups(&groups);
}

fn release_groups(groups: &[PathBuf]) {
    for group in groups.iter().filter(|g| g.is_dir()) {
        for _ in 0..50 {
            let members = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = members
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(group);
    }
}
