//! Why a sandbox could not be had, and what the agent is told: what failed, what became of its
//! sandbox, and how to go on.

use sandboxd_backend::BackendError;
use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};

/// Why `ensure_sandbox` failed.
#[derive(Debug)]
pub(crate) enum SandboxFailure {
    Backend(BackendError),
    Store(sandboxd_store::StoreError),
    /// The agent's turn could not be had (another replica held it too long, or the store
    /// failed); nothing was done.
    Turn(crate::BrokerError),
    /// Completing a live sandbox in place (an engine the project added, a feature asked for
    /// now) failed; what it had added was removed and the sandbox, its data and its
    /// credentials were kept as they were.
    Kept(Box<SandboxFailure>),
}

impl std::fmt::Display for SandboxFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Backend(err) => write!(f, "{err}"),
            Self::Store(err) => write!(f, "{err}"),
            Self::Turn(err) => write!(f, "{err}"),
            Self::Kept(err) => write!(f, "{err}"),
        }
    }
}

impl From<SandboxFailure> for crate::BrokerError {
    fn from(failure: SandboxFailure) -> Self {
        match failure {
            SandboxFailure::Backend(err) => Self::Backend(err),
            SandboxFailure::Store(err) => Self::Store(err),
            SandboxFailure::Turn(err) => err,
            SandboxFailure::Kept(inner) => Self::from(*inner),
        }
    }
}

impl SandboxFailure {
    fn feature_unavailable(&self) -> bool {
        match self {
            Self::Backend(err) => matches!(err, BackendError::FeatureUnavailable { .. }),
            Self::Store(_) | Self::Turn(_) => false,
            Self::Kept(inner) => inner.feature_unavailable(),
        }
    }

    /// The agent's answer: what failed, what became of its sandbox, and how to go on.
    pub(crate) fn envelope(&self) -> ErrorEnvelope {
        let retryable = !self.feature_unavailable();
        let (message, outcome) = match self {
            Self::Kept(_) => (
                format!("your sandbox could not be completed in place: {self}"),
                "your sandbox, its data and its credentials were kept as they were",
            ),
            _ => (
                format!("the sandbox could not be provisioned: {self}"),
                "nothing was left behind",
            ),
        };
        let remediate = if retryable {
            format!("retry request_sandbox in a little while; {outcome}")
        } else {
            format!(
                "if you asked for the unavailable feature, call request_sandbox again without \
                 it; if it is one of your project's standing features, an operator must provide \
                 it or remove it from the project; {outcome}"
            )
        };
        ErrorEnvelope::new(ErrorCode::InvalidState, message, remediate).retryable(retryable)
    }
}
