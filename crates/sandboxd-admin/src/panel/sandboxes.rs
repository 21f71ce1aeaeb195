//! Sandboxes: what runs, by owner (as the backends list it), with a teardown button each; and a
//! button for one janitor pass. The teardown asks for confirmation without script: the button
//! sits inside a `<details>` the operator opens first.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;
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
    let sandboxes = match state.broker.sandboxes().await {
        Ok(sandboxes) => sandboxes,
        Err(err) => return failure(&session, Section::Sandboxes, "Sandboxes", err),
    };
    let instances: usize = sandboxes.iter().map(|s| s.instances.len()).sum();
    let body = html! {
        section class="card" {
            div class="card-head" {
                p class="muted" {
                    (sandboxes.len()) " sandbox" (if sandboxes.len() == 1 { "" } else { "es" })
                    ", " (instances) " instance" (if instances == 1 { "" } else { "s" })
                }
                form method="post" action="/sandboxes/janitor" {
                    (csrf_field(&session))
                    button type="submit" id="run-janitor" { "Run janitor now" }
                }
            }
            @if sandboxes.is_empty() {
                p class="empty" id="no-sandboxes" { "No sandboxes are running." }
            } @else {
                table class="grid" id="sandboxes" {
                    thead {
                        tr {
                            th { "Owner" } th { "Engines" } th { "Backend" } th class="num" { "Age" }
                            th class="num" { "Last used" } th { "Status" } th { "Instances" } th {}
                        }
                    }
                    tbody {
                        @for sandbox in &sandboxes {
                            tr id={ "sandbox-" (sandbox.owner) } {
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
                                                @if !instance.live { " " (status(&instance.status)) }
                                                @if !instance.tracked { " " (badge("warn", "untracked")) }
                                            }
                                        }
                                    }
                                }
                                td class="actions" {
                                    details class="confirm" {
                                        summary class="button danger" { "Tear down" }
                                        form method="post" action={ "/sandboxes/" (sandbox.owner) "/teardown" } {
                                            (csrf_field(&session))
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

pub async fn teardown(
    State(state): State<AppState>,
    ApiPath(owner): ApiPath<String>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    let owner = match AgentSlug::parse(&owner) {
        Ok(owner) => owner,
        Err(err) => return done(&state, &session, "/sandboxes", false, err.to_string()),
    };
    match state.broker.teardown_sandbox(&owner).await {
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
    let report = state.broker.run_janitor().await;
    done(
        &state,
        &session,
        "/sandboxes",
        true,
        format!(
            "Janitor: {} examined, {} reaped, {} kept (younger than the grace window).",
            report.examined,
            report.reaped.len(),
            report.kept_young
        ),
    )
}
