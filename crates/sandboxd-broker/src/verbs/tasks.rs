//! The task a verb is about: the one it names (of the agent's own project only), or the one
//! the agent holds; and how a task is briefed.

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::quote;
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::{Agent, Task};

use crate::Broker;
use crate::envelopes::internal;

pub(super) fn briefing(task: &Task) -> String {
    format!("Task {}: {}\n{}", task.id, task.title, task.description)
        .trim_end()
        .to_owned()
}

impl Broker {
    /// The task `id` of the agent's project; a task of another project does not exist for it.
    pub(super) async fn task_in_project(
        &self,
        agent: &Agent,
        id: &str,
        remediate: String,
    ) -> Result<Task, ErrorEnvelope> {
        self.store()
            .get_task(id)
            .await
            .map_err(|e| internal("reading the task", &e))?
            .filter(|t| t.project == agent.project)
            .ok_or_else(|| {
                ErrorEnvelope::new(
                    ErrorCode::NotFound,
                    format!(
                        "task {} does not exist in project {}",
                        quote(id),
                        agent.project
                    ),
                    remediate,
                )
            })
    }

    /// The task a `note` / `evidence` call is about: the one it names, else the one the agent
    /// holds.
    pub(super) async fn named_or_held_task(
        &self,
        agent: &Agent,
        role: &RoleSpec,
        verb: Verb,
        named: Option<&str>,
    ) -> Result<Task, ErrorEnvelope> {
        if let Some(id) = named {
            let remediate = format!("call {verb} with a task id of your project");
            return self.task_in_project(agent, id, remediate).await;
        }
        self.store()
            .active_task_of(&agent.slug)
            .await
            .map_err(|e| internal("looking up your task", &e))?
            .ok_or_else(|| {
                ErrorEnvelope::new(
                    ErrorCode::OutOfOrder,
                    format!("{verb} records on the task you hold, and you hold none"),
                    role.hold_or_name_a_task(verb),
                )
            })
    }
}
