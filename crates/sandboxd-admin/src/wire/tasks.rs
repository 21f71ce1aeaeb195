//! `/v1/tasks`: tasks and their states.

use sandboxd_domain::Task;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskOut {
    pub id: String,
    pub project: String,
    pub title: String,
    pub description: String,
    /// `open`, `in_progress`, `review`, `in_review` or `done`.
    pub state: String,
    pub claimed_by: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Task> for TaskOut {
    fn from(t: Task) -> Self {
        Self {
            id: t.id,
            project: t.project.to_string(),
            title: t.title,
            description: t.description,
            state: t.state.as_str().to_owned(),
            claimed_by: t.claimed_by.map(|s| s.to_string()),
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.updated_at_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    pub project: String,
    /// 1 to 200 characters.
    pub title: String,
    /// At most 16 KiB.
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TasksQuery {
    pub project: Option<String>,
    /// A task state, e.g. `open`.
    pub state: Option<String>,
}
