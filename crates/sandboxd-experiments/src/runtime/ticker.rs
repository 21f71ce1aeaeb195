//! The epoch ticker: it ticks the engine's epoch while any run is under way (the wall-time
//! limit and the guests' turns on a thread hang on it), and parks while none is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::Engine;

/// One epoch tick: the granularity of the wall-time limit and of yielding to tokio.
const TICK: Duration = Duration::from_millis(10);

/// Ticks the engine's epoch while any run is under way, and sleeps otherwise.
#[derive(Debug, Default)]
pub(super) struct Ticker {
    active: AtomicUsize,
    pub(super) stop: AtomicBool,
}

/// Counts a run as active for as long as it lives.
pub(super) struct Active(Arc<Ticker>);

impl Active {
    pub(super) fn new(ticker: &Arc<Ticker>, wake: &std::thread::Thread) -> Self {
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

pub(super) fn tick(engine: &Engine, ticker: &Ticker) {
    while !ticker.stop.load(Ordering::SeqCst) {
        if ticker.active.load(Ordering::SeqCst) == 0 {
            std::thread::park_timeout(Duration::from_secs(1));
            continue;
        }
        std::thread::sleep(TICK);
        engine.increment_epoch();
    }
}
