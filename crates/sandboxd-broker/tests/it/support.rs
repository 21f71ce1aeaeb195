//! A test world: a real store file, a real backend (processes, or Docker when it answers) wrapped
//! to count provisions, a broker, and helpers to drive agents through verbs. Everything a world
//! created is torn down and checked gone when the test ends, even when it panics.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use sandboxd_backend::process::{ProcessBackend, ProcessConfig};
use sandboxd_backend::{
    Backend, BackendError, DoctorCheck, FeatureProbe, IdleMember, InstanceHandle, InstanceRequest,
    ListedInstance, Sweep,
};
use sandboxd_broker::{Backends, Broker, BrokerConfig};
use sandboxd_domain::Agent;
use sandboxd_domain::envelope::{Envelope, ErrorEnvelope, OkEnvelope};
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{
    AgentSlug, BackendKind, DaemonId, DataSize, EngineRef, Feature, FeatureRequest, Instance,
    ProjectSlug,
};
use sandboxd_store::{SecretCipher, Store};

pub use sandboxd_testkit::{docker_or_skip, show_logs, test_dir, unique};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A real backend that counts what it was asked to create.
#[derive(Debug)]
pub struct Counting {
    pub inner: Arc<dyn Backend>,
    provisions: Mutex<BTreeMap<String, usize>>,
    total: AtomicUsize,
    listing_fails: AtomicBool,
    /// Pings fail, as when the engine or its host stops answering.
    ping_fails: AtomicBool,
    /// How often the broker asked whether an engine runs here.
    supports_asked: Mutex<BTreeMap<String, usize>>,
    /// Provisions of this engine fail (an injected fault), before anything is made.
    failing_engine: Mutex<Option<String>>,
    /// Feature activations on live instances fail (an injected fault).
    activation_fails: AtomicBool,
    /// Every pool member started, as its backend made it (superuser access included): what a
    /// test changes behind a pool's back.
    idle_made: Mutex<Vec<Instance>>,
}

impl Counting {
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            provisions: Mutex::new(BTreeMap::new()),
            total: AtomicUsize::new(0),
            listing_fails: AtomicBool::new(false),
            ping_fails: AtomicBool::new(false),
            supports_asked: Mutex::new(BTreeMap::new()),
            failing_engine: Mutex::new(None),
            activation_fails: AtomicBool::new(false),
            idle_made: Mutex::new(Vec::new()),
        }
    }

    /// The pool members started so far, oldest first.
    pub fn idle_made(&self) -> Vec<Instance> {
        self.idle_made.lock().expect("lock").clone()
    }

    /// Makes every provision of `engine` fail, or none (`None`).
    pub fn fail_provisions_of(&self, engine: Option<&str>) {
        *self.failing_engine.lock().expect("lock") = engine.map(str::to_owned);
    }

    /// Makes feature activation on a live instance fail, or work again.
    pub fn fail_activation(&self, fail: bool) {
        self.activation_fails.store(fail, Ordering::SeqCst);
    }

    /// Counts a provision of `request` and fails it when the test injected a fault for its engine.
    fn count(&self, request: &InstanceRequest) -> Result<(), BackendError> {
        self.total.fetch_add(1, Ordering::SeqCst);
        *self
            .provisions
            .lock()
            .expect("lock")
            .entry(request.engine.name.to_owned())
            .or_default() += 1;
        let failing = self.failing_engine.lock().expect("lock").clone();
        if failing.as_deref() == Some(request.engine.name) {
            return Err(BackendError::Unavailable {
                backend: "test",
                detail: format!(
                    "provisioning {} fails: a fault the test injected",
                    request.engine
                ),
            });
        }
        Ok(())
    }

    pub fn provisions_of(&self, engine: &str) -> usize {
        self.provisions
            .lock()
            .expect("lock")
            .get(engine)
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// Makes `list` fail (an engine that stops answering for a moment) or work again.
    pub fn fail_listing(&self, fail: bool) {
        self.listing_fails.store(fail, Ordering::SeqCst);
    }

    /// Makes `ping` fail (the backend went away) or answer again.
    pub fn fail_ping(&self, fail: bool) {
        self.ping_fails.store(fail, Ordering::SeqCst);
    }

    /// How often `supports` was asked about `engine`.
    pub fn supports_asked(&self, engine: &str) -> usize {
        self.supports_asked
            .lock()
            .expect("lock")
            .get(engine)
            .copied()
            .unwrap_or(0)
    }
}

