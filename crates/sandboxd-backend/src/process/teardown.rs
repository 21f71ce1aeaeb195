//! Teardown: stop the server's whole process group (its graceful signal, then SIGKILL after the
//! stop timeout), release its resource caps, remove the instance directory. Idempotent: a
//! directory that is already gone is success.

use nix::sys::signal::Signal as NixSignal;
use sandboxd_domain::engine::Signal;

use super::metadata::Metadata;
use super::{ProcessBackend, limits, liveness};
use crate::backend::InstanceHandle;
use crate::error::BackendError;

fn nix_signal(signal: Signal) -> NixSignal {
    match signal {
        Signal::Term => NixSignal::SIGTERM,
        Signal::Int => NixSignal::SIGINT,
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
            return Ok(());
        }
        if let Some(meta) = Metadata::read(&dir) {
            let signal = handle
                .engine
                .process()
                .map(|r| r.graceful_signal)
                .unwrap_or(Signal::Term);
            liveness::stop(
                meta.pid,
                meta.pid_start_ticks,
                nix_signal(signal),
                self.config.stop_timeout,
            )
            .await;
            limits::release(&meta.limits);
        }
        let path = dir.clone();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        })
        .await
        .map_err(|e| BackendError::io("removing", handle.name.clone(), std::io::Error::other(e)))?
        .map_err(|e| BackendError::io("removing", dir.display().to_string(), e))
    }
}
