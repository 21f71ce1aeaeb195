//! The runtime: one wasmtime engine, the compiled guest ready to instantiate (`InstancePre`),
//! the threads guests run on, the capacity runs are admitted within (`capacity.rs`), and an
//! epoch ticker. A run is a fresh store (nothing carries over between runs), held to its
//! limits: the epoch callback interrupts at the wall deadline and yields on every tick in
//! between (so runs sharing a thread take turns), fuel bounds CPU, the limiter bounds memory,
//! and a timer around the whole run ends it even inside a host call. Runs execute on the
//! runtime's own threads, never on the caller's: however busy the guests, the caller's workers
//! stay free for everything else the daemon does.
//!
//! `execute.rs` is one run in its store and how its ending is read; `ticker.rs` the epoch
//! ticker.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wasmtime::component::{InstancePre, Linker};
use wasmtime::{Config, Engine};

use crate::capacity::{Admission, Capacity};
use crate::guest::{GuestFiles, Load};
use crate::host::HostState;
use crate::limits::{Limits, Policy};
use crate::outcome::{Run, Unavailable};
use crate::sql_port::SqlPort;
use execute::execute;
use ticker::{Active, Ticker, tick};

mod execute;
mod ticker;

/// Where preparing the guest stands.
#[derive(Clone)]
enum Readiness {
    /// Nothing under way (not started yet, or the last attempt failed and was reported).
    Idle,
    Preparing {
        since: Instant,
    },
    Ready(InstancePre<HostState>),
    Failed(Unavailable),
}

/// What an operator sees of the runtime (`doctor`, the panel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestStatus {
    Ready,
    Preparing { seconds: u64 },
    Failed(String),
    NotStarted,
}

/// The experiment runtime, shared by every run.
pub struct Runtime {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    files: GuestFiles,
    policy: Policy,
    admission: Admission,
    /// The threads guests run on (a tokio runtime of their own: a guest's host calls are
    /// async). Taken and shut down in the background on drop, which may happen inside the
    /// caller's runtime, where a blocking shutdown is not allowed.
    threads: Option<tokio::runtime::Runtime>,
    guests: tokio::runtime::Handle,
    readiness: watch::Sender<Readiness>,
    ticker: Arc<Ticker>,
    /// The ticker's thread, woken by each run (it parks while none is under way).
    ticker_wake: std::thread::Thread,
    ticker_thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("files", &self.files)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// [`Runtime::start_with`] the default capacity.
    pub fn start(files: GuestFiles, policy: Policy) -> Result<Arc<Self>, Unavailable> {
        Self::start_with(files, policy, Capacity::default())
    }

