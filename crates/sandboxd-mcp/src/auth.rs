//! Bearer authentication of every HTTP request to the gateway: token → agent, before any MCP
//! message is read. The agent rides in the request's extensions to the handler. A request naming
//! an MCP session that expired is then refused as the transport refuses an unknown one (404), and
//! a live session is marked used, which is what keeps it from expiring.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandboxd_broker::Broker;
use secrecy::SecretString;

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
    State(broker): State<Broker>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(&request) else {
        return unauthorized("no bearer token");
    };
    match broker.authenticate(&token).await {
        Ok(Some(agent)) => {
            let session = session_id(&request);
            if let Some(id) = session
                && let Some(refused) = expired_session(&broker, &id).await
            {
                return refused;
            }
            request.extensions_mut().insert(agent);
            next.run(request).await
        }
        Ok(None) => unauthorized("unknown or revoked token"),
        Err(err) => {
            tracing::error!(error = %err, "authenticating an agent failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "sandboxd cannot check tokens right now",
            )
                .into_response()
        }
    }
}

/// The header naming a request's MCP session (streamable HTTP).
const SESSION_HEADER: &str = "mcp-session-id";

/// The MCP session a request names. A header that is not text names no session the transport
/// could know either; it refuses that itself.
fn session_id(request: &Request) -> Option<String> {
    let id = request.headers().get(SESSION_HEADER)?.to_str().ok()?;
    Some(id.to_owned())
}

/// The 404 the transport answers for a session it does not know, for a session that expired;
/// marks a live session used. None: go on.
async fn expired_session(broker: &Broker, id: &str) -> Option<Response> {
    match broker.touch_mcp_session(id).await {
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
            Some(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sandboxd cannot check sessions right now",
                )
                    .into_response(),
            )
        }
    }
}
