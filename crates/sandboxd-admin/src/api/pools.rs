//! `/v1/pools`: the warm pools (the config file's, per engine and per source whose clones are
//! pooled, and those an operator added) and their sizes. A `PUT` sizes a pool, or adds it when
//! there is none of that name; it is stored and applies at once and at every start.

use axum::Json;
use axum::extract::State;
use sandboxd_broker::PoolKey;
use sandboxd_domain::error::InputError;

use super::{ApiJson, ApiPath, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{PoolOut, PutPool};

/// Every warm pool: sizes, idle and starting members, hand-outs, misses, failures, backoff.
#[utoipa::path(get, path = "/v1/pools", tag = TAG,
    responses(
        (status = 200, body = Vec<PoolOut>),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_pools(State(state): State<AppState>) -> Json<Vec<PoolOut>> {
    Json(state.desk.pools().into_iter().map(PoolOut::from).collect())
}

/// Sizes one warm pool, or adds it when there is none of that name (no features; its engine
/// must run on the provisioning backend, its source be registered); stored, it outlives a
/// restart, its sizes winning over the config file's.
#[utoipa::path(put, path = "/v1/pools/{pool}", tag = TAG,
    params(("pool" = String, Path, description = "an engine (`postgres`), or \
        `<engine>@<source>` for a pool of clones")),
    request_body = PutPool,
    responses(
        (status = 200, body = PoolOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ))]
pub async fn put_pool(
    State(state): State<AppState>,
    ApiPath(pool): ApiPath<String>,
    ApiJson(body): ApiJson<PutPool>,
) -> Result<Json<PoolOut>, ApiError> {
    let key = PoolKey::parse(&pool).map_err(|detail| InputError::Malformed {
        what: "pool",
        detail,
    })?;
    let current = state.desk.pools().into_iter().find(|p| p.key == key);
    let (min_idle, max_total) = body.sizes(current.as_ref());
    let pool = state.desk.resize_pool(&key, min_idle, max_total).await?;
    Ok(Json(pool.into()))
}
