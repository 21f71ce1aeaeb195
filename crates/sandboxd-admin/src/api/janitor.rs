//! `/v1/janitor/run`: one janitor pass now.

use axum::Json;
use axum::extract::State;

use super::TAG;
use crate::AppState;
use crate::wire::ErrorBody;
use crate::wire::JanitorOut;

/// Runs the orphan janitor once and reports what it examined and reaped.
#[utoipa::path(post, path = "/v1/janitor/run", tag = TAG,
    responses(
        (status = 200, body = JanitorOut),
        (status = 401, body = ErrorBody),
    ))]
pub async fn run_janitor(State(state): State<AppState>) -> Json<JanitorOut> {
    Json(state.desk.run_janitor().await.into())
}
