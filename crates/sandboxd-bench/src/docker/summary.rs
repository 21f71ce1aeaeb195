//! The Docker scenario's report: per contender and subject the ready and teardown series, the
//! targets checked against the floor and testcontainers-rs, and where the time goes.

use std::collections::BTreeMap;
use std::time::Duration;

use sandboxd_domain::EngineRef;

use super::runs::{Samples, Who, name_of};
use crate::containers::{self, Timeline};
use crate::stats::{Check, Report, Series};

const SERVER_UP: &str = containers::SERVER_UP;

const READY: &str = containers::READY;

pub(super) fn summarize(
    samples: &BTreeMap<(Who, String), Samples>,
    subjects: &[Vec<EngineRef>],
    report: &mut Report,
) {
    const SCENARIO: &str = "docker: cold provision to ready";
    let get = |who: Who, subject: &str| samples.get(&(who, subject.to_owned()));
    let mut ready_p50: BTreeMap<(Who, String), Series> = BTreeMap::new();
    for subject in subjects {
        let name = name_of(subject);
        let floor = get(Who::Floor, &name)
            .filter(|s| !s.ready.is_empty())
            .map(|s| Series::from_samples(SCENARIO, "", s.ready.clone()));
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
        ] {
            let Some(s) = get(who, &name) else { continue };
            if !s.failures.is_empty() {
                report.notes.push(format!(
                    "{} {name}: {} of {} runs failed; first error: {}",
                    who.label(),
                    s.failures.len(),
                    s.failures.len() + s.ready.len(),
                    s.failures[0]
                ));
            }
            if s.ready.is_empty() {
                continue;
            }
            let mut series = Series::from_samples(
                SCENARIO,
                &format!("{} {name}", who.label()),
                s.ready.clone(),
            );
            if let (Some(floor), true) = (&floor, who != Who::Floor) {
                series = series.with_ratio("floor", floor);
                if who == Who::Sandboxd {
                    series = series.with_target(floor.p50_ms * 1.10);
                }
            }
            ready_p50.insert((who, name.clone()), series.clone());
            report.series.push(series);
        }
    }
    for subject in subjects {
        let name = name_of(subject);
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
        ] {
            let Some(s) = get(who, &name).filter(|s| !s.teardown.is_empty()) else {
                continue;
            };
            let how = match who {
                Who::Sandboxd => "sandboxd (stop → kill → remove)",
                Who::Floor => "floor (docker rm -f)",
                Who::Testcontainers => "testcontainers-rs (rm)",
                Who::TestcontainersStandard => "testcontainers-rs, standard image (rm)",
                Who::Replay => continue,
            };
            report.series.push(Series::from_samples(
                "docker: teardown",
                &format!("{how} {name}"),
                s.teardown.clone(),
            ));
        }
    }

    // Targets (issue 3): overhead over the floor ≤ 10%; the set within max(pg, redis) + 10%.
    for subject in subjects {
        let name = name_of(subject);
        if let (Some(ours), Some(floor)) = (
            ready_p50.get(&(Who::Sandboxd, name.clone())),
            ready_p50.get(&(Who::Floor, name.clone())),
        ) {
            let ratio = ours.p50_ms / floor.p50_ms;
            report.checks.push(Check {
                target: format!("Docker {name}: sandboxd p50 ≤ floor p50 + 10%"),
                holds: ratio <= 1.10,
                measured: format!(
                    "{:.0} ms vs floor {:.0} ms: {ratio:.2}× ({:+.0}%, {:+.0} ms)",
                    ours.p50_ms,
                    floor.p50_ms,
                    (ratio - 1.0) * 100.0,
                    ours.p50_ms - floor.p50_ms
                ),
            });
        }
    }
    // Issue 15: from the baked image, at most half of what testcontainers-rs users wait for on
    // the standard one (Postgres subjects: only its image is baked).
    for subject in subjects
        .iter()
        .filter(|s| s.iter().any(|e| e.name == "postgres"))
    {
        let name = name_of(subject);
        if let (Some(ours), Some(standard)) = (
            ready_p50.get(&(Who::Sandboxd, name.clone())),
            ready_p50.get(&(Who::TestcontainersStandard, name.clone())),
        ) {
            let ratio = ours.p50_ms / standard.p50_ms;
            report.checks.push(Check {
                target: format!(
                    "Docker {name}: sandboxd p50 ≤ 0.5 × testcontainers-rs on the standard image"
                ),
                holds: ratio <= 0.5,
                measured: format!(
                    "{:.0} ms vs {:.0} ms: {ratio:.2}×",
                    ours.p50_ms, standard.p50_ms
                ),
            });
        }
    }
    if let [single_a, single_b, set] = subjects {
        let p50 = |subject: &Vec<EngineRef>| {
            ready_p50
                .get(&(Who::Sandboxd, name_of(subject)))
                .map(|s| s.p50_ms)
        };
        if let (Some(a), Some(b), Some(set_p50)) = (p50(single_a), p50(single_b), p50(set)) {
            let slowest = a.max(b);
            let ratio = set_p50 / slowest;
            report.checks.push(Check {
                target: format!(
                    "Docker {}: set p50 ≤ max({}, {}) p50 + 10%",
                    name_of(set),
                    name_of(single_a),
                    name_of(single_b)
                ),
                holds: ratio <= 1.10,
                measured: format!(
                    "{set_p50:.0} ms vs max({a:.0}, {b:.0}) = {slowest:.0} ms: {ratio:.2}×"
                ),
            });
        }
    }

    // Where the time goes: per engine, offsets of each phase from the call.
    for subject in subjects {
        let name = name_of(subject);
        let in_set = subject.len() > 1;
        for who in [
            Who::Sandboxd,
            Who::Floor,
            Who::Testcontainers,
            Who::TestcontainersStandard,
            Who::Replay,
        ] {
            let Some(s) = get(who, &name) else { continue };
            if who == Who::Replay && !s.failures.is_empty() {
                report.notes.push(format!(
                    "{} {name}: {} runs failed; first error: {}",
                    who.label(),
                    s.failures.len(),
                    s.failures[0]
                ));
            }
            for &engine in subject {
                let timelines: Vec<&Timeline> = s
                    .timelines
                    .iter()
                    .filter(|(e, _)| *e == engine)
                    .map(|(_, t)| t)
                    .collect();
                let Some(first) = timelines.first() else {
                    continue;
                };
                let scenario = if in_set {
                    format!("{} {engine} (in the {name} set)", who.label())
                } else {
                    format!("{} {engine}", who.label())
                };
                let at = |t: &Timeline, phase: &str| {
                    t.marks.iter().find(|(p, _)| p == phase).map(|m| m.1)
                };
                for (phase, _) in &first.marks {
                    let values: Vec<Duration> =
                        timelines.iter().filter_map(|t| at(t, phase)).collect();
                    report
                        .phases
                        .push(Series::from_samples(&scenario, phase, values));
                }
                // Per run, not a difference of percentiles: the time after the server is up.
                let after_up: Vec<Duration> = timelines
                    .iter()
                    .filter_map(|t| {
                        let up = at(t, SERVER_UP)?;
                        Some(at(t, READY)?.saturating_sub(up))
                    })
                    .collect();
                if !after_up.is_empty() && !in_set {
                    report.phases.push(Series::from_samples(
                        &scenario,
                        "Δ server logged ready → ready (per run)",
                        after_up,
                    ));
                }
            }
        }
    }
}
