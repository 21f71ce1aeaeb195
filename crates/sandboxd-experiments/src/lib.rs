//! `run_experiment`'s runtime. An agent's Python script runs inside a CPython interpreter
//! compiled to a WebAssembly component (`guest/`, built by `scripts/build-guest.sh` with
//! componentize-py), instantiated fresh per run by wasmtime. The guest has no files, sockets,
//! environment, arguments or stdio; its one way out is the `sql` import, which the caller
//! serves ([`SqlPort`]) over the agent's own connection. Limits ([`Limits`]) hold whatever the
//! script does, and a run always ends within its wall time plus a small margin.
//!
//! Runs are admitted within a [`Capacity`] (a number at once, and a memory budget their
//! memory limits share) and execute on threads of the runtime's own, so busy guests never
//! hold the caller's threads. Every text a run answers is capped: output at its limit, a
//! traceback like output ([`cut_to`]), `sql()` statements and the guest's answer by size
//! before the host copies them.
//!
//! This crate knows nothing of agents, sandboxes or databases: the broker resolves the
//! caller's sandbox and opens the connection behind [`SqlPort`].

mod capacity;
mod guest;
mod host;
mod limits;
mod outcome;
mod runtime;
mod sql_port;

pub use capacity::{Capacity, Full};
pub use guest::{GuestFiles, WASMTIME_VERSION};
pub use limits::{Bounds, Limit, Limits, OutOfBounds, Policy};
pub use outcome::{Ending, Run, RunReport, SqlCall, Unavailable, cut_to};
pub use runtime::{GuestStatus, Runtime, inspect};
pub use sql_port::{SqlParam, SqlPort, SqlRefusal, SqlRows};

/// Milliseconds with one decimal, as evidence shows them.
pub(crate) fn millis(elapsed: std::time::Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}
