//! `/v1/settings`: the master switch. A change persists at once and takes effect at the next
//! restart; the answer shows both values, and the environment override when one rules.
//! `/v1/restart`: that restart, in place.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::{ApiJson, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{PutSettings, RestartOut, Settings};

/// The stored and the running value of `sandbox_db_enabled`.
#[utoipa::path(get, path = "/v1/settings", tag = TAG,
    responses(
        (status = 200, body = Settings),
        (status = 401, body = ErrorBody),
    ))]
pub async fn get_settings(State(state): State<AppState>) -> Result<Json<Settings>, ApiError> {
    Ok(Json(state.desk.settings().await?.into()))
}

/// Stores `sandbox_db_enabled`; it takes effect at the next restart of sandboxd.
#[utoipa::path(put, path = "/v1/settings", tag = TAG,
    request_body = PutSettings,
    responses(
        (status = 200, body = Settings),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn put_settings(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<PutSettings>,
) -> Result<Json<Settings>, ApiError> {
    Ok(Json(
        state
            .desk
            .set_enabled(body.sandbox_db_enabled)
            .await?
            .into(),
    ))
}

/// Restarts sandboxd in place: answered (202) before anything stops; then the daemon stops
/// accepting, finishes the calls under way, joins its background tasks and re-executes itself
/// (same pid, binary, arguments, environment and address). Live sandboxes stay with their
/// credentials; a stored switch takes effect. Poll `/v1/settings` until `running_since_ms`
/// changes.
#[utoipa::path(post, path = "/v1/restart", tag = TAG,
    responses(
        (status = 202, body = RestartOut),
        (status = 401, body = ErrorBody),
    ))]
pub async fn restart(
    State(state): State<AppState>,
) -> Result<(StatusCode, Json<RestartOut>), ApiError> {
    let running = state.desk.settings().await?;
    state.desk.request_restart().await;
    Ok((
        StatusCode::ACCEPTED,
        Json(RestartOut {
            status: "restarting".into(),
            running_since_ms: running.running_since_ms,
            message: "sandboxd drains and re-executes itself; live sandboxes stay".into(),
        }),
    ))
}
