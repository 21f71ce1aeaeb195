//! `evidence`: with a text, records evidence on the task the agent holds; without one, reads
//! the evidence recorded on a task of its project.

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::verbs::EvidenceArgs;
use sandboxd_domain::{Agent, NoteKind};

use super::answer::RecordedEvidence;
use super::tasks::briefing;
use super::{Answer, check_text};
use crate::Broker;
use crate::envelopes::internal;

impl Broker {
    pub(super) async fn evidence(
        &self,
        agent: &Agent,
        role: &RoleSpec,
        args: EvidenceArgs,
    ) -> Answer {
        let verb = Verb::Evidence;
        let task = self
            .named_or_held_task(agent, role, verb, args.task.as_deref())
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
                        role.hold_the_task_first(),
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
                let items: Vec<RecordedEvidence> = notes
                    .into_iter()
                    .filter(|n| n.kind == NoteKind::Evidence)
                    .map(|n| RecordedEvidence {
                        by: n.agent,
                        at_ms: n.at_ms,
                        text: n.text,
                    })
                    .collect();
                Ok((
                    OkEnvelope::new(Some(task.id.clone()), "continue", briefing(&task))
                        .with_evidence(items),
                    format!("read evidence of {}", task.id),
                ))
            }
        }
    }
}
