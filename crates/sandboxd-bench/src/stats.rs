//! Percentiles, the report every scenario adds to, and its markdown rendering.

use std::time::Duration;

use serde::Serialize;

/// One measured series: what, how many runs, and its percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub scenario: String,
    pub subject: String,
    pub runs: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Set when a target applies: the p50 it must not exceed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_p50_ms: Option<f64>,
    /// Ratio of this p50 against the named baseline's p50, when the scenario has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<(String, f64)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Series {
    pub fn from_samples(scenario: &str, subject: &str, mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Self {
            scenario: scenario.to_owned(),
            subject: subject.to_owned(),
            runs: samples.len(),
            p50_ms: ms(percentile(&samples, 50.0)),
            p95_ms: ms(percentile(&samples, 95.0)),
            p99_ms: ms(percentile(&samples, 99.0)),
            min_ms: samples.first().copied().map(ms).unwrap_or(0.0),
            max_ms: samples.last().copied().map(ms).unwrap_or(0.0),
            target_p50_ms: None,
            ratio: None,
        }
    }

    pub fn with_target(mut self, p50_ms: f64) -> Self {
        self.target_p50_ms = Some(p50_ms);
        self
    }

    /// This p50 over `base`'s, named after the baseline.
    pub fn with_ratio(mut self, name: &str, base: &Series) -> Self {
        if base.p50_ms > 0.0 {
            self.ratio = Some((name.to_owned(), self.p50_ms / base.p50_ms));
        }
        self
    }
}

/// A target and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub holds: bool,
    /// The numbers behind the verdict.
    pub measured: String,
}

/// A value that is not a latency (memory, counts).
#[derive(Debug, Clone, Serialize)]
pub struct Measure {
    pub subject: String,
    pub value: f64,
    pub unit: String,
    pub note: String,
}

/// Everything one run of the harness found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub generated_at: String,
    pub machine: Vec<(String, String)>,
    pub series: Vec<Series>,
    /// Where the time of one provision goes: offsets of its phases, one series per phase.
    pub phases: Vec<Series>,
    pub checks: Vec<Check>,
    pub measures: Vec<Measure>,
    /// Scenarios of SPEC §6 that cannot be measured yet, and why.
    pub not_measured: Vec<(String, String)>,
    pub notes: Vec<String>,
}

/// The markdown table of `series`.
fn series_table(series: &[Series]) -> String {
    let mut out = String::from(
        "| scenario | subject | runs | p50 ms | p95 ms | p99 ms | min ms | max ms | target p50 | ratio (p50) |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for s in series {
        let target = match s.target_p50_ms {
            Some(t) if s.p50_ms <= t => format!("≤ {t:.0} ✓"),
            Some(t) => format!("≤ {t:.0} ✗"),
            None => String::new(),
        };
        let ratio = s
            .ratio
            .as_ref()
            .map(|(base, r)| format!("{r:.2}× {base}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
            s.scenario,
            s.subject,
            s.runs,
            s.p50_ms,
            s.p95_ms,
            s.p99_ms,
            s.min_ms,
            s.max_ms,
            target,
            ratio
        ));
    }
    out
}

impl Report {
    /// The whole report as markdown: machine, results, targets, phases, the rest.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if !self.generated_at.is_empty() {
            out.push_str(&format!("Run at {}.\n\n", self.generated_at));
        }
        if !self.machine.is_empty() {
            out.push_str("| machine | |\n|---|---|\n");
            for (key, value) in &self.machine {
                out.push_str(&format!("| {key} | {value} |\n"));
            }
            out.push('\n');
        }
        if !self.series.is_empty() {
            out.push_str("### Latencies\n\n");
            out.push_str(&series_table(&self.series));
            out.push('\n');
        }
        if !self.checks.is_empty() {
            out.push_str("### Targets\n\n| target | holds | measured |\n|---|---|---|\n");
            for c in &self.checks {
                let holds = if c.holds { "✓ yes" } else { "✗ no" };
                out.push_str(&format!("| {} | {holds} | {} |\n", c.target, c.measured));
            }
            out.push('\n');
        }
        if !self.phases.is_empty() {
            out.push_str(
                "### Where the time goes\n\nMilliseconds from the call to each phase's end, per \
                 provision (Docker's `Created` and `State.StartedAt`, the server's own \"ready\" log \
                 line, and the call's return).\n\n",
            );
            out.push_str(&series_table(&self.phases));
            out.push('\n');
        }
        if !self.measures.is_empty() {
            out.push_str(
                "### Memory and other values\n\n| subject | value | note |\n|---|---:|---|\n",
            );
            for m in &self.measures {
                out.push_str(&format!(
                    "| {} | {:.1} {} | {} |\n",
                    m.subject, m.value, m.unit, m.note
                ));
            }
            out.push('\n');
        }
        if !self.not_measured.is_empty() {
            out.push_str("### Not measured\n\n| scenario | why |\n|---|---|\n");
            for (scenario, why) in &self.not_measured {
                out.push_str(&format!("| {scenario} | {why} |\n"));
            }
            out.push('\n');
        }
        if !self.notes.is_empty() {
            out.push_str("### Notes\n\n");
            for note in &self.notes {
                out.push_str(&format!("- {note}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(10));
        assert_eq!(percentile(&samples, 95.0), Duration::from_millis(19));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(20));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn ratios_are_p50_over_the_baseline() {
        let base = Series::from_samples("s", "floor", vec![Duration::from_millis(100)]);
        let ours = Series::from_samples("s", "ours", vec![Duration::from_millis(110)])
            .with_ratio("floor", &base);
        let (name, ratio) = ours.ratio.clone().expect("a ratio");
        assert_eq!(name, "floor");
        assert!((ratio - 1.1).abs() < 1e-9);
        assert!(series_table(&[ours]).contains("1.10× floor"));
    }
}
