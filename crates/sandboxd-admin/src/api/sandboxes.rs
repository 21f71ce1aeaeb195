//! `/v1/sandboxes`: what runs (as the backends list it, joined with what the broker tracks),
//! and teardown by owner.

use axum::Json;
use axum::extract::State;
use sandboxd_domain::AgentSlug;

use super::{ApiPath, ApiQuery, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{SandboxOut, SandboxesQuery, TeardownOut};

/// This daemon's sandboxes, by owner; with `all=true` also the foreign ones (made by another
/// daemon or the CLI), which it lists and never touches. No credentials.
#[utoipa::path(get, path = "/v1/sandboxes", tag = TAG,
    params(SandboxesQuery),
    responses(
        (status = 200, body = Vec<SandboxOut>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_sandboxes(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SandboxesQuery>,
) -> Result<Json<Vec<SandboxOut>>, ApiError> {
    let all = query.all.unwrap_or(false);
    let sandboxes = state.desk.sandboxes().await?;
    Ok(Json(
        sandboxes
            .into_iter()
            .filter(|s| all || !s.foreign)
            .map(SandboxOut::from)
            .collect(),
    ))
}

/// Tears down every instance of one owner.
#[utoipa::path(delete, path = "/v1/sandboxes/{owner}", tag = TAG,
    params(("owner" = String, Path, description = "The owning agent's slug")),
    responses(
        (status = 200, body = TeardownOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The sandbox is foreign: made by another daemon or the CLI"),
    ))]
pub async fn teardown_sandbox(
    State(state): State<AppState>,
    ApiPath(owner): ApiPath<String>,
) -> Result<Json<TeardownOut>, ApiError> {
    let owner = AgentSlug::parse(&owner)?;
    let removed = state.desk.teardown_sandbox(&owner).await?;
    Ok(Json(TeardownOut {
        owner: owner.to_string(),
        removed,
    }))
}
