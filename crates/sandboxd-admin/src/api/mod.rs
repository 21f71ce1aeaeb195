//! The admin API under `/v1`. Every handler carries its `#[utoipa::path]`; the axum router and
//! the OpenAPI document are split from one `OpenApiRouter`, so a route cannot exist without its
//! description (and the other way round).

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Router, middleware};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::{AppState, auth};

mod agents;
pub(crate) mod audit;
mod janitor;
mod pools;
pub(crate) mod projects;
mod sandboxes;
mod settings;
mod sources;
mod tasks;

/// A JSON body whose rejection is an [`ApiError`] (`{"error","message"}`), not axum's text.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// A query string whose rejection is an [`ApiError`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// A path parameter whose rejection is an [`ApiError`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

pub const TAG: &str = "admin";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandboxd admin API",
        description = "The operator's API of sandboxd: the master switch and the restart that \
                       applies it, projects and their sandbox opt-in, agents, tasks, live \
                       sandboxes, warm pools, the audit log and the janitor. Every route takes \
                       the admin token as `Authorization: Bearer <token>`. Errors answer \
                       `{\"error\": <code>, \"message\": ...}`: 4xx for the caller's mistakes \
                       (nothing changed), 500 for failures inside sandboxd."
    ),
    modifiers(&BearerAuth),
    security(("admin_token" = [])),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

fn split() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(settings::get_settings, settings::put_settings))
        .routes(routes!(settings::restart))
        .routes(routes!(projects::list_projects))
        .routes(routes!(projects::get_project, projects::put_project))
        .routes(routes!(agents::list_agents, agents::spawn_agent))
        .routes(routes!(agents::get_agent, agents::remove_agent))
        .routes(routes!(tasks::list_tasks, tasks::add_task))
        .routes(routes!(sandboxes::list_sandboxes))
        .routes(routes!(sandboxes::teardown_sandbox))
        .routes(routes!(audit::list_audit))
        .routes(routes!(janitor::run_janitor))
        .routes(routes!(pools::list_pools))
        .routes(routes!(pools::put_pool))
        .routes(routes!(sources::list_sources))
        .routes(routes!(
            sources::get_source,
            sources::put_source,
            sources::remove_source
        ))
        .routes(routes!(sources::snapshot_source))
        .split_for_parts()
}

/// The OpenAPI document of the admin API, as served at `/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    split().1
}

/// The `/v1` routes: every documented route behind the admin token; the document itself and
/// the JSON 404 for unknown `/v1` paths are open.
pub fn router(state: AppState) -> Router<AppState> {
    let (api, doc) = split();
    let document: Arc<str> = match doc.to_pretty_json() {
        Ok(json) => json.into(),
        Err(err) => {
            tracing::error!(error = %err, "rendering the OpenAPI document failed");
            "{}".into()
        }
    };
    api.route_layer(middleware::from_fn_with_state(state, auth::require_admin))
        .route(
            "/v1/openapi.json",
            get(move || {
                let document = document.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        document.to_string(),
                    )
                }
            }),
        )
        .route("/v1/{*rest}", axum::routing::any(unknown_route))
}

async fn unknown_route() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        axum::Json(ErrorBody {
            error: "not_found".into(),
            message: "no such admin API route; /v1/openapi.json lists them".into(),
        }),
    )
}