    /// Builds the engine and the guests' threads, and starts preparing the guest in the
    /// background (loading its compiled form, or compiling it once).
    pub fn start_with(
        files: GuestFiles,
        policy: Policy,
        capacity: Capacity,
    ) -> Result<Arc<Self>, Unavailable> {
        let runtime_failed = |err: wasmtime::Error| Unavailable::Runtime {
            detail: format!("{err:#}"),
        };
        let engine = engine().map_err(runtime_failed)?;
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(runtime_failed)?;
        crate::host::add_to_linker(&mut linker).map_err(runtime_failed)?;
        let threads = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(capacity.threads.max(1))
            .thread_name("experiment")
            .enable_all()
            .build()
            .map_err(|err| Unavailable::Runtime {
                detail: format!("starting the experiment threads: {err}"),
            })?;
        let ticker = Arc::new(Ticker::default());
        let thread = {
            let (engine, ticker) = (engine.clone(), ticker.clone());
            std::thread::Builder::new()
                .name("experiment-epoch".into())
                .spawn(move || tick(&engine, &ticker))
                .map_err(|err| Unavailable::Runtime {
                    detail: format!("starting the epoch ticker: {err}"),
                })?
        };
        let runtime = Arc::new(Self {
            engine,
            linker: Arc::new(linker),
            files,
            policy,
            admission: Admission::new(capacity),
            guests: threads.handle().clone(),
            threads: Some(threads),
            readiness: watch::Sender::new(Readiness::Idle),
            ticker,
            ticker_wake: thread.thread().clone(),
            ticker_thread: Mutex::new(Some(thread)),
        });
        runtime.begin_preparing();
        Ok(runtime)
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn files(&self) -> &GuestFiles {
        &self.files
    }

    pub fn capacity(&self) -> Capacity {
        self.admission.capacity()
    }

    pub fn status(&self) -> GuestStatus {
        match &*self.readiness.borrow() {
            Readiness::Idle => GuestStatus::NotStarted,
            Readiness::Preparing { since } => GuestStatus::Preparing {
                seconds: since.elapsed().as_secs(),
            },
            Readiness::Ready(_) => GuestStatus::Ready,
            Readiness::Failed(err) => GuestStatus::Failed(err.to_string()),
        }
    }

    /// Waits up to `wait` for the guest to be ready (or its preparation to fail).
    pub async fn wait_ready(&self, wait: Duration) -> Result<(), Unavailable> {
        self.prepared(Instant::now() + wait).await.map(|_| ())
    }

    /// Starts preparing unless it is under way or done.
    fn begin_preparing(&self) {
        let started = self.readiness.send_if_modified(|state| match state {
            Readiness::Idle | Readiness::Failed(_) => {
                *state = Readiness::Preparing {
                    since: Instant::now(),
                };
                true
            }
            _ => false,
        });
        if !started {
            return;
        }
        let (engine, linker, files) =
            (self.engine.clone(), self.linker.clone(), self.files.clone());
        let readiness = self.readiness.clone();
        // A blocking task of its own: compiling takes seconds and must outlive any one run
        // that stops waiting for it.
        self.guests.spawn_blocking(move || {
            let outcome = prepare(&engine, &linker, &files);
            if let Err(err) = &outcome {
                tracing::warn!(error = %err, "the experiment guest is not ready");
            }
            readiness.send_replace(match outcome {
                Ok(pre) => Readiness::Ready(pre),
                Err(err) => Readiness::Failed(err),
            });
        });
    }

    /// The compiled guest, waiting until `deadline` while it is prepared. A failure is
    /// answered once; the next call starts over (and so compiles a guest found corrupt).
    async fn prepared(&self, deadline: Instant) -> Result<InstancePre<HostState>, Unavailable> {
        if matches!(*self.readiness.borrow(), Readiness::Idle) {
            self.begin_preparing();
        }
        let mut watcher = self.readiness.subscribe();
        let wait = deadline.saturating_duration_since(Instant::now());
        let settled = tokio::time::timeout(
            wait,
            watcher.wait_for(|state| !matches!(state, Readiness::Preparing { .. })),
        )
        .await;
        let state = match settled {
            Ok(Ok(state)) => state.clone(),
            Ok(Err(_)) => {
                return Err(Unavailable::Runtime {
                    detail: "the runtime stopped".into(),
                });
            }
            Err(_) => self.readiness.borrow().clone(),
        };
        match state {
            Readiness::Ready(pre) => Ok(pre),
            Readiness::Preparing { since } => Err(Unavailable::Compiling {
                seconds: since.elapsed().as_secs(),
            }),
            Readiness::Failed(err) => {
                self.readiness.send_if_modified(|state| {
                    let failed = matches!(state, Readiness::Failed(_));
                    if failed {
                        *state = Readiness::Idle;
                    }
                    failed
                });
                Err(err)
            }
            Readiness::Idle => Err(Unavailable::Compiling { seconds: 0 }),
        }
    }

    /// Runs `script` under `limits` with `sql` as its one capability. `Err` only when the
    /// runtime could not run it (retryable), [`Unavailable::Full`] when it had no room for it
    /// within its capacity; whatever the script did is in `Run`. Waits at most the capacity's
    /// wait for room, then ends within the wall time plus a small margin, whatever the script
    /// or the database do.
    pub async fn run(
        &self,
        script: &str,
        limits: Limits,
        sql: Box<dyn SqlPort>,
    ) -> Result<Run, Unavailable> {
        let admitted = self.admission.admit(limits.memory_bytes).await?;
        let started = Instant::now();
        let deadline = started + limits.wall();
        let pre = self.prepared(deadline).await?;
        let active = Active::new(&self.ticker, &self.ticker_wake);
        let (engine, script) = (self.engine.clone(), script.to_owned());
        // On the guests' threads; it keeps its room (and the ticker) until it ends, even if
        // the caller stops waiting for it.
        let run = self.guests.spawn(async move {
            let ran = execute(&engine, &pre, &script, limits, sql, started, deadline).await;
            drop((active, admitted));
            ran
        });
        run.await.unwrap_or_else(|err| {
            Err(Unavailable::Runtime {
                detail: format!("the run's thread failed: {err}"),
            })
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(threads) = self.threads.take() {
            threads.shutdown_background();
        }
        self.ticker.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.ticker_thread.lock().ok().and_then(|mut t| t.take()) {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The one engine configuration: a compiled guest is only valid for the configuration it was
/// compiled with (fuel metering and epoch checks are in its machine code).
fn engine() -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config.consume_fuel(true).epoch_interruption(true);
    Engine::new(&config)
}

/// Whether the guest is installed and already compiled for this daemon's wasmtime, without
/// compiling it (`sandboxd doctor`).
pub fn inspect(files: &GuestFiles) -> Result<bool, Unavailable> {
    let engine = engine().map_err(|err| Unavailable::Runtime {
        detail: format!("{err:#}"),
    })?;
    let component = files.read_component()?;
    Ok(files.compiled_path(&engine, &component).is_file())
}

fn prepare(
    engine: &Engine,
    linker: &Linker<HostState>,
    files: &GuestFiles,
) -> Result<InstancePre<HostState>, Unavailable> {
    let component_bytes = files.read_component()?;
    let path = files.compiled_path(engine, &component_bytes);
    let component = match files.load(engine, &path) {
        Ok(component) => component,
        Err(Load::Corrupt(why)) => return Err(Unavailable::GuestCorrupt { detail: why }),
        Err(Load::Missing) => {
            let started = Instant::now();
            tracing::info!(path = %path.display(), "compiling the experiment guest");
            let component = files.compile(engine, &component_bytes, &path)?;
            tracing::info!(
                seconds = started.elapsed().as_secs_f64(),
                "compiled the experiment guest"
            );
            component
        }
    };
    let runtime_failed = |err: wasmtime::Error| Unavailable::Runtime {
        detail: format!("{err:#}"),
    };
    linker.instantiate_pre(&component).map_err(runtime_failed)
}
