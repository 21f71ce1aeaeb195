//! The agent gateway end to end: the real daemon, real MCP clients (streamable HTTP and stdio),
//! real Postgres and Redis.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::{
    Home, Launch, TestDaemon, entry, spawn_daemon, spawn_daemon_at, spawn_daemon_with,
    teardown_everything, unique,
};

fn names(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// What a refusal tells the agent to do instead.
fn remediate(envelope: &Value) -> &str {
    envelope["remediate"].as_str().expect("remediate")
}

pub(crate) async fn opted_in_project(daemon: &TestDaemon) -> String {
    let project = unique("proj");
    daemon.project(&project, &["postgres", "redis"]).await;
    project
}

#[tokio::test]
async fn each_role_lists_exactly_its_verbs() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let expected = [
        (
            "developer",
            &[
                "give_me_work",
                "i_will_work_on",
                "i_am_done",
                "unclaim",
                "i_am_idle",
                "request_sandbox",
                "release_sandbox",
                "reset_sandbox",
                "sandbox_info",
                "sandbox_sql",
                "run_experiment",
                "note",
                "evidence",
            ][..],
        ),
        (
            "qa",
            &[
                "claim_review",
                "pass_review",
                "fail_review",
                "unclaim",
                "i_am_idle",
                "request_sandbox",
                "release_sandbox",
                "reset_sandbox",
                "sandbox_info",
                "sandbox_sql",
                "run_experiment",
                "note",
                "evidence",
            ][..],
        ),
        (
            "pr_reviewer",
            &[
                "claim_review",
                "pass_review",
                "fail_review",
                "note",
                "evidence",
            ][..],
        ),
        (
            "documenter",
            &[
                "give_me_work",
                "i_documented",
                "unclaim",
                "i_am_idle",
                "note",
                "evidence",
            ][..],
        ),
        ("auditor", &["note", "evidence"][..]),
    ];
    for (role, verbs) in expected {
        let (token, spawn) = daemon.spawn_agent(role, &project).await;
        let agent = daemon.client(&token).await;
        assert_eq!(agent.tools().await, names(verbs), "{role}");
        let manifest: Vec<String> = spawn["manifest"]
            .as_array()
            .expect("manifest")
            .iter()
            .map(|v| v.as_str().expect("verb").to_owned())
            .collect();
        assert_eq!(
            names(&manifest.iter().map(String::as_str).collect::<Vec<_>>()),
            names(verbs)
        );
        // The spawn env carries only the marker, and only for roles that can request one.
        let env = spawn["env"].as_object().expect("env");
        if verbs.contains(&"request_sandbox") {
            assert_eq!(env.len(), 1, "{env:?}");
            assert_eq!(env["ROBOCO_SANDBOX_SERVICES_AVAILABLE"], "postgres,redis");
            let briefing = spawn["briefing"].to_string();
            assert!(briefing.contains("request_sandbox()"), "{briefing}");
        } else {
            assert!(env.is_empty(), "{role}: {env:?}");
            assert!(!spawn["briefing"].to_string().contains("request_sandbox()"));
        }
        let tools = agent.service.list_all_tools().await.expect("tools");
        for tool in &tools {
            assert!(tool.description.as_deref().unwrap_or("").len() > 20);
            assert_eq!(tool.input_schema["type"], "object");
            assert!(
                tool.title.as_deref().is_some_and(|t| !t.is_empty()),
                "{}",
                tool.name
            );
            let hints = tool.annotations.as_ref().expect("annotations");
            assert_eq!(hints.open_world_hint, Some(false), "{}", tool.name);
            assert!(hints.read_only_hint.is_some() && hints.idempotent_hint.is_some());
            let output = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(output["type"], "object", "{}", tool.name);
        }
        let hint = |name: &str| {
            tools
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.annotations.clone())
        };
        if let Some(request) = tools.iter().find(|t| t.name == "request_sandbox") {
            // Only the project's engines can be named.
            assert_eq!(
                request.input_schema["properties"]["services"]["items"]["enum"],
                serde_json::json!(["postgres", "redis"]),
                "{:?}",
                request.input_schema
            );
            let hints = hint("request_sandbox").expect("annotated");
            assert_eq!(hints.idempotent_hint, Some(true));
            assert_eq!(hints.destructive_hint, Some(false));
        }
        if let Some(hints) = hint("release_sandbox") {
            assert_eq!(hints.destructive_hint, Some(true));
        }
    }
    // A project that is not opted in gets neither marker nor briefing line.
    let plain = unique("plain");
    daemon.project(&plain, &[]).await;
    let (_, spawn) = daemon.spawn_agent("developer", &plain).await;
    assert!(spawn["env"].as_object().expect("env").is_empty());
    assert!(!spawn["briefing"].to_string().contains("request_sandbox()"));
}

