//! The peers' readiness loop: an authenticated round trip (`SELECT 1`, `PING`) with the
//! superuser's password, through the same driver crates sandboxd's own probes use, polled on
//! sandboxd's own schedule (`poll_until_ready`), so the comparison is like for like.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use sandboxd_backend::readiness::{Attempt, poll_until_ready};
use sandboxd_domain::engine::Protocol;
use sandboxd_domain::{Credentials, EngineRef};
use secrecy::ExposeSecret;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Polls until `creds` get an answer from the server at `host:port`, up to the engine's deadline.
pub async fn wait_ready(
    engine: EngineRef,
    host: &str,
    port: u16,
    creds: &Credentials,
) -> anyhow::Result<()> {
    let name = format!("{engine} at {host}:{port}");
    poll_until_ready(&name, engine.readiness_deadline(), || async {
        round_trip(engine, host, port, creds)
            .await
            .map_err(Attempt::NotYet)
    })
    .await?;
    Ok(())
}

/// One authenticated round trip.
pub async fn round_trip(
    engine: EngineRef,
    host: &str,
    port: u16,
    creds: &Credentials,
) -> Result<(), String> {
    match engine.protocol() {
        Protocol::Postgres => {
            let mut config = tokio_postgres::Config::new();
            config
                .host(host)
                .port(port)
                .user(&creds.user)
                .password(creds.password.expose_secret())
                .dbname(engine.admin_database())
                .connect_timeout(CONNECT_TIMEOUT);
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client
                .simple_query("SELECT 1")
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Protocol::Redis => {
            let info = ConnectionAddr::Tcp(host.to_owned(), port)
                .into_connection_info()
                .map_err(|e| e.to_string())?
                .set_redis_settings(
                    RedisConnectionInfo::default()
                        .set_username(&creds.user)
                        .set_password(creds.password.expose_secret())
                        .set_skip_set_lib_name(),
                );
            let client = redis::Client::open(info).map_err(|e| e.to_string())?;
            let mut conn =
                tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                    .await
                    .map_err(|_| "connect timed out".to_owned())?
                    .map_err(|e| e.to_string())?;
            let pong: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            if pong == "PONG" {
                Ok(())
            } else {
                Err(format!("PING answered {pong:?}"))
            }
        }
        other => Err(format!("the bench has no round trip for {other:?}")),
    }
}

/// The line a server logs when it accepts connections (the last one, for Postgres, whose image
/// runs a temporary init server first).
pub fn ready_log_line(engine: EngineRef) -> Option<&'static str> {
    match engine.protocol() {
        Protocol::Postgres => Some("database system is ready to accept connections"),
        Protocol::Redis => Some("Ready to accept connections"),
        _ => None,
    }
}
