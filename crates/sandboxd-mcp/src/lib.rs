//! The agent gateway: each agent's role-scoped verbs as MCP tools, over streamable HTTP at
//! `/mcp`. (Over stdio, `sandboxd mcp` is a client of this gateway that relays to it: it lives
//! in the binary crate.)
//!
//! Parts:
//! - `auth.rs`: the bearer token of every HTTP request resolves to an agent before any MCP
//!   message (or any byte of the body) is read; a missing or wrong token is a 401 and nothing
//!   runs. A request in an expired MCP session, or in another agent's, is a 404, as for an
//!   unknown session. A session `initialize` opens is bound to its agent, and an agent past
//!   [`McpConfig::sessions_per_agent`] loses its least recently used session.
//! - `gateway.rs`: the MCP server handler. `tools/list` shows exactly the caller's role's verbs
//!   (`tools.rs`); `tools/call` hands the call to the broker's agent desk, which checks the role again and
//!   answers an envelope, returned as the tool result's structured content (error envelopes are
//!   flagged as tool errors).
//! - `sessions.rs`: MCP session state kept by the broker, so a session survives a restart.
//! - `resume.rs`: a client resuming an answer stream that died with the previous process (or
//!   ended) gets a JSON-RPC error for its call instead of an empty stream it would wait on.
//! - `single_answer.rs`: in a session, an answer that is the only message of its stream and is
//!   ready within [`McpConfig::session_json_budget`] is sent as JSON rather than as a stream.
//!
//! The gateway is handed an [`AgentDesk`], never the broker itself: it sees no backend, no store
//! and no operator operation, so no verb can reach around the guard chain.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use sandboxd_broker::AgentDesk;
use tokio_util::sync::CancellationToken;

mod auth;
mod gateway;
mod resume;
mod sessions;
mod single_answer;
mod tools;

pub use gateway::{Gateway, server_config};
pub use resume::{LOST_ANSWER, LOST_ANSWER_CODE};
pub use tools::{Offer, tools_for};

/// Where the gateway answers, and who may reach it.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// `Host` values accepted besides the loopback names (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted; any other present `Origin` is refused (403). Clients that are
    /// not browsers send none.
    pub allowed_origins: Vec<String>,
    /// Cancelled at shutdown: open streams end.
    pub shutdown: CancellationToken,
    /// MCP sessions one agent holds at once; opening one more closes its least recently used.
    pub sessions_per_agent: usize,
    /// How long a call in a 2025-11-25 session may take for its answer to come as
    /// `application/json` instead of an event stream (zero: always a stream). Past it the stream
    /// goes out, with the priming event that lets a client resume a long call after a restart.
    pub session_json_budget: Duration,
}

impl McpConfig {
    /// Far more than one agent's clients need at once (a client holds one session), few enough
    /// that an agent opening sessions in a loop cannot grow the daemon.
    pub const DEFAULT_SESSIONS_PER_AGENT: usize = 16;
    /// Longer than a quick verb takes (a warm hand-out, `give_me_work`), short enough that a
    /// call which could outlive a restart (a cold provision, `run_experiment`) stays resumable.
    pub const DEFAULT_SESSION_JSON_BUDGET: Duration = Duration::from_millis(200);
}

/// The loopback names every gateway accepts in `Host`.
pub const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

/// The `/mcp` route: bearer authentication, then the streamable HTTP transport.
pub fn router(desk: AgentDesk, config: McpConfig) -> Router {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    hosts.extend(config.allowed_hosts.iter().cloned());
    // A single answer comes as JSON where the transport can: requests served without a session
    // (2026-07-28). In a session the transport always answers an event stream whose first event
    // lets a client resume it, and learn that its answer is lost when the daemon restarted;
    // `single_answer` turns a quick one into JSON.
    let mut transport = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(config.allowed_origins.clone())
        .with_cancellation_token(config.shutdown.clone());
    if config.allowed_origins.is_empty() {
        transport = transport.enforce_origin_validation();
    }
    transport.session_store = Some(Arc::new(sessions::BrokerSessions::new(desk.clone())));
    let factory_desk = desk.clone();
    // Shared with the authentication layer, which closes the sessions an agent's cap evicts.
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(Gateway::new(factory_desk.clone())),
        sessions.clone(),
        transport,
    );
    let auth = auth::Auth {
        desk,
        sessions,
        sessions_per_agent: config.sessions_per_agent,
    };
    Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(session_end_is_no_content))
        .layer(axum::middleware::from_fn(resume::unresumable_is_an_error))
        .layer(axum::middleware::from_fn_with_state(
            config.session_json_budget,
            single_answer::json_if_single,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(auth),
            auth::require_agent,
        ))
}

/// A session's DELETE answers 204: the transport's 202 ("accepted") makes clients that expect
/// 200 or 204 (the Python SDK) warn that termination failed on every close, though it did not.
async fn session_end_is_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let ends_session = request.method() == http::Method::DELETE;
    let mut response = next.run(request).await;
    if ends_session && response.status() == http::StatusCode::ACCEPTED {
        *response.status_mut() = http::StatusCode::NO_CONTENT;
    }
    response
}
