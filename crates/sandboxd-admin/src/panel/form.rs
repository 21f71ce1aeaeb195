//! The only way a panel handler reads a submitted form: extractors that check the form's CSRF
//! token before the handler runs. [`VerifiedForm`] checks the session's token (every POST behind
//! the login); [`LoginForm`] checks the login page's double-submit cookie (the one POST before
//! there is a session). [`FormFields`] cannot be built anywhere else, so a handler that skipped
//! the check would have no form to read.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::cookie;
use super::layout::{self, CSRF_FIELD};
use super::login_page::{self, LOGIN_COOKIE};
use super::session::{PanelSession, tokens_match};
use crate::AppState;

/// A submitted form as its fields in order (repeated names allowed: checkboxes).
#[derive(Debug)]
pub struct FormFields(Vec<(String, String)>);

impl FormFields {
    fn parse(body: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the form's CSRF field is `expected`, compared in constant time.
    fn carries(&self, expected: &str) -> bool {
        tokens_match(self.get(CSRF_FIELD).unwrap_or_default(), expected)
    }
}

/// A POST form of a logged-in session whose CSRF field is the session's token. Anything else
/// is answered with a 403 "form expired" page before the handler runs, so nothing changes.
#[derive(Debug)]
pub struct VerifiedForm {
    pub session: PanelSession,
    pub fields: FormFields,
}

impl FromRequest<AppState> for VerifiedForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        // `require_session` put it there; a route outside the gate has none and is sent to
        // the login rather than trusted.
        let Some(session) = request.extensions().get::<PanelSession>().cloned() else {
            return Err(Redirect::to("/login").into_response());
        };
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = FormFields::parse(&body);
        if !fields.carries(&session.csrf) {
            return Err(expired());
        }
        Ok(Self { session, fields })
    }
}

/// The login form, whose CSRF field must echo the login page's double-submit cookie. Anything
/// else gets the login page again (403) with a fresh cookie.
#[derive(Debug)]
pub struct LoginForm {
    pub fields: FormFields,
}

impl FromRequest<AppState> for LoginForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let expected = cookie(request.headers(), LOGIN_COOKIE).unwrap_or_default();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = FormFields::parse(&body);
        if !fields.carries(&expected) {
            return Err(login_page::page(
                state,
                StatusCode::FORBIDDEN,
                Some("The login form expired (or cookies are off). Try again."),
            ));
        }
        Ok(Self { fields })
    }
}

/// The answer to a form that was not sent from this session of the panel.
fn expired() -> Response {
    (
        StatusCode::FORBIDDEN,
        layout::bare(
            "Form expired",
            maud::html! {
                h1 { "This form has expired" }
                p { "The form was not sent from this session of the panel. Nothing changed." }
                p { a href="/" { "Back to the panel" } }
            },
        ),
    )
        .into_response()
}
