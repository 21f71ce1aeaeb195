//! `release_sandbox`: the agent's whole sandbox torn down now, its task kept.

use sandboxd_domain::Agent;
use sandboxd_domain::envelope::OkEnvelope;

use super::Answer;
use crate::Broker;
use crate::envelopes::internal;

impl Broker {
    pub(super) async fn release_sandbox(&self, agent: &Agent) -> Answer {
        let released = self
            .release(&agent.slug)
            .await
            .map_err(|e| internal("releasing your sandbox", &e))?;
        Ok((
            OkEnvelope::new(
                self.held_task_id(&agent.slug).await,
                "continue your task; call request_sandbox again if you need a fresh database",
                format!("{released} instance(s) released"),
            ),
            format!("{released} instance(s) released"),
        ))
    }
}
