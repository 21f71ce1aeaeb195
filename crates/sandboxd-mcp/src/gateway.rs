//! The MCP server handler. One instance serves one MCP session; the caller is resolved per
//! request from the authenticated HTTP request, so a revoked agent stops at its next call.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandboxd_broker::{Agent, Broker};
use sandboxd_domain::envelope::{Envelope, ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::quote;
use sandboxd_domain::roles::Verb;

use crate::tools::{Offer, tools_for};

#[derive(Debug, Clone)]
pub struct Gateway {
    broker: Broker,
}

const INSTRUCTIONS: &str = "sandboxd gives you, on demand, a throwaway database for your task's \
tests. Start with give_me_work (or claim_review); every answer says what to call next in `next`, \
and every refusal says how to fix the call in `remediate`. request_sandbox returns credentials \
and an env dict per service: use only those, never any other database credentials.";

fn unauthenticated() -> ErrorData {
    ErrorData::invalid_request("the caller is not an authenticated agent", None)
}

fn envelope_result(envelope: &Envelope) -> CallToolResult {
    let value = serde_json::to_value(envelope).expect("envelopes always serialize");
    if envelope.is_error() {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    }
}

/// What sandboxd says about itself at `initialize`.
pub(crate) fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("sandboxd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
}

impl Gateway {
    pub fn new(broker: Broker) -> Self {
        Self { broker }
    }

    /// The agent the bearer-auth middleware resolved for this request.
    fn agent(&self, context: &RequestContext<RoleServer>) -> Result<Agent, ErrorData> {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Agent>())
            .cloned()
            .ok_or_else(unauthenticated)
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let agent = self.agent(&context)?;
        // A project the store cannot read right now only loses its enum: the call itself
        // answers the real refusal.
        let services = match self.broker.project(&agent.project).await {
            Ok(project) => project.and_then(|p| p.sandbox_services),
            Err(error) => {
                tracing::warn!(%error, "reading the caller's project for tools/list");
                None
            }
        };
        let offer = Offer { services };
        let tools = self
            .broker
            .manifest(&agent.role)
            .map(|role| tools_for(role, &offer))
            .unwrap_or_default();
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let agent = self.agent(&context)?;
        let envelope = match Verb::parse(&request.name) {
            Ok(verb) => {
                let args = request
                    .arguments
                    .map(serde_json::Value::Object)
                    .unwrap_or(serde_json::Value::Null);
                self.broker.call(&agent, verb, args).await
            }
            Err(_) => {
                let yours: Vec<&str> = self
                    .broker
                    .manifest(&agent.role)
                    .map(|m| m.verbs.iter().map(|v| v.name()).collect())
                    .unwrap_or_default();
                Envelope::Error(ErrorEnvelope::new(
                    ErrorCode::VerbNotAllowed,
                    format!("there is no verb {}", quote(&request.name)),
                    format!("use only your verbs: {}", yours.join(", ")),
                ))
            }
        };
        Ok(CallToolResponse::Complete(envelope_result(&envelope)))
    }
}
