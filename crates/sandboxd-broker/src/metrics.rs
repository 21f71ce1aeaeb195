//! Prometheus metrics, recorded where things happen and rendered as text by the operator
//! surface (`/metrics`). Labels never carry a credential or free text: the recording methods
//! take engines, backends, verbs, outcomes, reap reasons and error codes as their types, and the
//! labels are those types' fixed names.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sandboxd_domain::EngineRef;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::instance::BackendKind;
use sandboxd_domain::roles::Verb;

use crate::audit::Outcome;
use crate::janitor::ReapReason;
use crate::pools::PoolKey;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    pub engine: &'static str,
    pub backend: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResetLabels {
    pub engine: &'static str,
    pub result: &'static str,
}

/// A pool: its engine, backend, and the source its members are clones of (empty when not).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub engine: &'static str,
    pub backend: &'static str,
    pub clone_of: String,
}

/// A pool and how a request that looked in it fared: `hit` or `miss`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolRequestLabels {
    pub engine: &'static str,
    pub backend: &'static str,
    pub clone_of: String,
    pub result: &'static str,
}

/// An engine, a backend and a result: feature probes (ok, failed).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolResultLabels {
    pub engine: &'static str,
    pub backend: &'static str,
    pub result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolFailureLabels {
    pub engine: &'static str,
    pub backend: &'static str,
    pub clone_of: String,
    /// `start`, `idle` (stopped answering) or `hand_out`.
    pub stage: &'static str,
}

/// How an experiment ended: `completed`, `script_error`, `limit` or `unavailable`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExperimentLabels {
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub limit: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
    pub outcome: &'static str,
}

