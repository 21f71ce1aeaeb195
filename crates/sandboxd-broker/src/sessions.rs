//! An agent's way in: its bearer token resolved to the agent, and the MCP session state of the
//! agent gateway, kept in the store so sessions survive a restart. The gateway reaches the
//! store only through these calls.
//!
//! A session unused for `BrokerConfig::mcp_session_ttl` is expired: it reads as unknown (the
//! gateway answers 404 and the client starts a new session) and the sweeper deletes it, so
//! sessions agents opened and forgot cannot pile up in the store.
//!
//! A session belongs to the agent that opened it: to any other agent it reads as unknown, as an
//! expired one does. An agent keeps a bounded number of sessions; binding one more evicts its
//! least recently used, so no agent can grow the daemon by opening sessions.

use std::time::Duration;

use sandboxd_domain::clock::now_ms;
use sandboxd_domain::{Agent, AgentSlug};
use sandboxd_store::token_hash;
use secrecy::SecretString;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Broker, BrokerError};

/// How stale a live session's last-use time may get before a request writes it again: a busy
/// session costs a read per request and a write at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Broker {
    /// Resolves a bearer token to its agent.
    pub async fn authenticate(&self, token: &SecretString) -> Result<Option<Agent>, BrokerError> {
        Ok(self.store().agent_by_token_hash(&token_hash(token)).await?)
    }

    /// The oldest last-use time of a live session, now.
    fn sessions_used_since(&self) -> i64 {
        now_ms().saturating_sub(millis(self.inner.config.mcp_session_ttl))
    }

    /// A live session's state; `None` when it is unknown or expired.
    pub async fn mcp_session(&self, id: &str) -> Result<Option<String>, BrokerError> {
        Ok(self
            .store()
            .get_mcp_session(id, self.sessions_used_since())
            .await?)
    }

    pub async fn save_mcp_session(&self, id: &str, state_json: &str) -> Result<(), BrokerError> {
        Ok(self.store().put_mcp_session(id, state_json).await?)
    }

    pub async fn drop_mcp_session(&self, id: &str) -> Result<(), BrokerError> {
        Ok(self.store().delete_mcp_session(id).await?)
    }

    /// Records that `agent` opened session `id` (just stored by the transport), then evicts
    /// that agent's sessions past the `keep` it used most recently. Returns the evicted ids (for
    /// the transport to close), or `None` when `id` is not stored or already someone's: then it
    /// must not be handed out.
    pub async fn bind_mcp_session(
        &self,
        id: &str,
        agent: &AgentSlug,
        keep: usize,
    ) -> Result<Option<Vec<String>>, BrokerError> {
        let store = self.store();
        if !store.bind_mcp_session(id, agent.as_str()).await? {
            return Ok(None);
        }
        // At least the new one stays, whatever `keep` says.
        let evicted = store
            .evict_mcp_sessions(agent.as_str(), keep.max(1))
            .await?;
        Ok(Some(evicted))
    }

    /// Marks session `id` used now; false when it is unknown, expired or not `agent`'s (then
    /// the caller must refuse it like an unknown session).
    pub async fn touch_mcp_session(
        &self,
        id: &str,
        agent: &AgentSlug,
    ) -> Result<bool, BrokerError> {
        let now = now_ms();
        // Refresh at least a few times per TTL, so a short TTL still sees every use in time.
        let every = TOUCH_EVERY.min(self.inner.config.mcp_session_ttl / 4);
        Ok(self
            .store()
            .touch_mcp_session(
                id,
                agent.as_str(),
                now,
                self.sessions_used_since(),
                now.saturating_sub(millis(every)),
            )
            .await?)
    }

    /// Deletes every expired session; returns how many went.
    pub async fn sweep_mcp_sessions(&self) -> Result<u64, BrokerError> {
        Ok(self
            .store()
            .sweep_mcp_sessions(self.sessions_used_since())
            .await?)
    }

    /// Sweeps expired MCP sessions on the janitor's interval until `shutdown`.
    pub fn spawn_session_sweeper(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        let broker = self.clone();
        let period = self.inner.config.janitor_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = ticker.tick() => match broker.sweep_mcp_sessions().await {
                        Ok(0) => {}
                        Ok(swept) => tracing::info!(swept, "expired MCP sessions swept"),
                        Err(err) => tracing::warn!(error = %err, "sweeping MCP sessions failed"),
                    },
                }
            }
        })
    }
}
