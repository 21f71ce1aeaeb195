//! A quick single answer inside a session comes as JSON, not as an event stream.
//!
//! In a 2025-11-25 session the transport answers every request with an event stream (an empty
//! priming event, then the messages), even when the only message is the answer: rmcp consults
//! its `json_response` setting only for requests served without a session. A client then pays
//! for a stream (its parser, a second read) for one object. Here, when the first message of
//! such a stream is the JSON-RPC answer and it arrives within
//! [`McpConfig::session_json_budget`](crate::McpConfig::session_json_budget), the answer is
//! sent as `application/json` with exactly that object, which every revision lets a server do.
//!
//! Anything else passes through byte for byte: the frames read so far are replayed, then the
//! rest of the stream follows. That covers a notification or request sent before the answer
//! (it would be lost in a JSON answer), an answer slower than the budget (so a long verb keeps
//! the priming event that lets its client resume it across a daemon restart), a status other
//! than 200, and every GET, DELETE and 2026-07-28 request (already JSON where it can be).
//! A call answered within the budget gives up resumability only if the daemon dies in that
//! window; its client then sees a broken connection and calls again, and a repeated verb
//! answers as the first would have.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use tokio::time::Instant;

/// The revision from which requests are served without a session (and their single answers
/// are JSON already); protocol versions are dates, so they order as strings.
const STATELESS_REVISION: &str = "2026-07-28";

pub(crate) async fn json_if_single(
    State(budget): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let deadline = Instant::now() + budget;
    let judged = !budget.is_zero() && in_a_session(&request);
    let response = next.run(request).await;
    if judged && is_event_stream(&response) {
        json_if_answered_by(response, deadline).await
    } else {
        response
    }
}

/// Whether `request` is a POST in a session of a revision before 2026-07-28: the only requests
/// whose single answer the transport sends as a stream.
fn in_a_session(request: &Request) -> bool {
    let headers = request.headers();
    request.method() == http::Method::POST
        && headers.contains_key("mcp-session-id")
        && headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|version| version < STATELESS_REVISION)
}

fn is_event_stream(response: &Response) -> bool {
    response.status() == http::StatusCode::OK
        && response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"))
}

