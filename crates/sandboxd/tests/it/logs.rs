//! No credential in the daemon's log at any verbosity: a real `sandboxd serve` at
//! `SANDBOXD_LOG=trace` (every dependency included) and `-vv`, its stderr captured to a file,
//! driven through a whole agent flow on the process backend and on Docker (there with a clone
//! source registered and snapshotted whose DSN holds a handed-out password), the panel login
//! and an admin API call. Then the whole log is searched for every password handed out, every
//! password the daemon generated for itself (read back from its store with its key), the
//! superuser passwords a container's config shows, the agent token and the admin token.

use std::path::Path;
use std::sync::Mutex;

use reqwest::header;
use sandboxd_domain::engine::AdminAccess;
use sandboxd_store::{SecretCipher, Store};
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::support::{
    ADMIN_TOKEN, Home, Launch, TestDaemon, spawn_daemon_with, teardown_everything,
    teardown_maker_on_docker, unique,
};

const ENGINES: [&str; 3] = ["postgres", "redis", "mariadb"];

/// Starts a daemon at maximum verbosity, its log in `<home>/daemon.log`.
fn loud_daemon(home: &Home) -> (TestDaemon, std::path::PathBuf) {
    let log = home.dir.path().join("daemon.log");
    let file = std::fs::File::create(&log).expect("create the log file");
    let env = vec![("SANDBOXD_LOG".to_owned(), "trace".to_owned())];
    let daemon = spawn_daemon_with(
        home,
        Launch {
            args: vec!["-vv".to_owned()],
            env,
            stderr: Some(file),
            ..Launch::default()
        },
    );
    (daemon, log)
}

/// Every password of every instance the daemon has in its store: the handed-out account's and,
/// where the superuser logs in with one, the superuser's. Read with the daemon's own key.
async fn stored_passwords(home: &Home) -> Secrets {
    let state = home.dir.path().join("state");
    let cipher = SecretCipher::load_or_create(&state.join("store.key")).expect("the store key");
    let url = format!("sqlite://{}", state.join("sandboxd.db").display());
    let store = Store::open(&url, cipher).await.expect("open the store");
    let mut passwords = Vec::new();
    for instance in store.all_instances().await.expect("instances") {
        let agent = instance.agent.password.expose_secret().to_owned();
        passwords.push(("stored, the agent's", agent));
        if let AdminAccess::Password(admin) = &instance.admin {
            let admin = admin.password.expose_secret().to_owned();
            passwords.push(("stored, a superuser's", admin));
        }
    }
    store.close().await;
    passwords
}

/// The values of `*PASSWORD*` variables in the config of every container of `owner` (none since
/// issue 14, but a regression must still be searched for in the log).
fn container_passwords(owner: &str) -> Vec<String> {
    let ids = std::process::Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=sandboxd.owner={owner}"),
        ])
        .output()
        .expect("docker ps");
    let mut passwords = Vec::new();
    for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
        let inspect = std::process::Command::new("docker")
            .args(["inspect", "--format", "{{json .Config.Env}}", id])
            .output()
            .expect("docker inspect");
        let env: Vec<String> = serde_json::from_slice(&inspect.stdout).unwrap_or_default();
        for variable in env {
            if let Some((key, value)) = variable.split_once('=')
                && key.contains("PASSWORD")
                && !value.is_empty()
            {
                // The superuser's password reaches the entrypoint on stdin (issue 14): the
                // config names only where to read it. The stored superuser passwords are
                // searched for in the log all the same.
                if key.ends_with("_FILE") {
                    assert_eq!(value, "/dev/stdin", "{key}");
                    continue;
                }
                passwords.push(value.to_owned());
            }
        }
    }
    passwords
}

/// The forms a secret could take in a log line: as is, either half (a split or a partial
/// print), upper case, and as a list of byte values (a `Vec<u8>` or `&[u8]` printed with `{:?}`).
fn forms(secret: &str, halves: bool) -> Vec<String> {
    let bytes: Vec<String> = secret.bytes().map(|b| b.to_string()).collect();
    let mut forms = vec![
        secret.to_owned(),
        secret.to_uppercase(),
        bytes.join(", "),
        bytes.join(","),
    ];
    if halves {
        let middle = secret.len() / 2;
        forms.push(secret[..middle].to_owned());
        forms.push(secret[middle..].to_owned());
    }
    forms
}