/// `tools/list` offers, per service, only the features this daemon's backend provides, and
/// names the project's standing ones; the admin API refuses a standing feature it lacks.
#[tokio::test]
async fn tools_offer_only_the_features_the_backend_provides() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = unique("feat");
    let path = format!("/v1/projects/{project}");
    let put = |extensions: Value| {
        daemon.admin(
            reqwest::Method::PUT,
            &path,
            Some(json!({"sandbox_services": ["postgres", "redis"], "sandbox_extensions": extensions})),
        )
    };
    // This host's PostgreSQL has no pgvector package.
    let (status, body) = put(json!({"postgres": ["vector"]})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "feature_unavailable", "{body}");
    let message = body["message"].as_str().expect("message");
    assert!(message.contains("process backend"), "{message}");
    assert!(
        message.contains("available here for postgres: "),
        "{message}"
    );
    let (status, body) = put(json!({"postgres": ["pg_trgm"]})).await;
    assert_eq!(status, 200, "{body}");

    let agent = daemon.agent("developer", &project).await;
    let tools = agent.service.list_all_tools().await.expect("tools");
    let request = tools
        .iter()
        .find(|t| t.name == "request_sandbox")
        .expect("request_sandbox");
    let extensions = &request.input_schema["properties"]["extensions"];
    assert_eq!(extensions["additionalProperties"], false, "{extensions}");
    // An engine offering nothing says `maxItems: 0` (an empty `enum` trips some validators).
    let offered = |service: &str| -> BTreeSet<String> {
        let schema = &extensions["properties"][service];
        if schema["maxItems"] == 0 {
            assert!(schema.get("items").is_none(), "{schema}");
            return BTreeSet::new();
        }
        schema["items"]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("an enum for {service}: {extensions}"))
            .iter()
            .map(|v| v.as_str().expect("name").to_owned())
            .collect()
    };
    let postgres = offered("postgres");
    for present in ["pg_trgm", "citext", "uuid-ossp"] {
        assert!(postgres.contains(present), "{present}: {postgres:?}");
    }
    assert!(!postgres.contains("vector"), "{postgres:?}");
    // This host's Redis offers the modules scripts/install-deps.sh put in place (and that load:
    // not RediSearch 2 on Redis 7.0).
    let redis = offered("redis");
    let modules = std::path::Path::new("/usr/local/lib/sandboxd/redis-modules");
    for (feature, library) in [("json", "rejson.so"), ("bloom", "redisbloom.so")] {
        assert_eq!(
            redis.contains(feature),
            modules.join(library).exists(),
            "{feature}: {redis:?}"
        );
    }
    let description = request.description.as_deref().unwrap_or("");
    assert!(
        description.contains("always have these features active: postgres pg_trgm"),
        "{description}"
    );

    // The schema is what the daemon enforces: asking beyond it is refused, nothing is made.
    daemon.task(&project).await;
    agent.ok("give_me_work", json!({})).await;
    let refusal = agent
        .refused(
            "request_sandbox",
            json!({"extensions": {"postgres": ["vector"]}}),
        )
        .await;
    assert_eq!(refusal["error"], "feature_not_allowed", "{refusal}");
    assert!(daemon.sandboxes().await.is_empty());
    teardown_everything(&home);
}

