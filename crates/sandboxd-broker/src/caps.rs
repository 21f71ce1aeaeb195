//! Per-agent caps on concurrent costly calls, so that no agent can hold the daemon with a
//! flood of them: at most `broker.max_heavy_calls_per_agent` of its `sandbox_sql`,
//! `run_experiment` and `reset_sandbox` calls at once, and at most
//! `experiments.max_concurrent_per_agent` of its experiments. A call past a cap is refused at
//! once with `limit_exceeded` naming the cap (retryable), never queued.
//!
//! Counted in this daemon's memory: with replicas, each replica holds an agent to the caps on
//! its own.

use std::collections::HashMap;
use std::sync::Mutex;

use sandboxd_domain::AgentSlug;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::roles::Verb;

use crate::Broker;

/// The verbs that count toward `broker.max_heavy_calls_per_agent`: each holds a connection to
/// a server or a guest's memory while it runs. `request_sandbox` is not one: an agent's calls
/// of it are serialized and answered from its one sandbox.
pub(crate) fn is_heavy(verb: Verb) -> bool {
    matches!(
        verb,
        Verb::SandboxSql | Verb::RunExperiment | Verb::ResetSandbox
    )
}

/// One cap: how many calls of a kind each agent has under way.
#[derive(Debug)]
pub(crate) struct PerAgent {
    /// The setting that sets it, as the refusal names it.
    setting: &'static str,
    /// What it counts, as the refusal names it.
    what: &'static str,
    max: usize,
    /// A plain mutex: held only to count, never across an await.
    held: Mutex<HashMap<AgentSlug, usize>>,
}

/// A call counted under a cap until it is dropped (when the call ends or is abandoned).
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    cap: &'a PerAgent,
    agent: AgentSlug,
}

impl PerAgent {
    pub fn new(setting: &'static str, what: &'static str, max: usize) -> Self {
        Self {
            setting,
            what,
            max,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// A slot for one more call of `agent`, or the refusal naming the cap.
    pub fn take(&self, agent: &AgentSlug) -> Result<Slot<'_>, ErrorEnvelope> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = held.entry(agent.clone()).or_insert(0);
        if *count >= self.max {
            return Err(ErrorEnvelope::new(
                ErrorCode::LimitExceeded,
                format!(
                    "you have {} {} under way, the most one agent may have at once ({} = {})",
                    count, self.what, self.setting, self.max
                ),
                "wait until one of them answers, then call again",
            )
            .retryable(true));
        }
        *count += 1;
        Ok(Slot {
            cap: self,
            agent: agent.clone(),
        })
    }

    #[cfg(test)]
    fn held_by(&self, agent: &AgentSlug) -> usize {
        self.held
            .lock()
            .map(|held| held.get(agent).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut held = self
            .cap
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = held.get_mut(&self.agent) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.agent);
            }
        }
    }
}

/// The broker's per-agent caps.
#[derive(Debug)]
pub(crate) struct Caps {
    pub heavy: PerAgent,
    pub experiments: PerAgent,
}

impl Caps {
    pub fn new(config: &crate::BrokerConfig) -> Self {
        let experiments = config
            .experiments
            .as_ref()
            .map_or(usize::MAX, |e| e.max_per_agent);
        Self {
            heavy: PerAgent::new(
                "broker.max_heavy_calls_per_agent",
                "sandbox_sql, run_experiment and reset_sandbox calls",
                config.max_heavy_calls_per_agent,
            ),
            experiments: PerAgent::new(
                "experiments.max_concurrent_per_agent",
                "experiments",
                experiments,
            ),
        }
    }
}

impl Broker {
    /// A slot for `verb` of `agent` under `broker.max_heavy_calls_per_agent`.
    pub(crate) fn heavy_call(
        &self,
        agent: &AgentSlug,
        verb: Verb,
    ) -> Result<Slot<'_>, ErrorEnvelope> {
        debug_assert!(is_heavy(verb), "{verb} is not a heavy verb");
        self.inner.caps.heavy.take(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_refuses_past_its_max_and_frees_on_drop() {
        let cap = PerAgent::new("broker.max_heavy_calls_per_agent", "calls", 2);
        let (a, b) = (
            AgentSlug::parse("agent-a").expect("slug"),
            AgentSlug::parse("agent-b").expect("slug"),
        );
        let first = cap.take(&a).expect("room");
        let _second = cap.take(&a).expect("room");
        let refused = cap.take(&a).expect_err("at the cap");
        assert_eq!(refused.error, ErrorCode::LimitExceeded);
        assert!(refused.retryable);
        assert!(
            refused
                .message
                .contains("broker.max_heavy_calls_per_agent = 2"),
            "{}",
            refused.message
        );
        // Another agent is not held back by this one.
        let _other = cap.take(&b).expect("another agent's own room");
        drop(first);
        let _third = cap.take(&a).expect("room again");
        assert_eq!(cap.held_by(&a), 2);
    }
}