fn reset_histogram() -> Histogram {
    // 1 ms … ~8 s: a Redis flush takes a millisecond, a Postgres reset with features seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

fn experiment_histogram() -> Histogram {
    // 1 ms … ~65 s: a trivial script takes milliseconds, the longest wall limit a minute.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn snapshot_histogram() -> Histogram {
    // 50 ms … ~7 min: a small schema takes a fraction of a second, pg_dump's deadline is 5 min.
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

/// How a snapshot of a source ended: `ok` or `failed`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotLabels {
    pub outcome: &'static str,
}

fn provision_histogram() -> Histogram {
    // 10 ms … ~80 s: a process instance is ready in tens of milliseconds, a cold container in
    // seconds.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub provision_seconds: Family<ProvisionLabels, Histogram, fn() -> Histogram>,
    pub cache_requests: Family<ResultLabels, Counter>,
    pub live_sandboxes: Gauge,
    pub janitor_reaps: Family<ReasonLabels, Counter>,
    pub failures: Family<ReasonLabels, Counter>,
    pub verb_calls: Family<VerbLabels, Counter>,
    pub reset_seconds: Family<ResetLabels, Histogram, fn() -> Histogram>,
    pub pool_idle: Family<PoolLabels, Gauge>,
    pub pool_backing_off: Family<PoolLabels, Gauge>,
    pub pool_requests: Family<PoolRequestLabels, Counter>,
    pub pool_member_failures: Family<PoolFailureLabels, Counter>,
    pub feature_probes: Family<PoolResultLabels, Counter>,
    pub experiment_seconds: Family<ExperimentLabels, Histogram, fn() -> Histogram>,
    pub experiment_limits: Family<LimitLabels, Counter>,
    pub snapshot_seconds: Family<SnapshotLabels, Histogram, fn() -> Histogram>,
    /// Clones handed out, by source name (an operator's name, not its address).
    pub clones: Family<SourceLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sandboxd");
        let provision_seconds =
            Family::<ProvisionLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                provision_histogram,
            );
        let cache_requests = Family::<ResultLabels, Counter>::default();
        let live_sandboxes = Gauge::default();
        let janitor_reaps = Family::<ReasonLabels, Counter>::default();
        let failures = Family::<ReasonLabels, Counter>::default();
        let verb_calls = Family::<VerbLabels, Counter>::default();
        let reset_seconds =
            Family::<ResetLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                reset_histogram,
            );
        let pool_idle = Family::<PoolLabels, Gauge>::default();
        let pool_backing_off = Family::<PoolLabels, Gauge>::default();
        let pool_requests = Family::<PoolRequestLabels, Counter>::default();
        let pool_member_failures = Family::<PoolFailureLabels, Counter>::default();
        let feature_probes = Family::<PoolResultLabels, Counter>::default();
        let experiment_seconds =
            Family::<ExperimentLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                experiment_histogram,
            );
        let experiment_limits = Family::<LimitLabels, Counter>::default();
        let snapshot_seconds =
            Family::<SnapshotLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                snapshot_histogram,
            );
        let clones = Family::<SourceLabels, Counter>::default();
        registry.register(
            "snapshot_seconds",
            "Snapshots of clone sources by outcome (ok, failed) and how long each took",
            snapshot_seconds.clone(),
        );
        registry.register(
            "clones_handed_out",
            "Sandboxes handed out as clones, by source",
            clones.clone(),
        );
        registry.register(
            "experiment_seconds",
            "run_experiment runs by outcome (completed, script_error, limit, unavailable) and \
             their time from call to answer",
            experiment_seconds.clone(),
        );
        registry.register(
            "experiment_limit_hits",
            "Limits experiments met, by limit (the ones that ended a run and the ones that cut \
             rows or output)",
            experiment_limits.clone(),
        );
        registry.register(
            "pool_idle_members",
            "Warm-pool members ready to be handed out, per engine and backend",
            pool_idle.clone(),
        );
        registry.register(
            "pool_backing_off",
            "1 while a warm pool waits after failed starts, per engine and backend",
            pool_backing_off.clone(),
        );
        registry.register(
            "pool_requests",
            "Provisions that looked in a warm pool: hit (a member was handed out) or miss (empty)",
            pool_requests.clone(),
        );
        registry.register(
            "pool_member_failures",
            "Warm-pool members that failed, by stage: start, idle (quarantined), hand_out",
            pool_member_failures.clone(),
        );
        registry.register(
            "feature_probes",
            "Probes of which allowlisted features a backend provides, per engine, backend and \
             result (ok, failed)",
            feature_probes.clone(),
        );
        registry.register(
            "reset_seconds",
            "Time to reset one service of a sandbox in place, per engine and result",
            reset_seconds.clone(),
        );
        registry.register(
            "provision_seconds",
            "Time from provision request to a ready instance, per engine and backend",
            provision_seconds.clone(),
        );
        registry.register(
            "sandbox_cache_requests",
            "request_sandbox calls answered from a live sandbox (hit) or by provisioning (miss)",
            cache_requests.clone(),
        );
        registry.register(
            "live_sandbox_instances",
            "Service instances the broker currently holds for agents",
            live_sandboxes.clone(),
        );
        registry.register(
            "janitor_reaps",
            "Instances the janitor removed, by reason",
            janitor_reaps.clone(),
        );
        registry.register(
            "failures",
            "Failed provisions and refused sandbox requests, by reason (error code)",
            failures.clone(),
        );
        registry.register(
            "verb_calls",
            "Agent verb calls by verb and outcome",
            verb_calls.clone(),
        );
        Self {
            registry,
            provision_seconds,
            cache_requests,
            live_sandboxes,
            janitor_reaps,
            failures,
            verb_calls,
            reset_seconds,
            pool_idle,
            pool_backing_off,
            pool_requests,
            pool_member_failures,
            feature_probes,
            experiment_seconds,
            experiment_limits,
            snapshot_seconds,
            clones,
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String never fails");
        out
    }

    pub fn provisioned(&self, engine: EngineRef, backend: BackendKind, took: Duration) {
        self.provision_seconds
            .get_or_create(&ProvisionLabels {
                engine: engine.name,
                backend: backend.as_str(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn snapshot(&self, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "failed" };
        self.snapshot_seconds
            .get_or_create(&SnapshotLabels { outcome })
            .observe(took.as_secs_f64());
    }

    pub fn cloned(&self, source: &str) {
        self.clones
            .get_or_create(&SourceLabels {
                source: source.to_owned(),
            })
            .inc();
    }

    /// One experiment run: how it ended, how long it took, and every limit it met.
    pub fn experiment(&self, outcome: &'static str, took: Duration, limits: &[&'static str]) {
        self.experiment_seconds
            .get_or_create(&ExperimentLabels { outcome })
            .observe(took.as_secs_f64());
        for limit in limits {
            self.experiment_limits
                .get_or_create(&LimitLabels { limit })
                .inc();
        }
    }

    pub fn reset(&self, engine: EngineRef, ok: bool, took: Duration) {
        self.reset_seconds
            .get_or_create(&ResetLabels {
                engine: engine.name,
                result: if ok { "ok" } else { "failed" },
            })
            .observe(took.as_secs_f64());
    }

    pub fn cache(&self, hit: bool) {
        self.cache_requests
            .get_or_create(&ResultLabels {
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }

    pub fn reaped(&self, reason: ReapReason) {
        self.janitor_reaps
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// A refused sandbox request or a failed provision, by the error code the agent got.
    pub fn failed(&self, reason: ErrorCode) {
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub fn pool_request(&self, pool: &PoolKey, backend: &'static str, hit: bool) {
        self.pool_requests
            .get_or_create(&PoolRequestLabels {
                engine: pool.engine.name,
                backend,
                clone_of: pool.source_label(),
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }

    pub fn pool_member_failed(&self, pool: &PoolKey, backend: &'static str, stage: &'static str) {
        self.pool_member_failures
            .get_or_create(&PoolFailureLabels {
                engine: pool.engine.name,
                backend,
                clone_of: pool.source_label(),
                stage,
            })
            .inc();
    }

    pub fn pool_state(
        &self,
        pool: &PoolKey,
        backend: &'static str,
        idle: usize,
        backing_off: bool,
    ) {
        let labels = PoolLabels {
            engine: pool.engine.name,
            backend,
            clone_of: pool.source_label(),
        };
        self.pool_idle
            .get_or_create(&labels)
            .set(i64::try_from(idle).unwrap_or(i64::MAX));
        self.pool_backing_off
            .get_or_create(&labels)
            .set(i64::from(backing_off));
    }

    pub fn feature_probe(&self, engine: EngineRef, backend: BackendKind, ok: bool) {
        self.feature_probes
            .get_or_create(&PoolResultLabels {
                engine: engine.name,
                backend: backend.as_str(),
                result: if ok { "ok" } else { "failed" },
            })
            .inc();
    }

    pub fn verb(&self, verb: Verb, outcome: Outcome) {
        self.verb_calls
            .get_or_create(&VerbLabels {
                verb: verb.name(),
                outcome: outcome.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_was_recorded() {
        let metrics = Metrics::default();
        let engine = sandboxd_domain::engines::all().next().expect("an engine");
        metrics.provisioned(engine, BackendKind::Process, Duration::from_millis(250));
        metrics.reaped(ReapReason::OwnerGone);
        metrics.failed(ErrorCode::NoActiveTask);
        metrics.cache(true);
        metrics.cache(false);
        metrics.cache(false);
        metrics.live_sandboxes.set(3);
        let text = metrics.render();
        assert!(
            text.contains(&format!(
                "sandboxd_provision_seconds_count{{engine=\"{}\",backend=\"process\"}} 1",
                engine.name
            )),
            "{text}"
        );
        assert!(
            text.contains("sandboxd_janitor_reaps_total{reason=\"owner_gone\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandboxd_failures_total{reason=\"no_active_task\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandboxd_sandbox_cache_requests_total{result=\"miss\"} 2"),
            "{text}"
        );
        assert!(text.contains("sandboxd_live_sandbox_instances 3"), "{text}");
    }
}
