//! Pools: each warm pool (an engine's, or of an engine's clones of a source) — idle and
//! starting members, hand-outs, misses, quarantined members, a backoff in progress and its
//! cause, the snapshot a pool of clones makes members from — a form to resize it, and one to
//! add a pool (stored, filled at once, kept across restarts), as `sandboxd pools set` does.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;
use sandboxd_broker::{PoolConfig, PoolKey};
use sandboxd_domain::clock::format_age_since;
use sandboxd_domain::engines;

use super::form::FormFields;
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
                    "No warm pool yet: every sandbox is provisioned cold. Add one below (or "
                    code { "[pools.<engine>]" } " in the config file) to keep members ready."
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
        (add_form(&session))
    };
    layout::page(Section::Pools, "Pools", &session, flash.as_ref(), body).into_response()
}

/// The form that adds a pool: an engine (and a source for a pool of clones) and its sizes.
fn add_form(session: &PanelSession) -> maud::Markup {
    html! {
        section class="card" id="add-pool" {
            h2 { "Add a pool" }
            form method="post" action="/pools" {
                (csrf_field(session))
                label { "engine "
                    select name="engine" {
                        @for engine in engines::all() {
                            option value=(engine.name) { (engine.name) }
                        }
                    }
                }
                label { " clones of source "
                    input type="text" name="source" placeholder="(none: plain members)" size="14";
                }
                label { " min idle " input type="number" name="min_idle" min="0" value="1" size="3"; }
                label { " max total " input type="number" name="max_total" min="1" placeholder="4" size="3"; }
                " "
                button type="submit" { "Add pool" }
            }
            p class="note" {
                "A pool is stored and filled at once on the provisioning backend, and kept "
                "across restarts; its sizes win over the config file's. Left empty, max total "
                "is 4, or min idle when that is more. A pool that exists is resized instead."
            }
        }
    }
}

pub async fn create(
    State(state): State<AppState>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let engine = fields.get("engine").unwrap_or_default().trim();
    let pool = match fields
        .get("source")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        Some(source) => format!("{engine}@{source}"),
        None => engine.to_owned(),
    };
    apply(&state, &session, &pool, &fields).await
}

pub async fn resize(
    State(state): State<AppState>,
    ApiPath(pool): ApiPath<String>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    apply(&state, &session, &pool, &fields).await
}

/// Sizes the pool named `pool`, or adds it, from the form's `min_idle` and optional
/// `max_total`; the outcome is the flash on the pools page.
async fn apply(
    state: &AppState,
    session: &PanelSession,
    pool: &str,
    fields: &FormFields,
) -> Response {
    let size = |name: &str| -> Result<Option<usize>, ()> {
        match fields.get(name).map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(value) => value.parse::<usize>().map(Some).map_err(|_| ()),
        }
    };
    let outcome = match (PoolKey::parse(pool), size("min_idle"), size("max_total")) {
        (Err(err), _, _) => Err(format!("{err}; nothing changed.")),
        (Ok(key), Ok(Some(min_idle)), Ok(max_total)) => {
            let current = state.desk.pools().into_iter().find(|p| p.key == key);
            let existed = current.is_some();
            let (min_idle, max_total) = PoolConfig::sizes(current.as_ref(), min_idle, max_total);
            state
                .desk
                .resize_pool(&key, min_idle, max_total)
                .await
                .map(|pool| {
                    format!(
                        "The {} pool {} {} idle, at most {} in all.",
                        pool.key,
                        if existed {
                            "keeps"
                        } else {
                            "was added: it keeps"
                        },
                        pool.min_idle,
                        pool.max_total
                    )
                })
                .map_err(|err| crate::error::ApiError::from(err).parts().2)
        }
        _ => Err(
            "min idle (and max total, when given) must be whole numbers; nothing changed."
                .to_owned(),
        ),
    };
    match outcome {
        Ok(text) => done(state, session, "/pools", true, text),
        Err(text) => done(state, session, "/pools", false, text),
    }
}
