//! Every admin API route the CLI calls, typed: its method and path (names percent-encoded here
//! and nowhere else), its query or body, and the `sandboxd_admin::wire` type it answers. A
//! command cannot build a path by hand: `get` and `send` are private to the client.

use reqwest::Method;
use sandboxd_admin::wire::{
    AgentOut, AgentsQuery, JanitorOut, NewTask, PoolOut, ProjectOut, PutPool, PutProject,
    PutSettings, PutSource, RestartOut, SandboxOut, SandboxesQuery, Settings, SourceOut,
    SpawnAgent, SpawnedOut, TaskOut, TasksQuery, TeardownOut,
};

use super::{AdminClient, ClientError, Reply};

type Answer<T> = Result<Reply<T>, ClientError>;

/// `/v1/<collection>/<name>[/<action>]`, the name one percent-encoded segment: the daemon
/// judges the name; the URL must keep it one segment.
fn path(collection: &str, name: &str, action: Option<&str>) -> String {
    let name = urlencoding::encode(name);
    match action {
        Some(action) => format!("/v1/{collection}/{name}/{action}"),
        None => format!("/v1/{collection}/{name}"),
    }
}

impl AdminClient {
    pub async fn agents(&self, query: &AgentsQuery) -> Answer<Vec<AgentOut>> {
        self.get("/v1/agents", query).await
    }

    pub async fn spawn_agent(&self, body: &SpawnAgent) -> Answer<SpawnedOut> {
        self.send(Method::POST, "/v1/agents", Some(body)).await
    }

    pub async fn remove_agent(&self, slug: &str) -> Answer<()> {
        let path = path("agents", slug, None);
        self.send(Method::DELETE, &path, None::<&()>).await
    }

    pub async fn projects(&self) -> Answer<Vec<ProjectOut>> {
        self.get("/v1/projects", &()).await
    }

    pub async fn put_project(&self, slug: &str, body: &PutProject) -> Answer<ProjectOut> {
        let path = path("projects", slug, None);
        self.send(Method::PUT, &path, Some(body)).await
    }

    pub async fn tasks(&self, query: &TasksQuery) -> Answer<Vec<TaskOut>> {
        self.get("/v1/tasks", query).await
    }

    pub async fn add_task(&self, body: &NewTask) -> Answer<TaskOut> {
        self.send(Method::POST, "/v1/tasks", Some(body)).await
    }

    pub async fn sandboxes(&self, query: &SandboxesQuery) -> Answer<Vec<SandboxOut>> {
        self.get("/v1/sandboxes", query).await
    }

    pub async fn teardown_sandbox(&self, owner: &str) -> Answer<TeardownOut> {
        let path = path("sandboxes", owner, None);
        self.send(Method::DELETE, &path, None::<&()>).await
    }

    pub async fn pools(&self) -> Answer<Vec<PoolOut>> {
        self.get("/v1/pools", &()).await
    }

    /// `pool` is an engine (`postgres`) or an engine's clones of a source (`postgres@shop`).
    pub async fn resize_pool(&self, pool: &str, body: &PutPool) -> Answer<PoolOut> {
        let path = path("pools", pool, None);
        self.send(Method::PUT, &path, Some(body)).await
    }

    pub async fn settings(&self) -> Answer<Settings> {
        self.get("/v1/settings", &()).await
    }

    pub async fn put_settings(&self, body: &PutSettings) -> Answer<Settings> {
        self.send(Method::PUT, "/v1/settings", Some(body)).await
    }

    /// Answered before the daemon drains; it answers `settings` again once restarted.
    pub async fn restart(&self) -> Answer<RestartOut> {
        self.send(Method::POST, "/v1/restart", None::<&()>).await
    }

    pub async fn sources(&self) -> Answer<Vec<SourceOut>> {
        self.get("/v1/sources", &()).await
    }

    pub async fn put_source(&self, name: &str, body: &PutSource) -> Answer<SourceOut> {
        let path = path("sources", name, None);
        self.send(Method::PUT, &path, Some(body)).await
    }

    pub async fn remove_source(&self, name: &str) -> Answer<()> {
        let path = path("sources", name, None);
        self.send(Method::DELETE, &path, None::<&()>).await
    }

    pub async fn snapshot_source(&self, name: &str) -> Answer<SourceOut> {
        let path = path("sources", name, Some("snapshot"));
        self.send(Method::POST, &path, None::<&()>).await
    }

    pub async fn run_janitor(&self) -> Answer<JanitorOut> {
        self.send(Method::POST, "/v1/janitor/run", None::<&()>)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_stays_one_path_segment() {
        assert_eq!(path("agents", "dev-1", None), "/v1/agents/dev-1");
        assert_eq!(
            path("agents", "a/../b c", None),
            "/v1/agents/a%2F..%2Fb%20c"
        );
        assert_eq!(
            path("pools", "postgres@shop", None),
            "/v1/pools/postgres%40shop"
        );
        assert_eq!(
            path("sources", "shop", Some("snapshot")),
            "/v1/sources/shop/snapshot"
        );
    }
}