#[async_trait]
impl Backend for Counting {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn default_size(&self) -> DataSize {
        self.inner.default_size()
    }
    async fn ping(&self) -> Result<(), BackendError> {
        if self.ping_fails.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable {
                backend: "test",
                detail: "ping fails: a fault the test injected".into(),
            });
        }
        self.inner.ping().await
    }
    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError> {
        *self
            .supports_asked
            .lock()
            .expect("lock")
            .entry(engine.name.to_owned())
            .or_default() += 1;
        self.inner.supports(engine).await
    }
    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError> {
        self.count(request)?;
        self.inner.provision(request).await
    }
    async fn provision_idle(&self, request: &InstanceRequest) -> Result<IdleMember, BackendError> {
        self.count(request)?;
        let member = self.inner.provision_idle(request).await?;
        self.idle_made
            .lock()
            .expect("lock")
            .push(member.instance.clone());
        Ok(member)
    }
    async fn record_owner(
        &self,
        instance: &Instance,
        owner: &AgentSlug,
    ) -> Result<String, BackendError> {
        self.inner.record_owner(instance, owner).await
    }
    async fn activate(
        &self,
        instance: &mut Instance,
        features: &BTreeSet<Feature>,
    ) -> Result<(), BackendError> {
        if self.activation_fails.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable {
                backend: "test",
                detail: "activation fails: a fault the test injected".into(),
            });
        }
        self.inner.activate(instance, features).await
    }
    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError> {
        self.inner.is_live(handle).await
    }
    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError> {
        self.inner.teardown(handle).await
    }
    async fn sweep(&self, maker: &DaemonId, when: Sweep) -> Result<usize, BackendError> {
        self.inner.sweep(maker, when).await
    }
    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError> {
        if self.listing_fails.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable {
                backend: "test",
                detail: "listing switched off by the test".into(),
            });
        }
        self.inner.list().await
    }
    async fn doctor(&self) -> Vec<DoctorCheck> {
        self.inner.doctor().await
    }
    fn feature_location(&self, engine: EngineRef) -> String {
        self.inner.feature_location(engine)
    }
    async fn provider(&self, engine: EngineRef) -> Result<String, BackendError> {
        self.inner.provider(engine).await
    }
    async fn provider_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<String, BackendError> {
        self.inner.provider_of_major(engine, major).await
    }
    async fn image_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<Option<String>, BackendError> {
        self.inner.image_of_major(engine, major).await
    }
    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError> {
        self.inner.admin_address(instance).await
    }
    async fn dump_schema(
        &self,
        engine: EngineRef,
        major: u32,
        dsn: &secrecy::SecretString,
    ) -> Result<String, BackendError> {
        self.inner.dump_schema(engine, major, dsn).await
    }
    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        self.inner.extend_files(instance, files).await
    }
    /// A probe's throwaway instance is not a sandbox: not counted.
    async fn probe_features(
        &self,
        engine: EngineRef,
        slot: &AgentSlug,
        maker: &DaemonId,
    ) -> Result<FeatureProbe, BackendError> {
        self.inner.probe_features(engine, slot, maker).await
    }
    async fn probe_features_at(
        &self,
        engine: EngineRef,
        major: Option<u32>,
        slot: &AgentSlug,
        maker: &DaemonId,
    ) -> Result<FeatureProbe, BackendError> {
        self.inner
            .probe_features_at(engine, major, slot, maker)
            .await
    }
}

/// Which backend a world runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Process,
    Docker,
    /// The test cluster, in a namespace of the world's own.
    Kubernetes,
}

