//! MCP session state for the agent gateway, kept in the store so sessions survive a restart.
//! The gateway reaches the store only through these calls.

use crate::{Broker, BrokerError};

impl Broker {
    pub async fn mcp_session(&self, id: &str) -> Result<Option<String>, BrokerError> {
        Ok(self.store().get_mcp_session(id).await?)
    }

    pub async fn save_mcp_session(&self, id: &str, state_json: &str) -> Result<(), BrokerError> {
        Ok(self.store().put_mcp_session(id, state_json).await?)
    }

    pub async fn drop_mcp_session(&self, id: &str) -> Result<(), BrokerError> {
        Ok(self.store().delete_mcp_session(id).await?)
    }
}
