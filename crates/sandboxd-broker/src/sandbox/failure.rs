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

    /// The engine the backend turned out not to run (its image or programs went missing since
    /// the guards asked), and the backend's words on how to provide it.
    fn engine_missing(&self) -> Option<(&'static str, &BackendError)> {
        match self {
            Self::Backend(
                err @ (BackendError::ImageMissing { engine, .. }
                | BackendError::NotInstalled { engine, .. }),
            ) => Some((*engine, err)),
            Self::Backend(_) | Self::Store(_) | Self::Turn(_) => None,
            Self::Kept(inner) => inner.engine_missing(),
        }
    }

    /// The agent's answer: what failed, what became of its sandbox, and how to go on. How to
    /// provide a missing engine is the operator's to read (`remediate`), never a command in
    /// the agent's message; waiting does not bring it back, so it is not retryable.
    pub(crate) fn envelope(&self) -> ErrorEnvelope {
        if let Some((engine, err)) = self.engine_missing() {
            return ErrorEnvelope::new(
                ErrorCode::EngineUnavailable,
                format!(
                    "{engine} cannot run on this sandboxd: what runs it is not installed here; \
                     do not retry {engine}: call request_sandbox again with your project's \
                     other services, or run your tests without {engine}; {}",
                    if matches!(self, Self::Kept(_)) {
                        "your sandbox, its data and its credentials were kept as they were"
                    } else {
                        "nothing was left behind"
                    }
                ),
                format!("for the operator: {err}"),
            )
            .with_missing(vec![engine.to_owned()]);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_is_the_operators_to_fix_never_a_command_in_the_agents_message() {
        let failure = SandboxFailure::Backend(BackendError::ImageMissing {
            engine: "mongo",
            image: "mongo:8".into(),
            hint: "pull it with `docker pull mongo:8`".into(),
        });
        let envelope = failure.envelope();
        assert_eq!(envelope.error, ErrorCode::EngineUnavailable);
        assert!(!envelope.retryable, "{envelope:?}");
        assert!(
            !envelope.message.contains('`') && !envelope.message.contains("docker"),
            "{envelope:?}"
        );
        assert!(
            envelope.remediate.contains("docker pull mongo:8"),
            "{envelope:?}"
        );
        let kept = SandboxFailure::Kept(Box::new(failure)).envelope();
        assert!(kept.message.contains("were kept"), "{kept:?}");
    }
}
