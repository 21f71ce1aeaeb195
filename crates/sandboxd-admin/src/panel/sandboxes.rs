//! Sandboxes: what runs, by owner (as the backends list it), with a teardown button each for
//! this daemon's, and the foreign ones (another daemon's or the CLI's) apart with their maker
//! and no button; and a button for one janitor pass. The teardown asks for confirmation without script: the button
//! sits inside a `<details>` the operator opens first.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use sandboxd_broker::SandboxView;
use sandboxd_domain::AgentSlug;

use sandboxd_domain::clock::format_age_since;

use super::layout::{self, Section, badge, csrf_field, status};
use super::session::PanelSession;
use super::{VerifiedForm, done, failure};
use crate::AppState;
use crate::api::ApiPath;

pub async fn list(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let sandboxes = match state.desk.sandboxes().await {
        Ok(sandboxes) => sandboxes,
        Err(err) => return failure(&session, Section::Sandboxes, "Sandboxes", err),
    };
    let (foreign, own): (Vec<SandboxView>, Vec<SandboxView>) =
        sandboxes.into_iter().partition(|s| s.foreign);
    let instances: usize = own.iter().map(|s| s.instances.len()).sum();
    let body = html! {
        section class="card" {
            div class="card-head" {
                p class="muted" {
                    (own.len()) " sandbox" (if own.len() == 1 { "" } else { "es" })
                    ", " (instances) " instance" (if instances == 1 { "" } else { "s" })
                    " made by this sandboxd (" code id="daemon-id" { (state.desk.daemon_id()) } ")"
                }
                form method="post" action="/sandboxes/janitor" {
                    (csrf_field(&session))
                    button type="submit" id="run-janitor" { "Run janitor now" }
                }
            }
            @if own.is_empty() {
                p class="empty" id="no-sandboxes" { "No sandboxes are running." }
            } @else {
                (sandbox_table(&session, &own, false))
            }
        }
        @if !foreign.is_empty() {
            section class="card" id="foreign-card" {
                h2 { "Foreign sandboxes" }
                p class="muted" {
                    "Made by another sandboxd or by " code { "sandboxd provision" } " on the same host or \
                     engine. This sandboxd lists them and never touches them; remove them through \
                     their maker."
                }
                (sandbox_table(&session, &foreign, true))
            }
        }
    };
    layout::page(
        Section::Sandboxes,
        "Sandboxes",
        &session,
        flash.as_ref(),
        body,
    )
    .into_response()
}

/// One table of sandboxes; own ones get a teardown button, foreign ones their maker instead.
fn sandbox_table(session: &PanelSession, sandboxes: &[SandboxView], foreign: bool) -> Markup {
    html! {
        table class="grid" id=(if foreign { "foreign-sandboxes" } else { "sandboxes" }) {
            thead {
                tr {
                    th { "Owner" } th { "Engines" } th { "Backend" } th class="num" { "Age" }
                    th class="num" { "Last used" } th { "Status" } th { "Instances" }
                    th { @if foreign { "Made by" } }
                }
            }
            tbody {
                @for sandbox in sandboxes {
                    tr id={ @if foreign { "foreign-" (sandbox.maker) "-" } @else { "sandbox-" } (sandbox.owner) } {
                        td { code class="owner" { (sandbox.owner) } }
                        td { @for engine in &sandbox.engines { (badge("info", engine.name)) " " } }
                        td { (sandbox.backends.iter().map(|b| b.as_str()).collect::<Vec<_>>().join(", ")) }
                        td class="num" { (format_age_since(sandbox.created_at_ms)) }
                        td class="num last-used" {
                            @match sandbox.last_used_at_ms {
                                Some(at) => { (format_age_since(at)) " ago" }
                                None => span class="muted" { "—" }
                            }
                        }
                        td class="status" { (status(sandbox.status)) }
                        td {
                            ul class="instances" {
                                @for instance in &sandbox.instances {
                                    li {
                                        code { (instance.name) }
                                        " " span class="muted" { (instance.host) ":" (instance.port) }
                                        @if let Some(image) = &instance.image {
                                            " " span class="muted image" { (image) }
                                        }
                                        @if !instance.live { " " (status(&instance.status)) }
                                        @if !instance.tracked && !foreign { " " (badge("warn", "untracked")) }
                                    }
                                }
                            }
                        }
                        @if foreign {
                            td class="maker" { code { (sandbox.maker) } }
                        } @else {
                            td class="actions" {
                                details class="confirm" {
                                    summary class="button danger" { "Tear down" }
                                    form method="post" action={ "/sandboxes/" (sandbox.owner) "/teardown" } {
                                        (csrf_field(session))
                                        button class="danger" type="submit" { "Confirm teardown" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn teardown(
    State(state): State<AppState>,
    ApiPath(owner): ApiPath<String>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    let owner = match AgentSlug::parse(&owner) {
        Ok(owner) => owner,
        Err(err) => return done(&state, &session, "/sandboxes", false, err.to_string()),
    };
    match state.desk.teardown_sandbox(&owner).await {
        Ok(removed) => done(
            &state,
            &session,
            "/sandboxes",
            true,
            format!(
                "Tore down {owner}'s sandbox: {removed} instance{} removed.",
                if removed == 1 { "" } else { "s" }
            ),
        ),
        Err(err) => {
            let err = crate::error::ApiError::Broker(err);
            let (status, _, message) = err.parts();
            let text = if status.is_server_error() {
                tracing::error!(owner = %owner, error = %err, "panel: a teardown failed");
                "The teardown failed; the daemon's log has the cause.".to_owned()
            } else {
                message
            };
            done(&state, &session, "/sandboxes", false, text)
        }
    }
}

pub async fn run_janitor(
    State(state): State<AppState>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    let report = state.desk.run_janitor().await;
    done(
        &state,
        &session,
        "/sandboxes",
        true,
        format!(
            "Janitor: {} examined, {} reaped, {} kept (younger than the grace window), {} \
             foreign (left alone).",
            report.examined,
            report.reaped.len(),
            report.kept_young,
            report.foreign
        ),
    )
}
