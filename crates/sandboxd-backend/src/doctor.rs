//! One line of `sandboxd doctor`, as every backend reports it.

use serde::Serialize;

/// One line of `sandboxd doctor`.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorCheck {
    pub subject: String,
    pub ok: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl DoctorCheck {
    pub fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn missing(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}