#[tokio::test]
async fn a_reviewer_crafting_request_sandbox_is_refused_and_nothing_is_created() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let reviewer = daemon.agent("pr_reviewer", &project).await;
    let envelope = reviewer.refused("request_sandbox", json!({})).await;
    assert_eq!(envelope["error"], "verb_not_allowed");
    assert!(remediate(&envelope).contains("claim_review"));
    let envelope = reviewer.refused("drop_database", json!({})).await;
    assert_eq!(envelope["error"], "verb_not_allowed");
    assert!(daemon.sandboxes().await.is_empty());
    assert!(crate::support::sandbox_dirs(&home).is_empty());
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_401_and_no_tool_runs() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    daemon.task(&project).await;
    let http = reqwest::Client::new();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "give_me_work", "arguments": {}}});
    for token in [None, Some("sbx_wrong"), Some("")] {
        let mut request = http
            .post(format!("{}/mcp", daemon.url))
            .header("accept", "application/json, text/event-stream")
            .json(&call);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("request");
        assert_eq!(response.status().as_u16(), 401, "{token:?}");
        assert!(response.headers().get("www-authenticate").is_some());
    }
    // Nothing ran: the task is still open and no verb reached the audit log.
    let (_, tasks) = daemon
        .admin(
            reqwest::Method::GET,
            &format!("/v1/tasks?project={project}"),
            None,
        )
        .await;
    assert_eq!(tasks[0]["state"], "open", "{tasks}");
    let (_, audit) = daemon
        .admin(reqwest::Method::GET, "/v1/audit?limit=100", None)
        .await;
    let verbs: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(!verbs.contains(&"give_me_work"), "{verbs:?}");
    // A foreign Origin is refused before anything else (DNS rebinding protection).
    let response = http
        .post(format!("{}/mcp", daemon.url))
        .header("origin", "http://evil.example")
        .json(&call)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 403);
}

async fn redis_ping(entry: &Value) -> String {
    let client = redis::Client::open(entry["url"].as_str().expect("url")).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .expect("PING")
}

async fn pg_works(entry: &Value) -> Result<(), tokio_postgres::Error> {
    let env = entry["env"].as_object().expect("env");
    let mut config = tokio_postgres::Config::new();
    config
        .host(env["ROBOCO_TEST_DB_HOST"].as_str().expect("host"))
        .port(
            env["ROBOCO_TEST_DB_PORT"]
                .as_str()
                .expect("port")
                .parse()
                .expect("port"),
        )
        .user(env["ROBOCO_TEST_DB_USER"].as_str().expect("user"))
        .password(env["ROBOCO_TEST_DB_PASSWORD"].as_str().expect("password"))
        .dbname(env["ROBOCO_TEST_DB_NAME"].as_str().expect("db"));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS flow(x int); INSERT INTO flow VALUES (1)")
        .await
}

