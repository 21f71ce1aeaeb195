//! What the runtime takes on at once, all callers together: a number of runs, and a memory
//! budget that the memory limits of the runs under way must fit in together (a run's guest
//! may use all of its limit, and that memory is the daemon's). A run that does not fit waits
//! a little for one to end, then is refused saying which cap it met; it is never queued for
//! longer. Guests run on threads of their own ([`Capacity::threads`]), so a busy one never
//! holds a thread the daemon answers other calls on.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The runtime's caps (an operator's to set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capacity {
    /// Runs under way at once.
    pub max_runs: usize,
    /// The most the memory limits (`limits.memory_bytes`) of the runs under way may add up to.
    pub memory_budget_bytes: u64,
    /// How long a run waits for room before it is refused.
    #[serde(serialize_with = "as_millis", rename = "wait_ms")]
    pub wait: Duration,
    /// Threads that run guests. Runs share them in turns of one epoch tick.
    pub threads: usize,
}

fn as_millis<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            max_runs: 8,
            memory_budget_bytes: 2 * 1024 * 1024 * 1024,
            wait: Duration::from_secs(2),
            threads: Self::default_threads(),
        }
    }
}

impl Capacity {
    /// One thread fewer than the host has CPUs, and at least one: a core stays free for the
    /// daemon's own work whatever the experiments do.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get().saturating_sub(1))
            .unwrap_or(1)
            .max(1)
    }
}

/// Which cap a run met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error(
        "{max} experiments are running, the most this sandboxd runs at once; none ended within \
         {waited_ms} ms"
    )]
    Runs { max: usize, waited_ms: u64 },
    #[error(
        "the experiments running hold {held_bytes} of the {budget_bytes} bytes of memory \
         experiments may claim together, and this one asks for {asked_bytes} \
         (limits.memory_bytes); not enough was freed within {waited_ms} ms"
    )]
    Memory {
        budget_bytes: u64,
        held_bytes: u64,
        asked_bytes: u64,
        waited_ms: u64,
    },
    #[error(
        "this experiment asks for {asked_bytes} bytes of memory (limits.memory_bytes), more than \
         the {budget_bytes} all experiments may claim together"
    )]
    MemoryNeverFits { budget_bytes: u64, asked_bytes: u64 },
}

/// Memory is counted in KiB: a semaphore takes at most `u32::MAX` permits at once.
const UNIT: u64 = 1024;

fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

/// The runs and memory handed out, as semaphores (fair: the first to wait is the first
/// admitted, so a large run is not starved by small ones).
#[derive(Debug)]
pub(crate) struct Admission {
    capacity: Capacity,
    runs: Arc<Semaphore>,
    memory: Arc<Semaphore>,
}

/// Room for one run, given back when it is dropped (when the run ended, wherever it was
/// waited on from).
#[derive(Debug)]
pub(crate) struct Admitted {
    _run: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

impl Admission {
    pub fn new(capacity: Capacity) -> Self {
        let memory = usize::try_from(units(capacity.memory_budget_bytes))
            .unwrap_or(Semaphore::MAX_PERMITS)
            .min(Semaphore::MAX_PERMITS);
        Self {
            capacity,
            runs: Arc::new(Semaphore::new(
                capacity.max_runs.min(Semaphore::MAX_PERMITS),
            )),
            memory: Arc::new(Semaphore::new(memory)),
        }
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Room for a run whose guest may use `memory_bytes`, waiting up to the capacity's wait.
    pub async fn admit(&self, memory_bytes: u64) -> Result<Admitted, Full> {
        let budget_bytes = self.capacity.memory_budget_bytes;
        let asked = units(memory_bytes);
        let never = Full::MemoryNeverFits {
            budget_bytes,
            asked_bytes: memory_bytes,
        };
        if memory_bytes > budget_bytes {
            return Err(never);
        }
        let asked = u32::try_from(asked).map_err(|_| never)?;
        let deadline = tokio::time::Instant::now() + self.capacity.wait;
        let waited_ms = u64::try_from(self.capacity.wait.as_millis()).unwrap_or(u64::MAX);
        let run = tokio::time::timeout_at(deadline, self.runs.clone().acquire_owned())
            .await
            .map_err(|_| Full::Runs {
                max: self.capacity.max_runs,
                waited_ms,
            })?
            .map_err(|_| Full::Runs {
                max: self.capacity.max_runs,
                waited_ms,
            })?;
        let memory =
            tokio::time::timeout_at(deadline, self.memory.clone().acquire_many_owned(asked))
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| Full::Memory {
                    budget_bytes,
                    held_bytes: self.held_bytes(),
                    asked_bytes: memory_bytes,
                    waited_ms,
                })?;
        Ok(Admitted {
            _run: run,
            _memory: memory,
        })
    }

    /// Memory the runs under way claimed, bytes.
    fn held_bytes(&self) -> u64 {
        let free = self.memory.available_permits() as u64;
        self.capacity
            .memory_budget_bytes
            .saturating_sub(free.saturating_mul(UNIT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn admission(max_runs: usize, budget_mib: u64) -> Admission {
        Admission::new(Capacity {
            max_runs,
            memory_budget_bytes: budget_mib * MIB,
            wait: Duration::from_millis(50),
            threads: 1,
        })
    }

    #[tokio::test]
    async fn runs_past_the_cap_wait_then_are_refused_naming_it() {
        let admission = admission(2, 1024);
        let first = admission.admit(64 * MIB).await.expect("room");
        let _second = admission.admit(64 * MIB).await.expect("room");
        let refused = admission.admit(64 * MIB).await.expect_err("full");
        assert!(matches!(refused, Full::Runs { max: 2, .. }), "{refused:?}");
        drop(first);
        admission.admit(64 * MIB).await.expect("room again");
    }

    #[tokio::test]
    async fn memory_limits_add_up_within_the_budget() {
        let admission = admission(8, 300);
        let big = admission.admit(256 * MIB).await.expect("room");
        let refused = admission.admit(128 * MIB).await.expect_err("over budget");
        let Full::Memory {
            held_bytes,
            asked_bytes,
            ..
        } = refused
        else {
            panic!("{refused:?}");
        };
        assert_eq!((held_bytes, asked_bytes), (256 * MIB, 128 * MIB));
        // The refused one gave its run back.
        assert_eq!(admission.runs.available_permits(), 7);
        let small = admission.admit(44 * MIB).await.expect("fits beside");
        drop((big, small));
        assert_eq!(admission.held_bytes(), 0);
        let never = admission.admit(301 * MIB).await.expect_err("never fits");
        assert!(matches!(never, Full::MemoryNeverFits { .. }), "{never:?}");
        assert!(never.to_string().contains("limits.memory_bytes"), "{never}");
    }

    #[tokio::test]
    async fn a_waiting_run_is_admitted_when_one_ends_in_time() {
        let mut capacity = admission(1, 1024).capacity();
        capacity.wait = Duration::from_secs(5);
        let admission = Arc::new(Admission::new(capacity));
        let first = admission.admit(64 * MIB).await.expect("room");
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit(64 * MIB).await.map(drop) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(first);
        waiting
            .await
            .expect("joined")
            .expect("admitted once the first ended");
    }
}
