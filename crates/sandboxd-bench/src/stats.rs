//! Percentiles and the result table.

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
}

/// The markdown table of every series.
pub fn markdown(series: &[Series]) -> String {
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
}
