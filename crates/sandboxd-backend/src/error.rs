//! One error enum for the backend layer. Variants carry the operation and the instance they were
//! about; none carries a credential (wire errors are rendered by drivers that never echo
//! passwords, and we never format connection strings into them).

use std::fmt;
use std::time::Duration;

use sandboxd_domain::InputError;
use sandboxd_domain::instance::Instance;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "{engine} is not installed for the process backend: {missing} not found; install \
         {package}{alternative}"
    )]
    NotInstalled {
        engine: &'static str,
        missing: String,
        package: &'static str,
        alternative: &'static str,
    },
    #[error("image {image} for {engine} is not present on this Docker engine: {hint}")]
    ImageMissing {
        engine: &'static str,
        image: String,
        hint: String,
    },
    #[error("{name} did not become ready within {}s: {last_error}", deadline.as_secs())]
    ReadinessTimeout {
        name: String,
        deadline: Duration,
        last_error: String,
    },
    #[error("{name} stopped while starting: {detail}")]
    ExitedEarly { name: String, detail: String },
    #[error("feature {feature} of {engine} is not available in {location}: {hint}")]
    FeatureUnavailable {
        engine: &'static str,
        feature: &'static str,
        location: String,
        hint: String,
    },
    #[error("{operation} {name}: {source}")]
    Io {
        operation: &'static str,
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{operation} on {name}: {detail}")]
    Wire {
        operation: &'static str,
        name: String,
        detail: String,
    },
    #[error("docker {operation} {name}: {detail}")]
    Docker {
        operation: &'static str,
        name: String,
        detail: String,
    },
    #[error("kubernetes {operation} {name}: {detail}")]
    Kubernetes {
        operation: &'static str,
        name: String,
        detail: String,
    },
    #[error("the {backend} backend is unavailable: {detail}")]
    Unavailable {
        backend: &'static str,
        detail: String,
    },
    #[error("making {name} a clone failed while {step}: {detail}")]
    Clone {
        name: String,
        step: &'static str,
        detail: String,
    },
    #[error("{operation}: {detail}")]
    Unsupported {
        operation: &'static str,
        detail: String,
    },
    #[error("{name} exists and is younger than the grace window ({}s); leaving it alone", grace.as_secs())]
    YoungConflict { name: String, grace: Duration },
    #[error(transparent)]
    Input(#[from] InputError),
}

impl BackendError {
    pub(crate) fn io(
        operation: &'static str,
        name: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            operation,
            name: name.into(),
            source,
        }
    }

    /// True when the backend itself cannot be reached: the caller may retry later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// A failed exchange with `instance`'s server, as a `BackendError` naming what was being done.
pub(crate) fn wire_error<'a, E: fmt::Display>(
    instance: &'a Instance,
    operation: &'static str,
) -> impl FnOnce(E) -> BackendError + 'a {
    move |err| BackendError::Wire {
        operation,
        name: instance.name.clone(),
        detail: err.to_string(),
    }
}
