//! Errors of the operator-facing API. Agent-facing verbs answer envelopes instead (see
//! `envelopes.rs`): an agent never sees these.

use sandboxd_backend::BackendError;
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::{DaemonId, EngineRef, InputError};
use sandboxd_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The caller's input was refused; nothing changed.
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{what} {id} does not exist")]
    NotFound { what: &'static str, id: String },
    #[error("{what} {id} already exists")]
    Conflict { what: &'static str, id: String },
    /// Still referenced by something that must go first.
    #[error("{what} {id} is in use: {detail}")]
    InUse {
        what: &'static str,
        id: String,
        detail: String,
    },
    /// The instance was made by another sandboxd (or the CLI); this one never touches it.
    #[error(
        "{name} was made by {maker}, not by this sandboxd; remove it through its maker \
         (`sandboxd teardown --owner …` for the CLI's, that daemon's `sandboxd sandboxes rm`)"
    )]
    Foreign { name: String, maker: DaemonId },
    /// A standing feature no backend of this sandboxd provides; the message says where it
    /// exists, or what provides it.
    #[error("{0}")]
    FeatureUnavailable(String),
    /// An engine the primary backend cannot run; the message says why, where it runs, and
    /// which engines run here.
    #[error("{0}")]
    EngineUnavailable(String),
    #[error("store: {0}")]
    Store(#[source] StoreError),
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// The experiment runtime could not be built (an engine configuration wasmtime refused).
    #[error("experiments: {0}")]
    Experiments(String),
    /// A clone source could not be read (unreachable, refused, pg_dump failed); the message
    /// never quotes its DSN.
    #[error("source: {0}")]
    Source(String),
    /// Another replica held what this call needs for longer than it waits (retry).
    #[error("{what} stayed busy on another replica for {}s", waited.as_secs())]
    Busy {
        what: String,
        waited: std::time::Duration,
    },
}

impl From<StoreError> for BrokerError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl BrokerError {
    /// True for the caller's mistakes (4xx), false for failures inside sandboxd (5xx).
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            Self::Input(_)
                | Self::NotFound { .. }
                | Self::Conflict { .. }
                | Self::Foreign { .. }
                | Self::FeatureUnavailable(_)
                | Self::EngineUnavailable(_)
        )
    }
}

/// A project setting (`sandbox_sizes`, …) names `engine`, which the project did not opt into;
/// `thing` is what it gave for it ("a size for").
pub(crate) fn not_opted_in(
    what: &'static str,
    thing: &str,
    engine: EngineRef,
    opted: &[EngineRef],
) -> BrokerError {
    InputError::Malformed {
        what,
        detail: format!(
            "{thing} {engine}, which is not in sandbox_services; opted in: {}",
            allowed_list(opted.iter().map(|e| e.name))
        ),
    }
    .into()
}
