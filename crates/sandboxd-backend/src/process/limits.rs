//! Resource caps for instance processes: a cgroup v2 group when the host delegates one to us,
//! otherwise rlimits through util-linux's `prlimit`. What was applied is recorded in metadata.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const PRLIMIT: &str = "/usr/bin/prlimit";
const OPEN_FILES: u64 = 4096;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Applied {
    /// `cgroup-v2`, `rlimit` or `none`.
    pub mechanism: String,
    pub memory_bytes: Option<u64>,
    pub open_files: Option<u64>,
    pub pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
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
pub fn plan(name: &str, memory_bytes: u64, owner: Option<(u32, u32)>) -> Plan {
    if let Some(plan) = cgroup_v2(name, memory_bytes, owner) {
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
        },
        wrapper: vec![],
    }
}

fn cgroup_v2(name: &str, memory_bytes: u64, owner: Option<(u32, u32)>) -> Option<Plan> {
    let root = Path::new(CGROUP_ROOT);
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return None;
    }
    let parent = root.join("sandboxd");
    std::fs::create_dir_all(&parent).ok()?;
    let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
    let group = parent.join(name);
    std::fs::create_dir_all(&group).ok()?;
    std::fs::write(group.join("memory.max"), memory_bytes.to_string()).ok()?;
    std::fs::write(group.join("memory.swap.max"), "0").ok();
    std::fs::write(group.join("pids.max"), "512").ok()?;
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
            pids: Some(512),
            cgroup: Some(group),
        },
        // The shell moves itself into the group, then becomes the server: nothing it forks
        // can escape the limits.
        wrapper: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("echo $$ > '{procs}' && exec \"$@\""),
            "sandboxd-instance".into(),
        ],
    })
}

/// Removes an instance's cgroup once its processes are gone. Best effort.
pub fn release(applied: &Applied) {
    if let Some(group) = &applied.cgroup {
        let _ = std::fs::remove_dir(group);
    }
}
