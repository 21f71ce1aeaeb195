//! The task verbs (`give_me_work`, `i_will_work_on`, `claim_review`, `i_am_done`,
//! `pass_review`, `fail_review`, `i_documented`, `unclaim`, `i_am_idle`): one state machine
//! (`sandboxd_domain::lifecycle::plan` decides the move), applied here to the store. A
//! hand-over repeated by an agent that holds no task any more (its first answer was lost, e.g.
//! in a restart) answers the first call's success again, read from the agent's audit trail.

use sandboxd_domain::audit::{AuditFilter, OutcomeFilter};
use sandboxd_domain::call::Call;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::lifecycle::{self, Handed, Move, TaskState};
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::{Actor, Agent, NoteKind, Task};

use super::check_text;
use super::tasks::briefing;
use super::{Answer, Evidence};
use crate::Broker;
use crate::envelopes::{internal, out_of_order};

/// How far back a repeat is looked for: the rows of the calls an agent makes between two task
/// moves (sandbox verbs, notes) are few.
const RECENT_ROWS: u32 = 50;

/// The answer to a repeated hand-over: the first call's success, said again.
fn repeated(role: &RoleSpec, handed: &Handed) -> (OkEnvelope<Evidence>, String) {
    (
        OkEnvelope::new(
            Some(handed.task.clone()),
            lifecycle::next_after_hand(role, handed.verb, handed.from),
            format!(
                "task {} is already {} (your earlier {} did it)",
                handed.task, handed.to, handed.verb
            ),
        ),
        format!("{} (repeated)", handed.detail()),
    )
}

impl Broker {
    pub(super) async fn lifecycle(&self, agent: &Agent, role: &RoleSpec, call: Call) -> Answer {
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
        let holding = held.as_ref().map(|t| (t.id.as_str(), t.state));
        let plan = match lifecycle::plan(role, verb, holding) {
            Ok(plan) => plan,
            // Holding no task, the call may repeat one whose answer was lost: only then is the
            // trail read.
            Err(refusal) if holding.is_none() => {
                return match self.last_hand_over(agent).await {
                    Some(handed) if handed.is_repeated_by(verb, holding) => {
                        Ok(repeated(role, &handed))
                    }
                    _ => Err(out_of_order(refusal)),
                };
            }
            Err(refusal) => return Err(out_of_order(refusal)),
        };
        match plan {
            Move::Claim { from, to } => {
                let task = self
                    .claim(agent, role, verb, named_task.as_deref(), from, to)
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
                // The sandbox goes first: the move is the last write before the audit row that
                // lets a repeat of this call (its answer lost in a restart) be recognised, so
                // the window in which neither the old state nor the row says what happened
                // holds no teardown.
                if verb.releases_sandbox() {
                    self.release_best_effort(agent, verb.name()).await;
                }
                let handed = Handed {
                    verb,
                    task: task.id.clone(),
                    from,
                    to,
                };
                let moved = self
                    .store()
                    .hand_over(&agent.slug, &handed)
                    .await
                    .map_err(|e| internal("moving your task", &e))?;
                if !moved {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::OutOfOrder,
                        format!("task {} changed while you were calling {verb}", task.id),
                        match role.how_to_hold_a_task() {
                            Some(claim) => format!("{claim} to see what you hold now"),
                            None => "ask the operator what became of the task".to_owned(),
                        },
                    ));
                }
                Ok((
                    OkEnvelope::new(
                        Some(task.id.clone()),
                        lifecycle::next_after_hand(role, verb, from),
                        format!("task {} is now {to}", task.id),
                    ),
                    handed.detail(),
                ))
            }
            Move::None => {
                // i_am_idle: the engagement ends.
                self.release_best_effort(agent, verb.name()).await;
                Ok((
                    OkEnvelope::new(
                        None,
                        role.after_idling(),
                        "your sandbox, if any, was released",
                    ),
                    "idle".to_owned(),
                ))
            }
        }
    }

    /// The caller's last hand-over, when no other task move of the caller came after it. The
    /// store records the hand-over with the move itself (a crash cannot keep one without the
    /// other); the audit trail says whether the caller moved a task since (a claim, an idle).
    async fn last_hand_over(&self, agent: &Agent) -> Option<Handed> {
        let last = match self.store().last_hand_over(&agent.slug).await {
            Ok(last) => last?,
            Err(error) => {
                tracing::warn!(%error, agent = %agent.slug, "reading the caller's last hand-over");
                return None;
            }
        };
        let filter = AuditFilter {
            actor: Some(Actor::Agent(agent.slug.clone())),
            outcome: Some(OutcomeFilter::Ok),
            limit: RECENT_ROWS,
            ..Default::default()
        };
        // No flush: a task move's row is written before its answer (`audit.rs`), and only
        // those rows are read here.
        let page = match self.store().list_audit(&filter).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, agent = %agent.slug, "reading the caller's last task move");
                return None;
            }
        };
        let moved_since = page.entries.iter().any(|entry| {
            let Ok(verb) = Verb::parse(&entry.action) else {
                return false;
            };
            lifecycle::moves_tasks(verb)
                && entry.at_ms > last.at_ms
                && Handed::parse(verb, &entry.detail).as_ref() != Some(&last.handed)
        });
        // A full page of newer rows may hide a move: then it is not taken for a repeat.
        let beyond_the_page = page.entries.len() >= RECENT_ROWS as usize
            && page.entries.last().is_some_and(|e| e.at_ms > last.at_ms);
        (!moved_since && !beyond_the_page).then_some(last.handed)
    }

    async fn claim(
        &self,
        agent: &Agent,
        role: &RoleSpec,
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
                        role.when_no_work(verb),
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
                if verb == Verb::ClaimReview {
                    format!("call {verb} without a task id to take the next waiting one")
                } else {
                    // i_will_work_on needs a task id; give_me_work takes the next one.
                    format!(
                        "call {verb} with another task id of your project, or give_me_work to \
                         take the next waiting one"
                    )
                },
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
}
