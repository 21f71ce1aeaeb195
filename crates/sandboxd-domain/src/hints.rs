//! What each role is told to call next. Every text names only verbs of the caller's own role,
//! so no agent is steered to a verb its manifest refuses.

use crate::roles::{RoleSpec, Verb};

/// The verbs that claim a task, in the order a role is pointed to them.
const CLAIMING: [Verb; 3] = [Verb::GiveMeWork, Verb::IWillWorkOn, Verb::ClaimReview];

impl RoleSpec {
    fn allowed<const N: usize>(&self, verbs: [Verb; N]) -> Vec<&'static str> {
        verbs
            .into_iter()
            .filter(|verb| self.allows(*verb))
            .map(Verb::name)
            .collect()
    }

    /// The verbs an agent of this role starts its engagement with.
    pub fn starting_verbs(&self) -> Vec<&'static str> {
        self.allowed([Verb::GiveMeWork, Verb::ClaimReview])
    }

    /// `request_sandbox`'s `next`: the verb that ends the caller's work.
    pub fn after_the_sandbox(&self) -> &'static str {
        if self.allows(Verb::IAmDone) {
            "run your tests against the sandbox; call i_am_done when your work is finished"
        } else if self.allows(Verb::PassReview) {
            "run your tests against the sandbox; then call pass_review or fail_review"
        } else {
            "run your tests against the sandbox; call release_sandbox when you no longer need it"
        }
    }

    /// The `next` of a successful claim by `verb`.
    pub fn after_claiming(&self, verb: Verb) -> &'static str {
        match verb {
            Verb::ClaimReview if self.allows(Verb::RequestSandbox) => {
                "request_sandbox if the review needs a database; then pass_review or fail_review"
            }
            Verb::ClaimReview => "review the work, then call pass_review or fail_review",
            _ if self.allows(Verb::RequestSandbox) => {
                "do the work (call request_sandbox if your tests need a database), then call i_am_done"
            }
            _ if self.allows(Verb::IDocumented) => {
                "write the documentation, then call i_documented"
            }
            _ => "do the work, then call i_am_done",
        }
    }
}

impl RoleSpec {
    /// How an agent of this role comes to hold a task (`call give_me_work (or
    /// i_will_work_on)`), or None when it cannot claim one.
    pub fn how_to_hold_a_task(&self) -> Option<String> {
        match self.allowed(CLAIMING).as_slice() {
            [] => None,
            [one] => Some(format!("call {one}")),
            [first, rest @ ..] => Some(format!("call {first} (or {})", rest.join(" / "))),
        }
    }

    /// The remediation of a verb that records on the task the caller holds, called while it
    /// holds none: claim one, or name a task.
    pub fn hold_or_name_a_task(&self, verb: Verb) -> String {
        match self.how_to_hold_a_task() {
            Some(claim) => format!("{claim} first, or call {verb} with a task id of your project"),
            None => format!("call {verb} with a task id of your project"),
        }
    }

    /// The remediation of recording evidence on a task the caller does not hold.
    pub fn hold_the_task_first(&self) -> String {
        match self.how_to_hold_a_task() {
            Some(claim) => format!("{claim} to hold a task first; evidence records only on it"),
            None => {
                "your role records no evidence; call evidence without text to read it".to_owned()
            }
        }
    }

    /// The `next` after a verb handed the caller's task on (`i_am_done`, `i_documented`,
    /// `pass_review`, `fail_review`, `unclaim`): the claim that fits, and the way to stop.
    pub fn after_handing(&self) -> String {
        let next = if self.allows(Verb::GiveMeWork) {
            Some("give_me_work for the next task")
        } else if self.allows(Verb::ClaimReview) {
            Some("claim_review for the next review")
        } else {
            None
        };
        let stop = self
            .allows(Verb::IAmIdle)
            .then_some("i_am_idle to end your engagement");
        match (next, stop) {
            (Some(next), Some(stop)) => format!("{next}, or {stop}"),
            (Some(one), None) | (None, Some(one)) => one.to_owned(),
            (None, None) => "nothing: your role has no further step".to_owned(),
        }
    }

    /// The `next` of `i_am_idle`: what to call when new work arrives.
    pub fn after_idling(&self) -> String {
        match self.how_to_hold_a_task() {
            Some(claim) => {
                format!("nothing: your engagement is over ({claim} if new work arrives)")
            }
            None => "nothing: your engagement is over".to_owned(),
        }
    }

    /// The remediation of `no_work` for `verb`: try again later, or end the engagement.
    pub fn when_no_work(&self, verb: Verb) -> String {
        if self.allows(Verb::IAmIdle) {
            format!("call {verb} again later, or i_am_idle to end your engagement")
        } else {
            format!("call {verb} again later")
        }
    }

    /// The remediation of a claim made while the caller holds task `id` in `state`: finish it
    /// or give it back with this role's verbs, then call `verb`.
    pub fn free_yourself(&self, id: &str, in_review: bool, verb: Verb) -> String {
        let finishing: &[Verb] = if in_review {
            &[Verb::PassReview, Verb::FailReview]
        } else {
            &[Verb::IAmDone, Verb::IDocumented]
        };
        let finish: Vec<&str> = finishing
            .iter()
            .filter(|v| self.allows(**v))
            .map(|v| v.name())
            .collect();
        let mut steps = Vec::new();
        if !finish.is_empty() {
            steps.push(format!("finish task {id} with {}", finish.join(" or ")));
        }
        if self.allows(Verb::Unclaim) {
            steps.push(format!("give task {id} back with unclaim"));
        }
        match steps.as_slice() {
            [] => format!("task {id} stays yours until an operator releases it"),
            steps => format!("{}, then call {verb}", steps.join(", or ")),
        }
    }
}

/// The remediation of `no_active_task`, naming only the claiming verbs of the caller's role
/// (none when its role is not configured).
pub fn how_to_claim(role: Option<&RoleSpec>) -> String {
    let claims = role.map(|role| role.allowed(CLAIMING)).unwrap_or_default();
    match claims.as_slice() {
        [] => "your role cannot claim a task; ask the operator for a role that can".to_owned(),
        [one] => format!("call {one} first, then request_sandbox"),
        [first, rest @ ..] => {
            format!(
                "call {first} (or {}) first, then request_sandbox",
                rest.join(" / ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::RoleBook;

    #[test]
    fn every_hint_names_only_verbs_of_the_role() {
        let book = RoleBook::default();
        let verb_names: Vec<&str> = Verb::ALL.iter().map(|v| v.name()).collect();
        for (name, role) in &book.roles {
            let mut texts = vec![role.starting_verbs().join(" ")];
            // Both answer request_sandbox only.
            if role.allows(Verb::RequestSandbox) {
                texts.push(how_to_claim(Some(role)));
                texts.push(role.after_the_sandbox().to_owned());
            }
            for verb in [Verb::GiveMeWork, Verb::IWillWorkOn, Verb::ClaimReview] {
                if role.allows(verb) {
                    texts.push(role.after_claiming(verb).to_owned());
                }
            }
            for text in texts {
                for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                    if verb_names.contains(&word) {
                        let verb = Verb::parse(word).expect("a verb name");
                        assert!(role.allows(verb), "{name} is pointed to {word}: {text}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_role_that_cannot_claim_is_told_so() {
        let book = RoleBook::default();
        assert!(how_to_claim(book.get("auditor")).contains("cannot claim"));
        assert!(how_to_claim(None).contains("cannot claim"));
        assert_eq!(
            how_to_claim(book.get("qa")),
            "call claim_review first, then request_sandbox"
        );
    }
}
