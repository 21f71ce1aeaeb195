//! The peers' readiness loop: an authenticated round trip (`SELECT 1`, `PING`) with the
//! superuser's password, through sandboxd's own probe (`wire::probe`), polled on sandboxd's own
//! schedule (`poll_until_ready`), so the comparison is like for like.

use sandboxd_backend::readiness::{Attempt, poll_until_ready};
use sandboxd_backend::wire::{self, Reach};
use sandboxd_domain::engine::Protocol;
use sandboxd_domain::{Credentials, EngineRef};

/// Polls until `creds` get an answer from the server at `host:port`, up to the engine's deadline.
pub async fn wait_ready(
    engine: EngineRef,
    host: &str,
    port: u16,
    creds: &Credentials,
) -> anyhow::Result<()> {
    let name = format!("{engine} at {host}:{port}");
    poll_until_ready(&name, engine.readiness_deadline, || async {
        wire::probe(
            engine.get(),
            Reach { host, port },
            creds,
            engine.admin_database,
        )
        .await
        .map_err(|e| Attempt::NotYet(e.to_string()))
    })
    .await?;
    Ok(())
}

/// The line a server logs when it accepts connections (the last one, for Postgres, whose image
/// runs a temporary init server first).
pub fn ready_log_line(engine: EngineRef) -> Option<&'static str> {
    match engine.protocol {
        Protocol::Postgres => Some("database system is ready to accept connections"),
        Protocol::Redis => Some("Ready to accept connections"),
        _ => None,
    }
}
