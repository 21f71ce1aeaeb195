//! The admin API's errors: `{"error": <code>, "message": ...}`.
//!
//! A caller's mistake (bad slug, unknown engine, a feature outside the allowlist, malformed
//! JSON) is a 4xx whose message says what is allowed; the broker refused it before changing
//! anything. Anything else is a 500 with a generic message, and its cause goes to the log only.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandboxd_broker::BrokerError;
use sandboxd_domain::InputError;

use crate::wire::ErrorBody;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Input(#[from] InputError),
    /// A request body or query string that does not parse.
    #[error("{message}")]
    Malformed { code: &'static str, message: String },
    #[error("{0}")]
    Broker(#[from] BrokerError),
}

/// Shows rejected text safely: control characters and markup escaped, cut to a sane length.
pub fn clean(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let mut shown: String = text
        .chars()
        .take(MAX_CHARS)
        .flat_map(char::escape_default)
        .collect::<String>()
        .replace('<', "\\u{3c}")
        .replace('>', "\\u{3e}")
        .replace('&', "\\u{26}");
    if text.chars().count() > MAX_CHARS {
        shown.push('…');
    }
    shown
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let code = match rejection {
            JsonRejection::MissingJsonContentType(_) => "unsupported_media_type",
            _ => "malformed_json",
        };
        ApiError::Malformed {
            code,
            message: clean(&rejection.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::Malformed {
            code: "invalid_query",
            message: clean(&rejection.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::Malformed {
            code: "invalid_path",
            message: clean(&rejection.body_text()),
        }
    }
}

fn input_code(err: &InputError) -> &'static str {
    match err {
        InputError::InvalidName { .. } => "invalid_name",
        InputError::UnknownEngine { .. } => "unknown_engine",
        InputError::FeatureNotAllowed { .. } => "feature_not_allowed",
        InputError::Malformed { .. } => "invalid_input",
    }
}

impl ApiError {
    /// Status, code and the message the caller may see.
    pub fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::Unauthorized(message) => {
                (StatusCode::UNAUTHORIZED, "unauthorized", (*message).into())
            }
            ApiError::Input(err) => (StatusCode::BAD_REQUEST, input_code(err), err.to_string()),
            ApiError::Malformed { code, message } => {
                let status = if *code == "unsupported_media_type" {
                    StatusCode::UNSUPPORTED_MEDIA_TYPE
                } else {
                    StatusCode::BAD_REQUEST
                };
                (status, code, message.clone())
            }
            ApiError::Broker(err) => match err {
                BrokerError::Input(input) => (
                    StatusCode::BAD_REQUEST,
                    input_code(input),
                    input.to_string(),
                ),
                BrokerError::NotFound { .. } => {
                    (StatusCode::NOT_FOUND, "not_found", err.to_string())
                }
                BrokerError::Conflict { .. } | BrokerError::InUse { .. } => {
                    (StatusCode::CONFLICT, "conflict", err.to_string())
                }
                BrokerError::Foreign { .. } => (StatusCode::CONFLICT, "foreign", err.to_string()),
                BrokerError::Source(_) => (
                    StatusCode::BAD_GATEWAY,
                    "source_unreachable",
                    err.to_string(),
                ),
                BrokerError::FeatureUnavailable(_) => (
                    StatusCode::BAD_REQUEST,
                    "feature_unavailable",
                    err.to_string(),
                ),
                BrokerError::EngineUnavailable(_) => (
                    StatusCode::BAD_REQUEST,
                    "engine_unavailable",
                    err.to_string(),
                ),
                _ => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "sandboxd failed to do this; the daemon's log has the cause".into(),
                ),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        if status.is_server_error() {
            tracing::error!(error = %self, cause = ?std::error::Error::source(&self), "admin API request failed");
        }
        let mut response = (
            status,
            axum::Json(ErrorBody {
                error: code.to_owned(),
                message,
            }),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sandboxd-admin\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_failures_show_nothing_internal() {
        let err = ApiError::Broker(BrokerError::Backend(
            sandboxd_backend::BackendError::ExitedEarly {
                name: "instance-at-/secret-path".into(),
                detail: "boom".into(),
            },
        ));
        let (status, code, message) = err.parts();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(code, "internal");
        assert!(!message.contains("secret-path"), "{message}");
    }

    #[test]
    fn clean_escapes_markup_and_control_characters() {
        let shown = clean("bad <script>\n\u{1b}x");
        assert!(!shown.contains('<') && !shown.contains('\n') && !shown.contains('\u{1b}'));
        assert!(clean(&"a".repeat(1000)).ends_with('…'));
    }
}
