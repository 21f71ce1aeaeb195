//! `/v1/projects`: projects and their sandbox opt-in, validated against the engine registry
//! and each engine's feature allowlist before anything is stored.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use sandboxd_domain::clone::CloneChoice;
use sandboxd_domain::{EngineRef, FeatureRequest, ProjectSizes, ProjectSlug};

use super::{ApiJson, ApiPath, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{ProjectOut, PutProject};

/// Parses an opt-in as the operator wrote it. Unknown engines and features outside an
/// engine's allowlist are refused here, naming the allowed set; the broker then refuses
/// features for engines that are not opted in.
pub(crate) fn parse_opt_in(
    services: Option<&[String]>,
    extensions: Option<&BTreeMap<String, Vec<String>>>,
) -> Result<(Option<Vec<EngineRef>>, Option<FeatureRequest>), ApiError> {
    let services = services
        .map(|names| {
            names
                .iter()
                .map(|name| EngineRef::parse(name.trim()))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let extensions = extensions.map(FeatureRequest::parse_map).transpose()?;
    Ok((services, extensions))
}

/// Parses `{"<engine>": "<source>[:<privacy>]"}` as the operator wrote it; an unknown
/// privacy mode is refused naming the allowed ones.
pub(crate) fn parse_clones(
    map: &BTreeMap<String, String>,
) -> Result<Vec<(EngineRef, CloneChoice)>, ApiError> {
    map.iter()
        .map(|(engine, choice)| {
            Ok((
                EngineRef::parse(engine.trim())?,
                CloneChoice::parse(choice)?,
            ))
        })
        .collect()
}

/// Every project with its opt-in.
#[utoipa::path(get, path = "/v1/projects", tag = TAG,
    responses(
        (status = 200, body = Vec<ProjectOut>),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_projects(
    State(state): State<AppState>,
) -> Result<Json<Vec<ProjectOut>>, ApiError> {
    let projects = state.desk.projects().await?;
    Ok(Json(projects.into_iter().map(ProjectOut::from).collect()))
}

/// One project.
#[utoipa::path(get, path = "/v1/projects/{slug}", tag = TAG,
    params(("slug" = String, Path, description = "The project's slug")),
    responses(
        (status = 200, body = ProjectOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ))]
pub async fn get_project(
    State(state): State<AppState>,
    ApiPath(slug): ApiPath<String>,
) -> Result<Json<ProjectOut>, ApiError> {
    let slug = ProjectSlug::parse(&slug)?;
    let project =
        state
            .desk
            .project(&slug)
            .await?
            .ok_or_else(|| sandboxd_broker::BrokerError::NotFound {
                what: "project",
                id: slug.to_string(),
            })?;
    Ok(Json(project.into()))
}

/// Creates or updates a project's sandbox opt-in (both fields replace what is stored).
#[utoipa::path(put, path = "/v1/projects/{slug}", tag = TAG,
    params(("slug" = String, Path, description = "The project's slug")),
    request_body = PutProject,
    responses(
        (status = 200, body = ProjectOut),
        (status = 400, description = "Invalid slug, unknown engine, feature outside the \
            allowlist, features or a size for an engine that is not opted in, a size that \
            does not parse or is above the operator's ceiling, a clone of an unknown source \
            or under an unknown privacy mode, or keeping values a source does not keep \
            (named); nothing changed",
            body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn put_project(
    State(state): State<AppState>,
    ApiPath(slug): ApiPath<String>,
    ApiJson(body): ApiJson<PutProject>,
) -> Result<Json<ProjectOut>, ApiError> {
    let slug = ProjectSlug::parse(&slug)?;
    let (services, extensions) = parse_opt_in(
        body.sandbox_services.as_deref(),
        body.sandbox_extensions.as_ref(),
    )?;
    let clones = body.sandbox_clones.as_ref().map(parse_clones).transpose()?;
    let sizes = body
        .sandbox_sizes
        .as_ref()
        .map(ProjectSizes::parse_map)
        .transpose()?;
    // Refused before anything is stored.
    if let Some(clones) = &clones {
        state
            .desk
            .check_project_clones(services.as_deref().unwrap_or_default(), clones)
            .await?;
    }
    if let Some(sizes) = &sizes {
        state
            .desk
            .check_project_sizes(services.as_deref().unwrap_or_default(), sizes)?;
    }
    let mut project = state.desk.set_project(&slug, services, extensions).await?;
    if let Some(clones) = clones {
        project = state.desk.set_project_clones(&slug, clones).await?;
    }
    if let Some(sizes) = sizes {
        project = state.desk.set_project_sizes(&slug, sizes).await?;
    }
    Ok(Json(project.into()))
}
