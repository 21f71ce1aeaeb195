//! `/v1/agents`: spawn (the only answer that ever carries an agent's token), list, remove.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sandboxd_domain::{AgentSlug, ProjectSlug};

use super::{ApiJson, ApiPath, ApiQuery, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{AgentOut, AgentsQuery, SpawnAgent, SpawnedOut};

/// Agents, optionally of one project.
#[utoipa::path(get, path = "/v1/agents", tag = TAG,
    params(AgentsQuery),
    responses(
        (status = 200, body = Vec<AgentOut>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_agents(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AgentsQuery>,
) -> Result<Json<Vec<AgentOut>>, ApiError> {
    let project = query
        .project
        .as_deref()
        .map(ProjectSlug::parse)
        .transpose()?;
    let agents = state.desk.agents(project.as_ref()).await?;
    Ok(Json(agents.into_iter().map(AgentOut::from).collect()))
}

/// Spawns an agent: answers its token (shown once), manifest, spawn environment and briefing.
#[utoipa::path(post, path = "/v1/agents", tag = TAG,
    request_body = SpawnAgent,
    responses(
        (status = 201, body = SpawnedOut),
        (status = 400, description = "Invalid slug or unknown role", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such project", body = ErrorBody),
        (status = 409, description = "The slug is taken", body = ErrorBody),
    ))]
pub async fn spawn_agent(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<SpawnAgent>,
) -> Result<(StatusCode, Json<SpawnedOut>), ApiError> {
    let slug = AgentSlug::parse(&body.slug)?;
    let project = ProjectSlug::parse(&body.project)?;
    let spawned = state.desk.spawn_agent(&slug, &body.role, &project).await?;
    Ok((StatusCode::CREATED, Json(spawned.into())))
}

/// One agent.
#[utoipa::path(get, path = "/v1/agents/{slug}", tag = TAG,
    params(("slug" = String, Path, description = "The agent's slug")),
    responses(
        (status = 200, body = AgentOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ))]
pub async fn get_agent(
    State(state): State<AppState>,
    ApiPath(slug): ApiPath<String>,
) -> Result<Json<AgentOut>, ApiError> {
    let slug = AgentSlug::parse(&slug)?;
    let agent =
        state
            .desk
            .agent(&slug)
            .await?
            .ok_or_else(|| sandboxd_broker::BrokerError::NotFound {
                what: "agent",
                id: slug.to_string(),
            })?;
    Ok(Json(agent.into()))
}

/// Removes an agent: its sandbox is released, its task goes back, its token stops working.
#[utoipa::path(delete, path = "/v1/agents/{slug}", tag = TAG,
    params(("slug" = String, Path, description = "The agent's slug")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ))]
pub async fn remove_agent(
    State(state): State<AppState>,
    ApiPath(slug): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let slug = AgentSlug::parse(&slug)?;
    state.desk.remove_agent(&slug).await?;
    Ok(StatusCode::NO_CONTENT)
}
