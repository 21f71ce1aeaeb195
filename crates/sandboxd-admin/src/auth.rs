//! The admin token and the API's bearer check.
//!
//! The token is compared in constant time over SHA-256 digests of both sides, so neither the
//! position of the first differing byte nor the token's length shows in the response time.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::ApiError;

/// The admin token, held only as its digest.
pub struct AdminToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl AdminToken {
    pub fn new(token: &SecretString) -> Self {
        Self {
            digest: digest(token.expose_secret().as_bytes()),
        }
    }

    /// True when `given` is the admin token (constant time). An empty token never matches.
    pub fn verify(&self, given: &str) -> bool {
        !given.is_empty() && bool::from(digest(given.as_bytes()).ct_eq(&self.digest))
    }
}

/// The bearer token of an `Authorization` header value, if it is one.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Lets a request through only with the admin token; otherwise answers 401 and nothing runs.
pub async fn require_admin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match given {
        Some(token) if state.token.verify(token) => next.run(request).await,
        Some(_) => {
            tracing::warn!(path = %request.uri().path(), "admin API: wrong admin token");
            ApiError::Unauthorized("the bearer token is not the admin token").into_response()
        }
        None => ApiError::Unauthorized("send the admin token as `Authorization: Bearer <token>`")
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_only_the_exact_token() {
        let token = AdminToken::new(&SecretString::from("s3cret-token"));
        assert!(token.verify("s3cret-token"));
        assert!(!token.verify("s3cret-token "));
        assert!(!token.verify("s3cret-toke"));
        assert!(!token.verify(""));
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn parses_bearer_headers() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("abc"), None);
    }
}
