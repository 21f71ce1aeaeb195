//! Settings → Feature Flags: the master switch, its stored and running values, and "takes
//! effect on next restart".

use axum::Extension;
use axum::extract::State;
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
    let pending = stored != running && settings.env_override.is_none();
    let body = html! {
        section class="card" {
            h2 { "Feature flags" }
            table class="grid" {
                thead { tr { th { "Flag" } th { "Stored" } th { "Running" } th {} } }
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
                "Changes are stored at once and take effect on next restart of sandboxd."
            }
            @if pending {
                p class="note" id="restart-pending" {
                    (badge("warn", "restart pending"))
                    " The stored value differs from the running one until sandboxd restarts."
                }
            }
            @if let Some(forced) = settings.env_override {
                p class="note" id="env-override" {
                    (badge("info", "env override"))
                    " " code { "ROBOCO_SANDBOX_DB_ENABLED" } " is set: it keeps the switch "
                    (if forced { "on" } else { "off" })
                    " whatever is stored."
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
        Ok(_) => done(
            &state,
            &session,
            "/settings",
            true,
            format!(
                "sandbox_db_enabled stored {}; it takes effect on next restart.",
                if enabled { "on" } else { "off" }
            ),
        ),
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
