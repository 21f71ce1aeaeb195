//! The admin login: a form taking the admin token. Before there is a session, the login form is
//! protected from cross-site submission by a double-submit token (a SameSite=Strict cookie that
//! the form must echo, checked by `LoginForm`); after it, by the session's own CSRF token
//! (checked by `VerifiedForm`). The token is compared first, in constant time: the right one
//! always logs in, whatever came before from the same address; each client has a budget of wrong
//! tokens per window (`throttle.rs`), past which a wrong one answers 429 (one audit row per run).
//! The form itself is small, and its body is capped at [`MAX_FORM_BYTES`]: it is read before
//! anyone is authenticated.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::form::{LoginForm, VerifiedForm};
use super::login_page::{LOGIN_COOKIE, page};
use super::session::PanelSession;
use super::throttle::{Client, Limited};
use super::{SESSION_COOKIE, cookie, set_cookie};
use crate::AppState;

/// The largest login form body: a CSRF token and an admin token, with room to spare. An
/// unauthenticated client can make the daemon hold no more than this per connection.
pub(super) const MAX_FORM_BYTES: usize = 4096;

fn session_of(state: &AppState, headers: &HeaderMap) -> Option<PanelSession> {
    cookie(headers, SESSION_COOKIE).and_then(|id| state.sessions.get(&id))
}

/// The gate in front of every page but the login: no session, no page (303 to the login).
pub async fn require_session(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    match session_of(&state, request.headers()) {
        Some(session) => {
            request.extensions_mut().insert(session);
            next.run(request).await
        }
        None => Redirect::to("/login").into_response(),
    }
}

pub async fn show(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if session_of(&state, &headers).is_some() {
        return Redirect::to("/").into_response();
    }
    page(&state, StatusCode::OK, None)
}

/// A wrong token past the client's budget. One audit row and one log line per run of refusals,
/// not per attempt.
async fn limited(state: &AppState, client: Client, limited: Limited) -> Response {
    let retry = limited.retry_after.as_secs();
    if limited.first {
        let detail = format!(
            "{} wrong logins within {} s from {client}; its wrong tokens are refused for {retry} s",
            state.config.login_attempts,
            state.config.login_window.as_secs()
        );
        tracing::warn!(%client, retry_after_secs = retry, "panel: login rate limit reached");
        state.desk.audit_login_limited("panel", detail).await;
    }
    let message = format!(
        "Too many wrong tokens from your address: they are refused for {retry} s. The admin \
         token still logs in."
    );
    let mut response = page(state, StatusCode::TOO_MANY_REQUESTS, Some(&message));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry));
    response
}

pub async fn submit(
    State(state): State<AppState>,
    client: Client,
    LoginForm { fields }: LoginForm,
) -> Response {
    // Compared first (constant time): the right token is never refused for what others sent
    // from the same address. Only a wrong one is charged to the client's budget.
    let token = fields.get("token").unwrap_or_default();
    if !state.token.verify(token) {
        if let Err(refused) = state.login_throttle.charge(client) {
            return limited(&state, client, refused).await;
        }
        state.desk.audit_login("panel", false).await;
        tracing::warn!(%client, "panel: a login with a wrong admin token");
        return page(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("That is not the admin token."),
        );
    }
    state.desk.audit_login("panel", true).await;
    state.login_throttle.succeeded(client);
    let session = state.sessions.create();
    let secure = state.config.secure_cookies;
    let mut response = Redirect::to("/").into_response();
    let headers = response.headers_mut();
    for value in [
        set_cookie(
            SESSION_COOKIE,
            &session.id,
            state.sessions.ttl().as_secs(),
            secure,
        ),
        set_cookie(LOGIN_COOKIE, "", 0, secure),
    ] {
        if let Ok(value) = value.parse() {
            headers.append(header::SET_COOKIE, value);
        }
    }
    response
}

pub async fn logout(
    State(state): State<AppState>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    state.sessions.remove(&session.id);
    (
        [(
            header::SET_COOKIE,
            set_cookie(SESSION_COOKIE, "", 0, state.config.secure_cookies),
        )],
        Redirect::to("/login"),
    )
        .into_response()
}
