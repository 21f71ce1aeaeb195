//! One run in a fresh store, on the guests' threads, held to its limits; and how its ending is
//! read from what the guest answered or how it stopped.

use std::time::{Duration, Instant};

use wasmtime::component::InstancePre;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use crate::host::{GuestAnswer, HostState};
use crate::limits::{Limit, Limits};
use crate::outcome::{Ending, Run, RunReport, Unavailable, cut_to};
use crate::sql_port::SqlPort;

/// How long past its wall time a run may take to end (the epoch check lands within a tick; a
/// host call is cut by the timer).
const MARGIN: Duration = Duration::from_millis(100);
/// One run in a fresh store, on the guests' threads.
pub(super) async fn execute(
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
