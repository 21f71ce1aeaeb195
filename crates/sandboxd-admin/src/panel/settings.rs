//! Settings → Feature Flags: the master switch, its stored and running values, the environment
//! override when one rules, "takes effect on next restart", and the restart that applies it.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::layout::{self, Section, badge, csrf_field, on_off};
use super::session::PanelSession;
use super::{VerifiedForm, done};
use crate::AppState;

pub async fn show(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let settings = match state.desk.settings().await {
        Ok(settings) => settings,
        Err(err) => return super::failure(&session, Section::Settings, "Settings", err),
    };
    let stored = settings.sandbox_db_enabled_stored;
    let running = settings.sandbox_db_enabled_running;
    let pending = settings.restart_pending();
    let override_text = settings.override_text();
    let body = html! {
        section class="card" {
            h2 { "Feature flags" }
            table class="grid" {
                thead { tr { th { "Flag" } th { "Stored" } th { "Running" } th { "Override" } th {} } }
                tbody {
                    tr id="flag-sandbox-db-enabled" {
                        td {
                            code { "sandbox_db_enabled" }
                            div class="muted small" {
                                "Agents of opted-in projects may request throwaway databases ("
                                code { "request_sandbox" } ")."
                            }
                        }
                        td class="stored" { (on_off(stored)) }
                        td class="running" { (on_off(running)) }
                        td class="override" {
                            @match &override_text {
                                Some(text) => { code { (text) } }
                                None => { span class="muted" { "none" } }
                            }
                        }
                        td class="actions" {
                            form method="post" action="/settings/sandbox-db" {
                                (csrf_field(&session))
                                @if stored {
                                    input type="hidden" name="value" value="off";
                                    button class="danger" type="submit" id="disarm" { "Disarm" }
                                } @else {
                                    input type="hidden" name="value" value="on";
                                    button class="primary" type="submit" id="arm" { "Arm" }
                                }
                            }
                        }
                    }
                }
            }
            p class="note" {
                "Changes are stored at once and take effect on next restart of sandboxd. "
                "While the switch is off, warm pools hold no members."
            }
            @if pending {
                p class="note" id="restart-pending" {
                    (badge("warn", "restart pending"))
                    " The stored value differs from the running one until sandboxd restarts."
                }
            }
            @if let Some(text) = &override_text {
                p class="note" id="env-override" {
                    (badge("info", "env override"))
                    " " code { (text) } " is set in sandboxd's environment: it keeps the switch "
                    (if running { "on" } else { "off" })
                    " whatever is stored, also after a restart from here (a restart keeps the \
                     environment). Remove it from the service's environment and restart the \
                     service to let the stored value rule."
                }
            }
        }
        section class="card" id="restart" {
            h2 { "Restart" }
            p class="note" {
                "Restarts sandboxd in place: it stops accepting, finishes the calls under way and \
                 starts again with the same binary, arguments and environment (same process id). \
                 Live sandboxes stay with their credentials; the stored switch takes effect. \
                 Panel sessions live in memory: log in again afterwards."
            }
            form method="post" action="/settings/restart" {
                (csrf_field(&session))
                button class=(if pending { "primary" } else { "" }) type="submit" id="restart-now" {
                    "Restart sandboxd now"
                }
            }
        }
    };
    layout::page(
        Section::Settings,
        "Settings",
        &session,
        flash.as_ref(),
        body,
    )
    .into_response()
}

/// Asks for the restart and answers with a page of its own rather than the usual redirect: the
/// daemon is not listening while it drains and starts, and its panel sessions (in memory) end
/// with it, so the way back is the login.
pub async fn restart(State(state): State<AppState>, VerifiedForm { .. }: VerifiedForm) -> Response {
    state.desk.request_restart().await;
    let body = html! {
        h1 { "sandboxd is restarting" }
        p id="restarting" {
            "It stops accepting, finishes the calls under way and starts again in place; live \
             sandboxes stay. This takes a few seconds, longer with many live sandboxes."
        }
        p { a href="/login" { "Log in again" } " once it answers." }
    };
    (StatusCode::ACCEPTED, layout::bare("Restarting", body)).into_response()
}

pub async fn set_switch(
    State(state): State<AppState>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let enabled = match fields.get("value") {
        Some("on") => true,
        Some("off") => false,
        _ => {
            return done(
                &state,
                &session,
                "/settings",
                false,
                "The form sent no value; nothing changed.".into(),
            );
        }
    };
    match state.desk.set_enabled(enabled).await {
        Ok(settings) => {
            let when = match settings.override_text() {
                Some(text) => format!("it does not rule while {text} is set"),
                None => "it takes effect on next restart (Restart below)".to_owned(),
            };
            done(
                &state,
                &session,
                "/settings",
                true,
                format!(
                    "sandbox_db_enabled stored {}; {when}.",
                    if enabled { "on" } else { "off" }
                ),
            )
        }
        Err(err) => {
            tracing::error!(error = %err, "panel: storing the master switch failed");
            done(
                &state,
                &session,
                "/settings",
                false,
                "Storing the switch failed; the daemon's log has the cause.".into(),
            )
        }
    }
}