/// Reads `response`'s stream until its first message or `deadline`: the answer as JSON when
/// that message is one, else the stream as it was.
async fn json_if_answered_by(response: Response, deadline: Instant) -> Response {
    let (mut parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    // Every item read, as read, to be replayed when the stream goes out after all.
    let mut consumed = Vec::new();
    let mut events = Events::default();
    let first = loop {
        if let Some(event) = events.next_event() {
            break Some(event);
        }
        let Ok(item) = tokio::time::timeout_at(deadline, stream.next()).await else {
            break None; // slower than the budget
        };
        match item {
            Some(Ok(bytes)) => {
                events.feed(&bytes);
                consumed.push(Ok(bytes));
            }
            Some(Err(error)) => {
                consumed.push(Err(error));
                break None;
            }
            None => {
                events.end();
                break events.next_event();
            }
        }
    };
    if let Some(Event::Message(answer)) = first.filter(is_an_answer) {
        // The transport closes a call's stream after its answer: nothing is left to lose.
        let headers = &mut parts.headers;
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        headers.remove(http::header::CACHE_CONTROL);
        headers.remove("x-accel-buffering");
        headers.remove(http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(answer));
    }
    let replay = futures::stream::iter(consumed).chain(stream);
    Response::from_parts(parts, Body::from_stream(replay))
}

/// Whether `event` is a JSON-RPC response or error (not a request or notification, which
/// carry a `method`).
fn is_an_answer(event: &Event) -> bool {
    let Event::Message(data) = event else {
        return false;
    };
    let Ok(serde_json::Value::Object(message)) = serde_json::from_str(data) else {
        return false;
    };
    message.get("jsonrpc").and_then(|v| v.as_str()) == Some("2.0")
        && message.contains_key("id")
        && !message.contains_key("method")
        && (message.contains_key("result") || message.contains_key("error"))
}

/// What an event of the stream carries, as far as judging it goes.
#[derive(Debug, PartialEq)]
enum Event {
    /// A `message` event's data.
    Message(String),
    /// An event of another type: no client would read it as the answer.
    Other,
}

/// An event-stream parser that yields each event with data, as the HTML standard's
/// "interpreting an event stream" dispatches them: lines end in CRLF, LF or CR; a line starting
/// with `:` is a comment (the transport's keep-alive); `data` lines join with LF; an event
/// whose data is empty (the transport's priming event) carries no message and is skipped.
#[derive(Default)]
struct Events {
    /// Bytes after the last complete line.
    pending: Vec<u8>,
    /// The event being read: its data lines so far, and whether it has a type of its own.
    data: Option<String>,
    foreign_type: bool,
    /// Events complete but not yet taken.
    ready: std::collections::VecDeque<Event>,
    ended: bool,
}

impl Events {
    fn feed(&mut self, bytes: &Bytes) {
        self.pending.extend_from_slice(bytes);
        self.take_lines();
    }

    /// The stream ended: a last line without its end is still a line (an event without its
    /// blank line is not dispatched, as the standard says).
    fn end(&mut self) {
        self.ended = true;
        self.take_lines();
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.line(&line);
        }
    }

    fn next_event(&mut self) -> Option<Event> {
        self.ready.pop_front()
    }

    fn take_lines(&mut self) {
        let mut start = 0;
        while let Some(offset) = self.pending[start..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
        {
            let end = start + offset;
            let after = match (self.pending[end], self.pending.get(end + 1)) {
                (b'\r', Some(b'\n')) => end + 2,
                // A CR last in what was read may be the first half of a CRLF.
                (b'\r', None) if !self.ended => break,
                _ => end + 1,
            };
            let line = self.pending[start..end].to_vec();
            self.line(&line);
            start = after;
        }
        self.pending.drain(..start);
    }

    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            let data = self.data.take();
            let foreign = std::mem::take(&mut self.foreign_type);
            match data {
                Some(_) if foreign => self.ready.push_back(Event::Other),
                Some(data) if !data.is_empty() => self.ready.push_back(Event::Message(data)),
                _ => {}
            }
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.foreign_type = value != "message",
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
    const PRIMING: &str = "data: \nid: 0/3\nretry: 3000\n\n";

    fn stream_of(chunks: Vec<Result<Bytes, std::io::Error>>) -> Response {
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .header("mcp-session-id", "s")
            .body(Body::from_stream(futures::stream::iter(chunks)))
            .expect("response")
    }

    fn chunks(parts: &[&str]) -> Vec<Result<Bytes, std::io::Error>> {
        parts
            .iter()
            .map(|p| Ok(Bytes::from(p.to_string())))
            .collect()
    }

    async fn judged(response: Response, budget: Duration) -> (String, String) {
        let response = json_if_answered_by(response, Instant::now() + budget).await;
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert_eq!(response.headers()["mcp-session-id"], "s");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (content_type, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn a_primed_answer_becomes_exactly_its_json() {
        let answer = format!("id: 0/3\ndata: {ANSWER}\n\n");
        for parts in [
            vec![PRIMING, answer.as_str()],
            // Split anywhere, with a keep-alive comment before it.
            vec![
                "da",
                "ta: \r",
                "\nid: 0/3\r\n\r\n: ping\n\n",
                &answer[..9],
                &answer[9..],
            ],
        ] {
            let (content_type, body) =
                judged(stream_of(chunks(&parts)), Duration::from_secs(5)).await;
            assert_eq!(content_type, "application/json");
            assert_eq!(body, ANSWER);
        }
    }

    #[tokio::test]
    async fn anything_but_an_answer_first_passes_byte_for_byte() {
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        let before = format!("{PRIMING}data: {progress}\n\n");
        let answer = format!("data: {ANSWER}\n\n");
        let typed = format!("event: other\ndata: {ANSWER}\n\n");
        for parts in [
            vec![before.as_str(), answer.as_str()],
            vec![PRIMING, "data: not json\n\n", answer.as_str()],
            vec![typed.as_str()],
            vec![PRIMING],
            vec![PRIMING, "data: {\"jsonrpc\":\"2.0\",\"id\":3,"],
        ] {
            let (content_type, body) =
                judged(stream_of(chunks(&parts)), Duration::from_secs(5)).await;
            assert_eq!(content_type, "text/event-stream");
            assert_eq!(body, parts.concat());
        }
    }

    #[tokio::test]
    async fn an_answer_slower_than_the_budget_stays_a_stream() {
        let answer = format!("data: {ANSWER}\n\n");
        let slow = futures::stream::iter(chunks(&[PRIMING])).chain(futures::stream::once(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Bytes::from(format!("data: {ANSWER}\n\n")))
        }));
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .header("mcp-session-id", "s")
            .body(Body::from_stream(slow))
            .expect("response");
        let (content_type, body) = judged(response, Duration::from_millis(50)).await;
        assert_eq!(content_type, "text/event-stream");
        assert_eq!(body, format!("{PRIMING}{answer}"));
    }

    #[test]
    fn only_session_posts_before_2026_07_28_are_judged() {
        let request = |method: http::Method, headers: &[(&str, &str)]| {
            let mut builder = http::Request::builder().method(method).uri("/mcp");
            for (name, value) in headers {
                builder = builder.header(*name, *value);
            }
            builder.body(Body::empty()).expect("request")
        };
        let session = ("mcp-session-id", "s");
        assert!(in_a_session(&request(http::Method::POST, &[session])));
        assert!(in_a_session(&request(
            http::Method::POST,
            &[session, ("mcp-protocol-version", "2025-11-25")]
        )));
        assert!(!in_a_session(&request(
            http::Method::POST,
            &[session, ("mcp-protocol-version", "2026-07-28")]
        )));
        assert!(!in_a_session(&request(http::Method::POST, &[])));
        assert!(!in_a_session(&request(http::Method::GET, &[session])));
        assert!(!in_a_session(&request(http::Method::DELETE, &[session])));
    }
}
