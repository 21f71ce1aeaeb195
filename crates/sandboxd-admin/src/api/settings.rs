//! `/v1/settings`: the master switch. A change persists at once and takes effect at the next
//! restart; the answer shows both values.

use axum::Json;
use axum::extract::State;

use super::{ApiJson, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{PutSettings, Settings};

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
