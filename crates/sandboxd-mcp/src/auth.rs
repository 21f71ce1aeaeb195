//! Bearer authentication of every HTTP request to the gateway: token → agent, before any MCP
//! message is read — before any byte of the body, too: the daemon's body limit reads a body only
//! when a handler asks for it, so a refused request's body is never taken in. The agent rides in
//! the request's extensions to the handler.
//!
//! MCP sessions are the agent's own. A request naming a session that expired, or that another
//! agent opened, is refused as the transport refuses an unknown one (404); a live session of the
//! caller is marked used, which is what keeps it from expiring. A session an `initialize` opens
//! is bound to the caller before its id reaches the client, and the caller's least recently used
//! sessions past the per-agent cap are closed.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use sandboxd_broker::AgentDesk;
use sandboxd_domain::Agent;
use secrecy::SecretString;

/// What authentication needs: the desk (tokens, session owners) and the transport's sessions
/// (to close those the cap evicts).
#[derive(Debug)]
pub(crate) struct Auth {
    pub desk: AgentDesk,
    pub sessions: Arc<LocalSessionManager>,
    pub sessions_per_agent: usize,
}

fn unauthorized(reason: &str) -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({
            "error": "unauthorized",
            "message": reason,
            "remediate": "send the agent token issued at spawn as `Authorization: Bearer <token>`",
        })
        .to_string(),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sandboxd\""),
    );
    response
}

/// The bearer token of a request, if it carries one.
pub(crate) fn bearer(request: &Request) -> Option<SecretString> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    (!token.is_empty()).then(|| SecretString::from(token.trim().to_owned()))
}

pub(crate) async fn require_agent(
    State(auth): State<Arc<Auth>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(&request) else {
        return unauthorized("no bearer token");
    };
    let agent = match auth.desk.authenticate(&token).await {
        Ok(Some(agent)) => agent,
        Ok(None) => return unauthorized("unknown or revoked token"),
        Err(err) => {
            tracing::error!(error = %err, "authenticating an agent failed");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "sandboxd cannot check tokens right now",
            )
                .into_response();
        }
    };
    let session = session_id(request.headers());
    if let Some(id) = &session
        && let Some(refused) = not_live(&auth.desk, id, &agent).await
    {
        return refused;
    }
    request.extensions_mut().insert(agent.clone());
    let response = next.run(request).await;
    match session {
        // A request outside a session that opened one: an `initialize`.
        None => match session_id(response.headers()) {
            Some(opened) => bind(&auth, &opened, &agent, response).await,
            None => response,
        },
        Some(_) => response,
    }
}

/// The header naming a request's MCP session (streamable HTTP).
const SESSION_HEADER: &str = "mcp-session-id";

/// The MCP session named in `headers`. A header that is not text names no session the
/// transport could know either; it refuses that itself.
fn session_id(headers: &axum::http::HeaderMap) -> Option<String> {
    let id = headers.get(SESSION_HEADER)?.to_str().ok()?;
    Some(id.to_owned())
}

/// The 404 the transport answers for a session it does not know, for a session that expired
/// or is another agent's; marks a live session of `agent` used. None: go on.
async fn not_live(desk: &AgentDesk, id: &str, agent: &Agent) -> Option<Response> {
    match desk.touch_mcp_session(id, &agent.slug).await {
        Ok(true) => None,
        Ok(false) => Some(
            (
                StatusCode::NOT_FOUND,
                "Not Found: Session not found (expired or unknown; initialize a new session)",
            )
                .into_response(),
        ),
        Err(err) => {
            tracing::error!(error = %err, "checking an MCP session failed");
            Some(unavailable("sandboxd cannot check sessions right now"))
        }
    }
}

fn unavailable(message: &'static str) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
}

/// Binds the session `opened` just opened to `agent` before its id reaches the client, and
/// closes the agent's sessions past the cap. A session that cannot be bound is closed and not
/// handed out: an unbound session would be nobody's, refused at its first use anyway.
async fn bind(auth: &Auth, opened: &str, agent: &Agent, response: Response) -> Response {
    let bound = auth
        .desk
        .bind_mcp_session(opened, &agent.slug, auth.sessions_per_agent)
        .await;
    let evicted = match bound {
        Ok(Some(evicted)) => evicted,
        Ok(None) | Err(_) => {
            if let Err(err) = &bound {
                tracing::error!(error = %err, "recording an MCP session's agent failed");
            } else {
                tracing::error!("an MCP session was not stored; it is closed");
            }
            close(auth, opened).await;
            if let Err(err) = auth.desk.drop_mcp_session(opened).await {
                tracing::warn!(error = %err, "removing an MCP session failed");
            }
            return unavailable("sandboxd cannot record the session right now; initialize again");
        }
    };
    if !evicted.is_empty() {
        tracing::info!(
            agent = %agent.slug,
            evicted = evicted.len(),
            cap = auth.sessions_per_agent,
            "an agent's least recently used MCP sessions were closed (per-agent cap)"
        );
    }
    for id in &evicted {
        close(auth, id).await;
    }
    response
}

/// Ends session `id` in the transport: its worker and its streams (the store's row is the
/// desk's to remove).
async fn close(auth: &Auth, id: &str) {
    if let Err(err) = auth.sessions.close_session(&Arc::from(id)).await {
        tracing::warn!(error = %err, "closing an MCP session failed");
    }
}
