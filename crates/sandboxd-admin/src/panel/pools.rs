//! Pools: each warm pool (an engine's, or of an engine's clones of a source) — idle and
//! starting members, hand-outs, misses, quarantined members, a backoff in progress and its
//! cause, the snapshot a pool of clones makes members from — and a form to resize it.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;
use sandboxd_broker::PoolKey;
use sandboxd_domain::clock::format_age_since;

use super::layout::{self, Section, badge, csrf_field};
use super::session::PanelSession;
use super::{VerifiedForm, done};
use crate::AppState;
use crate::api::ApiPath;

pub async fn list(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let pools = state.desk.pools();
    let body = html! {
        section class="card" {
            h2 { "Warm pools" }
            @if pools.is_empty() {
                p class="muted" id="no-pools" {
                    "No warm pool is configured: every sandbox is provisioned cold. Add "
                    code { "[pools.<engine>]" } " with " code { "min_idle" } " and "
                    code { "max_total" } " to the config file to keep members ready."
                }
            } @else {
                table class="grid" id="pools" {
                    thead { tr {
                        th { "Engine" } th { "State" } th { "Idle" } th { "Starting" }
                        th { "Handed out" } th { "Misses" } th { "Quarantined" } th { "Sizes" }
                    } }
                    tbody {
                        @for pool in &pools {
                            tr id=(format!("pool-{}", pool.key)) {
                                td {
                                    strong { (pool.engine.name) }
                                    @if let Some(source) = &pool.key.clone_of {
                                        " · clone of " strong { (source) }
                                    }
                                    div class="muted small" {
                                        (pool.backend)
                                        @if !pool.features.is_empty() {
                                            " · " (pool.features.join(", "))
                                        }
                                        @if let Some(taken) = pool.snapshot_taken_at_ms {
                                            " · snapshot " (format_age_since(taken)) " old"
                                        }
                                    }
                                }
                                td class="state" {
                                    @if pool.key.clone_of.is_some() && pool.snapshot_taken_at_ms.is_none() {
                                        (badge("info", "waiting for a snapshot"))
                                        div class="muted small" {
                                            "members are made once the source has one (Sources page)"
                                        }
                                    } @else if let Some(wait) = pool.backing_off_for {
                                        (badge("warn", "backing off"))
                                        div class="muted small" {
                                            (pool.failures) " failed start(s); next try in "
                                            (wait.as_secs()) " s"
                                        }
                                        @if let Some(error) = &pool.last_error {
                                            div class="muted small last-error" { (error) }
                                        }
                                    } @else if pool.idle >= pool.min_idle {
                                        (badge("ok", "ready"))
                                    } @else {
                                        (badge("info", "filling"))
                                    }
                                }
                                td class="idle" { (pool.idle) " / " (pool.target) }
                                td { (pool.starting) }
                                td class="handed-out" { (pool.handed_out) }
                                td { (pool.misses) }
                                td { (pool.quarantined) }
                                td {
                                    form method="post" action=(format!("/pools/{}", pool.key)) class="inline" {
                                        (csrf_field(&session))
                                        label { "min idle " input type="number" name="min_idle" min="0" value=(pool.min_idle) size="3"; }
                                        label { " max total " input type="number" name="max_total" min="1" value=(pool.max_total) size="3"; }
                                        " "
                                        button type="submit" { "Resize" }
                                    }
                                }
                            }
                        }
                    }
                }
                p class="note" {
                    "Members are started, proven ready and prepared without any agent account; "
                    "a request takes one and gets its own account minted at hand-out. A pool of "
                    "clones holds members already made from its source's latest snapshot; a "
                    "newer snapshot replaces them. A resize is stored and applies at once; it "
                    "outlives a restart."
                }
            }
        }
    };
    layout::page(Section::Pools, "Pools", &session, flash.as_ref(), body).into_response()
}

pub async fn resize(
    State(state): State<AppState>,
    ApiPath(pool): ApiPath<String>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let size = |name: &str| {
        fields
            .get(name)
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    let outcome = match (PoolKey::parse(&pool), size("min_idle"), size("max_total")) {
        (Ok(key), Some(min_idle), Some(max_total)) => state
            .desk
            .resize_pool(&key, min_idle, max_total)
            .await
            .map(|pool| {
                format!(
                    "The {} pool keeps {} idle, at most {} in all.",
                    pool.key, pool.min_idle, pool.max_total
                )
            })
            .map_err(|err| {
                let err = crate::error::ApiError::from(err);
                err.parts().2
            }),
        (Err(err), _, _) => Err(err),
        _ => Err("min idle and max total must be whole numbers; nothing changed.".to_owned()),
    };
    match outcome {
        Ok(text) => done(&state, &session, "/pools", true, text),
        Err(text) => done(&state, &session, "/pools", false, text),
    }
}
