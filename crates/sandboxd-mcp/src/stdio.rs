//! The same verbs over stdio, for MCP clients that launch a command (`sandboxd mcp --token …`).
//! It relays to the running daemon's `/mcp` with the agent's token rather than opening the
//! store itself: one broker holds the per-agent locks, so a stdio agent and an HTTP agent can
//! never race each other's sandboxes.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use secrecy::{ExposeSecret, SecretString};

use crate::gateway::server_config;

/// Why the stdio gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("cannot open an MCP session with sandboxd at {url}: {detail}")]
    Upstream { url: String, detail: String },
    #[error("stdio transport: {0}")]
    Stdio(String),
}

struct Relay {
    upstream: RunningService<RoleClient, ()>,
}

fn relayed(err: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("sandboxd did not answer: {err}"), None)
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.upstream.list_tools(request).await.map_err(relayed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.upstream
            .call_tool(request)
            .await
            .map(CallToolResponse::Complete)
            .map_err(relayed)
    }
}

/// Serves one agent over stdin/stdout, relaying to the daemon at `base_url`, until the client
/// closes the stream.
pub async fn serve_stdio(base_url: &str, token: SecretString) -> Result<(), StdioError> {
    let url = format!("{}/mcp", base_url.trim_end_matches('/'));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone())
            .auth_header(token.expose_secret().to_owned()),
    );
    let upstream =
        ().serve(transport)
            .await
            .map_err(|e| StdioError::Upstream {
                url: url.clone(),
                detail: e.to_string(),
            })?;
    let service = Relay { upstream }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Stdio(e.to_string()))?;
    service
        .waiting()
        .await
        .map_err(|e| StdioError::Stdio(e.to_string()))?;
    Ok(())
}
