//! `/metrics`: the broker's counters and histograms in the Prometheus text format. Open, like
//! every Prometheus endpoint: the daemon listens on loopback by default, and no label carries a
//! credential or free text.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(render))
}

async fn render(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.desk.metrics().render(),
    )
}
