//! The minimal task lifecycle (§3.3) as a pure state machine: which verb moves a task from which
//! state to which, and what to tell an agent that calls a verb out of order. The store applies a
//! move atomically (compare-and-set); this module only decides.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::roles::{RoleSpec, Verb};

/// Where a task is. `claimed` in the doc of each state says whether an agent holds it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for a developer or documenter; unclaimed.
    Open,
    /// Claimed by the agent working on it.
    InProgress,
    /// Handed to review; unclaimed.
    Review,
    /// Claimed by the reviewer.
    InReview,
    /// Finished; unclaimed.
    Done,
}

impl TaskState {
    pub const ALL: [TaskState; 5] = [
        TaskState::Open,
        TaskState::InProgress,
        TaskState::Review,
        TaskState::InReview,
        TaskState::Done,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::InProgress => "in_progress",
            Self::Review => "review",
            Self::InReview => "in_review",
            Self::Done => "done",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// States in which the task is held by an agent.
    pub fn is_claimed(self) -> bool {
        matches!(self, Self::InProgress | Self::InReview)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a verb does to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Claim an unclaimed task in `from` (the next one, or a named one) into `to`.
    Claim { from: TaskState, to: TaskState },
    /// Move the caller's held task from `from` to `to`, which is unclaimed.
    Hand { from: TaskState, to: TaskState },
    /// No task changes.
    None,
}

/// A verb called before the one it depends on, with the verb to call first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfOrder {
    pub message: String,
    pub remediate: String,
}

/// Why a verb cannot be called now, before it is put in the words of the caller's role.
enum Refusal<'a> {
    /// A claim (or `i_am_idle`) while the caller holds task `id`.
    Holding { id: &'a str, state: TaskState },
    /// A hand-over of a task in `expected`, while the caller holds `held`.
    NeedsHeld {
        expected: TaskState,
        held: Option<(&'a str, TaskState)>,
    },
    /// `unclaim` with nothing held.
    NothingToGiveBack,
}

/// Decides what `verb` does given the task the caller holds (its id and state), or why it cannot
/// be called now, the remediation naming only verbs of the caller's `role`.
pub fn plan(
    role: &RoleSpec,
    verb: Verb,
    held: Option<(&str, TaskState)>,
) -> Result<Move, OutOfOrder> {
    decide(verb, held).map_err(|refusal| explain(role, verb, refusal))
}

fn decide(verb: Verb, held: Option<(&str, TaskState)>) -> Result<Move, Refusal<'_>> {
    use TaskState::*;
    let must_be_free = |then: Move| match held {
        None => Ok(then),
        Some((id, state)) => Err(Refusal::Holding { id, state }),
    };
    let must_hold = |expected: TaskState, to: TaskState| match held {
        Some((_, state)) if state == expected => Ok(Move::Hand { from: expected, to }),
        held => Err(Refusal::NeedsHeld { expected, held }),
    };
    match verb {
        Verb::GiveMeWork | Verb::IWillWorkOn => must_be_free(Move::Claim {
            from: Open,
            to: InProgress,
        }),
        Verb::ClaimReview => must_be_free(Move::Claim {
            from: Review,
            to: InReview,
        }),
        Verb::IAmDone | Verb::IDocumented => must_hold(InProgress, Review),
        Verb::PassReview => must_hold(InReview, Done),
        Verb::FailReview => must_hold(InReview, Open),
        Verb::Unclaim => match held {
            Some((_, InProgress)) => Ok(Move::Hand {
                from: InProgress,
                to: Open,
            }),
            Some((_, InReview)) => Ok(Move::Hand {
                from: InReview,
                to: Review,
            }),
            _ => Err(Refusal::NothingToGiveBack),
        },
        Verb::IAmIdle => must_be_free(Move::None),
        Verb::RequestSandbox
        | Verb::ReleaseSandbox
        | Verb::ResetSandbox
        | Verb::SandboxInfo
        | Verb::SandboxSql
        | Verb::RunExperiment
        | Verb::Note
        | Verb::Evidence => Ok(Move::None),
    }
}

fn explain(role: &RoleSpec, verb: Verb, refusal: Refusal<'_>) -> OutOfOrder {
    match refusal {
        Refusal::Holding { id, state } => OutOfOrder {
            message: format!("you already hold task {id} ({state})"),
            remediate: role.free_yourself(id, state == TaskState::InReview, verb),
        },
        Refusal::NeedsHeld { expected, held } => {
            let claims: &[Verb] = if expected == TaskState::InReview {
                &[Verb::ClaimReview]
            } else {
                &[Verb::GiveMeWork, Verb::IWillWorkOn]
            };
            let claims: Vec<&str> = claims
                .iter()
                .filter(|claim| role.allows(**claim))
                .map(|claim| claim.name())
                .collect();
            let remediate = match claims.as_slice() {
                [] => format!(
                    "your role cannot claim a task in {expected}; {verb} has none to hand on"
                ),
                [one] => format!("call {one} first"),
                [first, rest @ ..] => format!("call {first} (or {}) first", rest.join(" / ")),
            };
            let message = match held {
                Some((id, state)) => {
                    format!("{verb} needs a task in {expected}, but task {id} is {state}")
                }
                None => format!("{verb} needs a task you hold, and you hold none"),
            };
            OutOfOrder { message, remediate }
        }
        Refusal::NothingToGiveBack => OutOfOrder {
            message: "unclaim gives back a task you hold, and you hold none".into(),
            remediate: match role.how_to_hold_a_task() {
                Some(claim) => format!("{claim} to hold a task first"),
                None => "your role claims no task, so there is none to give back".to_owned(),
            },
        },
    }
}

/// A hand-over a caller made, as the broker records it (`detail` of the call's audit row), so a
/// repeat of the same call can be recognised after the first answer was lost (a restart cut the
/// connection): the store has moved the task on and the caller holds none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    pub verb: Verb,
    pub task: String,
    pub from: TaskState,
    pub to: TaskState,
}

