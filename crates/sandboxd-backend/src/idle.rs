//! A warm-pool member between [`Backend::provision_idle`](crate::Backend::provision_idle) and
//! [`Backend::hand_out`](crate::Backend::hand_out): what a pool holds while no agent has it.

use sandboxd_domain::Credentials;
use sandboxd_domain::engine::AdminStep;
use sandboxd_domain::instance::Instance;

use crate::error::{BackendError, wire_error};
use crate::handle::InstanceHandle;
use crate::wire::AdminSession;

/// A warm-pool member: running, ready, prepared, its features active, its superuser
/// connection held open, and no handed-out account yet. Its `instance.owner` is its pool slot
/// and `instance.agent` holds credentials nobody was given.
#[derive(Debug)]
pub struct IdleMember {
    pub instance: Instance,
    pub(crate) session: AdminSession,
    /// The account it will be handed out with, and the steps that make it: made while the
    /// member waits (a SCRAM verifier is 4096 rounds of PBKDF2), run when it is handed out.
    pub(crate) agent: Credentials,
    pub(crate) mint: Vec<AdminStep>,
}

impl IdleMember {
    pub fn handle(&self) -> InstanceHandle {
        InstanceHandle::of(&self.instance)
    }

    /// The account name the hand-out will mint.
    pub(crate) fn minted_user(&self) -> &str {
        &self.agent.user
    }

    /// One more step the hand-out runs over the held connection, after the account exists.
    pub(crate) fn mint_also(&mut self, step: AdminStep) {
        self.mint.push(step);
    }

    /// One round trip over the held connection: the member still answers its superuser.
    pub async fn check(&mut self) -> Result<(), BackendError> {
        self.session
            .check()
            .await
            .map_err(wire_error(&self.instance, "checking"))
    }
}
