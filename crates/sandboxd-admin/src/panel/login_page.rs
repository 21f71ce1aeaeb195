//! The login page: the form taking the admin token, and the double-submit cookie that protects
//! it before there is a session (the form must echo it; `LoginForm` checks).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::layout::{self, CSRF_FIELD};
use super::session::random_token;
use super::set_cookie;
use crate::AppState;

/// The login form's double-submit cookie.
pub(super) const LOGIN_COOKIE: &str = "sandboxd_login";
const LOGIN_COOKIE_SECS: u64 = 3600;

fn form(csrf: &str, error: Option<&str>) -> Markup {
    layout::bare(
        "Log in",
        html! {
            div class="card login" {
                h1 { span class="brand-mark" { "◆" } " sandboxd" }
                p class="muted" { "Operator panel" }
                @if let Some(error) = error {
                    div class="flash flash-error" role="alert" { (error) }
                }
                form method="post" action="/login" {
                    input type="hidden" name=(CSRF_FIELD) value=(csrf);
                    label for="token" { "Admin token" }
                    input id="token" type="password" name="token" autocomplete="current-password"
                        required autofocus;
                    button class="primary" type="submit" { "Log in" }
                }
                p class="muted small" {
                    "The token is in the daemon's admin token file ("
                    code { "admin.token" } " in its state directory) or in "
                    code { "SANDBOXD_ADMIN_TOKEN" } "."
                }
            }
        },
    )
}

/// The login form with a fresh double-submit cookie.
pub(super) fn page(state: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let csrf = random_token();
    (
        status,
        [(
            header::SET_COOKIE,
            set_cookie(
                LOGIN_COOKIE,
                &csrf,
                LOGIN_COOKIE_SECS,
                state.config.secure_cookies,
            ),
        )],
        form(&csrf, error),
    )
        .into_response()
}
