//! What the guest's store holds: an empty WASI context (no files, sockets, environment or
//! arguments; stdio goes nowhere), the memory limiter, and the guest's two imports: `sql()`,
//! which counts, times and bounds every call, and `answer`, which takes the run's answer.
//!
//! Both imports are defined by hand rather than by `bindgen!`: they take their string as a view
//! of the guest's memory (`WasmStr`) and copy it only when it is within its bound, so whatever
//! the script makes of the interpreter, the host never holds more of its text than that. (An
//! export's result is lifted whole before the host could look at its size, which is why the
//! answer comes through an import.)

use std::time::{Duration, Instant};

use wasmtime::component::{Linker, ResourceTable, WasmStr};
use wasmtime::{ResourceLimiter, StoreContextMut};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::limits::{Limit, Limits};
use crate::outcome::SqlCall;
use crate::sql_port::{SqlParam, SqlPort, SqlRefusal};

/// How much of a statement the evidence repeats.
const STATEMENT_SHOWN: usize = 200;
/// `sql()` calls the evidence lists one by one; the rest are counted.
pub(crate) const CALLS_SHOWN: usize = 1000;
/// The longest statement `sql()` takes, bytes.
pub(crate) const STATEMENT_MAX: usize = 1024 * 1024;
/// The store waits this much past a statement's own timeout before giving up on the server.
const SQL_GRACE: Duration = Duration::from_millis(500);
/// Instances, tables and memories a CPython component needs (it has a handful of each).
const MAX_INSTANCES: usize = 64;
const MAX_TABLES: usize = 64;
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Linear memory and tables held to the run's limits, remembering whether growth was refused.
/// The memory limit holds for the guest's memories together (a component has several), not
/// for each one.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    /// Bytes of every linear memory of the run, now (memories only grow).
    total_bytes: usize,
    pub peak_bytes: usize,
    pub memory_refused: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .total_bytes
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.memory_bytes {
            self.memory_refused = true;
            return Ok(false);
        }
        self.total_bytes = total;
        self.peak_bytes = self.peak_bytes.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_INSTANCES
    }
}

/// One run's store data.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: Limiter,
    sql: Box<dyn SqlPort>,
    limits: Limits,
    deadline: Instant,
    /// `sql()` calls made, refused ones included.
    made: usize,
    /// The first [`CALLS_SHOWN`] of them.
    pub calls: Vec<SqlCall>,
    /// The run's answer, as the guest handed it over.
    pub answer: Option<GuestAnswer>,
    /// The limit that ended the run from inside a host call, if one did.
    pub limit_hit: Option<(Limit, String)>,
    pub rows_cut: bool,
    /// The sandbox could not be reached: the run ends as an infrastructure failure.
    pub connection_failed: Option<String>,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("limits", &self.limits)
            .field("calls", &self.calls.len())
            .finish_non_exhaustive()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    pub fn new(sql: Box<dyn SqlPort>, limits: Limits, deadline: Instant) -> Self {
        let wasi = WasiCtx::builder()
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                total_bytes: 0,
                peak_bytes: 0,
                memory_refused: false,
            },
            sql,
            limits,
            deadline,
            made: 0,
            calls: Vec::new(),
            answer: None,
            limit_hit: None,
            rows_cut: false,
            connection_failed: None,
        }
    }

    /// `sql()` calls made, refused ones included.
    pub fn calls_made(&self) -> usize {
        self.made
    }

    fn record(&mut self, statement: &str, started: Instant, rows: usize, outcome: &'static str) {
        self.made += 1;
        if self.calls.len() >= CALLS_SHOWN {
            return;
        }
        let shown: String = statement.chars().take(STATEMENT_SHOWN).collect();
        self.calls.push(SqlCall {
            statement: shown,
            elapsed_ms: crate::millis(started.elapsed()),
            rows,
            outcome,
        });
    }

    /// A refusal the guest turns into `ExperimentLimit` (it ends the run) or `SqlError`.
    fn refusal(message: &str, limit: bool) -> String {
        serde_json::json!({ "message": message, "limit": limit }).to_string()
    }

    fn stop_at(&mut self, limit: Limit, detail: String) -> String {
        let answer = Self::refusal(&detail, true);
        self.limit_hit.get_or_insert((limit, detail));
        answer
    }
}

/// What the guest handed over as its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuestAnswer {
    Read(String),
    /// Longer than [`answer_max`]: left in the guest, only its length known.
    TooLong(usize),
}

/// The most of an answer the host reads: its output and its traceback (or limit) at most
/// `output_chars` characters each, as the guest caps them (with room for the mark of a cut),
/// at most 12 bytes a character once JSON-escaped (a surrogate pair), and the rest of the JSON;
/// and never less than [`ANSWER_FLOOR`], so that an answer whose guest-side cap the script
/// lifted a little is still read (and cut by the host).
pub(crate) fn answer_max(limits: &Limits) -> usize {
    let chars = (limits.output_chars as usize).saturating_add(crate::outcome::CUT_ROOM);
    chars
        .saturating_mul(2 * 12)
        .saturating_add(4096)
        .max(ANSWER_FLOOR)
}

/// The least of an answer the host reads, bytes.
const ANSWER_FLOOR: usize = 1024 * 1024;

