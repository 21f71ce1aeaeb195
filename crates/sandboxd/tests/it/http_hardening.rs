//! Nothing an HTTP client sends holds the daemon without bound, and no agent reaches another's
//! MCP session, over real TCP against the real daemon: a head that never ends is cut at the
//! header timeout, a stalled body at the body timeout; a request without a valid token is
//! answered before its body is read (the daemon's memory does not grow with what unauthenticated
//! clients send); connections past the cap wait for a free one; a session answers to its own
//! agent only, and an agent's sessions are capped; a control character an agent puts in a logged
//! value comes out escaped.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::mcp::{list_in, open_session, opted_in_project, post_mcp};
use crate::support::{
    ADMIN_TOKEN, Home, Launch, TestDaemon, spawn_daemon, spawn_daemon_with, stop_and_clean_up,
    unique,
};

/// A daemon with `settings` (`SANDBOXD_…` variables) on top of the common ones.
fn daemon_with(home: &Home, settings: &[(&str, &str)]) -> TestDaemon {
    spawn_daemon_with(
        home,
        Launch {
            env: settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Launch::default()
        },
    )
}

async fn connect(daemon: &TestDaemon) -> TcpStream {
    TcpStream::connect(&daemon.addr).await.expect("connect")
}

/// The status of the answer that arrives on `stream` within `within`, or None.
async fn status_within(stream: &mut TcpStream, within: Duration) -> Option<u16> {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()?;
    String::from_utf8_lossy(&answer)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// How long until the daemon closes `stream` (whatever it sends first), if within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

/// The peak resident memory of process `pid` so far, in KiB (`VmHWM` in `/proc/<pid>/status`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmHWM")
}

