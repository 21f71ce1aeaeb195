//! rmcp's session store over the desk: a session's `initialize` parameters survive a restart,
//! so an agent's MCP client keeps its session id and simply goes on.

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use sandboxd_broker::AgentDesk;

#[derive(Debug, Clone)]
pub(crate) struct BrokerSessions {
    desk: AgentDesk,
}

impl BrokerSessions {
    pub(crate) fn new(desk: AgentDesk) -> Self {
        Self { desk }
    }
}

#[async_trait::async_trait]
impl SessionStore for BrokerSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.desk.mcp_session(session_id).await? {
            Some(json) => Ok(Some(serde_json::from_str(&json)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let json = serde_json::to_string(state)?;
        Ok(self.desk.save_mcp_session(session_id, &json).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.desk.drop_mcp_session(session_id).await?)
    }
}