#[tokio::test]
async fn the_whole_flow_and_a_restart_mid_session() {
    let home = Home::new();
    let mut daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let task = daemon.task(&project).await;
    let dev = daemon.agent("developer", &project).await;

    let work = dev.ok("give_me_work", json!({})).await;
    assert_eq!(work["task_id"], task.as_str());
    assert!(
        work["next"]
            .as_str()
            .expect("next")
            .contains("request_sandbox")
    );
    let sandbox = dev.ok("request_sandbox", json!({})).await;
    pg_works(entry(&sandbox, "postgres"))
        .await
        .expect("postgres with the returned env");
    assert_eq!(redis_ping(entry(&sandbox, "redis")).await, "PONG");

    // The daemon restarts under the agent: same port, same state. Its MCP session goes on.
    let addr = daemon.addr.clone();
    daemon.stop();
    let daemon = spawn_daemon_at(&home, &addr);
    let again = dev
        .ok("request_sandbox", json!({"services": ["postgres"]}))
        .await;
    assert_eq!(
        entry(&again, "postgres")["password"],
        entry(&sandbox, "postgres")["password"],
        "a cache hit with the same credentials after the restart"
    );
    pg_works(entry(&again, "postgres"))
        .await
        .expect("still answering");

    let done = dev.ok("i_am_done", json!({"summary": "green"})).await;
    assert!(
        done["next"]
            .as_str()
            .expect("next")
            .contains("give_me_work")
    );
    assert!(daemon.sandboxes().await.is_empty(), "released on i_am_done");
    assert!(
        pg_works(entry(&sandbox, "postgres")).await.is_err(),
        "the instance is gone"
    );
    drop(dev);
    drop(daemon);
    teardown_everything(&home);
}

#[tokio::test]
async fn two_developers_racing_for_one_task_exactly_one_wins() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    daemon.task(&project).await;
    let a = daemon.agent("developer", &project).await;
    let b = daemon.agent("developer", &project).await;
    let (ra, rb) = tokio::join!(
        a.call("give_me_work", json!({})),
        b.call("give_me_work", json!({}))
    );
    let outcomes: BTreeSet<String> = [ra, rb]
        .iter()
        .map(|(envelope, _)| {
            envelope["status"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| envelope["error"].as_str().expect("code").to_owned())
        })
        .collect();
    assert_eq!(
        outcomes,
        BTreeSet::from(["ok".to_owned(), "no_work".to_owned()])
    );
}

#[tokio::test]
async fn out_of_order_verbs_say_which_verb_to_call_first() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let dev = daemon.agent("developer", &project).await;
    let envelope = dev.refused("i_am_done", json!({})).await;
    assert_eq!(envelope["error"], "out_of_order");
    assert!(remediate(&envelope).contains("give_me_work"));
    assert_eq!(envelope["retryable"], false);
    let envelope = dev.refused("request_sandbox", json!({})).await;
    assert_eq!(envelope["error"], "no_active_task");
    assert!(remediate(&envelope).contains("give_me_work"));

    let qa = daemon.agent("qa", &project).await;
    let envelope = qa.refused("pass_review", json!({})).await;
    assert_eq!(envelope["error"], "out_of_order");
    assert!(remediate(&envelope).contains("claim_review"));
    let envelope = qa
        .refused("claim_review", json!({"task": "t-nope\n<b>"}))
        .await;
    assert_eq!(envelope["error"], "not_found");
    assert!(
        !envelope["message"]
            .as_str()
            .expect("message")
            .contains('\n')
    );
    let envelope = qa.refused("claim_review", json!({"bogus": 1})).await;
    assert_eq!(envelope["error"], "invalid_argument");
}

#[tokio::test]
async fn the_same_verbs_over_stdio() {
    use rmcp::ServiceExt;
    use rmcp::transport::TokioChildProcess;

    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    daemon.task(&project).await;
    let (token, _) = daemon.spawn_agent("developer", &project).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"));
    cmd.args(["mcp", "--url", &daemon.url])
        .env("SANDBOXD_AGENT_TOKEN", &token)
        .env_remove("SANDBOXD_CONFIG");
    let client = ().serve(TokioChildProcess::new(cmd).expect("spawn")).await.expect("initialize");
    let tools: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(tools.contains(&"request_sandbox".to_owned()), "{tools:?}");
    let mut params = rmcp::model::CallToolRequestParams::new("give_me_work");
    params.arguments = Some(serde_json::Map::new());
    let result = client.call_tool(params).await.expect("call");
    let envelope = result.structured_content.expect("envelope");
    assert_eq!(envelope["status"], "ok", "{envelope}");
    client.cancel().await.expect("close");
}

