//! Listing: every `sandboxd-*` directory under the root, read from its metadata file (or, for a
//! directory a crash left without one, from its name), never from memory.

use std::path::Path;

use sandboxd_domain::clock::unix_ms;
use sandboxd_domain::instance::{BackendKind, parse_instance_name};

use super::metadata::Metadata;
use super::{HOST, liveness};
use crate::backend::{InstanceHandle, ListedInstance};
use crate::error::BackendError;

/// The instances under `root`, sorted by name.
pub(super) fn instances(root: &Path) -> Result<Vec<ListedInstance>, BackendError> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(err) => return Err(BackendError::io("listing", root.display().to_string(), err)),
    };
    let mut listed = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if !file_name.starts_with("sandboxd-") {
            continue;
        }
        match Metadata::read(&dir) {
            Some(meta) if meta.name == file_name => listed.push(from_metadata(&dir, meta)),
            _ => {
                if let Some(handle) = handle_from_dir_name(&file_name, &dir) {
                    // A directory without metadata: a provision that crashed half-way.
                    let created_at_ms = entry
                        .metadata()
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .map_or(0, unix_ms);
                    listed.push(ListedInstance {
                        handle,
                        host: HOST.to_owned(),
                        port: 0,
                        created_at_ms,
                        live: false,
                        status: "incomplete".to_owned(),
                        image: None,
                    });
                }
            }
        }
    }
    listed.sort_by(|a, b| a.handle.name.cmp(&b.handle.name));
    Ok(listed)
}

fn from_metadata(dir: &Path, meta: Metadata) -> ListedInstance {
    let live = liveness::is_alive(meta.pid, meta.pid_start_ticks);
    ListedInstance {
        handle: InstanceHandle {
            engine: meta.engine,
            owner: meta.owner,
            maker: meta.maker,
            backend: BackendKind::Process,
            backend_id: dir.display().to_string(),
            name: meta.name,
        },
        host: meta.host,
        port: meta.port,
        created_at_ms: meta.created_at_ms,
        live,
        status: if live { "running" } else { "exited" }.to_owned(),
        image: None,
    }
}

/// Recovers engine, owner and maker from `sandboxd-<engine>-<owner>-<maker>`.
fn handle_from_dir_name(file_name: &str, dir: &Path) -> Option<InstanceHandle> {
    let (engine, owner, maker) = parse_instance_name(file_name)?;
    Some(InstanceHandle {
        engine,
        owner,
        maker,
        backend: BackendKind::Process,
        backend_id: dir.display().to_string(),
        name: file_name.to_owned(),
    })
}