/// Everything one test runs against.
pub struct World {
    pub broker: Broker,
    pub backend: Arc<Counting>,
    pub store_path: PathBuf,
    key_path: PathBuf,
    config: BrokerConfig,
    others: Vec<Arc<dyn Backend>>,
    pub project: ProjectSlug,
    /// Owners this world created instances for, torn down at the end.
    owners: Mutex<Vec<AgentSlug>>,
    /// The warm pools' task, when the test started it.
    pools: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
    /// The world's namespace on the test cluster (Kubernetes worlds), removed after it.
    _namespace: Option<sandboxd_testkit::KubeNamespace>,
    _dir: tempfile::TempDir,
}

pub struct WorldSpec {
    pub kind: Kind,
    pub services: Vec<&'static str>,
    /// The project's standing features, `engine=feature` items.
    pub extensions: Vec<&'static str>,
    pub enabled: bool,
    pub tweak_config: fn(&mut BrokerConfig),
    pub tweak_process: fn(&mut ProcessConfig),
    /// Docker beside the primary backend, as a daemon has it when the engine answers (the
    /// world is skipped without Docker).
    pub docker_beside: bool,
}

impl Default for WorldSpec {
    fn default() -> Self {
        Self {
            kind: Kind::Process,
            services: vec!["postgres", "redis"],
            extensions: vec![],
            enabled: true,
            tweak_config: |_| {},
            tweak_process: |_| {},
            docker_beside: false,
        }
    }
}

impl World {
    /// Builds a world, or None when its backend is not available here (Docker skipped).
    pub async fn new(spec: WorldSpec) -> Option<Self> {
        show_logs();
        let dir = test_dir("sandboxd-test-");
        let mut namespace = None;
        let inner: Arc<dyn Backend> = match spec.kind {
            Kind::Process => {
                let mut config = ProcessConfig {
                    root: dir.path().join("instances"),
                    grace: Duration::ZERO,
                    ..ProcessConfig::default()
                };
                (spec.tweak_process)(&mut config);
                Arc::new(ProcessBackend::new(config).expect("process backend"))
            }
            Kind::Docker => Arc::new(docker_or_skip().await?),
            Kind::Kubernetes => {
                let (kube, own) = sandboxd_testkit::kube_or_skip("broker", |_| {})?;
                namespace = Some(own);
                Arc::new(kube)
            }
        };
        let backend = Arc::new(Counting::new(inner));
        let mut others: Vec<Arc<dyn Backend>> = Vec::new();
        if spec.docker_beside {
            others.push(Arc::new(docker_or_skip().await?));
        }
        let store_path = dir.path().join("sandboxd.db");
        let key_path = dir.path().join("secret.key");
        let store = open_store(&store_path, &key_path).await;
        let mut config = BrokerConfig {
            enabled_override: Some(spec.enabled),
            grace: Duration::from_secs(600),
            ..BrokerConfig::default()
        };
        (spec.tweak_config)(&mut config);
        let broker = Broker::start(
            config.clone(),
            store,
            Backends::new(backend.clone(), others.clone()),
        )
        .await
        .expect("broker");
        let project = ProjectSlug::parse(&unique("p")).expect("slug");
        let services = engines(&spec.services);
        let extensions =
            FeatureRequest::parse_cli(spec.extensions.iter().copied()).expect("allowlisted");
        broker
            .set_project(&project, Some(services), Some(extensions))
            .await
            .expect("project");
        Some(Self {
            broker,
            backend,
            store_path,
            key_path,
            config,
            others,
            project,
            owners: Mutex::new(Vec::new()),
            pools: Mutex::new(None),
            _namespace: namespace,
            _dir: dir,
        })
    }

    /// Starts the broker's warm pools, as `sandboxd serve` does.
    pub fn spawn_pools(&self) {
        let shutdown = CancellationToken::new();
        let task = self.broker.spawn_pools(shutdown.clone());
        *self.pools.lock().expect("lock") = Some((shutdown, task));
    }

