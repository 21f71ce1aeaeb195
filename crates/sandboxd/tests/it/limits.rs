//! Bounded input from outside: a request body over `server.max_body_bytes` answers 413 on every
//! surface that reads one (MCP, the admin API, panel forms), whether it declares its length or
//! streams chunks without one, over real HTTP against the real daemon. A request that is not
//! authenticated, or a route that takes no body, is answered without its body being read.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{ADMIN_TOKEN, Home, Launch, TestDaemon, spawn_daemon_with, unique};

const LIMIT: usize = 64 * 1024;

fn limited_daemon(home: &Home) -> TestDaemon {
    spawn_daemon_with(
        home,
        Launch {
            env: vec![(
                "SANDBOXD_SERVER__MAX_BODY_BYTES".to_owned(),
                LIMIT.to_string(),
            )],
            ..Launch::default()
        },
    )
}

/// `{"sandbox_services": ["postgres"]}` padded with spaces to exactly `len` bytes.
fn project_json(len: usize) -> String {
    let json = r#"{"sandbox_services": ["postgres"]}"#;
    format!("{json}{}", " ".repeat(len - json.len()))
}

/// Writes `request` on a raw connection and returns the answer's status.
async fn raw_status(daemon: &TestDaemon, request: &[u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(&daemon.addr)
        .await
        .expect("connect");
    // The daemon may answer and close before it has read everything: that is the point.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

/// Sends `body` chunked (no `Content-Length`) after `head` and returns the status.
async fn chunked(daemon: &TestDaemon, head: &str, body: &[u8]) -> u16 {
    let mut request = format!(
        "{head}\r\nHost: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        daemon.addr
    )
    .into_bytes();
    for chunk in body.chunks(8 * 1024) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    raw_status(daemon, &request).await
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_on_every_route() {
    let home = Home::new();
    let daemon = limited_daemon(&home);
    let project = unique("limits");
    daemon.project(&project, &["postgres"]).await;
    let (agent_token, _) = daemon.spawn_agent("developer", &project).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let over = "x".repeat(LIMIT + 1);
    let url = |path: &str| format!("{}{path}", daemon.url);
    let cases = [
        (
            "MCP",
            http.post(url("/mcp"))
                .bearer_auth(&agent_token)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json"),
        ),
        (
            "the admin API",
            http.put(url(&format!("/v1/projects/{project}")))
                .bearer_auth(ADMIN_TOKEN)
                .header("content-type", "application/json"),
        ),
    ];
    for (surface, request) in cases {
        let answer = request.body(over.clone()).send().await.expect("send");
        assert_eq!(answer.status().as_u16(), 413, "{surface}");
        let text = answer.text().await.expect("body");
        assert!(text.contains("server.max_body_bytes"), "{surface}: {text}");
    }
    // The panel login's form is read before anyone is authenticated: a form's size, not the
    // daemon's limit.
    let login = http
        .post(url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x".repeat(8 * 1024))
        .send()
        .await
        .expect("send");
    assert_eq!(login.status().as_u16(), 413, "the panel login");
    // Not read at all: a request its route's authentication refuses, a route without a body.
    let unread = [
        ("MCP without a token", http.post(url("/mcp")), 401),
        (
            "a panel form behind the login",
            http.post(url("/sandboxes/janitor")),
            303,
        ),
        (
            "a route that ignores bodies",
            http.get(url("/metrics")),
            200,
        ),
    ];
    for (surface, request, status) in unread {
        let answer = request.body(over.clone()).send().await.expect("send");
        assert_eq!(answer.status().as_u16(), status, "{surface}");
    }
    // Exactly at the limit is accepted.
    let at_limit = http
        .put(url(&format!("/v1/projects/{project}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(project_json(LIMIT))
        .send()
        .await
        .expect("send");
    assert_eq!(at_limit.status().as_u16(), 200);

    // Chunked, with no length declared: cut off once past the limit.
    let chunked_cases = [
        (
            format!(
                "POST /mcp HTTP/1.1\r\nAuthorization: Bearer {agent_token}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json"
            ),
            "MCP",
        ),
        (
            format!(
                "PUT /v1/projects/{project} HTTP/1.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json"
            ),
            "the admin API",
        ),
    ];
    for (head, surface) in &chunked_cases {
        let status = chunked(&daemon, head, over.as_bytes()).await;
        assert_eq!(status, 413, "chunked to {surface}");
    }
    let status = chunked(&daemon, "GET /v1/openapi.json HTTP/1.1", over.as_bytes()).await;
    assert_eq!(
        status, 200,
        "chunked to a route that ignores bodies: not read"
    );
    // A huge declared length is refused at once, without waiting for a byte of it: 413 once
    // authenticated, 401 before.
    for (token, expected) in [(Some(&agent_token), 413), (None, 401)] {
        let started = std::time::Instant::now();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let huge = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\n{auth}Accept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n",
            daemon.addr
        );
        assert_eq!(raw_status(&daemon, huge.as_bytes()).await, expected);
        assert!(started.elapsed() < std::time::Duration::from_millis(900));
    }
    // A chunked body within the limit goes through whole.
    let (head, _) = &chunked_cases[1];
    let status = chunked(&daemon, head, project_json(LIMIT).as_bytes()).await;
    assert_eq!(status, 200, "a chunked body within the limit");
}
