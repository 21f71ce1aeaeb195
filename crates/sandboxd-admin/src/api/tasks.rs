//! `/v1/tasks`: add tasks to a project, list them by project and state.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sandboxd_broker::parse_task_state;
use sandboxd_domain::ProjectSlug;

use super::{ApiJson, ApiQuery, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{NewTask, TaskOut, TasksQuery};

/// Tasks, optionally of one project and in one state.
#[utoipa::path(get, path = "/v1/tasks", tag = TAG,
    params(TasksQuery),
    responses(
        (status = 200, body = Vec<TaskOut>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_tasks(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TasksQuery>,
) -> Result<Json<Vec<TaskOut>>, ApiError> {
    let project = query
        .project
        .as_deref()
        .map(ProjectSlug::parse)
        .transpose()?;
    let task_state = query.state.as_deref().map(parse_task_state).transpose()?;
    let tasks = state.desk.tasks(project.as_ref(), task_state).await?;
    Ok(Json(tasks.into_iter().map(TaskOut::from).collect()))
}

/// Adds an open task to a project.
#[utoipa::path(post, path = "/v1/tasks", tag = TAG,
    request_body = NewTask,
    responses(
        (status = 201, body = TaskOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such project", body = ErrorBody),
    ))]
pub async fn add_task(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<NewTask>,
) -> Result<(StatusCode, Json<TaskOut>), ApiError> {
    let project = ProjectSlug::parse(&body.project)?;
    let task = state
        .desk
        .add_task(&project, &body.title, &body.description)
        .await?;
    Ok((StatusCode::CREATED, Json(task.into())))
}
