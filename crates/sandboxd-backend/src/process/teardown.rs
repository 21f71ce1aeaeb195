//! Teardown: stop the server's whole process group (its graceful signal, then SIGKILL after the
//! stop timeout), release its cgroups, unmount its tmpfs mounts, remove the instance directory,
//! free its uid lease. Idempotent: a directory that is already gone is success. Cgroups, mounts
//! and the lease are found by the instance's name and directory, not from metadata, so an
//! instance a crash left half-made is cleaned up as well. The only process signalled by pid is
//! the one the daemon recorded, proven to be it (`liveness::Recorded`).

use rustix::process::Signal as OsSignal;
use sandboxd_domain::engine::Signal;

use super::metadata::Metadata;
use super::{ProcessBackend, limits, liveness, space};
use crate::error::BackendError;
use crate::handle::InstanceHandle;

fn os_signal(signal: Signal) -> OsSignal {
    match signal {
        Signal::Term => OsSignal::TERM,
        Signal::Int => OsSignal::INT,
    }
}

impl ProcessBackend {
    #[tracing::instrument(
        name = "teardown",
        skip_all,
        fields(instance = %handle.name, engine = handle.engine.name, agent = %handle.owner, backend = "process")
    )]
    pub(super) async fn remove(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        let dir = self.dir_of(handle);
        if !dir.exists() {
            Metadata::remove(&dir);
            self.identity.release(&dir);
            return Ok(());
        }
        if let Some(meta) = Metadata::read(&dir) {
            let signal = handle
                .engine
                .process()
                .map(|r| r.graceful_signal)
                .unwrap_or(Signal::Term);
            liveness::stop(meta.server(), os_signal(signal), self.config.stop_timeout).await;
        }
        let (path, name) = (dir.clone(), handle.name.clone());
        let removed = tokio::task::spawn_blocking(move || {
            limits::release(&name);
            space::unmount_under(&path);
            match std::fs::remove_dir_all(&path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| BackendError::io("removing", handle.name.clone(), std::io::Error::other(e)))?
        .map_err(|e| BackendError::io("removing", dir.display().to_string(), e));
        // The uid is free only once nothing of the instance is left: its processes are gone
        // with its cgroups, its files with its directory. Its metadata goes last: a teardown
        // cut short is found again by it.
        if removed.is_ok() {
            Metadata::remove(&dir);
            self.identity.release(&dir);
        }
        removed
    }
}
