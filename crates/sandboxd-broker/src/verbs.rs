//! One agent verb call: the manifest check (again, on every call), argument parsing, the verb
//! itself, the release hook, and the audit row and metrics of the call.

use std::time::Instant;

use sandboxd_domain::call::{Call, Malformed};
use sandboxd_domain::envelope::{Envelope, ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::error::quote;
use sandboxd_domain::lifecycle::TaskState;
use sandboxd_domain::lifecycle::{self, Move};
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::verbs::{EvidenceArgs, NoteArgs};
use sandboxd_domain::{Actor, Agent, NoteKind, Task};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::envelopes::{internal, out_of_order};

/// Text an agent may record is capped, so a note cannot flood the store or the panel.
const MAX_TEXT: usize = 16 * 1024;

fn check_text(verb: Verb, text: &str) -> Result<(), ErrorEnvelope> {
    if text.len() > MAX_TEXT {
        return Err(ErrorEnvelope::new(
            ErrorCode::InvalidArgument,
            format!(
                "the text given to {verb} is {} bytes; at most {MAX_TEXT}",
                text.len()
            ),
            format!("call {verb} again with a shorter text"),
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

fn briefing(task: &Task) -> String {
    format!("Task {}: {}\n{}", task.id, task.title, task.description)
        .trim_end()
        .to_owned()
}

impl Broker {
    /// Runs one call for an authenticated agent, as the gateway parsed it, and answers its
    /// envelope. The manifest is checked before the arguments' fit, and every call is audited,
    /// malformed ones too; none can fail with anything but an envelope.
    #[tracing::instrument(name = "verb", skip_all, fields(agent = %agent.slug, verb = verb_of(&call).name()))]
    pub async fn call(&self, agent: &Agent, call: Result<Call, Malformed>) -> Envelope {
        let started = Instant::now();
        let verb = verb_of(&call);
        let outcome = self.dispatch(agent, verb, call).await;
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

    async fn dispatch(
        &self,
        agent: &Agent,
        verb: Verb,
        call: Result<Call, Malformed>,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
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
            Call::ReleaseSandbox => {
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
            Call::ResetSandbox(args) => self.reset_sandbox(agent, args).await,
            Call::SandboxSql(args) => self.sandbox_sql(agent, args).await,
            Call::RunExperiment(args) => self.run_experiment(agent, args).await,
            Call::SandboxInfo => self.sandbox_info(agent).await,
            Call::Note(args) => self.note(agent, role, verb, args).await,
            Call::Evidence(args) => self.evidence(agent, role, verb, args).await,
            lifecycle_call => self.lifecycle(agent, role, lifecycle_call).await,
        }
    }

    async fn lifecycle(
        &self,
        agent: &Agent,
        role: &RoleSpec,
        call: Call,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        let verb = call.verb();
        let (named_task, text) = match call {
            Call::IWillWorkOn(args) => (Some(args.task), None),
            Call::ClaimReview(args) => (args.task, None),
            Call::IAmDone(args) | Call::IDocumented(args) => (None, args.summary),
            Call::PassReview(args) | Call::FailReview(args) => (None, args.comment),
            _ => (None, None),
        };
        if let Some(text) = &text {
            check_text(verb, text)?;
        }
        let held = self
            .store()
            .active_task_of(&agent.slug)
            .await
            .map_err(|e| internal("looking up your task", &e))?;
        let plan = lifecycle::plan(verb, held.as_ref().map(|t| (t.id.as_str(), t.state)))
            .map_err(out_of_order)?;
        match plan {
            Move::Claim { from, to } => {
                let task = self
                    .claim(agent, verb, named_task.as_deref(), from, to)
                    .await?;
                let next = match verb {
                    Verb::ClaimReview if role.allows(Verb::RequestSandbox) => {
                        "request_sandbox if the review needs a database; then pass_review or fail_review"
                    }
                    Verb::ClaimReview => "review the work, then call pass_review or fail_review",
                    _ if role.allows(Verb::RequestSandbox) => {
                        "do the work (call request_sandbox if your tests need a database), then call i_am_done"
                    }
                    _ if role.allows(Verb::IDocumented) => {
                        "write the documentation, then call i_documented"
                    }
                    _ => "do the work, then call i_am_done",
                };
                let detail = format!("claimed {}", task.id);
                Ok((
                    OkEnvelope::new(Some(task.id.clone()), next, briefing(&task)),
                    detail,
                ))
            }
            Move::Hand { from, to } => {
                let task = held.expect("lifecycle::plan hands only a task the caller holds");
                if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
                    let kind = if matches!(verb, Verb::FailReview | Verb::PassReview) {
                        NoteKind::Note
                    } else {
                        NoteKind::Evidence
                    };
                    self.store()
                        .record_task_note(&task.id, &agent.slug, kind, false, &text)
                        .await
                        .map_err(|e| internal("recording your summary", &e))?;
                }
                let moved = self
                    .store()
                    .transition(&task.id, from, Some(&agent.slug), to, None)
                    .await
                    .map_err(|e| internal("moving your task", &e))?;
                if !moved {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::OutOfOrder,
                        format!("task {} changed while you were calling {verb}", task.id),
                        "call give_me_work or claim_review to see what you hold now",
                    ));
                }
                if verb.releases_sandbox() {
                    self.release_best_effort(agent, verb.name()).await;
                }
                let next = match verb {
                    Verb::PassReview | Verb::FailReview => {
                        "claim_review for the next review, or i_am_idle"
                    }
                    Verb::Unclaim if from == TaskState::InReview => "claim_review, or i_am_idle",
                    _ => "give_me_work for the next task, or i_am_idle",
                };
                Ok((
                    OkEnvelope::new(
                        Some(task.id.clone()),
                        next,
                        format!("task {} is now {to}", task.id),
                    ),
                    format!("{} {from} -> {to}", task.id),
                ))
            }
            Move::None => {
                // i_am_idle: the engagement ends.
                self.release_best_effort(agent, verb.name()).await;
                Ok((
                    OkEnvelope::new(
                        None,
                        "nothing: your engagement is over (give_me_work if new work arrives)",
                        "your sandbox, if any, was released",
                    ),
                    "idle".to_owned(),
                ))
            }
        }
    }

    async fn claim(
        &self,
        agent: &Agent,
        verb: Verb,
        named: Option<&str>,
        from: TaskState,
        to: TaskState,
    ) -> Result<Task, ErrorEnvelope> {
        let Some(id) = named else {
            return self
                .store()
                .claim_next(&agent.project, from, to, &agent.slug)
                .await
                .map_err(|e| internal("claiming a task", &e))?
                .ok_or_else(|| {
                    ErrorEnvelope::new(
                        ErrorCode::NoWork,
                        format!("no task of project {} is waiting ({from})", agent.project),
                        format!("call {verb} again later, or i_am_idle to end your engagement"),
                    )
                });
        };
        let task = self
            .task_in_project(
                agent,
                id,
                if verb == Verb::ClaimReview {
                    format!(
                        "call {verb} with a task id of your project, or without one to take the \
                         next"
                    )
                } else {
                    format!(
                        "call {verb} with a task id of your project, or give_me_work to take the \
                         next"
                    )
                },
            )
            .await?;
        let taken = || {
            ErrorEnvelope::new(
                ErrorCode::TaskTaken,
                format!(
                    "task {} is {} and cannot be claimed now",
                    task.id, task.state
                ),
                format!("call {verb} without a task id to take the next waiting one"),
            )
        };
        if task.state != from || task.claimed_by.is_some() {
            return Err(taken());
        }
        let claimed = self
            .store()
            .transition(&task.id, from, None, to, Some(&agent.slug))
            .await
            .map_err(|e| internal("claiming the task", &e))?;
        if !claimed {
            return Err(taken());
        }
        Ok(Task {
            state: to,
            claimed_by: Some(agent.slug.clone()),
            ..task
        })
    }

    async fn note(
        &self,
        agent: &Agent,
        role: &RoleSpec,
        verb: Verb,
        args: NoteArgs,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        check_text(verb, &args.text)?;
        let task = self
            .named_or_held_task(agent, verb, args.task.as_deref())
            .await?;
        // Roles that observe (the auditor) write only private notes.
        let private = args.private || role.private_notes;
        self.store()
            .record_task_note(&task.id, &agent.slug, NoteKind::Note, private, &args.text)
            .await
            .map_err(|e| internal("recording your note", &e))?;
        Ok((
            OkEnvelope::new(Some(task.id.clone()), "continue your task", "note recorded"),
            format!(
                "note on {}{}",
                task.id,
                if private { " (private)" } else { "" }
            ),
        ))
    }

    async fn evidence(
        &self,
        agent: &Agent,
        role: &RoleSpec,
        verb: Verb,
        args: EvidenceArgs,
    ) -> Result<(OkEnvelope, String), ErrorEnvelope> {
        let task = self
            .named_or_held_task(agent, verb, args.task.as_deref())
            .await?;
        match args.text {
            Some(text) => {
                if role.read_only_evidence {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::VerbNotAllowed,
                        format!("role {} reads evidence but does not record it", agent.role),
                        "call evidence without text to read it",
                    ));
                }
                check_text(verb, &text)?;
                if task.claimed_by.as_ref() != Some(&agent.slug) {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::OutOfOrder,
                        format!(
                            "you can record evidence only on a task you hold, not {}",
                            task.id
                        ),
                        "call give_me_work or claim_review first",
                    ));
                }
                self.store()
                    .record_task_note(&task.id, &agent.slug, NoteKind::Evidence, false, &text)
                    .await
                    .map_err(|e| internal("recording your evidence", &e))?;
                Ok((
                    OkEnvelope::new(
                        Some(task.id.clone()),
                        "continue your task",
                        "evidence recorded",
                    ),
                    format!("evidence on {}", task.id),
                ))
            }
            None => {
                let notes = self
                    .store()
                    .list_task_notes(&task.id, false)
                    .await
                    .map_err(|e| internal("reading evidence", &e))?;
                let items: Vec<serde_json::Value> = notes
                    .iter()
                    .filter(|n| n.kind == NoteKind::Evidence)
                    .map(|n| serde_json::json!({"by": n.agent, "at_ms": n.at_ms, "text": n.text}))
                    .collect();
                Ok((
                    OkEnvelope::new(Some(task.id.clone()), "continue", briefing(&task))
                        .with_evidence(serde_json::Value::Array(items)),
                    format!("read evidence of {}", task.id),
                ))
            }
        }
    }

    /// The task `id` of the agent's project; a task of another project does not exist for it.
    async fn task_in_project(
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
    async fn named_or_held_task(
        &self,
        agent: &Agent,
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
                    "call give_me_work or claim_review first (or pass a task id)",
                )
            })
    }
}