/// `sandboxd mcp` launched as an MCP client launches it, with `token` in the environment
/// (or on the command line; an empty one: none at all), relaying to `url`; its stderr is piped.
fn stdio_server(
    url: &str,
    token: &str,
    on_argv: bool,
) -> (
    rmcp::transport::TokioChildProcess,
    tokio::process::ChildStderr,
) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"));
    cmd.args(["mcp", "--url", url])
        .env_remove("SANDBOXD_CONFIG");
    if token.is_empty() {
        cmd.env_remove("SANDBOXD_AGENT_TOKEN");
    } else if on_argv {
        cmd.args(["--token", token])
            .env_remove("SANDBOXD_AGENT_TOKEN");
    } else {
        cmd.env("SANDBOXD_AGENT_TOKEN", token);
    }
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandboxd mcp");
    (transport, stderr.expect("piped stderr"))
}

async fn read_all(mut stderr: tokio::process::ChildStderr) -> String {
    use tokio::io::AsyncReadExt;
    let mut text = String::new();
    let _ = stderr.read_to_string(&mut text).await;
    text
}

/// What the client's `initialize` got back from a `sandboxd mcp` that cannot reach the daemon.
async fn refused_initialize(url: &str, token: &str) -> (rmcp::ErrorData, String) {
    use rmcp::ServiceExt;
    use rmcp::service::ClientInitializeError;

    let (transport, stderr) = stdio_server(url, token, false);
    let error = match ().serve(transport).await {
        Err(ClientInitializeError::JsonRpcError(error)) => error,
        Err(other) => panic!("initialize should be answered with an MCP error, got {other}"),
        Ok(_) => panic!("initialize should fail"),
    };
    (error, read_all(stderr).await)
}

#[tokio::test]
async fn sandboxd_mcp_answers_initialize_with_what_failed_and_how_to_fix_it() {
    use rmcp::ServiceExt;

    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let project = opted_in_project(&daemon).await;
    let (token, _) = daemon.spawn_agent("developer", &project).await;

    // Nothing listens at the URL: start the daemon, or fix the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let (error, stderr) = refused_initialize(&nowhere, &token).await;
    let data = error.data.clone().expect("sandboxd's envelope");
    assert_eq!(data["error"], "daemon_unreachable", "{error:?}");
    for expected in [
        "not reachable at",
        &nowhere,
        "sandboxd serve",
        "SANDBOXD_URL",
    ] {
        assert!(
            error.message.contains(expected),
            "{expected}: {}",
            error.message
        );
    }
    assert_eq!(data["retryable"], true);
    assert!(stderr.contains("not reachable"), "{stderr}");
    assert!(!stderr.contains(&token), "{stderr}");

    // The daemon answers but refuses the token: check SANDBOXD_AGENT_TOKEN.
    let wrong = format!("sbx_{}", "0".repeat(64));
    let (error, stderr) = refused_initialize(&daemon.url, &wrong).await;
    let data = error.data.clone().expect("sandboxd's envelope");
    assert_eq!(data["error"], "token_refused", "{error:?}");
    for expected in [
        "refused the agent token",
        "SANDBOXD_AGENT_TOKEN",
        "agents spawn",
    ] {
        assert!(
            error.message.contains(expected),
            "{expected}: {}",
            error.message
        );
    }
    assert_eq!(data["retryable"], false);
    assert!(stderr.contains("refused the agent token"), "{stderr}");

    // No token at all: the client still gets a JSON-RPC answer naming what to set, not a
    // closed pipe after clap's usage text.
    let (error, stderr) = refused_initialize(&daemon.url, "").await;
    let data = error.data.clone().expect("sandboxd's envelope");
    assert_eq!(data["error"], "no_token", "{error:?}");
    assert!(
        error.message.contains("SANDBOXD_AGENT_TOKEN"),
        "{}",
        error.message
    );
    assert_eq!(data["retryable"], false);
    assert!(!stderr.contains("Usage:"), "{stderr}");

    // `--token` still works, with a warning that `ps` shows it.
    let (transport, stderr) = stdio_server(&daemon.url, &token, true);
    let client = ().serve(transport).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools");
    assert!(tools.iter().any(|t| t.name == "request_sandbox"));
    client.cancel().await.expect("close");
    let stderr = read_all(stderr).await;
    assert!(
        stderr.contains("set SANDBOXD_AGENT_TOKEN instead"),
        "{stderr}"
    );
}

