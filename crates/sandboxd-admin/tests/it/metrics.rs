//! /metrics after a scripted agent flow shows exactly what happened.

use sandboxd_domain::call::Call;
use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use sandboxd_domain::roles::Verb;
use serde_json::json;

use crate::support::{App, app_with_switch, ok};

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').expect("name value");
            (key.to_owned(), value.parse::<f64>().expect("a number"))
        })
        .collect()
}

/// The sum of every sample whose key starts with `prefix`.
fn sum_of(samples: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// The body of `GET /metrics`.
async fn scrape(app: &App) -> String {
    app.anonymous(Method::GET, "/metrics")
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body")
}

#[tokio::test]
async fn counters_and_histograms_show_exactly_the_scripted_flow() {
    app_with_switch(true).await.run(|app| async move {
        let project = app.project(&["postgres", "redis"], &[]).await;
        // spawn + give_me_work
        let dev = app.working_developer(&project).await;
        // request_sandbox twice: a miss, then a hit
        ok(app.broker().call(&dev, Call::parse(Verb::RequestSandbox, json!({}))).await);
        ok(app
            .broker()
            .call(&dev, Call::parse(Verb::RequestSandbox, json!({"services": ["redis"]})))
            .await);

        let response = app.anonymous(Method::GET, "/metrics").send().await.expect("metrics");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let during = samples(&response.text().await.expect("body"));

        ok(app.broker().call(&dev, Call::parse(Verb::ReleaseSandbox, json!({}))).await);
        let text = scrape(&app).await;
        let after = samples(&text);

        let get = |m: &BTreeMap<String, f64>, key: &str| -> f64 {
            *m.get(key).unwrap_or_else(|| panic!("{key} missing in:\n{text}"))
        };
        assert_eq!(get(&after, r#"sandboxd_sandbox_cache_requests_total{result="miss"}"#), 1.0);
        assert_eq!(get(&after, r#"sandboxd_sandbox_cache_requests_total{result="hit"}"#), 1.0);
        for engine in ["postgres", "redis"] {
            let labels = format!(r#"{{engine="{engine}",backend="process"}}"#);
            assert_eq!(get(&after, &format!("sandboxd_provision_seconds_count{labels}")), 1.0);
            let sum = get(&after, &format!("sandboxd_provision_seconds_sum{labels}"));
            assert!(sum > 0.0 && sum < 120.0, "{engine}: {sum}");
            let inf = format!(
                r#"sandboxd_provision_seconds_bucket{{le="+Inf",engine="{engine}",backend="process"}}"#
            );
            assert_eq!(get(&after, &inf), 1.0);
            // Buckets are cumulative: exactly one bucket boundary is crossed by the one sample.
            let buckets: Vec<f64> = after
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("sandboxd_provision_seconds_bucket")
                        && k.contains(&format!(r#"engine="{engine}""#))
                })
                .map(|(_, v)| *v)
                .collect();
            assert_eq!(buckets.len(), 15, "14 bounds and +Inf: {buckets:?}");
            assert!(buckets.iter().all(|v| *v == 0.0 || *v == 1.0), "{buckets:?}");
            // The one observation lies in the bucket whose bound first exceeds the sum.
            let first = after
                .iter()
                .filter(|(k, v)| {
                    k.starts_with("sandboxd_provision_seconds_bucket")
                        && k.contains(&format!(r#"engine="{engine}""#))
                        && **v == 1.0
                })
                .filter_map(|(k, _)| {
                    let le = k.split("le=\"").nth(1)?.split('"').next()?;
                    le.parse::<f64>().ok()
                })
                .fold(f64::INFINITY, f64::min);
            assert!(
                first >= sum && (first <= 0.01 || first / 2.0 < sum),
                "{engine}: sum {sum}, first bucket {first}"
            );
        }
        assert_eq!(
            after
                .keys()
                .filter(|k| k.starts_with("sandboxd_provision_seconds_count"))
                .count(),
            2,
            "no other engine or backend provisioned"
        );
        assert_eq!(get(&during, "sandboxd_live_sandbox_instances"), 2.0);
        assert_eq!(get(&after, "sandboxd_live_sandbox_instances"), 0.0);
        for (verb, count) in [("give_me_work", 1.0), ("request_sandbox", 2.0), ("release_sandbox", 1.0)] {
            assert_eq!(
                get(&after, &format!(r#"sandboxd_verb_calls_total{{verb="{verb}",outcome="ok"}}"#)),
                count,
                "{verb}"
            );
        }
        assert_eq!(
            sum_of(&after, "sandboxd_verb_calls_total"),
            4.0,
            "no other verb call:\n{text}"
        );
        assert_eq!(
            sum_of(&after, "sandboxd_failures_total"),
            0.0,
            "no failure:\n{text}"
        );
        assert_eq!(sum_of(&after, "sandboxd_janitor_reaps_total"), 0.0);
    })
    .await;
}

#[tokio::test]
async fn refusals_are_counted_by_reason() {
    app_with_switch(false)
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let dev = app.working_developer(&project).await;
            for _ in 0..2 {
                let answer = app
                    .broker()
                    .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                    .await;
                assert!(answer.is_error());
            }
            let text = scrape(&app).await;
            let after = samples(&text);
            assert_eq!(
                after.get(r#"sandboxd_failures_total{reason="sandbox_disabled"}"#),
                Some(&2.0),
                "{text}"
            );
            let refused_calls =
                r#"sandboxd_verb_calls_total{verb="request_sandbox",outcome="sandbox_disabled"}"#;
            assert_eq!(after.get(refused_calls), Some(&2.0), "{text}");
            assert!(
                !after
                    .keys()
                    .any(|k| k.starts_with("sandboxd_provision_seconds_count"))
            );
        })
        .await;
}
