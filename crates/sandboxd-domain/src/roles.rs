//! Verbs, roles and manifests (§3.1). A role's manifest is the exact list of verbs it may call;
//! the gateway lists only those and checks the manifest again on every call.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{InputError, allowed_list, quote};

/// Every verb of the agent gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    GiveMeWork,
    IWillWorkOn,
    IAmDone,
    ClaimReview,
    PassReview,
    FailReview,
    IDocumented,
    Unclaim,
    IAmIdle,
    RequestSandbox,
    ReleaseSandbox,
    ResetSandbox,
    SandboxInfo,
    SandboxSql,
    RunExperiment,
    Note,
    Evidence,
}

impl Verb {
    pub const ALL: [Verb; 17] = [
        Verb::GiveMeWork,
        Verb::IWillWorkOn,
        Verb::IAmDone,
        Verb::ClaimReview,
        Verb::PassReview,
        Verb::FailReview,
        Verb::IDocumented,
        Verb::Unclaim,
        Verb::IAmIdle,
        Verb::RequestSandbox,
        Verb::ReleaseSandbox,
        Verb::ResetSandbox,
        Verb::SandboxInfo,
        Verb::SandboxSql,
        Verb::RunExperiment,
        Verb::Note,
        Verb::Evidence,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Verb::GiveMeWork => "give_me_work",
            Verb::IWillWorkOn => "i_will_work_on",
            Verb::IAmDone => "i_am_done",
            Verb::ClaimReview => "claim_review",
            Verb::PassReview => "pass_review",
            Verb::FailReview => "fail_review",
            Verb::IDocumented => "i_documented",
            Verb::Unclaim => "unclaim",
            Verb::IAmIdle => "i_am_idle",
            Verb::RequestSandbox => "request_sandbox",
            Verb::ReleaseSandbox => "release_sandbox",
            Verb::ResetSandbox => "reset_sandbox",
            Verb::SandboxInfo => "sandbox_info",
            Verb::SandboxSql => "sandbox_sql",
            Verb::RunExperiment => "run_experiment",
            Verb::Note => "note",
            Verb::Evidence => "evidence",
        }
    }

    pub fn parse(name: &str) -> Result<Self, InputError> {
        Self::ALL
            .into_iter()
            .find(|v| v.name() == name)
            .ok_or_else(|| InputError::Malformed {
                what: "verb",
                detail: format!(
                    "unknown verb {}; verbs: {}",
                    quote(name),
                    allowed_list(Self::ALL.iter().map(|v| v.name()))
                ),
            })
    }

    /// Verbs whose successful exit ends the agent's engagement and so releases its sandbox
    /// (§3.5).
    pub fn releases_sandbox(self) -> bool {
        matches!(
            self,
            Verb::IAmDone
                | Verb::Unclaim
                | Verb::IAmIdle
                | Verb::PassReview
                | Verb::FailReview
                | Verb::IDocumented
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A role's manifest: its verbs, and how `note` / `evidence` are restricted for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSpec {
    pub verbs: BTreeSet<Verb>,
    /// `note` records only private notes (the auditor observes, it does not talk).
    #[serde(default)]
    pub private_notes: bool,
    /// `evidence` reads but never records.
    #[serde(default)]
    pub read_only_evidence: bool,
}

impl RoleSpec {
    fn of(verbs: &[Verb]) -> Self {
        Self {
            verbs: verbs.iter().copied().collect(),
            private_notes: false,
            read_only_evidence: false,
        }
    }

    pub fn allows(&self, verb: Verb) -> bool {
        self.verbs.contains(&verb)
    }
}

/// The role configuration: role name → manifest. Loaded from the operator's roles file; the
/// defaults are §3.1's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBook {
    pub roles: BTreeMap<String, RoleSpec>,
}

impl Default for RoleBook {
    fn default() -> Self {
        use Verb::*;
        let mut roles = BTreeMap::new();
        roles.insert(
            "developer".to_owned(),
            RoleSpec::of(&[
                GiveMeWork,
                IWillWorkOn,
                IAmDone,
                Unclaim,
                IAmIdle,
                RequestSandbox,
                ReleaseSandbox,
                ResetSandbox,
                SandboxInfo,
                SandboxSql,
                RunExperiment,
                Note,
                Evidence,
            ]),
        );
        roles.insert(
            "qa".to_owned(),
            RoleSpec::of(&[
                ClaimReview,
                PassReview,
                FailReview,
                Unclaim,
                IAmIdle,
                RequestSandbox,
                ReleaseSandbox,
                ResetSandbox,
                SandboxInfo,
                SandboxSql,
                RunExperiment,
                Note,
                Evidence,
            ]),
        );
        roles.insert(
            "pr_reviewer".to_owned(),
            RoleSpec::of(&[ClaimReview, PassReview, FailReview, Note, Evidence]),
        );
        roles.insert(
            "documenter".to_owned(),
            RoleSpec::of(&[GiveMeWork, IDocumented, Unclaim, IAmIdle, Note, Evidence]),
        );
        roles.insert(
            "auditor".to_owned(),
            RoleSpec {
                verbs: [Note, Evidence].into(),
                private_notes: true,
                read_only_evidence: true,
            },
        );
        Self { roles }
    }
}

impl RoleBook {
    pub fn get(&self, role: &str) -> Option<&RoleSpec> {
        self.roles.get(role)
    }

    /// Checks a role name against the book, naming the roles that exist.
    pub fn check(&self, role: &str) -> Result<&RoleSpec, InputError> {
        self.get(role).ok_or_else(|| InputError::Malformed {
            what: "role",
            detail: format!(
                "unknown role {}; roles: {}",
                quote(role),
                allowed_list(self.roles.keys().map(String::as_str))
            ),
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.roles.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_developer_and_qa_carry_request_sandbox() {
        let book = RoleBook::default();
        let carriers: Vec<&str> = book
            .roles
            .iter()
            .filter(|(_, spec)| spec.allows(Verb::RequestSandbox))
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(carriers, ["developer", "qa"]);
    }

    #[test]
    fn verb_names_round_trip() {
        for verb in Verb::ALL {
            assert_eq!(Verb::parse(verb.name()).expect("known"), verb);
            assert_eq!(
                serde_json::to_string(&verb).expect("json"),
                format!("\"{}\"", verb.name())
            );
        }
        assert!(Verb::parse("merge").is_err());
    }

    #[test]
    fn role_book_reads_from_toml_shaped_json() {
        let book: RoleBook =
            serde_json::from_str(r#"{"roles":{"ops":{"verbs":["note","request_sandbox"]}}}"#)
                .expect("valid");
        assert!(
            book.check("ops")
                .expect("exists")
                .allows(Verb::RequestSandbox)
        );
        let err = book.check("developer").expect_err("not in this book");
        assert!(err.to_string().contains("roles: ops"));
    }
}
