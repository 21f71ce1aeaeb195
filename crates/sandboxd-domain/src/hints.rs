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
