//! One agent verb call, one file per verb: the manifest check (again, on every call), the
//! verb itself (what it decides and does), and the audit row and metrics of the call. The
//! gateway has already parsed the call into a typed [`Call`]; each verb answers a typed
//! [`Answer`] (`answer.rs`), which only the gateway turns into JSON.

use std::time::Instant;

use sandboxd_domain::Actor;
use sandboxd_domain::Agent;
use sandboxd_domain::call::{Call, Malformed};
use sandboxd_domain::envelope::{Envelope, ErrorCode, ErrorEnvelope};
use sandboxd_domain::roles::{RoleSpec, Verb};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};

mod answer;
mod evidence;
mod held;
mod lifecycle;
mod note;
mod release_sandbox;
mod request_sandbox;
mod reset_sandbox;
mod run_experiment;
mod sandbox_info;
mod sandbox_sql;
mod tasks;

pub(crate) use answer::Answer;
pub use answer::Evidence;

/// Text an agent may record is capped, so a note cannot flood the store or the panel.
const MAX_TEXT: usize = 16 * 1024;

fn check_text(verb: Verb, text: &str) -> Result<(), ErrorEnvelope> {
    if text.len() > MAX_TEXT {
        // Named as the verb's schema names it.
        let argument = match verb {
            Verb::IAmDone | Verb::IDocumented => "summary",
            Verb::PassReview | Verb::FailReview => "comment",
            _ => "text",
        };
        return Err(ErrorEnvelope::new(
            ErrorCode::InvalidArgument,
            format!(
                "the {argument} given to {verb} is {} bytes; at most {MAX_TEXT}",
                text.len()
            ),
            format!("call {verb} again with a shorter {argument}"),
        ));
    }
    Ok(())
}

/// What an audit row keeps of a refusal: its first line, capped (a script's traceback and
/// output stay in the answer, not the trail).
fn audit_line(message: &str) -> String {
    const MAX: usize = 300;
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

fn verb_of(call: &Result<Call, Malformed>) -> Verb {
    match call {
        Ok(call) => call.verb(),
        Err(malformed) => malformed.verb,
    }
}

impl Broker {
    /// Runs one call for an authenticated agent, as the gateway parsed it, and answers its
    /// envelope. The manifest is checked before the arguments' fit, and every call is audited,
    /// malformed ones too; none can fail with anything but an envelope.
    #[tracing::instrument(name = "verb", skip_all, fields(agent = %agent.slug, verb = verb_of(&call).name()))]
    pub async fn call(&self, agent: &Agent, call: Result<Call, Malformed>) -> Envelope<Evidence> {
        let started = Instant::now();
        let verb = verb_of(&call);
        let outcome = self.dispatch(agent, call).await;
        let (result, subject, detail) = match &outcome {
            Ok((ok, detail)) => (
                Outcome::Ok,
                ok.task_id.clone().unwrap_or_else(|| agent.slug.to_string()),
                detail.clone(),
            ),
            Err(err) => (
                Outcome::Failed(err.error),
                agent.slug.to_string(),
                audit_line(&err.message),
            ),
        };
        self.inner.metrics.verb(verb, result);
        self.audit(AuditRecord {
            actor: Actor::Agent(agent.slug.clone()),
            action: AuditAction::Verb(verb),
            subject: &subject,
            project: Some(&agent.project),
            outcome: result,
            started,
            detail,
        })
        .await;
        match outcome {
            Ok((ok, _)) => Envelope::Ok(ok),
            Err(err) => Envelope::Error(err),
        }
    }

    /// The id of the task the agent holds, for an answer's `task_id`; None when it holds none
    /// or the store cannot say (the answer does not depend on it).
    pub(crate) async fn held_task_id(&self, agent: &sandboxd_domain::AgentSlug) -> Option<String> {
        self.store()
            .active_task_of(agent)
            .await
            .ok()
            .flatten()
            .map(|t| t.id)
    }

    /// The role's manifest, if the role is configured.
    pub fn manifest(&self, role: &str) -> Option<&RoleSpec> {
        self.inner.config.roles.get(role)
    }

    async fn dispatch(&self, agent: &Agent, call: Result<Call, Malformed>) -> Answer {
        let verb = verb_of(&call);
        let role = self.manifest(&agent.role).ok_or_else(|| {
            ErrorEnvelope::new(
                ErrorCode::VerbNotAllowed,
                format!(
                    "your role {} is not configured on this sandboxd",
                    agent.role
                ),
                "ask the operator to fix the role configuration; no verb can run meanwhile",
            )
        })?;
        if !role.allows(verb) {
            let yours: Vec<&str> = role.verbs.iter().map(|v| v.name()).collect();
            return Err(ErrorEnvelope::new(
                ErrorCode::VerbNotAllowed,
                format!("{verb} is not in the manifest of role {}", agent.role),
                format!("use only your verbs: {}", yours.join(", ")),
            ));
        }
        match call.map_err(|malformed| malformed.refusal)? {
            Call::RequestSandbox(args) => self.request_sandbox(agent, args).await,
            Call::ReleaseSandbox => self.release_sandbox(agent).await,
            Call::ResetSandbox(args) => self.reset_sandbox(agent, args).await,
            Call::SandboxSql(args) => self.sandbox_sql(agent, args).await,
            Call::RunExperiment(args) => self.run_experiment(agent, args).await,
            Call::SandboxInfo => self.sandbox_info(agent).await,
            Call::Note(args) => self.note(agent, role, args).await,
            Call::Evidence(args) => self.evidence(agent, role, args).await,
            lifecycle_call => self.lifecycle(agent, role, lifecycle_call).await,
        }
    }
}
