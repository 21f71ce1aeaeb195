//! The runtime: one wasmtime engine, the compiled guest ready to instantiate (`InstancePre`),
//! the threads guests run on, the capacity runs are admitted within (`capacity.rs`), and an
//! epoch ticker. A run is a fresh store (nothing carries over between runs), held to its
//! limits: the epoch callback interrupts at the wall deadline and yields on every tick in
//! between (so runs sharing a thread take turns), fuel bounds CPU, the limiter bounds memory,
//! and a timer around the whole run ends it even inside a host call. Runs execute on the
//! runtime's own threads, never on the caller's: however busy the guests, the caller's workers
//! stay free for everything else the daemon does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wasmtime::component::{InstancePre, Linker};
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};

use crate::capacity::{Admission, Capacity};
use crate::guest::{GuestFiles, Load};
use crate::host::{GuestAnswer, HostState};
use crate::limits::{Limit, Limits, Policy};
use crate::outcome::{Ending, Run, RunReport, Unavailable, cut_to};
use crate::sql_port::SqlPort;

/// One epoch tick: the granularity of the wall-time limit and of yielding to tokio.
const TICK: Duration = Duration::from_millis(10);
/// How long past its wall time a run may take to end (the epoch check lands within a tick; a
/// host call is cut by the timer).
const MARGIN: Duration = Duration::from_millis(100);

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

/// Ticks the engine's epoch while any run is under way, and sleeps otherwise.
#[derive(Debug, Default)]
struct Ticker {
    active: AtomicUsize,
    stop: AtomicBool,
}

/// Counts a run as active for as long as it lives.
struct Active(Arc<Ticker>);

