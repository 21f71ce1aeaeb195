//! The same verbs over stdio, for MCP clients that launch a command (`sandboxd mcp`, the agent
//! token in `SANDBOXD_AGENT_TOKEN`). It relays to the running daemon's `/mcp` with the agent's
//! token rather than opening the store itself: one broker holds the per-agent locks, so a stdio
//! agent and an HTTP agent can never race each other's sandboxes.
//!
//! The daemon is reached when the client sends `initialize`. When it cannot be (not running, a
//! wrong URL, a refused token), the client's `initialize` is answered with an MCP error saying
//! what failed and how to fix it, rather than a closed pipe the client can only call a crash.

use std::error::Error as StdError;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, DiscoverResult, ErrorCode, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ResultType, ServerConfig,
};
use rmcp::service::{ClientInitializeError, RequestContext, RunningService, ServerInitializeError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::OnceCell;

use sandboxd_mcp::server_config;

/// How long opening the session with the daemon may take before the client is told it failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the stdio gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The daemon could not be reached or refused the token; the client was told so.
    #[error("{0}")]
    Upstream(String),
    #[error("stdio transport: {0}")]
    Stdio(String),
}

/// What went wrong opening the session with the daemon, as the agent's client is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unavailable {
    /// Nothing answers at the URL (not running, wrong host or port).
    Unreachable { url: String, detail: String },
    /// The daemon answered 401: not an agent token it knows.
    TokenRefused { url: String },
    /// Something answered, but no MCP session came of it.
    Failed { url: String, detail: String },
    /// No agent token was given: nothing is sent to the daemon.
    NoToken,
}

impl Unavailable {
    /// Reads the cause of a failed session: a refused token is rmcp's `AuthRequiredError` (the
    /// daemon's 401) somewhere in the error chain; otherwise a plain TCP connection to the URL
    /// tells an unreachable daemon (nothing listens, no route, no such host) from one that
    /// answered something else. The MCP client's own error does not carry the I/O cause.
    async fn classify(url: &str, err: &(dyn StdError + Send + Sync + 'static)) -> Self {
        if token_refused(err) || http_status_401(err) {
            return Self::TokenRefused {
                url: url.to_owned(),
            };
        }
        match reachable(url).await {
            Err(detail) => Self::Unreachable {
                url: url.to_owned(),
                detail,
            },
            Ok(()) => Self::Failed {
                url: url.to_owned(),
                detail: chain(err),
            },
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "daemon_unreachable",
            Self::TokenRefused { .. } => "token_refused",
            Self::Failed { .. } => "daemon_failed",
            Self::NoToken => "no_token",
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Unreachable { url, detail } => {
                format!("sandboxd is not reachable at {url} ({detail})")
            }
            Self::TokenRefused { url } => {
                format!("sandboxd at {url} refused the agent token (401 Unauthorized)")
            }
            Self::Failed { url, detail } => {
                format!("cannot open an MCP session with sandboxd at {url}: {detail}")
            }
            Self::NoToken => "`sandboxd mcp` was started without an agent token".to_owned(),
        }
    }

    fn remediate(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => {
                "start the daemon (`sandboxd serve`), or point `--url` / SANDBOXD_URL at the \
                 address it prints (`sandboxd listening on http://…`), then restart this server"
            }
            Self::TokenRefused { .. } => {
                "set SANDBOXD_AGENT_TOKEN to the token `sandboxd agents spawn` printed for this \
                 agent (shown once; a removed agent's token no longer works), then restart this \
                 server"
            }
            Self::Failed { .. } => {
                "check that `--url` / SANDBOXD_URL is sandboxd's address (`sandboxd listening on \
                 http://…`) and read the daemon's log, then restart this server"
            }
            Self::NoToken => {
                "set SANDBOXD_AGENT_TOKEN in this server's environment (the MCP client's `env` \
                 for it) to the token `sandboxd agents spawn` printed for this agent, then \
                 restart this server"
            }
        }
    }

    /// The MCP error the client's `initialize` (or first request) gets: the message says what
    /// failed and how to fix it; `data` is sandboxd's error envelope.
    fn error_data(&self) -> ErrorData {
        let message = format!("{}. To fix: {}.", self.message(), self.remediate());
        let envelope = serde_json::json!({
            "error": self.code(),
            "message": self.message(),
            "remediate": self.remediate(),
            "retryable": !matches!(self, Self::TokenRefused { .. } | Self::NoToken),
        });
        ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(envelope))
    }
}

