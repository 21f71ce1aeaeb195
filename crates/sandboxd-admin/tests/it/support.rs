//! `spawn_app()`: a real store file, a real backend (processes in a private temp root, or Docker
//! with the local images), a broker, and the admin router served with `axum::serve` on
//! 127.0.0.1:0. Everything an app created is torn down and checked gone when the test ends,
//! even when it panics.

use sandboxd_domain::call::Call;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use sandboxd_admin::AdminConfig;
use sandboxd_backend::process::{ProcessBackend, ProcessConfig};
use sandboxd_backend::{Backend, ListedInstance};
use sandboxd_broker::Evidence;
use sandboxd_broker::{Backends, Broker, BrokerConfig, PoolConfig};
use sandboxd_domain::envelope::{Envelope, OkEnvelope};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{Agent, Project};
use sandboxd_domain::{AgentSlug, ProjectSlug};
use sandboxd_store::{SecretCipher, Store};
use secrecy::SecretString;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use sandboxd_testkit::{docker_or_skip, show_logs, test_dir, unique};

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Process,
    Docker,
}

/// What an app is built with.
pub struct AppSpec {
    pub kind: Kind,
    /// `ROBOCO_SANDBOX_DB_ENABLED` as the daemon would read it (None: the stored value rules).
    pub enabled_override: Option<bool>,
    /// Warm pools as configured; their task is not started, so they stay empty.
    pub pools: Vec<PoolConfig>,
}

impl Default for AppSpec {
    fn default() -> Self {
        Self {
            kind: Kind::Process,
            enabled_override: None,
            pools: Vec::new(),
        }
    }
}

struct Server {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// One daemon's operator surface, served for real.
pub struct App {
    /// Both change when the app restarts.
    url: Mutex<String>,
    broker: Mutex<Broker>,
    pub backend: Arc<dyn Backend>,
    pub http: reqwest::Client,
    config: BrokerConfig,
    store_path: PathBuf,
    key_path: PathBuf,
    server: Mutex<Option<Server>>,
    /// The `Origin` header of every POST served, in order.
    pub posted_origins: Arc<Mutex<Vec<String>>>,
    /// Agent slugs whose instances this app tears down at the end.
    owners: Mutex<Vec<AgentSlug>>,
    _dir: tempfile::TempDir,
}

/// Records the `Origin` header of every POST, so a test can check what a browser sends (the
/// daemon's Origin guard refuses a POST whose Origin is not its own).
async fn serve(broker: Broker, posted_origins: Arc<Mutex<Vec<String>>>) -> (String, Server) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    let origins = posted_origins.clone();
    let router = sandboxd_admin::router(
        broker.operator_desk(),
        AdminConfig::new(SecretString::from(ADMIN_TOKEN)),
    )
    .layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            if request.method() == axum::http::Method::POST {
                let origin = request
                    .headers()
                    .get("origin")
                    .and_then(|o| o.to_str().ok())
                    .unwrap_or("(none)")
                    .to_owned();
                origins.lock().expect("lock").push(origin);
            }
            next.run(request)
        },
    ));
    let (shutdown, stop) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, service)
            .with_graceful_shutdown(async move {
                let _ = stop.await;
            })
            .await;
    });
    (format!("http://{addr}"), Server { shutdown, task })
}

async fn open_broker(
    config: &BrokerConfig,
    store_path: &std::path::Path,
    key_path: &std::path::Path,
    backend: Arc<dyn Backend>,
) -> Broker {
    let cipher = SecretCipher::load_or_create(key_path).expect("key");
    let store = Store::open(&format!("sqlite://{}", store_path.display()), cipher)
        .await
        .expect("store");
    Broker::start(config.clone(), store, Backends::new(backend, vec![]))
        .await
        .expect("broker")
}

/// A process-backed app on which the stored switch rules.
pub async fn app() -> App {
    spawn_app(AppSpec::default()).await.expect("process app")
}

/// A process-backed app whose running switch is `enabled`, as `ROBOCO_SANDBOX_DB_ENABLED` sets it.
pub async fn app_with_switch(enabled: bool) -> App {
    spawn_app(AppSpec {
        kind: Kind::Process,
        enabled_override: Some(enabled),
        ..AppSpec::default()
    })
    .await
    .expect("process app")
}

/// Builds an app, or None when its backend is not available here (Docker skipped).
pub async fn spawn_app(spec: AppSpec) -> Option<App> {
    show_logs();
    let dir = test_dir("sandboxd-admin-test-");
    let backend: Arc<dyn Backend> = match spec.kind {
        Kind::Process => Arc::new(
            ProcessBackend::new(ProcessConfig {
                root: dir.path().join("instances"),
                grace: Duration::ZERO,
                ..ProcessConfig::default()
            })
            .expect("process backend"),
        ),
        Kind::Docker => Arc::new(docker_or_skip().await?),
    };
    let config = BrokerConfig {
        enabled_override: spec.enabled_override,
        pools: spec.pools,
        grace: Duration::from_secs(600),
        ..BrokerConfig::default()
    };
    let store_path = dir.path().join("sandboxd.db");
    let key_path = dir.path().join("store.key");
    let broker = open_broker(&config, &store_path, &key_path, backend.clone()).await;
    let posted_origins = Arc::new(Mutex::new(Vec::new()));
    let (url, server) = serve(broker.clone(), posted_origins.clone()).await;
    Some(App {
        posted_origins,
        url: Mutex::new(url),
        broker: Mutex::new(broker),
        backend,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("http client"),
        config,
        store_path,
        key_path,
        server: Mutex::new(Some(server)),
        owners: Mutex::new(Vec::new()),
        _dir: dir,
    })
}