/// Adds the guest's imports, `sql` and `answer`, to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut root = linker.root();
    root.func_wrap_async(
        "sql",
        |mut store: StoreContextMut<'_, HostState>, (query, params): (WasmStr, WasmStr)| {
            Box::new(async move {
                let text = query.to_str(&store)?;
                let values = params.to_str(&store)?;
                let lengths = (text.len(), values.len());
                let query = if lengths.0.saturating_add(lengths.1) <= STATEMENT_MAX {
                    Ok((text.into_owned(), values.into_owned()))
                } else {
                    Err(lengths)
                };
                let state = store.data_mut();
                let answer = match query {
                    Ok((query, params)) => match serde_json::from_str::<Vec<SqlParam>>(&params) {
                        Ok(params) => state.sql(query, params).await,
                        Err(_) => state.unbindable(&query),
                    },
                    Err((statement, params)) => state.too_long(statement, params),
                };
                Ok((answer,))
            })
        },
    )?;
    root.func_wrap(
        "answer",
        |mut store: StoreContextMut<'_, HostState>, (json,): (WasmStr,)| {
            let max = answer_max(&store.data().limits);
            let text = json.to_str(&store)?;
            let answer = if text.len() <= max {
                GuestAnswer::Read(text.into_owned())
            } else {
                GuestAnswer::TooLong(text.len())
            };
            store.data_mut().answer = Some(answer);
            Ok(())
        },
    )?;
    Ok(())
}

impl HostState {
    /// A statement over [`STATEMENT_MAX`]: refused without reading it, as the server would
    /// refuse a statement (the script may catch it).
    fn too_long(&mut self, statement: usize, params: usize) -> Result<String, String> {
        self.record("", Instant::now(), 0, "refused");
        Err(Self::refusal(
            &format!(
                "the statement is {statement} bytes and its params {params} bytes (as JSON); \
                 sql() takes at most {STATEMENT_MAX} bytes of both together"
            ),
            false,
        ))
    }

    /// Params that are not a list of scalars (the guest checks first; this holds whatever
    /// the script made of it).
    fn unbindable(&mut self, query: &str) -> Result<String, String> {
        self.record(query, Instant::now(), 0, "refused");
        Err(Self::refusal(
            "params must be a list of str, int (64-bit), float, bool or None",
            false,
        ))
    }

    async fn sql(&mut self, query: String, params: Vec<SqlParam>) -> Result<String, String> {
        let started = Instant::now();
        if self.made >= self.limits.sql_calls as usize {
            self.record(&query, started, 0, "limit");
            let detail = format!(
                "sql() was called more than {} times (limits.sql_calls)",
                self.limits.sql_calls
            );
            return Err(self.stop_at(Limit::SqlCalls, detail));
        }
        let left = self.deadline.saturating_duration_since(started);
        let statement_time = self.limits.sql_timeout();
        let wait = left.min(statement_time + SQL_GRACE);
        let max_rows = self.limits.sql_rows as usize;
        let answer = tokio::time::timeout(
            wait,
            self.sql.run(&query, &params, max_rows, statement_time),
        )
        .await
        .unwrap_or(Err(SqlRefusal::TimedOut));
        match answer {
            Ok(rows) => {
                self.record(&query, started, rows.rows.len(), "ok");
                self.rows_cut |= rows.truncated;
                Ok(serde_json::to_string(&rows).unwrap_or_else(|_| "{}".to_owned()))
            }
            Err(SqlRefusal::Server(message)) => {
                self.record(&query, started, 0, "refused");
                Err(Self::refusal(&message, false))
            }
            Err(SqlRefusal::TimedOut) => {
                self.record(&query, started, 0, "timed_out");
                if Instant::now() >= self.deadline {
                    let detail = format!(
                        "the run's wall time ({} ms, limits.wall_ms) ran out inside sql()",
                        self.limits.wall_ms
                    );
                    return Err(self.stop_at(Limit::WallMs, detail));
                }
                let detail = format!(
                    "a statement ran past {} ms (limits.sql_ms) and was cancelled",
                    self.limits.sql_ms
                );
                Err(self.stop_at(Limit::SqlMs, detail))
            }
            Err(SqlRefusal::Unavailable(detail)) => {
                self.record(&query, started, 0, "refused");
                let answer =
                    Self::refusal(&format!("the sandbox connection failed: {detail}"), true);
                self.connection_failed.get_or_insert(detail);
                Err(answer)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_holds_for_every_memory_together() {
        let mut limiter = Limiter {
            memory_bytes: 100,
            total_bytes: 0,
            peak_bytes: 0,
            memory_refused: false,
        };
        assert!(limiter.memory_growing(0, 60, None).expect("answer"));
        // A second memory of 60 would take the run past 100, though it alone is below.
        assert!(!limiter.memory_growing(0, 60, None).expect("answer"));
        assert!(limiter.memory_refused);
        assert!(limiter.memory_growing(0, 30, None).expect("answer"));
        // The first grows by 10: 100 in all, allowed; by one more byte, refused.
        assert!(limiter.memory_growing(60, 70, None).expect("answer"));
        assert!(!limiter.memory_growing(70, 71, None).expect("answer"));
        assert_eq!(limiter.peak_bytes, 100);
    }
}
