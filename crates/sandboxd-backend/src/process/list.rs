//! Listing: every `sandboxd-*` directory under the root, read from its metadata file (or, for a
//! directory a crash left without one, from its name), and metadata left without a directory,
//! never from memory.

use std::path::Path;

use sandboxd_domain::clock::unix_ms;
use sandboxd_domain::instance::{BackendKind, parse_instance_name};

use super::HOST;
use super::metadata::DIR_NAME;
use super::metadata::Metadata;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, ListedInstance};

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
    listed.extend(metadata_without_directory(root));
    listed.sort_by(|a, b| a.handle.name.cmp(&b.handle.name));
    Ok(listed)
}

/// Metadata whose instance directory is gone (a teardown cut short between the two): listed
/// as an exited instance, so its maker's janitor tears it down and the file goes with it.
fn metadata_without_directory(root: &Path) -> Vec<ListedInstance> {
    let Ok(entries) = std::fs::read_dir(root.join(DIR_NAME)) else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let name = file_name.strip_suffix(".json")?;
            let dir = root.join(name);
            if dir.exists() {
                return None;
            }
            let meta = Metadata::read(&dir).filter(|meta| meta.name == name)?;
            let mut listed = from_metadata(&dir, meta);
            listed.live = false;
            listed.status = "incomplete".to_owned();
            Some(listed)
        })
        .collect()
}

fn from_metadata(dir: &Path, meta: Metadata) -> ListedInstance {
    let live = meta.server().is_alive();
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
