//! A warm-pool member between [`Backend::provision_idle`](crate::Backend::provision_idle) and
//! [`Backend::hand_out`](crate::Backend::hand_out): what a pool holds while no agent has it.

use std::time::{Duration, Instant};

use sandboxd_domain::Credentials;
use sandboxd_domain::engine::AdminStep;
use sandboxd_domain::instance::Instance;
use secrecy::SecretString;

use crate::handle::InstanceHandle;
use crate::wire::AdminSession;

/// How old a member's proof may be when it is handed out without a login of its own: past it
/// the hand-out logs in as the account again before answering. Three health checks' worth at
/// the default interval, so a pool checker that fell behind never weakens a hand-out.
pub const PROOF_MAX_AGE: Duration = Duration::from_secs(30);

/// A health check older than this proof logs in as the member's account again (the default
/// check interval of 10 s re-proves every other check).
pub const REPROVE_AFTER: Duration = Duration::from_secs(15);

/// A warm-pool member: running, ready, prepared, its features active, its superuser
/// connection held open. Its `instance.owner` is its pool slot and `instance.agent` holds
/// credentials nobody was given. Once [`ready`](IdleMember::ready) its handed-out account
/// exists and was proven by its own login; until then the hand-out mints it.
#[derive(Debug)]
pub struct IdleMember {
    pub instance: Instance,
    pub(crate) session: AdminSession,
    /// The account it will be handed out with, known to nobody until then: its password made
    /// by the daemon's CSPRNG, in memory only.
    pub(crate) agent: Credentials,
    /// The steps that make the account (a SCRAM verifier is 4096 rounds of PBKDF2, made when
    /// the member is held); emptied once they ran.
    pub(crate) mint: Vec<AdminStep>,
    pub(crate) proof: Option<Proof>,
}

/// The last time the member's account logged in by itself, and what the account was then, as
/// read over the held connection before and after that login.
#[derive(Debug)]
pub(crate) struct Proof {
    pub(crate) at: Instant,
    /// Holds the password's verifier or hash: compared, never shown.
    pub(crate) account: SecretString,
}

impl IdleMember {
    pub fn handle(&self) -> InstanceHandle {
        InstanceHandle::of(&self.instance)
    }

    /// The account name the hand-out will mint.
    pub(crate) fn minted_user(&self) -> &str {
        &self.agent.user
    }

    /// One more step that makes the account, over the held connection after it exists.
    pub(crate) fn mint_also(&mut self, step: AdminStep) {
        debug_assert!(
            self.proof.is_none(),
            "a step added after the account was made"
        );
        self.mint.push(step);
    }

    /// Whether the account exists and was proven by its own login (and how long ago).
    pub fn proven_for(&self) -> Option<Duration> {
        self.proof.as_ref().map(|proof| proof.at.elapsed())
    }
}