impl Handed {
    /// The line the audit row keeps: `<task> <from> -> <to>`.
    pub fn detail(&self) -> String {
        format!("{} {} -> {}", self.task, self.from, self.to)
    }

    /// The hand-over an audit row of `verb` with this `detail` recorded; `None` for any other
    /// row (a claim, an idle, a refusal). Words after `<to>` are ignored.
    pub fn parse(verb: Verb, detail: &str) -> Option<Self> {
        let mut words = detail.split_whitespace();
        let (task, from, arrow, to) = (words.next()?, words.next()?, words.next()?, words.next()?);
        let (from, to) = (TaskState::parse(from)?, TaskState::parse(to)?);
        let planned = decide(verb, Some((task, from))).ok()?;
        (arrow == "->" && planned == (Move::Hand { from, to })).then(|| Self {
            verb,
            task: task.to_owned(),
            from,
            to,
        })
    }

    /// Whether `verb`, called by an agent holding no task, repeats this hand-over: the same verb,
    /// and (the caller checks) no other task move of the caller since. Such a call answers the
    /// first call's success again instead of `out_of_order`.
    pub fn is_repeated_by(&self, verb: Verb, held: Option<(&str, TaskState)>) -> bool {
        held.is_none() && self.verb == verb
    }
}

/// Whether `verb` moves a task (claims, hands over, or ends the engagement): the calls a repeat
/// is judged against.
pub fn moves_tasks(verb: Verb) -> bool {
    matches!(
        verb,
        Verb::GiveMeWork
            | Verb::IWillWorkOn
            | Verb::ClaimReview
            | Verb::IAmDone
            | Verb::IDocumented
            | Verb::PassReview
            | Verb::FailReview
            | Verb::Unclaim
            | Verb::IAmIdle
    )
}