/// Whether the daemon's 401 (rmcp's `AuthRequiredError`) is somewhere in `err`'s chain.
fn token_refused(err: &(dyn StdError + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if current.is::<AuthRequiredError>() {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Whether `err` is the MCP client's transport failing with the daemon's 401: rmcp's
/// initialize error holds the transport's error without chaining it as a cause.
fn http_status_401(err: &(dyn StdError + 'static)) -> bool {
    let Some(ClientInitializeError::TransportError { error, .. }) = err.downcast_ref() else {
        return false;
    };
    matches!(
        error
            .error
            .downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::AuthRequired(_))
    )
}

/// Whether a TCP connection to `url`'s host and port opens; why not when it does not.
async fn reachable(url: &str) -> Result<(), String> {
    let uri: axum::http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    let host = uri.host().ok_or("the URL has no host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// An error and its causes on one line.
fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(current) = cause {
        let more = current.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = current.source();
    }
    text
}

/// Opens the MCP session with the daemon's `/mcp` as the agent.
async fn connect(
    url: &str,
    token: Option<&SecretString>,
) -> Result<RunningService<RoleClient, ()>, Unavailable> {
    let token = token.ok_or(Unavailable::NoToken)?;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned())
            .auth_header(token.expose_secret().to_owned()),
    );
    match tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport)).await {
        Ok(Ok(upstream)) => Ok(upstream),
        Ok(Err(err)) => Err(Unavailable::classify(url, &err).await),
        Err(_) => Err(Unavailable::Unreachable {
            url: url.to_owned(),
            detail: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }),
    }
}

struct Relay {
    url: String,
    /// None when none was given: the client's first request is told what to set.
    token: Option<SecretString>,
    /// Set once, by the first request that needs the daemon (normally `initialize`); an async
    /// once-cell so concurrent first requests open one session, not several.
    upstream: OnceCell<RunningService<RoleClient, ()>>,
}

/// The relay's session with the daemon may speak an older revision than the client, whose
/// results carry no `resultType`; a 2026-07-28 client requires it. rmcp strips it again for a
/// client on an older revision, so the client sees what `/mcp` would have answered it.
fn complete(result_type: &mut Option<ResultType>) {
    result_type.get_or_insert(ResultType::COMPLETE);
}

/// The daemon's instructions for this agent's role, as `/mcp` gave them.
fn instructions(upstream: &RunningService<RoleClient, ()>) -> Option<String> {
    upstream
        .peer_info()
        .and_then(|info| info.instructions.clone())
}

fn relayed(err: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("sandboxd did not answer: {err}"), None)
}

impl Relay {
    async fn upstream(&self) -> Result<&RunningService<RoleClient, ()>, ErrorData> {
        self.upstream
            .get_or_try_init(|| connect(&self.url, self.token.as_ref()))
            .await
            .map_err(|unavailable| {
                // Logged before the client hears it: a client may kill this process as soon as
                // its `initialize` failed, and whoever reads the client's logs sees this too.
                let error = unavailable.error_data();
                tracing::warn!(error = unavailable.code(), "{}", error.message);
                error
            })
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let upstream = self.upstream().await?;
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        info.instructions = instructions(upstream);
        Ok(info)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let upstream = self.upstream().await?;
        let mut info = self.get_info();
        info.instructions = instructions(upstream);
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self
            .upstream()
            .await?
            .list_tools(request)
            .await
            .map_err(relayed)?;
        complete(&mut tools.result_type);
        Ok(tools)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut result = self
            .upstream()
            .await?
            .call_tool(request)
            .await
            .map_err(relayed)?;
        complete(&mut result.result_type);
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves one agent over stdin/stdout, relaying to the daemon at `base_url`, until the client
/// closes the stream. When the daemon cannot be reached or refuses the token, the client's
/// `initialize` is answered with an error saying so, and this returns that error.
pub async fn serve_stdio(base_url: &str, token: Option<SecretString>) -> Result<(), StdioError> {
    let relay = Relay {
        url: format!("{}/mcp", base_url.trim_end_matches('/')),
        token,
        upstream: OnceCell::new(),
    };
    let service = match relay.serve(rmcp::transport::stdio()).await {
        Ok(service) => service,
        Err(ServerInitializeError::InitializeFailed(error)) => {
            return Err(StdioError::Upstream(error.message.into_owned()));
        }
        Err(err) => return Err(StdioError::Stdio(err.to_string())),
    };
    service
        .waiting()
        .await
        .map_err(|e| StdioError::Stdio(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_failure_says_what_failed_and_how_to_fix_it() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/mcp", closed.local_addr().expect("addr"));
        drop(closed);
        let url = url.as_str();
        let refused = std::io::Error::other("the MCP client's error");
        let unreachable = Unavailable::classify(url, &refused).await;
        assert!(
            matches!(&unreachable, Unavailable::Unreachable { detail, .. }
                if detail.contains("refused")),
            "{unreachable:?}"
        );
        let error = unreachable.error_data();
        assert!(error.message.contains(&format!("not reachable at {url}")));
        assert!(
            error.message.contains("sandboxd serve"),
            "{}",
            error.message
        );
        let auth = Unavailable::classify(url, &AuthRequiredError::new(String::new())).await;
        assert_eq!(
            auth,
            Unavailable::TokenRefused {
                url: url.to_owned()
            }
        );
        let error = auth.error_data();
        assert!(
            error.message.contains("SANDBOXD_AGENT_TOKEN"),
            "{}",
            error.message
        );
        let data = error.data.expect("the envelope");
        assert_eq!(data["error"], "token_refused");
        assert_eq!(data["retryable"], false);
    }
}
