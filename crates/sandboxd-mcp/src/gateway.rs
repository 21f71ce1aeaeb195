//! The MCP server handler. One instance serves one MCP session; the caller is resolved per
//! request from the authenticated HTTP request, so a revoked agent stops at its next call.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, DiscoverResult, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use std::time::Duration;

use futures::future::join_all;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandboxd_broker::{AgentDesk, Evidence};
use sandboxd_domain::call::Call;
use sandboxd_domain::envelope::{Envelope, ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::quote;
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::{Agent, Project};

use crate::tools::{Offer, tools_for};

#[derive(Debug, Clone)]
pub struct Gateway {
    desk: AgentDesk,
}

/// How long `tools/list` waits for a feature probe under way before it offers the allowlist.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

const INSTRUCTIONS: &str = "sandboxd gives you, on demand, a throwaway database for your task's \
tests. Every answer says what to call next in `next`, and every refusal says how to fix the \
call in `remediate`. request_sandbox returns credentials and an env dict per service: use only \
those, never any other database credentials.";

/// The instructions an agent of `role` reads: where its work starts, in its own verbs.
pub fn instructions_for(role: Option<&RoleSpec>) -> String {
    let Some(role) = role else {
        return "Your role is not configured on this sandboxd: ask the operator to fix the role \
                configuration; no verb can run meanwhile."
            .to_owned();
    };
    let first = match role.starting_verbs().as_slice() {
        [] => "Your role records notes and reads evidence: call note or evidence.".to_owned(),
        verbs => format!("Start with {}.", verbs.join(" or ")),
    };
    let text = if role.allows(Verb::RequestSandbox) {
        INSTRUCTIONS.to_owned()
    } else {
        "sandboxd hands out your tasks. Every answer says what to call next in `next`, and every \
         refusal says how to fix the call in `remediate`."
            .to_owned()
    };
    format!("{first} {text}")
}

fn unauthenticated() -> ErrorData {
    ErrorData::invalid_request("the caller is not an authenticated agent", None)
}

/// The one place an answer becomes JSON.
fn envelope_result(envelope: &Envelope<Evidence>) -> CallToolResult {
    let value = serde_json::to_value(envelope).expect("envelopes always serialize");
    if envelope.is_error() {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    }
}

/// What sandboxd says about itself at `initialize`.
pub fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("sandboxd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
}

impl Gateway {
    pub fn new(desk: AgentDesk) -> Self {
        Self { desk }
    }

    /// The instructions of the caller's role, for `initialize` and `server/discover` alike.
    fn instructions(&self, context: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        let agent = self.agent(context)?;
        Ok(instructions_for(self.desk.manifest(&agent.role)))
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

impl Gateway {
    /// What the caller's project lets it ask for: its services this sandboxd's backend runs,
    /// and per service the features it provides (waiting a little for a probe under way).
    async fn offer(&self, project: Option<Project>) -> Offer {
        let Some(project) = project else {
            return Offer::default();
        };
        let opted_in = project.sandbox_services.clone().unwrap_or_default();
        let services = self.desk.runnable(&opted_in).await;
        let project = &project;
        let offered = join_all(services.iter().map(|engine| async move {
            (
                *engine,
                self.desk
                    .offered_names_in(project, *engine, PROBE_PATIENCE)
                    .await,
            )
        }))
        .await;
        let standing = project.sandbox_extensions.clone().unwrap_or_default();
        let standing = standing
            .engines()
            .map(|engine| {
                let names = standing
                    .for_engine(engine)
                    .iter()
                    .map(|f| f.name())
                    .collect();
                (engine, names)
            })
            .collect();
        Offer {
            services: (!services.is_empty()).then_some(services),
            features: offered.into_iter().collect(),
            standing,
        }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        info.instructions = Some(self.instructions(&context)?);
        Ok(info)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        info.instructions = Some(self.instructions(&context)?);
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let agent = self.agent(&context)?;
        // A project the store cannot read right now only loses its enum: the call itself
        // answers the real refusal.
        let project = match self.desk.project_of(&agent).await {
            Ok(project) => project,
            Err(error) => {
                tracing::warn!(%error, "reading the caller's project for tools/list");
                None
            }
        };
        let offer = self.offer(project).await;
        let tools = self
            .desk
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
                self.desk.call(&agent, Call::parse(verb, args)).await
            }
            Err(_) => {
                let yours: Vec<&str> = self
                    .desk
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

#[cfg(test)]
mod tests {
    use sandboxd_domain::roles::RoleBook;

    use super::*;

    /// The verbs `text` names, as whole words.
    fn named(text: &str) -> Vec<Verb> {
        let words: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        Verb::ALL
            .into_iter()
            .filter(|verb| words.contains(&verb.name()))
            .collect()
    }

    #[test]
    fn instructions_name_only_the_roles_own_verbs() {
        let book = RoleBook::default();
        for name in book.names() {
            let role = book.get(name).expect("a role of the book");
            let text = instructions_for(Some(role));
            let verbs = named(&text);
            assert!(!verbs.is_empty(), "{name}: {text}");
            for verb in verbs {
                assert!(role.allows(verb), "{name} is told to call {verb}: {text}");
            }
        }
        assert!(named(&instructions_for(None)).is_empty());
    }
}
