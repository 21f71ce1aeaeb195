//! Request bodies, bounded in size and in time, and read only when a handler asks.
//!
//! Every request's body is wrapped in a [`Bounded`] before any route sees it. Wrapping reads
//! nothing: a request that authentication refuses (or a route that has no use for its body) is
//! answered without a byte of its body being taken in, so an unauthenticated client cannot make
//! the daemon hold its body. A handler that reads gets at most `max_bytes` (a declared
//! `Content-Length` over it is refused before the first byte) within `timeout` of the request's
//! head; past either, the read fails and [`bound`] answers 413 or 408 whatever the handler made
//! of the failure.
//!
//! What a route left unread is drained a little after the answer (bounded in bytes and in time,
//! never kept), so that a client which sent a moderately sized body in one go reads the answer
//! instead of a connection reset; a larger or slower one is simply cut off.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::{Instant, Sleep};

/// How much of an unread body is still drained, as a multiple of the limit, and for how long.
const DRAIN_FACTOR: usize = 4;
const DRAIN_TIME: Duration = Duration::from_secs(1);

/// The bounds of every request body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// `server.max_body_bytes`.
    pub max_bytes: usize,
    /// `server.body_timeout_secs`: from the request's head to the body's last byte.
    pub timeout: Duration,
}

/// Why a body read failed.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the request body is over the limit")]
    TooLarge,
    #[error("the request body did not arrive in time")]
    TimedOut,
    #[error("unreadable request body: {0}")]
    Unreadable(#[source] axum::Error),
}

/// What became of one request's body, shared by the [`Bounded`] a handler reads and [`bound`],
/// which answers once the handler is done.
#[derive(Debug, Default)]
struct Verdict {
    /// A std mutex: held for a field update, never across an await.
    state: Mutex<VerdictState>,
}

#[derive(Debug, Default)]
struct VerdictState {
    refused: Option<Refusal>,
    /// What is left of the body when the reader refused it or let it go unread: drained after
    /// the answer.
    rest: Option<Body>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    TooLarge,
    TimedOut,
}

impl Verdict {
    fn lock(&self) -> std::sync::MutexGuard<'_, VerdictState> {
        // Each critical section is one assignment: a poisoned lock holds a whole value.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request body that fails past `max_bytes` or past its deadline, and reports why.
struct Bounded {
    /// `None` once the body was refused: nothing more is read from it.
    inner: Option<Body>,
    read: usize,
    max_bytes: usize,
    /// The declared `Content-Length` is over `max_bytes`: refused at the first read.
    declared_over: bool,
    /// Whether what is left is worth draining (a declared length within the drain cap).
    drainable: bool,
    deadline: Instant,
    /// Made at the first read that has to wait.
    sleep: Option<Pin<Box<Sleep>>>,
    verdict: Arc<Verdict>,
}

impl Bounded {
    fn refuse(&mut self, refusal: Refusal) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let inner = self.inner.take();
        let mut state = self.verdict.lock();
        state.refused = Some(refusal);
        // A slow client is not waited for again; an oversized one may still read its 413.
        if refusal == Refusal::TooLarge && self.drainable {
            state.rest = inner;
        }
        Poll::Ready(Some(Err(match refusal {
            Refusal::TooLarge => BodyError::TooLarge,
            Refusal::TimedOut => BodyError::TimedOut,
        })))
    }
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.inner.is_none() {
            return Poll::Ready(None);
        }
        if this.declared_over {
            return this.refuse(Refusal::TooLarge);
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            return this.refuse(Refusal::TimedOut);
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.read = this
                    .read
                    .saturating_add(frame.data_ref().map_or(0, Bytes::len));
                if this.read > this.max_bytes {
                    return this.refuse(Refusal::TooLarge);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(BodyError::Unreadable(err)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Bounded {
    /// A body its reader let go of before its end is left for [`bound`] to drain.
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take()
            && self.drainable
            && !inner.is_end_stream()
        {
            self.verdict.lock().rest = Some(inner);
        }
    }
}

fn too_large(limit: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "Payload Too Large: request bodies are limited to {limit} bytes (server.max_body_bytes)"
        ),
    )
        .into_response()
}

fn timed_out(timeout: Duration) -> Response {
    let mut response = (
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "Request Timeout: the request body must arrive within {} s of its head \
             (server.body_timeout_secs)",
            timeout.as_secs()
        ),
    )
        .into_response();
    // The rest of a late body is never read: the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads and discards what is left of `body`, up to `cap` bytes or [`DRAIN_TIME`].
async fn drain(mut body: Body, cap: usize) {
    let mut drained = 0usize;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while drained <= cap {
            match body.frame().await {
                Some(Ok(frame)) => {
                    drained += frame.data_ref().map_or(0, Bytes::len);
                }
                _ => break,
            }
        }
    })
    .await;
}

/// Every request, on every route: its body becomes a [`Bounded`], and the answer is 413 or 408
/// when reading it failed so. Nothing here reads the body.
pub async fn bound(State(limits): State<BodyLimits>, request: Request, next: Next) -> Response {
    let cap = limits.max_bytes.saturating_mul(DRAIN_FACTOR);
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|len| usize::try_from(len).unwrap_or(usize::MAX));
    let verdict = Arc::new(Verdict::default());
    let request = request.map(|inner| {
        Body::new(Bounded {
            inner: Some(inner),
            read: 0,
            max_bytes: limits.max_bytes,
            declared_over: declared.is_some_and(|len| len > limits.max_bytes),
            drainable: declared.is_none_or(|len| len <= cap),
            deadline: Instant::now() + limits.timeout,
            sleep: None,
            verdict: verdict.clone(),
        })
    });
    let response = next.run(request).await;
    let (refused, rest) = {
        let mut state = verdict.lock();
        (state.refused, state.rest.take())
    };
    if let Some(rest) = rest {
        // Beside the answer, not before it: hyper writes the answer while this reads.
        tokio::spawn(drain(rest, cap));
    }
    match refused {
        Some(Refusal::TooLarge) => too_large(limits.max_bytes),
        Some(Refusal::TimedOut) => timed_out(limits.timeout),
        None => response,
    }
}
