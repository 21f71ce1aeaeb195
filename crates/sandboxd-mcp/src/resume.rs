//! A stream that cannot be resumed answers an error, never silence.
//!
//! A client whose answer stream was cut (the daemon restarted mid-call) reconnects with
//! `GET /mcp` and the `Last-Event-ID` of that stream to resume it. The transport answers a resume it cannot serve
//! (the stream died with the old process, or has ended) with an empty event stream, and the
//! Python SDKs then reconnect again and again, or wait forever: the call hangs. Here such an
//! empty answer becomes one event carrying a JSON-RPC error, which the SDKs deliver as the
//! error of the call they were resuming (they put its request id on it), so the caller learns
//! the answer is lost and calls again: a repeated verb answers as the first would have.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures::{FutureExt, StreamExt};

/// The JSON-RPC code of a lost answer: a server error of the implementation-defined range.
pub const LOST_ANSWER_CODE: i64 = -32000;

/// What the caller of a call whose answer is lost reads.
pub const LOST_ANSWER: &str = "this call's answer is lost (sandboxd restarted while it ran, or \
the stream ended): call it again; sandboxd answers a repeated call as it answered the first";

pub(crate) async fn unresumable_is_an_error(request: Request, next: Next) -> Response {
    let resuming = resumes_a_call(&request);
    let response = next.run(request).await;
    if resuming {
        error_if_empty(response).await
    } else {
        response
    }
}

/// Whether `request` resumes the answer stream of a call. The transport numbers such a stream
/// `<index>/<request>`; the session's own stream of server messages (`<index>`) carries no call,
/// so an empty resume of it is left alone (the client just opens it again).
fn resumes_a_call(request: &Request) -> bool {
    request.method() == http::Method::GET
        && request
            .headers()
            .get("last-event-id")
            .and_then(|id| id.to_str().ok())
            .is_some_and(|id| id.contains('/'))
}

/// The transport's answer to a resume, unless it is an empty stream: then the lost answer.
async fn error_if_empty(response: Response) -> Response {
    if response.status() != http::StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    // A resumed stream is either still open (pending: its answer is yet to come) or replays
    // what it kept; only a stream with nothing to give ends at its first poll.
    let body = match stream.next().now_or_never() {
        Some(None) => {
            tracing::info!(
                "an answer stream could not be resumed: the client is told to call again"
            );
            return lost_answer(parts);
        }
        Some(Some(first)) => {
            Body::from_stream(futures::stream::once(async { first }).chain(stream))
        }
        None => Body::from_stream(stream),
    };
    Response::from_parts(parts, body)
}

/// One event carrying the error. Its id is not the resumed request's (which only the client
/// knows); the SDKs answer the call they resumed with whatever error the stream brings.
fn lost_answer(parts: http::response::Parts) -> Response {
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": "lost-answer",
        "error": {
            "code": LOST_ANSWER_CODE,
            "message": LOST_ANSWER,
            "data": {"retryable": true},
        },
    });
    let event = format!("event: message\ndata: {error}\n\n");
    Response::from_parts(parts, Body::from(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer_of(body: Body) -> String {
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .expect("response");
        let response = error_if_empty(response).await;
        assert_eq!(response.status(), http::StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn an_empty_resume_becomes_the_error_of_the_call() {
        let text = answer_of(Body::empty()).await;
        let data = text
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .expect("one data line");
        let error: serde_json::Value = serde_json::from_str(data).expect("JSON-RPC");
        assert_eq!(error["error"]["code"], LOST_ANSWER_CODE);
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("call it again"))
        );
    }

    #[tokio::test]
    async fn a_stream_with_events_passes_unchanged() {
        let event = "id: 0/3\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        assert_eq!(answer_of(Body::from(event)).await, event);
    }

    #[test]
    fn only_a_calls_stream_is_judged() {
        let resume = |id: &str| {
            http::Request::get("/mcp")
                .header("last-event-id", id)
                .body(Body::empty())
                .expect("request")
        };
        assert!(resumes_a_call(&resume("0/3")));
        assert!(!resumes_a_call(&resume("0")), "the session's own stream");
        let post = http::Request::post("/mcp")
            .header("last-event-id", "0/3")
            .body(Body::empty())
            .expect("request");
        assert!(!resumes_a_call(&post));
    }
}
