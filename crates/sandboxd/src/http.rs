//! The daemon's HTTP surface: the agent gateway at `/mcp` and the operator surface (`/v1`, the
//! panel, `/metrics`) on one listener, behind a Host/Origin guard against DNS rebinding and
//! cross-site requests, and behind one request-body limit for every route.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use sandboxd_mcp::{LOOPBACK_HOSTS, McpConfig};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::daemon::Daemon;

#[derive(Debug)]
struct Guard {
    hosts: Vec<String>,
    origins: Vec<String>,
}

/// The host part of a `Host` header value (`[::1]:80` → `::1`, `a:1` → `a`).
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    value.rsplit_once(':').map(|(h, _)| h).unwrap_or(value)
}

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !guard.hosts.iter().any(|allowed| allowed == host_name(host)) {
        return (StatusCode::FORBIDDEN, "Forbidden: Host is not allowed").into_response();
    }
    if let Some(origin) = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
    {
        let same_origin = origin == format!("http://{host}") || origin == format!("https://{host}");
        if !same_origin && !guard.origins.iter().any(|o| o == origin) {
            return (StatusCode::FORBIDDEN, "Forbidden: Origin is not allowed").into_response();
        }
    }
    next.run(request).await
}

/// How much of a refused body is still read (and thrown away), as a multiple of the limit, and
/// for how long: enough that a client which sent a moderately oversized body in one go reads the
/// 413 instead of a connection reset; a larger or slower one is simply cut off.
const DRAIN_FACTOR: usize = 4;
const DRAIN_TIME: Duration = Duration::from_secs(1);

fn too_large(limit: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "Payload Too Large: request bodies are limited to {limit} bytes (server.max_body_bytes)"
        ),
    )
        .into_response()
}

/// Reads and discards what is left of `body`, up to `cap` bytes or [`DRAIN_TIME`].
async fn drain(mut body: Body, cap: usize) {
    let mut drained = 0usize;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while drained <= cap {
            match body.frame().await {
                Some(Ok(frame)) => {
                    drained += frame.data_ref().map_or(0, |data| data.len());
                }
                _ => break,
            }
        }
    })
    .await;
}

/// Every request's body, whatever the route does with it (MCP, the API, panel forms, routes
/// that ignore it): a declared `Content-Length` over `limit` is answered 413 before anything is
/// kept; any other body (chunked, or sent without a length) is read up to `limit` and answered
/// 413 the moment it goes past. A body within the limit is handed on whole, so no handler reads
/// more than `limit` bytes either. What follows a refusal is drained a little (bounded in bytes
/// and time, never kept) so the client can read the answer.
async fn limit_body(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let cap = limit.saturating_mul(DRAIN_FACTOR);
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|len| usize::try_from(len).unwrap_or(usize::MAX));
    let (parts, mut body) = request.into_parts();
    if let Some(declared) = declared.filter(|&len| len > limit) {
        if declared <= cap {
            drain(body, cap).await;
        }
        return too_large(limit);
    }
    let mut kept: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The client went away or sent a malformed chunk: nothing to hand on.
            return (
                StatusCode::BAD_REQUEST,
                "Bad Request: unreadable request body",
            )
                .into_response();
        };
        // Trailers are dropped: no route reads them.
        if let Ok(data) = frame.into_data() {
            if kept.len() + data.len() > limit {
                drain(body, cap).await;
                return too_large(limit);
            }
            kept.extend_from_slice(&data);
        }
    }
    next.run(Request::from_parts(parts, Body::from(kept))).await
}

pub fn app(daemon: &Daemon, settings: &Settings, shutdown: CancellationToken) -> Router {
    let mcp = sandboxd_mcp::router(
        daemon.broker.clone(),
        McpConfig {
            allowed_hosts: settings.server.allowed_hosts.clone(),
            allowed_origins: settings.server.allowed_origins.clone(),
            shutdown,
        },
    );
    let admin = sandboxd_admin::router(
        daemon.broker.clone(),
        settings.admin_config(daemon.admin_token.clone()),
    );
    let mut hosts: Vec<String> = LOOPBACK_HOSTS
        .iter()
        .map(|h| host_name(h).to_owned())
        .collect();
    hosts.extend(settings.server.allowed_hosts.iter().cloned());
    let guard_state = Arc::new(Guard {
        hosts,
        origins: settings.server.allowed_origins.clone(),
    });
    let limit = settings.server.max_body_bytes;
    Router::new()
        .merge(mcp)
        .merge(admin)
        .layer(axum::middleware::from_fn_with_state(guard_state, guard))
        // Extractors that buffer (forms, JSON) get the same limit instead of axum's own 2 MB.
        .layer(DefaultBodyLimit::max(limit))
        // Outermost: an oversized body is refused before the guard or a token check reads it.
        .layer(axum::middleware::from_fn_with_state(limit, limit_body))
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn host_names_drop_ports_and_brackets() {
        assert_eq!(host_name("127.0.0.1:7878"), "127.0.0.1");
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("localhost"), "localhost");
    }
}