/// One MCP message over plain HTTP, as any streamable-HTTP client sends it.
pub(crate) async fn post_mcp(
    http: &reqwest::Client,
    daemon: &TestDaemon,
    token: &str,
    session: Option<&str>,
    message: Value,
) -> reqwest::Response {
    let mut request = http
        .post(format!("{}/mcp", daemon.url))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&message);
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    request.send().await.expect("POST /mcp")
}

/// Opens a session (initialize, then the initialized notification) and returns its id.
pub(crate) async fn open_session(
    http: &reqwest::Client,
    daemon: &TestDaemon,
    token: &str,
) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-http", "version": "1"}}});
    let response = post_mcp(http, daemon, token, None, initialize).await;
    assert_eq!(response.status().as_u16(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post_mcp(http, daemon, token, Some(&session), initialized).await;
    assert_eq!(response.status().as_u16(), 202);
    session
}

/// The HTTP status of a `tools/list` in `session`.
pub(crate) async fn list_in(
    http: &reqwest::Client,
    daemon: &TestDaemon,
    token: &str,
    session: &str,
) -> u16 {
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let response = post_mcp(http, daemon, token, Some(session), list).await;
    response.status().as_u16()
}

#[tokio::test]
async fn an_mcp_session_idle_past_its_ttl_is_refused_then_swept_while_a_busy_one_lives() {
    use std::time::{Duration, Instant};

    const TTL_SECS: u64 = 3;
    let home = Home::new();
    let short_ttl = Launch {
        env: vec![
            (
                "SANDBOXD_BROKER__MCP_SESSION_TTL_SECS".to_owned(),
                TTL_SECS.to_string(),
            ),
            (
                "SANDBOXD_BROKER__JANITOR_INTERVAL_SECS".to_owned(),
                "1".to_owned(),
            ),
        ],
        ..Launch::default()
    };
    let mut daemon = spawn_daemon_with(&home, short_ttl);
    let project = opted_in_project(&daemon).await;
    let (token, _) = daemon.spawn_agent("developer", &project).await;
    let http = reqwest::Client::new();
    let idle = open_session(&http, &daemon, &token).await;
    let busy = open_session(&http, &daemon, &token).await;
    let client = daemon.client(&token).await;

    // Past the TTL (and a sweep or two), with `busy` in use all along.
    let opened = Instant::now();
    while opened.elapsed() < Duration::from_secs(TTL_SECS + 2) {
        assert_eq!(list_in(&http, &daemon, &token, &busy).await, 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        list_in(&http, &daemon, &token, &idle).await,
        404,
        "idle past the TTL: refused like an unknown session"
    );
    assert_eq!(list_in(&http, &daemon, &token, &busy).await, 200);
    // A real MCP client whose session expired starts a new one and goes on.
    assert!(client.tools().await.contains(&"request_sandbox".to_owned()));

    // Swept, not just hidden: a daemon with a long TTL on the same store does not know it, while
    // the busy session is restored from the store.
    let addr = daemon.addr.clone();
    daemon.stop();
    let daemon = spawn_daemon_at(&home, &addr);
    assert_eq!(list_in(&http, &daemon, &token, &idle).await, 404, "swept");
    assert_eq!(list_in(&http, &daemon, &token, &busy).await, 200, "kept");
}