#[tokio::test]
async fn a_head_that_never_ends_is_cut_at_the_header_timeout() {
    let home = Home::new();
    let daemon = daemon_with(&home, &[("SANDBOXD_SERVER__HEADER_TIMEOUT_SECS", "2")]);
    // One sends half a head and waits; one sends nothing at all; one trickles a header's bytes,
    // each well within the timeout, and never ends its head.
    let mut partial = connect(&daemon).await;
    partial
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    let mut silent = connect(&daemon).await;
    let trickle = connect(&daemon).await;
    let (mut trickle_read, mut trickle_write) = trickle.into_split();
    let trickling = tokio::spawn(async move {
        let _ = trickle_write
            .write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            .await;
        while trickle_write.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let limit = Duration::from_secs(15);
    for (who, closed) in [
        ("half a head", closed_within(&mut partial, limit).await),
        ("nothing", closed_within(&mut silent, limit).await),
        (
            "a trickle",
            tokio::time::timeout(limit, async {
                let mut buf = [0u8; 1024];
                while let Ok(n) = trickle_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await
            .ok()
            .map(|()| Duration::ZERO),
        ),
    ] {
        let closed = closed.unwrap_or_else(|| panic!("{who}: still open after {limit:?}"));
        assert!(
            closed < Duration::from_secs(8),
            "{who}: closed after {closed:?}"
        );
    }
    trickling.abort();
    // A client that sends its head in time is served as before.
    let mut prompt = connect(&daemon).await;
    prompt
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(
        status_within(&mut prompt, Duration::from_secs(5)).await,
        Some(200)
    );
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_at_the_body_timeout_and_an_unauthenticated_one_401_at_once()
{
    let home = Home::new();
    let daemon = daemon_with(&home, &[("SANDBOXD_SERVER__BODY_TIMEOUT_SECS", "2")]);
    let project = unique("stall");
    daemon.project(&project, &[]).await;
    let (agent_token, _) = daemon.spawn_agent("developer", &project).await;
    let heads = [
        (
            "the admin API",
            format!(
                "PUT /v1/projects/{project} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\n"
            ),
            408,
        ),
        (
            "MCP",
            format!(
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {agent_token}\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
            ),
            408,
        ),
        (
            "MCP without a token",
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                .to_owned(),
            401,
        ),
        (
            "the admin API with a wrong token",
            format!(
                "PUT /v1/projects/{project} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer wrong-admin-token-0123456789\r\n"
            ),
            401,
        ),
    ];
    for (surface, head, expected) in heads {
        let mut stream = connect(&daemon).await;
        let started = Instant::now();
        // 200 bytes promised, 20 sent, then nothing.
        let request = format!("{head}Content-Length: 200\r\n\r\n{{\"sandbox_services\":");
        stream.write_all(request.as_bytes()).await.expect("write");
        let status = status_within(&mut stream, Duration::from_secs(15)).await;
        let took = started.elapsed();
        assert_eq!(status, Some(expected), "{surface} after {took:?}");
        if expected == 408 {
            assert!(took >= Duration::from_millis(1500), "{surface}: {took:?}");
            assert!(took < Duration::from_secs(8), "{surface}: {took:?}");
            let closed = closed_within(&mut stream, Duration::from_secs(5)).await;
            assert!(
                closed.is_some(),
                "{surface}: the connection is closed after a 408"
            );
        } else {
            assert!(
                took < Duration::from_secs(1),
                "{surface}: refused at once, {took:?}"
            );
        }
    }
}

/// The resident memory of process `pid` now, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS")
}

/// Waits until the daemon's memory stops moving (its start-up work in the background is done).
async fn settled(pid: u32) {
    let started = Instant::now();
    let mut last = rss_kib(pid);
    while started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib(pid);
        if now.abs_diff(last) < 512 {
            return;
        }
        last = now;
    }
}

/// `clients` clients at once, each declaring a body of `DECLARED` bytes to `/mcp` without a
/// token, reading the answer to its head, then sending `SENT` bytes of the body and stalling
/// (never the whole). Returns each one's answer and its connection, still open.
async fn stalling_clients(daemon: &TestDaemon, clients: usize) -> Vec<(Option<u16>, TcpStream)> {
    const DECLARED: usize = 1_000_000;
    const SENT: usize = 990_000;
    let body = vec![b' '; SENT];
    let clients = (0..clients).map(|_| {
        let body = &body;
        async move {
            let mut stream = connect(daemon).await;
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Content-Length: {DECLARED}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.expect("write");
            let status = status_within(&mut stream, Duration::from_secs(5)).await;
            // The daemon may close before it has all of it: that is the point.
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.write_all(body)).await;
            (status, stream)
        }
    });
    futures::future::join_all(clients).await
}

#[tokio::test]
async fn an_unauthenticated_body_is_refused_unread_and_costs_the_daemon_no_memory() {
    let home = Home::new();
    // No experiment runtime: its compiled guest loads in the background after the start, and
    // would move the daemon's memory under the measurement.
    let daemon = daemon_with(&home, &[("SANDBOXD_EXPERIMENTS__ENABLED", "false")]);
    let project = unique("unread");
    daemon.project(&project, &[]).await;
    // 5 MB declared: the answer comes before a byte of it is sent.
    let heads = [
        ("MCP without a token", "POST /mcp".to_owned(), None, 401),
        (
            "MCP with a wrong token",
            "POST /mcp".to_owned(),
            Some(format!("sbx_{}", "0".repeat(64))),
            401,
        ),
        (
            "the admin API without the token",
            format!("PUT /v1/projects/{project}"),
            None,
            401,
        ),
        (
            "the admin API with a wrong token",
            format!("PUT /v1/projects/{project}"),
            Some("wrong-admin-token-0123456789".to_owned()),
            401,
        ),
        (
            "a panel form without a session",
            "POST /sandboxes/janitor".to_owned(),
            None,
            303,
        ),
    ];
    for (surface, line, token, expected) in heads {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "{line} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: 5000000\r\n\r\n"
        );
        let mut stream = connect(&daemon).await;
        stream.write_all(head.as_bytes()).await.expect("write");
        let status = status_within(&mut stream, Duration::from_secs(3)).await;
        assert_eq!(
            status,
            Some(expected),
            "{surface}: answered before its body"
        );
    }

    // A hundred clients at once, each sending almost all of a body within the limit (1 MB of
    // 1 MiB) and then stalling: what the old daemon buffered before checking a token.
    const CLIENTS: usize = 100;
    let pid = daemon.pid();
    settled(pid).await;
    drop(stalling_clients(&daemon, 10).await); // warms the allocator's arenas
    let before = peak_rss_kib(pid);
    let answered = stalling_clients(&daemon, CLIENTS).await;
    // Held open (stalled) while the daemon's peak is read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_mib = peak_rss_kib(pid).saturating_sub(before) / 1024;
    let statuses: Vec<Option<u16>> = answered.iter().map(|(status, _)| *status).collect();
    drop(answered);
    assert!(
        statuses.iter().all(|s| *s == Some(401)),
        "every client answered 401 before its body: {statuses:?}"
    );
    eprintln!("the daemon's peak RSS grew {grown_mib} MiB for {CLIENTS} stalled bodies");
    assert!(
        grown_mib < 32,
        "the daemon's peak RSS grew {grown_mib} MiB for {CLIENTS} unauthenticated bodies"
    );
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_ends() {
    let home = Home::new();
    let daemon = daemon_with(
        &home,
        &[
            ("SANDBOXD_SERVER__MAX_CONNECTIONS", "4"),
            ("SANDBOXD_SERVER__HEADER_TIMEOUT_SECS", "60"),
        ],
    );
    // Four connections hold every slot, each in the middle of its head.
    let mut holders = Vec::new();
    for _ in 0..4 {
        let mut stream = connect(&daemon).await;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("write");
        holders.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A fifth connects (the kernel queues it) but is not served while they hold on.
    let mut waiting = connect(&daemon).await;
    waiting
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(
        status_within(&mut waiting, Duration::from_millis(1500)).await,
        None,
        "served past the cap"
    );
    // One ends: the waiting one is served at once.
    drop(holders.pop());
    let started = Instant::now();
    assert_eq!(
        status_within(&mut waiting, Duration::from_secs(5)).await,
        Some(200)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_mcp_session_answers_to_its_own_agent_only() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let (owner, _) = daemon.spawn_agent("developer", &project).await;
    let (other, _) = daemon.spawn_agent("developer", &project).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &daemon, &owner).await;
    assert_eq!(list_in(&http, &daemon, &owner, &session).await, 200);

    // Another agent's token: the session is unknown to it, for a message and for its end.
    assert_eq!(
        list_in(&http, &daemon, &other, &session).await,
        404,
        "another agent's token in the session"
    );
    let end = |token: &str| {
        http.delete(format!("{}/mcp", daemon.url))
            .bearer_auth(token)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
    };
    let ended = end(&other).await.expect("DELETE");
    assert_eq!(
        ended.status().as_u16(),
        404,
        "another agent ends the session"
    );
    // The owner's session goes on, and is the owner's to end.
    assert_eq!(list_in(&http, &daemon, &owner, &session).await, 200);
    let ended = end(&owner).await.expect("DELETE");
    assert_eq!(ended.status().as_u16(), 204);
    assert_eq!(list_in(&http, &daemon, &owner, &session).await, 404);
}

#[tokio::test]
async fn an_agent_keeps_its_most_recent_sessions_up_to_the_cap() {
    let home = Home::new();
    let daemon = daemon_with(&home, &[("SANDBOXD_BROKER__MCP_SESSIONS_PER_AGENT", "3")]);
    let project = opted_in_project(&daemon).await;
    let (agent, _) = daemon.spawn_agent("developer", &project).await;
    let (other, _) = daemon.spawn_agent("developer", &project).await;
    let http = reqwest::Client::new();
    let others = open_session(&http, &daemon, &other).await;
    // An agent opening sessions in a loop (the attack opened 2,000): only the last three live.
    let mut sessions = Vec::new();
    for _ in 0..12 {
        sessions.push(open_session(&http, &daemon, &agent).await);
    }
    let mut statuses = Vec::new();
    for session in &sessions {
        statuses.push(list_in(&http, &daemon, &agent, session).await);
    }
    let mut expected = vec![404; 9];
    expected.extend([200; 3]);
    assert_eq!(statuses, expected, "the least recently used went");
    // Another agent's session does not count against it, nor is it touched.
    assert_eq!(list_in(&http, &daemon, &other, &others).await, 200);
    // An evicted session's client starts a new one and goes on, like after an expiry.
    let client = daemon.client(&agent).await;
    assert!(client.tools().await.contains(&"request_sandbox".to_owned()));
    // The one just opened counts: the oldest of the three before it went.
    assert_eq!(list_in(&http, &daemon, &agent, &sessions[9]).await, 404);
    assert_eq!(list_in(&http, &daemon, &agent, &sessions[11]).await, 200);
    // A raw initialize still opens a session, whatever the cap evicts.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-http", "version": "1"}}});
    let response = post_mcp(&http, &daemon, &agent, None, initialize).await;
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("mcp-session-id").is_some());
}

#[tokio::test]
async fn a_control_character_in_a_logged_value_comes_out_escaped() {
    let home = Home::new();
    let log = home.dir.path().join("daemon.log");
    let file = std::fs::File::create(&log).expect("create the log file");
    let daemon = spawn_daemon_with(
        &home,
        Launch {
            // Every dependency on: tokio-postgres logs each statement it prepares as is.
            env: vec![("SANDBOXD_LOG".to_owned(), "trace".to_owned())],
            stderr: Some(file),
            ..Launch::default()
        },
    );
    let outcome = AssertUnwindSafe(forge_a_line(&daemon)).catch_unwind().await;
    let daemon_log = std::fs::read(&log).unwrap_or_default();
    stop_and_clean_up(daemon, &home, outcome);

    let text = String::from_utf8_lossy(&daemon_log);
    assert!(
        text.contains("\\nFORGED-LINE"),
        "the statement was logged, escaped ({} bytes of log)",
        daemon_log.len()
    );
    let forged: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("FORGED-LINE"))
        .collect();
    assert!(forged.is_empty(), "a forged line: {forged:?}");
    assert!(!daemon_log.contains(&0x1b), "a raw ESC in the log");
    assert!(
        !daemon_log.contains(&b'\r'),
        "a raw carriage return in the log"
    );
    assert!(
        !daemon_log.windows(2).any(|w| w == [0xc2, 0x85]),
        "a raw C1 control in the log"
    );
}

/// An agent's statement with a newline, a carriage return, an ESC sequence and a C1 control,
/// run through `sandbox_sql`, so a dependency logs it.
async fn forge_a_line(daemon: &TestDaemon) {
    let project = unique("forge");
    daemon.project(&project, &["postgres"]).await;
    daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;
    dev.ok("give_me_work", json!({})).await;
    dev.ok("request_sandbox", json!({})).await;
    let statement = "SELECT 1 AS one -- \nFORGED-LINE  INFO sandboxd: \r\u{1b}[31mred\u{85}";
    let _ = dev
        .call(
            "sandbox_sql",
            json!({"service": "postgres", "statement": statement}),
        )
        .await;
    dev.ok("release_sandbox", json!({})).await;
}