    /// Stops the warm pools as a clean stop does: their idle members are removed.
    pub async fn stop_pools(&self) {
        let running = self.pools.lock().expect("lock").take();
        if let Some((shutdown, task)) = running {
            shutdown.cancel();
            task.await.expect("the pools' task ends");
        }
    }

    /// Ends the warm pools' task as a crash would: their members stay behind.
    pub async fn crash_pools(&self) {
        let running = self.pools.lock().expect("lock").take();
        if let Some((_, task)) = running {
            task.abort();
            let _ = task.await;
        }
    }

    /// Everything the backend lists that this world's daemon made.
    pub async fn made_here(&self) -> Vec<ListedInstance> {
        let daemon = self.broker.daemon_id();
        self.backend
            .list()
            .await
            .expect("list")
            .into_iter()
            .filter(|i| &i.handle.maker == daemon)
            .collect()
    }

    /// Spawns an agent of `role` in the world's project.
    pub async fn agent(&self, role: &str) -> Agent {
        let slug = AgentSlug::parse(&unique(role.replace('_', "-").as_str())).expect("slug");
        self.owners.lock().expect("lock").push(slug.clone());
        self.broker
            .spawn_agent(&slug, role, &self.project)
            .await
            .expect("spawn");
        self.broker
            .agent(&slug)
            .await
            .expect("read agent")
            .expect("agent exists")
    }

    /// An agent of `role` holding a fresh task.
    pub async fn working_agent(&self, role: &str) -> Agent {
        let agent = self.agent(role).await;
        self.broker
            .add_task(&self.project, &unique("task"), "a task")
            .await
            .expect("task");
        let verb = if role == "qa" {
            Verb::ClaimReview
        } else {
            Verb::GiveMeWork
        };
        if role == "qa" {
            // A task waiting for review needs a developer to hand it over first.
            let dev = self.agent("developer").await;
            ok(self
                .call(&dev, Verb::GiveMeWork, serde_json::json!({}))
                .await);
            ok(self.call(&dev, Verb::IAmDone, serde_json::json!({})).await);
        }
        ok(self.call(&agent, verb, serde_json::json!({})).await);
        agent
    }

    pub async fn call(&self, agent: &Agent, verb: Verb, args: serde_json::Value) -> Envelope {
        self.broker
            .call(agent, sandboxd_domain::call::Call::parse(verb, args))
            .await
            .to_json()
    }

    /// Makes every write of sandbox instances to the store fail (a trigger that aborts the
    /// insert: the store's own transaction rolls back), or work again.
    pub async fn fail_store_writes(&self, fail: bool) {
        use sqlx::Connection;
        let url = format!("sqlite://{}", self.store_path.display());
        let mut raw = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("a raw connection to the test store");
        let statement = if fail {
            "CREATE TRIGGER injected_fault BEFORE INSERT ON sandbox_instances \
             BEGIN SELECT RAISE(ABORT, 'a fault the test injected'); END"
        } else {
            "DROP TRIGGER IF EXISTS injected_fault"
        };
        sqlx::query(statement)
            .execute(&mut raw)
            .await
            .expect("the fault trigger");
        raw.close().await.expect("close");
    }

    pub fn track(&self, owner: &AgentSlug) {
        self.owners.lock().expect("lock").push(owner.clone());
    }

    /// The world's store, opened beside its broker: for writing what an operator surface
    /// would refuse (a standing feature set before the backend changed).
    pub async fn store(&self) -> Store {
        open_store(&self.store_path, &self.key_path).await
    }

    /// A second broker on the same store and backend, as after a restart or a crash.
    pub async fn restarted(&self) -> Broker {
        self.restarted_with(self.backend.clone()).await
    }

    /// A second broker on the same store, with `backend` instead of the world's.
    pub async fn restarted_with(&self, backend: Arc<dyn Backend>) -> Broker {
        let store = open_store(&self.store_path, &self.key_path).await;
        Broker::start(
            self.config.clone(),
            store,
            Backends::new(backend, self.others.clone()),
        )
        .await
        .expect("broker")
    }

