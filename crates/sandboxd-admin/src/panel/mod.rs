//! The web panel: server-rendered HTML with no script at all (the Content-Security-Policy
//! forbids scripts outright), one embedded stylesheet, and plain forms.
//!
//! - `login.rs`: the admin-token login, logout, and the session gate every other page is
//!   behind; `login_page.rs`: the login form and its double-submit cookie.
//! - `settings.rs`, `projects.rs`, `sandboxes.rs`, `pools.rs`, `sources.rs`, `audit.rs`: one
//!   file per page.
//! - `session.rs`: in-memory sessions with a CSRF token each; `layout.rs`: the page shell.
//! - `throttle.rs`: the login's rate limit per client.
//! - `form.rs`: the extractors every POST handler takes to read its form ([`VerifiedForm`]
//!   behind the login, `LoginForm` for the login itself); they check the CSRF token before the
//!   handler runs, and no other code can read a form.
//!
//! Every POST carries the session's CSRF token and answers with a redirect (POST → redirect →
//! GET), with a one-shot flash message saying what happened; only the restart answers with a
//! page, as the daemon it would redirect to is restarting.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::AppState;

mod audit;
mod form;
pub(crate) mod layout;
mod login;
mod login_page;
mod pools;
mod projects;
mod sandboxes;
pub(crate) mod session;
mod settings;
mod sources;
pub(crate) mod throttle;

pub use form::VerifiedForm;
use session::{Flash, PanelSession};

pub const STYLESHEET_PATH: &str = "/assets/panel.css";
const STYLESHEET: &str = include_str!("panel.css");

/// The session cookie. `HttpOnly` and `SameSite=Strict`: no script can read it and no other
/// site's page can make the browser send it.
pub const SESSION_COOKIE: &str = "sandboxd_session";

/// Headers on every panel response: no scripts, no framing, no caching of pages that show state.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn router(state: AppState) -> Router<AppState> {
    let gated = Router::new()
        .route("/", get(|| async { Redirect::to("/sandboxes") }))
        .route("/settings", get(settings::show))
        .route("/settings/sandbox-db", post(settings::set_switch))
        .route("/settings/restart", post(settings::restart))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/projects/{slug}", get(projects::show).post(projects::save))
        .route("/sandboxes", get(sandboxes::list))
        .route("/sandboxes/{owner}/teardown", post(sandboxes::teardown))
        .route("/sandboxes/janitor", post(sandboxes::run_janitor))
        .route("/pools", get(pools::list).post(pools::create))
        .route("/pools/{pool}", post(pools::resize))
        .route("/sources", get(sources::list).post(sources::save))
        .route("/sources/{name}/snapshot", post(sources::snapshot))
        .route("/sources/{name}/remove", post(sources::remove))
        .route("/audit", get(audit::show))
        .route("/logout", post(login::logout))
        .route_layer(middleware::from_fn_with_state(
            state,
            login::require_session,
        ));
    Router::new()
        .route(
            "/login",
            get(login::show)
                .post(login::submit)
                // Read before anyone is authenticated: a login form's size, not the daemon's limit.
                .layer(DefaultBodyLimit::max(login::MAX_FORM_BYTES)),
        )
        .route(
            STYLESHEET_PATH,
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/css; charset=utf-8"),
                        (header::CACHE_CONTROL, "public, max-age=3600"),
                    ],
                    STYLESHEET,
                )
            }),
        )
        .merge(gated)
        .layer(middleware::from_fn(security_headers))
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with every form POST, and
        // the daemon's Origin guard (rightly) refuses that.
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A cookie's value from the request headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().to_owned())
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, path `/`; `max_age` 0 deletes it.
pub fn set_cookie(name: &str, value: &str, max_age_secs: u64, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Sets a flash message and redirects (303) to `to`.
pub fn done(
    state: &AppState,
    session: &PanelSession,
    to: &str,
    ok: bool,
    text: String,
) -> Response {
    state.sessions.set_flash(&session.id, Flash { ok, text });
    Redirect::to(to).into_response()
}

/// A page that could not be built: the caller's mistake shows its message (4xx); an internal
/// failure shows a generic one (500) and logs the cause.
pub fn failure(
    session: &PanelSession,
    section: layout::Section,
    title: &str,
    err: impl Into<crate::error::ApiError>,
) -> Response {
    let err = err.into();
    let (status, _, message) = err.parts();
    if status.is_server_error() {
        tracing::error!(error = %err, "panel: building a page failed");
    }
    let flash = Flash {
        ok: false,
        text: message,
    };
    (
        status,
        layout::page(section, title, session, Some(&flash), maud::html! {}),
    )
        .into_response()
}
