//! One line of `sandboxd doctor`, as every backend reports it.

use serde::Serialize;

/// One line of `sandboxd doctor`.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorCheck {
    pub subject: String,
    /// Whether what was looked for is there and works.
    pub ok: bool,
    /// Whether a failure keeps sandboxd (or the backend it names) from working; a failed
    /// optional check only means something is not offered (an engine, a feature).
    pub required: bool,
    /// The backend the check is about (`process`, `docker`, `kubernetes`); none for the
    /// daemon's own checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl DoctorCheck {
    pub fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            ok: true,
            required: true,
            backend: None,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A required check that failed.
    pub fn missing(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            ok: false,
            required: true,
            backend: None,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// An optional check that failed: something is not offered, and nothing else breaks.
    pub fn unavailable(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::missing(subject, detail, fix).optional()
    }

    /// The same check, its failure only something not offered.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// The same check, about `backend`.
    pub fn on(mut self, backend: impl Into<String>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// `ok`, `MISSING`, or `not available (optional)`.
    pub fn status(&self) -> &'static str {
        match (self.ok, self.required) {
            (true, _) => "ok",
            (false, true) => "MISSING",
            (false, false) => "not available (optional)",
        }
    }
}
