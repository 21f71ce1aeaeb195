//! The daemon's HTTP surface: the agent gateway at `/mcp` and the operator surface (`/v1`, the
//! panel, `/metrics`) on one listener, behind a Host/Origin guard against DNS rebinding and
//! cross-site requests.
//!
//! Nothing a client sends is held without bound: the listener caps connections and the time a
//! request's head may take (`listener.rs`), and every body is bounded in size and time and read
//! only when a handler asks for it, after the route's authentication (`body.rs`).

mod body;
mod listener;

pub use listener::{ConnectionLimits, serve};

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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

pub fn app(daemon: &Daemon, settings: &Settings, shutdown: CancellationToken) -> Router {
    let mcp = sandboxd_mcp::router(
        daemon.broker.agent_desk(),
        McpConfig {
            allowed_hosts: settings.server.allowed_hosts.clone(),
            allowed_origins: settings.server.allowed_origins.clone(),
            shutdown,
            sessions_per_agent: settings.broker.mcp_sessions_per_agent.get(),
            session_json_budget: settings.broker.mcp_session_json_budget,
        },
    );
    let admin = sandboxd_admin::router(
        daemon.broker.operator_desk(),
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
    let limits = body::BodyLimits {
        max_bytes: settings.server.max_body_bytes.get(),
        timeout: settings.server.body_timeout,
    };
    Router::new()
        .merge(mcp)
        .merge(admin)
        .layer(axum::middleware::from_fn_with_state(guard_state, guard))
        // Extractors that buffer (forms, JSON) get the same limit instead of axum's own 2 MB.
        .layer(DefaultBodyLimit::max(limits.max_bytes))
        // Outermost, and reads nothing: each route's authentication runs before its body is
        // read, and the body it then reads is bounded.
        .layer(axum::middleware::from_fn_with_state(limits, body::bound))
}

/// The listener's bounds from the settings.
pub fn connection_limits(settings: &Settings) -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: settings.server.header_timeout,
        max_connections: settings.server.max_connections.get(),
    }
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
