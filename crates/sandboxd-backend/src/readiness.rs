//! Polling until an authenticated round trip succeeds, with a deadline. Never a bare TCP connect:
//! a port that accepts connections is not a server that answers (the Postgres image's temporary
//! init server, Docker's port proxy).

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::error::BackendError;

/// Why one attempt failed: keep polling, or give up now.
#[derive(Debug)]
pub enum Attempt {
    NotYet(String),
    Fatal(BackendError),
}

/// Calls `attempt` until it succeeds, fails fatally, or `deadline` passes. The delay starts at a
/// few milliseconds (a process is often ready in tens of them) and grows to 50 ms: a failed
/// attempt is cheap, and every millisecond of polling slack is provisioning latency.
pub async fn poll_until_ready<T, F, Fut>(
    name: &str,
    deadline: Duration,
    mut attempt: F,
) -> Result<T, BackendError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt>>,
{
    let started = Instant::now();
    let mut delay = Duration::from_millis(5);
    loop {
        let last_error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(Attempt::Fatal(err)) => return Err(err),
            Err(Attempt::NotYet(why)) => why,
        };
        if started.elapsed() + delay > deadline {
            return Err(BackendError::ReadinessTimeout {
                name: name.to_owned(),
                deadline,
                last_error,
            });
        }
        sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn times_out_with_the_last_reason() {
        let err = poll_until_ready::<(), _, _>("x", Duration::from_millis(60), || async {
            Err(Attempt::NotYet("connection refused".into()))
        })
        .await
        .expect_err("never ready");
        assert!(err.to_string().contains("connection refused"), "{err}");
        assert!(matches!(err, BackendError::ReadinessTimeout { .. }));
    }

    #[tokio::test]
    async fn returns_as_soon_as_an_attempt_succeeds() {
        let mut calls = 0;
        let value = poll_until_ready("x", Duration::from_secs(5), || {
            calls += 1;
            let done = calls >= 3;
            async move {
                if done {
                    Ok(42)
                } else {
                    Err(Attempt::NotYet("starting".into()))
                }
            }
        })
        .await
        .expect("ready on the third call");
        assert_eq!(value, 42);
        assert_eq!(calls, 3);
    }
}