/// What an agent of `role` that handed a task over with `verb` (from `from`) calls next: the
/// next review after a review, else the role's next claim, or the way to stop.
pub fn next_after_hand(role: &RoleSpec, verb: Verb, from: TaskState) -> String {
    let reviewed = matches!(verb, Verb::PassReview | Verb::FailReview)
        || (verb == Verb::Unclaim && from == TaskState::InReview);
    if reviewed && role.allows(Verb::ClaimReview) {
        let mut next = "claim_review for the next review".to_owned();
        if role.allows(Verb::IAmIdle) {
            next.push_str(", or i_am_idle to end your engagement");
        }
        return next;
    }
    role.after_handing()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::RoleBook;

    /// A role allowed every verb: the texts then name every step.
    fn everyone() -> RoleSpec {
        RoleSpec {
            verbs: Verb::ALL.into_iter().collect(),
            private_notes: false,
            read_only_evidence: false,
        }
    }

    #[test]
    fn a_role_is_pointed_only_to_its_own_verbs() {
        let book = RoleBook::default();
        let qa = book.get("qa").expect("qa");
        let busy =
            plan(qa, Verb::ClaimReview, Some(("t3", TaskState::InReview))).expect_err("busy");
        assert!(busy.remediate.contains("pass_review"), "{busy:?}");
        assert!(!busy.remediate.contains("i_am_done"), "{busy:?}");
        let documenter = book.get("documenter").expect("documenter");
        let busy = plan(
            documenter,
            Verb::GiveMeWork,
            Some(("t4", TaskState::InProgress)),
        )
        .expect_err("busy");
        assert!(busy.remediate.contains("i_documented"), "{busy:?}");
        assert!(!busy.remediate.contains("i_am_done"), "{busy:?}");
        let nothing = plan(qa, Verb::Unclaim, None).expect_err("nothing held");
        assert!(nothing.remediate.contains("claim_review"), "{nothing:?}");
        assert!(!nothing.remediate.contains("give_me_work"), "{nothing:?}");
        let reviewer = book.get("pr_reviewer").expect("pr_reviewer");
        assert_eq!(
            next_after_hand(reviewer, Verb::PassReview, TaskState::InReview),
            "claim_review for the next review"
        );
        let developer = book.get("developer").expect("developer");
        assert!(
            !next_after_hand(developer, Verb::Unclaim, TaskState::InProgress)
                .contains("claim_review")
        );
    }

    #[test]
    fn the_happy_path_of_a_task() {
        use TaskState::*;
        assert_eq!(
            plan(&everyone(), Verb::GiveMeWork, None),
            Ok(Move::Claim {
                from: Open,
                to: InProgress
            })
        );
        assert_eq!(
            plan(&everyone(), Verb::IAmDone, Some(("t1", InProgress))),
            Ok(Move::Hand {
                from: InProgress,
                to: Review
            })
        );
        assert_eq!(
            plan(&everyone(), Verb::ClaimReview, None),
            Ok(Move::Claim {
                from: Review,
                to: InReview
            })
        );
        assert_eq!(
            plan(&everyone(), Verb::PassReview, Some(("t1", InReview))),
            Ok(Move::Hand {
                from: InReview,
                to: Done
            })
        );
    }

    #[test]
    fn out_of_order_calls_name_the_verb_to_call_first() {
        let err = plan(&everyone(), Verb::IAmDone, None).expect_err("no task");
        assert!(err.remediate.contains("give_me_work"), "{err:?}");
        let err = plan(&everyone(), Verb::PassReview, None).expect_err("not claimed");
        assert!(err.remediate.contains("claim_review"), "{err:?}");
        let err = plan(
            &everyone(),
            Verb::PassReview,
            Some(("t9", TaskState::InProgress)),
        )
        .expect_err("wrong state");
        assert!(err.message.contains("t9") && err.remediate.contains("claim_review"));
        let err = plan(
            &everyone(),
            Verb::GiveMeWork,
            Some(("t2", TaskState::InProgress)),
        )
        .expect_err("busy");
        assert!(err.remediate.contains("i_am_done") && err.remediate.contains("unclaim"));
        let err = plan(
            &everyone(),
            Verb::IAmIdle,
            Some(("t2", TaskState::InReview)),
        )
        .expect_err("busy");
        assert!(err.remediate.contains("pass_review"));
    }

    #[test]
    fn unclaim_returns_the_task_to_where_it_was_waiting() {
        assert_eq!(
            plan(&everyone(), Verb::Unclaim, Some(("t", TaskState::InReview))),
            Ok(Move::Hand {
                from: TaskState::InReview,
                to: TaskState::Review
            })
        );
        assert!(plan(&everyone(), Verb::Unclaim, None).is_err());
    }

    #[test]
    fn a_hand_over_round_trips_through_its_audit_detail() {
        let handed = Handed {
            verb: Verb::IAmDone,
            task: "t1".into(),
            from: TaskState::InProgress,
            to: TaskState::Review,
        };
        let detail = handed.detail();
        assert_eq!(detail, "t1 in_progress -> review");
        assert_eq!(Handed::parse(Verb::IAmDone, &detail), Some(handed.clone()));
        assert_eq!(
            Handed::parse(Verb::IAmDone, &format!("{detail} (repeated)")),
            Some(handed.clone())
        );
        // Not a move this verb makes, or not a hand-over at all.
        assert_eq!(Handed::parse(Verb::PassReview, &detail), None);
        assert_eq!(Handed::parse(Verb::GiveMeWork, "claimed t1"), None);
        assert_eq!(Handed::parse(Verb::IAmIdle, "idle"), None);
        assert!(handed.is_repeated_by(Verb::IAmDone, None));
        assert!(!handed.is_repeated_by(Verb::Unclaim, None));
        assert!(!handed.is_repeated_by(Verb::IAmDone, Some(("t2", TaskState::InProgress))));
    }

    #[test]
    fn states_round_trip() {
        for state in TaskState::ALL {
            assert_eq!(TaskState::parse(state.as_str()), Some(state));
        }
        assert!(TaskState::parse("merged").is_none());
    }
}