/// Logs in to the panel as a browser without JavaScript would, opens a page behind it, and
/// returns the session cookie (a credential too: it is the operator's login).
async fn panel_login(daemon: &TestDaemon) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let page = http
        .get(format!("{}/login", daemon.url))
        .send()
        .await
        .expect("GET /login");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("login page");
    let marker = "name=\"csrf\" value=\"";
    let start = html.find(marker).expect("the login form's csrf field") + marker.len();
    let csrf = html[start..]
        .split('"')
        .next()
        .expect("csrf value")
        .to_owned();
    let answer = http
        .post(format!("{}/login", daemon.url))
        .header(header::COOKIE, format!("sandboxd_login={csrf}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&token={ADMIN_TOKEN}"))
        .send()
        .await
        .expect("POST /login");
    assert_eq!(answer.status().as_u16(), 303, "logged in");
    let session = answer
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("sandboxd_session="))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let sandboxes = http
        .get(format!("{}/sandboxes", daemon.url))
        .header(header::COOKIE, format!("sandboxd_session={session}"))
        .send()
        .await
        .expect("GET /sandboxes");
    assert_eq!(sandboxes.status().as_u16(), 200);
    session
}

/// Every password the test saw or could read, with where it came from.
type Secrets = Vec<(&'static str, String)>;

/// The tokens the flow used: the agent's and the panel session's (the admin token is a
/// constant of the test support).
struct Tokens {
    agent: String,
    panel_session: String,
}

/// Drives the whole flow on `daemon`, and returns the tokens it used and every password it saw
/// or could read. The agent is recorded in `owners` as soon as it exists.
async fn whole_flow(
    home: &Home,
    daemon: &TestDaemon,
    owners: &Mutex<Vec<String>>,
    docker: bool,
) -> (Tokens, Secrets) {
    let project = unique("logs");
    daemon.project(&project, &ENGINES).await;
    daemon.task(&project).await;
    let (token, spawned) = daemon.spawn_agent("developer", &project).await;
    let slug = spawned["agent"].as_str().expect("agent slug").to_owned();
    owners.lock().expect("lock").push(slug.clone());
    let agent = daemon.client(&token).await;
    agent.ok("give_me_work", json!({})).await;
    let sandbox = agent.ok("request_sandbox", json!({})).await;
    let evidence = sandbox["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), ENGINES.len(), "{sandbox}");
    let mut secrets: Secrets = evidence
        .iter()
        .map(|e| {
            (
                "handed out",
                e["password"].as_str().expect("password").to_owned(),
            )
        })
        .collect();
    if docker {
        // The agent's own Postgres as a clone source: its DSN (the handed-out password) goes
        // through the API, the store's seal, pg_dump's container and a snapshot's reads.
        let postgres = evidence
            .iter()
            .find(|e| e["service"] == "postgres")
            .expect("postgres evidence");
        snapshot_a_source(daemon, &project, postgres).await;
    }
    // A cache hit answers the same credentials again.
    let hit = agent
        .ok("request_sandbox", json!({"services": ["postgres"]}))
        .await;
    assert_eq!(hit["evidence"][0]["password"], evidence[0]["password"]);
    secrets.extend(stored_passwords(home).await);
    if docker {
        secrets.extend(
            container_passwords(&slug)
                .into_iter()
                .map(|p| ("in a container's config", p)),
        );
    }
    agent.ok("release_sandbox", json!({})).await;
    let panel_session = panel_login(daemon).await;
    let (status, listed) = daemon
        .admin(reqwest::Method::GET, "/v1/sandboxes", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    // Only this agent's: other tests may share the Docker engine.
    let mine: Vec<&Value> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter(|sandbox| sandbox["owner"] == slug.as_str())
        .collect();
    assert!(mine.is_empty(), "released: {mine:?}");
    agent.service.cancel().await.expect("close the MCP session");
    let tokens = Tokens {
        agent: token,
        panel_session,
    };
    (tokens, secrets)
}

/// Registers the Postgres of `evidence` as a clone source, snapshots it, and removes it.
async fn snapshot_a_source(daemon: &TestDaemon, project: &str, evidence: &Value) {
    let dsn = evidence["url"].as_str().expect("a url");
    let path = format!("/v1/sources/{project}");
    let (status, body) = daemon
        .admin(reqwest::Method::PUT, &path, Some(json!({"dsn": dsn})))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = daemon
        .admin(reqwest::Method::POST, &format!("{path}/snapshot"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["snapshot"]["server_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("PostgreSQL")),
        "{body}"
    );
    let (status, body) = daemon.admin(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(status, 204, "{body}");
}

/// Asserts the log at `path` really is a maximum-verbosity log and holds none of `secrets`
/// (nor the agent, admin and panel session tokens) in any form.
fn assert_no_secret_in(path: &Path, tokens: &Tokens, secrets: &Secrets, markers: &[&str]) {
    let log = std::fs::read_to_string(path).expect("read the log");
    if let Ok(keep) = std::env::var("SANDBOXD_KEEP_LOG") {
        let _ = std::fs::copy(path, keep);
    }
    let lines = log.lines().count();
    for marker in [" TRACE ", "rmcp::", "sqlx::"].iter().chain(markers) {
        assert!(
            log.contains(marker),
            "the log has no {marker:?} line ({lines} lines): it did not capture maximum verbosity"
        );
    }
    let mut checked = 0;
    let mut found = Vec::new();
    let mut sources = std::collections::BTreeMap::<&str, usize>::new();
    for (source, secret) in secrets {
        *sources.entry(source).or_default() += 1;
        assert_eq!(secret.len(), 32, "a generated password ({source})");
        for form in forms(secret, true) {
            checked += 1;
            if log.contains(&form) {
                found.push(form);
            }
        }
    }
    let token_hex = tokens.agent.strip_prefix("sbx_").expect("an agent token");
    for form in forms(&tokens.agent, false)
        .into_iter()
        .chain(forms(token_hex, true))
        .chain(forms(ADMIN_TOKEN, false))
        .chain(forms(&tokens.panel_session, true))
    {
        checked += 1;
        if log.contains(&form) {
            found.push(form);
        }
    }
    let redacted = log.matches(sandboxd::logging::REDACTED).count();
    eprintln!(
        "searched a {lines}-line, {} KiB log for {checked} forms of {} passwords ({sources:?}) \
         and 3 tokens: {} found; {redacted} runs redacted",
        log.len() / 1024,
        secrets.len(),
        found.len()
    );
    assert!(found.is_empty(), "secrets in the log: {found:?}");
}

/// Tears down every sandbox of the test's agents when the test ends, even on a panic (a
/// stopped daemon keeps its sandboxes for the next start, so nothing else would).
struct Cleanup<'a> {
    home: &'a Home,
    /// The daemon that made them: the CLI tears down only the instances of the maker it names.
    maker: String,
    owners: Mutex<Vec<String>>,
}

impl<'a> Cleanup<'a> {
    fn new(home: &'a Home, maker: String) -> Self {
        Self {
            home,
            maker,
            owners: Mutex::default(),
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let owners = self.owners.lock().map(|o| o.clone()).unwrap_or_default();
        for owner in owners {
            let _ = self
                .home
                .sandboxd()
                .args(["teardown", "--owner", &owner, "--maker", &self.maker])
                .output();
        }
    }
}

#[tokio::test]
async fn a_trace_log_of_a_whole_process_flow_holds_no_credential() {
    let home = Home::new();
    let (mut daemon, log) = loud_daemon(&home);
    let cleanup = Cleanup::new(&home, daemon.daemon_id().await);
    let (tokens, secrets) = whole_flow(&home, &daemon, &cleanup.owners, false).await;
    // 3 handed out + 3 stored agent passwords (the same) + the superusers that use one.
    assert!(secrets.len() >= 6, "{}", secrets.len());
    daemon.stop();
    // The driver the process backend sets Postgres up with.
    assert_no_secret_in(&log, &tokens, &secrets, &["tokio_postgres::"]);
    drop(daemon);
    teardown_everything(&home);
}

#[tokio::test]
async fn a_trace_log_of_a_whole_docker_flow_holds_no_credential() {
    if sandboxd_testkit::docker_or_skip().await.is_none() {
        return;
    }
    let home = Home::on_docker();
    let (mut daemon, log) = loud_daemon(&home);
    let cleanup = Cleanup::new(&home, daemon.daemon_id().await);
    let (tokens, secrets) = whole_flow(&home, &daemon, &cleanup.owners, true).await;
    assert!(secrets.len() >= 6, "{}", secrets.len());
    daemon.stop();
    // The Engine API client and the HTTP client under it.
    assert_no_secret_in(&log, &tokens, &secrets, &["bollard::", "hyper_util::"]);
    let maker = cleanup.maker.clone();
    drop(cleanup);
    teardown_maker_on_docker(&home, &maker);
}

/// A warm hand-out at maximum verbosity: its spans (take, hand_out, mint, record_owner, prove)
/// and the tokio-postgres/redis lines under them name no password handed out and no SCRAM
/// verifier of the account minted for it.
#[tokio::test]
async fn a_trace_log_of_a_warm_hand_out_holds_no_credential() {
    let mut home = Home::new();
    for engine in ["POSTGRES", "REDIS"] {
        home.set(&format!("SANDBOXD_POOLS__{engine}__MIN_IDLE"), "1");
        home.set(&format!("SANDBOXD_POOLS__{engine}__MAX_TOTAL"), "1");
    }
    let (mut daemon, log) = loud_daemon(&home);
    let cleanup = Cleanup::new(&home, daemon.daemon_id().await);
    let project = unique("logs-warm");
    daemon.project(&project, &["postgres", "redis"]).await;
    daemon.task(&project).await;
    let (token, spawned) = daemon.spawn_agent("developer", &project).await;
    let slug = spawned["agent"].as_str().expect("agent slug").to_owned();
    cleanup.owners.lock().expect("lock").push(slug);
    let started = std::time::Instant::now();
    loop {
        let (status, pools) = daemon.admin(reqwest::Method::GET, "/v1/pools", None).await;
        assert_eq!(status, 200, "{pools}");
        let idle = |engine: &str| {
            pools
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["engine"] == engine && p["idle"] == 1)
        };
        if idle("postgres") && idle("redis") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "pools never filled: {pools}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let agent = daemon.client(&token).await;
    agent.ok("give_me_work", json!({})).await;
    let sandbox = agent.ok("request_sandbox", json!({})).await;
    let evidence = sandbox["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 2, "{sandbox}");
    let mut secrets: Secrets = evidence
        .iter()
        .map(|e| {
            (
                "handed out",
                e["password"].as_str().expect("password").to_owned(),
            )
        })
        .collect();
    secrets.extend(stored_passwords(&home).await);
    agent.ok("release_sandbox", json!({})).await;
    agent.service.cancel().await.expect("close the MCP session");
    let panel_session = panel_login(&daemon).await;
    daemon.stop();
    let tokens = Tokens {
        agent: token,
        panel_session,
    };
    assert_no_secret_in(&log, &tokens, &secrets, &["tokio_postgres::"]);
    let text = std::fs::read_to_string(&log).expect("read the log");
    // The account is made and proven while the member idles (`ready`); the hand-out
    // re-checks it over the held connection (`recheck`).
    for span in [
        "ready",
        "take",
        "hand_out",
        "recheck",
        "record_owner",
        "store_put",
    ] {
        assert!(
            text.contains(&format!("{span}: close")) || text.contains(&format!("{span}{{")),
            "no {span} span in the log"
        );
    }
    // The mint statement tokio-postgres logs at `debug` carries the account's SCRAM verifier
    // (and the re-check reads it back): base64, not a 32-hex run, so the redactor blanks it by
    // its prefix.
    assert_eq!(
        text.matches("SCRAM-SHA-256$").count(),
        text.matches("SCRAM-SHA-256$[redacted]").count(),
        "a SCRAM verifier in the log"
    );
    drop(daemon);
    drop(cleanup);
    teardown_everything(&home);
}
