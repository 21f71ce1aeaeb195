//! Runs a test body against both databases: SQLite in a temporary file, then a real PostgreSQL
//! started with the project's own process backend and torn down whatever happened.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;

use futures::FutureExt;
use sandboxd_backend::process::{ProcessBackend, ProcessConfig};
use sandboxd_backend::{Backend, InstanceRequest};
use sandboxd_domain::{AgentSlug, EngineRef, ProjectSlug};
use sandboxd_store::{NewAgent, SecretCipher, Store, StoreKind};
use secrecy::{ExposeSecret, SecretString};

/// One database a test body runs against.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub kind: StoreKind,
    pub url: String,
    /// The SQLite file (`None` on PostgreSQL).
    pub file: Option<PathBuf>,
}

impl TestDb {
    pub async fn open(&self, cipher: SecretCipher) -> Store {
        Store::open(&self.url, cipher)
            .await
            .unwrap_or_else(|e| panic!("open {:?} store: {e}", self.kind))
    }

    /// A raw connection pool, for what the public API must not offer: corrupting a row,
    /// reading stored bytes.
    pub async fn raw(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::any::AnyPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .expect("raw connection")
    }
}

/// Runs `body` on SQLite, then on PostgreSQL.
pub async fn on_both<F, Fut>(tag: &str, body: F)
where
    F: Fn(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("store.db");
    body(TestDb {
        kind: StoreKind::Sqlite,
        url: format!("sqlite://{}", file.display()),
        file: Some(file),
    })
    .await;

    let pg = PgServer::start(tag).await;
    let outcome = AssertUnwindSafe(body(pg.db.clone())).catch_unwind().await;
    pg.stop().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A PostgreSQL instance of the process backend, under its own root.
struct PgServer {
    backend: ProcessBackend,
    db: TestDb,
    _root: tempfile::TempDir,
}

impl PgServer {
    async fn start(tag: &str) -> PgServer {
        let base = sandboxd_testkit::test_dir("sst-");
        let backend = ProcessBackend::new(ProcessConfig {
            root: base.path().join("instances"),
            ..ProcessConfig::default()
        })
        .expect("process backend");
        let request = InstanceRequest {
            major: None,
            engine: EngineRef::parse("postgres").expect("registered"),
            // Short: the server's unix socket path must stay under 108 bytes.
            owner: unique_slug("store"),
            maker: sandboxd_domain::DaemonId::cli(),
            features: Default::default(),
            size: None,
        };
        let instance = match backend.provision(&request).await {
            Ok(instance) => instance,
            Err(e) => {
                clean(&backend).await;
                panic!("provision postgres for the store test {tag:?}: {e}");
            }
        };
        let url = format!(
            "postgres://{}:{}@{}:{}/{}",
            instance.agent.user,
            instance.agent.password.expose_secret(),
            instance.host,
            instance.port,
            instance.database
        );
        PgServer {
            backend,
            db: TestDb {
                kind: StoreKind::Postgres,
                url,
                file: None,
            },
            _root: base,
        }
    }

    async fn stop(self) {
        clean(&self.backend).await;
    }
}

async fn clean(backend: &ProcessBackend) {
    for listed in backend.list().await.expect("list instances") {
        backend
            .teardown(&listed.handle)
            .await
            .expect("tear down the test postgres");
    }
    assert!(backend.list().await.expect("list").is_empty());
}

/// A slug no other test (or test process) uses.
pub fn unique_slug(tag: &str) -> AgentSlug {
    AgentSlug::parse(&sandboxd_testkit::unique(tag)).expect("valid slug")
}

pub fn agent(slug: &str) -> AgentSlug {
    AgentSlug::parse(slug).expect("valid agent slug")
}

pub fn project(slug: &str) -> ProjectSlug {
    ProjectSlug::parse(slug).expect("valid project slug")
}

/// Creates `project` (not opted in) and an agent in it with a fresh token; answers the token.
pub async fn seed_agent(
    store: &Store,
    project_slug: &ProjectSlug,
    slug: &AgentSlug,
) -> SecretString {
    if store
        .get_project(project_slug)
        .await
        .expect("get")
        .is_none()
    {
        store
            .put_project(project_slug, None, None)
            .await
            .expect("put project");
    }
    let token = sandboxd_domain::generate_secret();
    store
        .create_agent(&NewAgent {
            slug,
            role: "developer",
            project: project_slug,
            token_hash: &sandboxd_store::token_hash(&token),
        })
        .await
        .expect("create agent");
    token
}