impl App {
    pub fn url(&self) -> String {
        self.url.lock().expect("lock").clone()
    }

    /// The current broker (a new one after [`App::restart`]).
    pub fn broker(&self) -> Broker {
        self.broker.lock().expect("lock").clone()
    }

    /// A request to the admin API with the admin token.
    pub fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(ADMIN_TOKEN)
    }

    /// A request without any token.
    pub fn anonymous(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url()))
    }

    pub fn track(&self, owner: &AgentSlug) {
        self.owners.lock().expect("lock").push(owner.clone());
    }

    /// A fresh project opted into `services` (with `features`, `engine=feature` items).
    pub async fn project(&self, services: &[&str], features: &[&str]) -> ProjectSlug {
        let slug = ProjectSlug::parse(&unique("p")).expect("slug");
        let services = services
            .iter()
            .map(|s| sandboxd_domain::EngineRef::parse(s).expect("engine"))
            .collect();
        let features =
            sandboxd_domain::FeatureRequest::parse_cli(features.iter().copied()).expect("features");
        self.broker()
            .set_project(&slug, Some(services), Some(features))
            .await
            .expect("project");
        slug
    }

    /// A fresh developer of `project`, holding no task.
    pub async fn developer(&self, project: &ProjectSlug) -> Agent {
        let slug = AgentSlug::parse(&unique("dev")).expect("slug");
        self.track(&slug);
        let broker = self.broker();
        broker
            .spawn_agent(&slug, "developer", project)
            .await
            .expect("spawn");
        broker.agent(&slug).await.expect("read").expect("agent")
    }

    /// A developer of `project` holding a fresh task (through the broker, acting as the agent).
    pub async fn working_developer(&self, project: &ProjectSlug) -> Agent {
        let agent = self.developer(project).await;
        let broker = self.broker();
        broker
            .add_task(project, &unique("task"), "a task")
            .await
            .expect("task");
        ok(broker
            .call(&agent, Call::parse(Verb::GiveMeWork, serde_json::json!({})))
            .await);
        agent
    }

    /// The project as the store has it.
    pub async fn stored_project(&self, slug: &ProjectSlug) -> Project {
        self.broker()
            .project(slug)
            .await
            .expect("read")
            .expect("project")
    }

    /// The switch value stored for the next start.
    pub async fn stored_switch(&self) -> bool {
        self.broker()
            .settings()
            .await
            .expect("settings")
            .sandbox_db_enabled_stored
    }

    /// How many audit entries there are.
    pub async fn audit_total(&self) -> u64 {
        self.broker()
            .audit_log(&Default::default())
            .await
            .expect("audit")
            .total
    }

    /// Instances the backend lists for `owner`.
    pub async fn listed(&self, owner: &AgentSlug) -> Vec<ListedInstance> {
        self.backend
            .list()
            .await
            .expect("list")
            .into_iter()
            .filter(|i| &i.handle.owner == owner)
            .collect()
    }

    /// Stops serving, starts a new broker on the same store and backend (as a daemon restart
    /// does) and serves it on a new port. Panel sessions do not survive it.
    pub async fn restart(&self) {
        self.stop_serving().await;
        let broker = open_broker(
            &self.config,
            &self.store_path,
            &self.key_path,
            self.backend.clone(),
        )
        .await;
        let (url, server) = serve(broker.clone(), self.posted_origins.clone()).await;
        *self.broker.lock().expect("lock") = broker;
        *self.url.lock().expect("lock") = url;
        *self.server.lock().expect("lock") = Some(server);
    }

    /// Runs `body`, then stops the server, tears down every instance of this app's agents and
    /// asserts none is left; re-raises a panic of `body`.
    pub async fn run<F, Fut>(self, body: F)
    where
        F: FnOnce(Arc<App>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let app = Arc::new(self);
        let outcome = AssertUnwindSafe(body(app.clone())).catch_unwind().await;
        app.cleanup().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    async fn stop_serving(&self) {
        let old = self.server.lock().expect("lock").take();
        if let Some(server) = old {
            let _ = server.shutdown.send(());
            let _ = server.task.await;
        }
    }

    async fn cleanup(&self) {
        self.stop_serving().await;
        let mut owners: Vec<AgentSlug> = self.owners.lock().expect("lock").clone();
        if let Ok(agents) = self.broker().agents(None).await {
            owners.extend(agents.into_iter().map(|a| a.slug));
        }
        teardown_owners(self.backend.as_ref(), &owners).await;
        for owner in &owners {
            let left = self.listed(owner).await;
            assert!(left.is_empty(), "instances left for {owner}: {left:?}");
        }
        // As a clean stop does: the daemon's Docker network goes with its last instance.
        let broker = self.broker();
        broker.sweep_at_stop().await;
        let daemon = broker.daemon_id().to_string();
        assert!(
            !sandboxd_testkit::daemon_network_left(&daemon),
            "daemon {daemon}'s network outlived every instance of it"
        );
    }
}

async fn teardown_owners(backend: &dyn Backend, owners: &[AgentSlug]) {
    let Ok(listed) = backend.list().await else {
        return;
    };
    for instance in listed {
        if owners.contains(&instance.handle.owner) {
            let _ = backend.teardown(&instance.handle).await;
        }
    }
}

/// The answer of a verb as an agent reads it (its evidence as JSON), which must be ok.
pub fn ok(envelope: Envelope<Evidence>) -> OkEnvelope {
    match envelope.to_json() {
        Envelope::Ok(ok) => ok,
        Envelope::Error(err) => panic!("expected ok, got {err:?}"),
    }
}
