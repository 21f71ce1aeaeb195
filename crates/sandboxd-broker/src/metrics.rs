//! Prometheus metrics, recorded where things happen and rendered as text by the operator
//! surface (`/metrics`). Labels never carry a credential or free text: engines, backends, verbs
//! and error codes only.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    pub engine: String,
    pub backend: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
    pub outcome: String,
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

    pub fn provisioned(&self, engine: &str, backend: &str, seconds: f64) {
        self.provision_seconds
            .get_or_create(&ProvisionLabels {
                engine: engine.to_owned(),
                backend: backend.to_owned(),
            })
            .observe(seconds);
    }

    pub fn cache(&self, hit: bool) {
        self.cache_requests
            .get_or_create(&ResultLabels {
                result: if hit { "hit" } else { "miss" }.to_owned(),
            })
            .inc();
    }

    pub fn reaped(&self, reason: &str) {
        self.janitor_reaps
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn verb(&self, verb: &str, outcome: &str) {
        self.verb_calls
            .get_or_create(&VerbLabels {
                verb: verb.to_owned(),
                outcome: outcome.to_owned(),
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
        metrics.provisioned("postgres", "process", 0.25);
        metrics.cache(true);
        metrics.cache(false);
        metrics.cache(false);
        metrics.live_sandboxes.set(3);
        let text = metrics.render();
        assert!(
            text.contains(
                "sandboxd_provision_seconds_count{engine=\"postgres\",backend=\"process\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("sandboxd_sandbox_cache_requests_total{result=\"miss\"} 2"),
            "{text}"
        );
        assert!(text.contains("sandboxd_live_sandbox_instances 3"), "{text}");
    }
}