impl Active {
    fn new(ticker: &Arc<Ticker>, wake: &std::thread::Thread) -> Self {
        ticker.active.fetch_add(1, Ordering::SeqCst);
        wake.unpark();
        Self(ticker.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
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

/// One run in a fresh store, on the guests' threads.
async fn execute(
    engine: &Engine,
    pre: &InstancePre<HostState>,
    script: &str,
    limits: Limits,
    sql: Box<dyn SqlPort>,
    started: Instant,
    deadline: Instant,
) -> Result<Run, Unavailable> {
    let runtime_failed = |err: wasmtime::Error| Unavailable::Runtime {
        detail: format!("{err:#}"),
    };
    let mut store = Store::new(engine, HostState::new(sql, limits, deadline));
    store.limiter(|state| &mut state.limiter);
    store.set_fuel(limits.fuel).map_err(runtime_failed)?;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    let answered = {
        let work = async {
            let instance = pre.instantiate_async(&mut store).await?;
            let run = instance.get_typed_func::<(&str, u32), (bool,)>(&mut store, "run")?;
            run.call_async(&mut store, (script, limits.output_chars))
                .await
                .map(|(completed,)| completed)
        };
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left + MARGIN, work).await
    };
    let fuel_left = store.get_fuel().ok();
    let mut state = store.into_data();
    let max = limits.output_chars as usize;
    let (ending, output, dropped) = match answered {
        Err(_) => (wall_time_ran_out(&limits), String::new(), 0),
        Ok(Err(err)) => (trapped(&err, &state, &limits)?, String::new(), 0),
        Ok(Ok(completed)) => match state.answer.take() {
            Some(GuestAnswer::Read(answer)) => {
                let (output, dropped) = printed(&answer, limits.output_chars);
                let ending = if completed {
                    Ending::Completed
                } else {
                    raised(&answer, &state, max)?
                };
                (ending, output, dropped)
            }
            Some(GuestAnswer::TooLong(length)) => (too_long(length, &limits), String::new(), 0),
            None => (
                Ending::ScriptError {
                    traceback: "the script ended without the interpreter's answer".into(),
                },
                String::new(),
                0,
            ),
        },
    };
    let mut limits_met = Vec::new();
    if state.rows_cut {
        limits_met.push(Limit::SqlRows);
    }
    if dropped > 0 {
        limits_met.push(Limit::OutputChars);
    }
    let interrupted = matches!(
        ending,
        Ending::LimitHit {
            limit: Limit::WallMs,
            ..
        }
    );
    let made = state.calls_made() as u64;
    let calls = std::mem::take(&mut state.calls);
    let report = RunReport {
        output,
        output_dropped: dropped,
        sql_calls_dropped: made.saturating_sub(calls.len() as u64),
        sql_calls: calls,
        elapsed_ms: crate::millis(started.elapsed()),
        fuel_used: fuel_left
            .filter(|_| !interrupted)
            .map(|left| limits.fuel.saturating_sub(left)),
        memory_peak_bytes: state.limiter.peak_bytes as u64,
        limits,
        limits_met,
    };
    Ok(Run { ending, report })
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

fn tick(engine: &Engine, ticker: &Ticker) {
    while !ticker.stop.load(Ordering::SeqCst) {
        if ticker.active.load(Ordering::SeqCst) == 0 {
            std::thread::park_timeout(Duration::from_secs(1));
            continue;
        }
        std::thread::sleep(TICK);
        engine.increment_epoch();
    }
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

fn wall_time_ran_out(limits: &Limits) -> Ending {
    Ending::LimitHit {
        limit: Limit::WallMs,
        detail: format!(
            "the script ran longer than {} ms (limits.wall_ms) and was stopped",
            limits.wall_ms
        ),
    }
}

/// The ending of a run the guest did not return from.
fn trapped(
    err: &wasmtime::Error,
    state: &HostState,
    limits: &Limits,
) -> Result<Ending, Unavailable> {
    if let Some(detail) = &state.connection_failed {
        return Err(Unavailable::Connection {
            detail: detail.clone(),
        });
    }
    if let Some((limit, detail)) = &state.limit_hit {
        return Ok(Ending::LimitHit {
            limit: *limit,
            detail: detail.clone(),
        });
    }
    Ok(match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => wall_time_ran_out(limits),
        Some(Trap::OutOfFuel) => Ending::LimitHit {
            limit: Limit::Fuel,
            detail: format!(
                "the script used all {} units of fuel (limits.fuel) and was stopped",
                limits.fuel
            ),
        },
        _ if state.limiter.memory_refused => Ending::LimitHit {
            limit: Limit::MemoryBytes,
            detail: format!(
                "the script needed more than {} bytes of memory (limits.memory_bytes)",
                limits.memory_bytes
            ),
        },
        Some(Trap::StackOverflow) => Ending::ScriptError {
            traceback: "the script recursed until the interpreter's stack ran out".into(),
        },
        Some(trap) => Ending::ScriptError {
            traceback: format!("the interpreter stopped: {trap}"),
        },
        None => {
            return Err(Unavailable::Runtime {
                detail: format!("{err:#}"),
            });
        }
    })
}

/// The ending of a run whose answer was longer than the host reads: only a script that
/// reached into the interpreter's own capture (which caps what it answers) gets here.
fn too_long(length: usize, limits: &Limits) -> Ending {
    Ending::ScriptError {
        traceback: format!(
            "the script's answer was {length} bytes, more than the {} this runtime reads; \
             nothing of it is shown (what a script prints is kept up to limits.output_chars)",
            crate::host::answer_max(limits)
        ),
    }
}

/// The ending of a run the guest did not complete: a traceback, or a limit it hit. Texts
/// from the guest are cut to `max` characters ([`cut_to`]) whatever the guest did to its own
/// cut.
fn raised(answer: &str, state: &HostState, max: usize) -> Result<Ending, Unavailable> {
    if let Some(detail) = &state.connection_failed {
        return Err(Unavailable::Connection {
            detail: detail.clone(),
        });
    }
    let parsed: serde_json::Value = serde_json::from_str(answer).unwrap_or_default();
    if let Some((limit, detail)) = &state.limit_hit {
        return Ok(Ending::LimitHit {
            limit: *limit,
            detail: detail.clone(),
        });
    }
    let traceback = cut_to(parsed["traceback"].as_str().unwrap_or(answer), max);
    if state.limiter.memory_refused && traceback.trim_end().ends_with("MemoryError") {
        return Ok(Ending::LimitHit {
            limit: Limit::MemoryBytes,
            detail: format!(
                "the script needed more memory than limits.memory_bytes allows:\n{traceback}"
            ),
        });
    }
    Ok(Ending::ScriptError { traceback })
}

/// The output a guest answer carries, and how much of it was dropped.
/// Capped here too: the script can reach the guest's own cap and lift it.
fn printed(answer: &str, limit: u32) -> (String, u64) {
    let parsed: serde_json::Value = serde_json::from_str(answer).unwrap_or_default();
    let output = parsed["output"].as_str().unwrap_or_default();
    let mut dropped = parsed["dropped"].as_u64().unwrap_or(0);
    let kept: String = output.chars().take(limit as usize).collect();
    if kept.len() < output.len() {
        dropped += output[kept.len()..].chars().count() as u64;
    }
    (kept, dropped)
}
