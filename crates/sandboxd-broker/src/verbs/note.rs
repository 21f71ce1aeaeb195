//! `note`: a note on the task the agent holds (or names); private for roles that observe.

use sandboxd_domain::envelope::OkEnvelope;
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::verbs::NoteArgs;
use sandboxd_domain::{Agent, NoteKind};

use super::Answer;
use super::check_text;
use crate::Broker;
use crate::envelopes::internal;

impl Broker {
    pub(super) async fn note(&self, agent: &Agent, role: &RoleSpec, args: NoteArgs) -> Answer {
        let verb = Verb::Note;
        check_text(verb, &args.text)?;
        let task = self
            .named_or_held_task(agent, role, verb, args.task.as_deref())
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
}
