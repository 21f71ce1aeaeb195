//! The one listener: HTTP/1.1 connections, at most `max_connections` at once, each given
//! `header_timeout` to send a request's head (and, between requests, to start the next one).
//!
//! Past the cap, a new connection is not accepted: it waits in the kernel's accept queue (the
//! listen backlog) until a connection ends, and is then served in arrival order. It is not
//! refused, because the connections holding the slots end on their own — a client that sends
//! nothing is cut at the header timeout, a stalled body at the body timeout — so a waiting
//! client is served a moment later, ahead of whoever reconnects after it; a refusal would only
//! tell it to retry, behind an attacker's reconnects.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The largest request head (request line and headers) a connection may send: far above any
/// client's (a bearer token and a few cookies), and what a connection that holds its slot can
/// make the daemon keep. Past it the answer is 431.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long a stop waits for open connections to finish their requests.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The bounds of every connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// `server.header_timeout_secs`.
    pub header_timeout: Duration,
    /// `server.max_connections`.
    pub max_connections: u32,
}

/// Serves `app` on `listener` until `stop` completes, then stops accepting, lets every open
/// connection finish its request (idle ones close at once) and returns when the last is gone.
/// The peer address rides with each request as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max as usize));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let closing = CancellationToken::new();
    let mut stop = pin!(stop);
    loop {
        // A slot first, then the connection: past the cap, connections wait unaccepted.
        let slot = tokio::select! {
            () = &mut stop => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_failed(&err).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(Body::new))
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let closing = closing.clone();
        tokio::spawn(async move {
            // Held until the connection ends: the slot is the connection.
            let _slot = slot;
            let mut connection = pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = ended {
                // A client that went away, was too slow or spoke no HTTP: its business.
                tracing::debug!(%peer, error = %err, "connection ended");
            }
        });
    }
    drop(listener);
    closing.cancel();
    // Every slot back: every connection has ended. One still in a slow client's head or body
    // after the grace is dropped with the runtime.
    let ended = tokio::time::timeout(STOP_GRACE, slots.acquire_many(max)).await;
    if ended.is_err() {
        tracing::info!(
            open = max as usize - slots.available_permits(),
            "connections still open at the stop are dropped"
        );
    }
}

/// A failed `accept`: the connection that failed is gone, so go on; when the process is out of
/// file descriptors (or memory), wait a moment rather than spin.
async fn accept_failed(err: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::warn!(error = %err, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