    /// The world's namespace on the test cluster (Kubernetes worlds only).
    pub fn namespace(&self) -> Option<&str> {
        self._namespace.as_ref().map(|n| n.name.as_str())
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

    /// Runs `body`, then tears down everything this world's owners have and asserts nothing of
    /// theirs is left; re-raises a panic of `body`.
    pub async fn run<F, Fut>(self, body: F)
    where
        F: FnOnce(Arc<World>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let world = Arc::new(self);
        let outcome = AssertUnwindSafe(body(world.clone())).catch_unwind().await;
        world.stop_pools().await;
        let pool_members: Vec<ListedInstance> = world
            .made_here()
            .await
            .into_iter()
            .filter(|i| i.handle.owner.is_pool_slot())
            .collect();
        for member in &pool_members {
            let _ = world.backend.teardown(&member.handle).await;
        }
        let owners: Vec<AgentSlug> = world.owners.lock().expect("lock").clone();
        for owner in &owners {
            for instance in world.listed(owner).await {
                let _ = world.backend.teardown(&instance.handle).await;
            }
        }
        for owner in &owners {
            let left = world.listed(owner).await;
            assert!(left.is_empty(), "instances left for {owner}: {left:?}");
        }
        // As a clean stop does: what the instances shared (a Docker network) goes too.
        world.broker.sweep_at_stop().await;
        let daemon = world.broker.daemon_id().to_string();
        let left = sandboxd_testkit::daemon_network_left(&daemon);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        assert!(
            pool_members.is_empty(),
            "a clean stop of the pools left members behind: {pool_members:?}"
        );
        assert!(
            !left,
            "daemon {daemon}'s network outlived every instance of it"
        );
    }
}

async fn open_store(store_path: &Path, key_path: &Path) -> Store {
    let cipher = SecretCipher::load_or_create(key_path).expect("key");
    Store::open(&format!("sqlite://{}", store_path.display()), cipher)
        .await
        .expect("store")
}

/// An answer as an agent reads it: the broker's typed one turned into JSON as the gateway
/// does, or one that already is.
pub trait Answered {
    fn json(self) -> Envelope;
}

impl Answered for Envelope {
    fn json(self) -> Envelope {
        self
    }
}

impl Answered for Envelope<sandboxd_broker::Evidence> {
    fn json(self) -> Envelope {
        self.to_json()
    }
}

pub fn ok(envelope: impl Answered) -> OkEnvelope {
    match envelope.json() {
        Envelope::Ok(ok) => ok,
        Envelope::Error(err) => panic!("expected ok, got {err:?}"),
    }
}

pub fn refused(envelope: impl Answered) -> ErrorEnvelope {
    match envelope.json() {
        Envelope::Error(err) => err,
        Envelope::Ok(ok) => panic!("expected a refusal, got {ok:?}"),
    }
}

/// `(service, password)` pairs of a request_sandbox answer.
pub fn passwords(ok: &OkEnvelope) -> BTreeMap<String, String> {
    ok.evidence
        .as_ref()
        .and_then(|e| e.as_array())
        .expect("evidence array")
        .iter()
        .map(|entry| {
            (
                entry["service"].as_str().expect("service").to_owned(),
                entry["password"].as_str().expect("password").to_owned(),
            )
        })
        .collect()
}

pub async fn pg_query(entry: &serde_json::Value, sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, connection) =
        tokio_postgres::connect(entry["url"].as_str().expect("url"), tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.batch_execute(sql).await
}

pub fn evidence_of<'a>(ok: &'a OkEnvelope, service: &str) -> &'a serde_json::Value {
    ok.evidence
        .as_ref()
        .and_then(|e| e.as_array())
        .expect("evidence array")
        .iter()
        .find(|e| e["service"] == service)
        .unwrap_or_else(|| panic!("{service} in {:?}", ok.evidence))
}

/// Registered engines by name, or fails the test.
pub fn engines(names: &[&str]) -> Vec<EngineRef> {
    names
        .iter()
        .map(|n| EngineRef::parse(n).expect("registered"))
        .collect()
}
