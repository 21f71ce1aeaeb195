//! The panel in a real headless Chromium (Debian's `chromium` + `chromium-driver`) driven over
//! WebDriver, with JavaScript switched off in the browser: log in, arm the switch, restart, opt
//! a project into postgres+redis with `vector`, watch the sandbox an agent requested (Docker, the
//! local images) appear, tear it down from the panel, and see it gone from Docker. Screenshots
//! go to `artifacts/screenshots/`.

use sandboxd_domain::call::Call;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use sandboxd_domain::roles::Verb;
use sandboxd_domain::{AgentSlug, ProjectSlug};
use serde_json::json;

use crate::support::{ADMIN_TOKEN, App, AppSpec, Kind, ok, spawn_app, unique};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// chromedriver as a child in its own process group, with a private profile directory that is
/// also its HOME (so chromium's crash handlers, which leave the group for sessions of their
/// own, carry the directory's path on their command line). Dropping it kills the group and
/// every process naming the directory, so no browser process outlives the test.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill, killpg};
        use nix::unistd::Pid;
        // A syscall, not `kill -KILL -<pgid>`: procps-ng 4.0.2's kill misreads a negative pid
        // (`-18835` became `-1`, which killed every process on the machine).
        if let Ok(group) = i32::try_from(self.child.id())
            && group > 1
        {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
        for pid in processes_naming(self.profile.path()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pids (> 1, never this process) whose command line mentions `path`.
fn processes_naming(path: &Path) -> Vec<i32> {
    let needle = path.as_os_str().as_encoded_bytes();
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid > 1 && pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The browser is required where CI runs (`CI` set); elsewhere a missing one skips the test.
fn browser_or_skip() -> bool {
    if Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("CI needs {CHROMIUM} and {CHROMEDRIVER} (scripts/install-deps.sh installs them)");
    }
    eprintln!("skipping: no {CHROMIUM} / {CHROMEDRIVER}");
    false
}

async fn start_driver() -> Driver {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let profile = tempfile::Builder::new()
        .prefix("sandboxd-browser-")
        .tempdir()
        .expect("profile dir");
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .env("HOME", profile.path())
        .env("XDG_CONFIG_HOME", profile.path().join("config"))
        .env("XDG_CACHE_HOME", profile.path().join("cache"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        port,
        profile,
    };
    let status = format!("http://127.0.0.1:{port}/status");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = reqwest::get(&status).await
            && response.status().is_success()
        {
            return driver;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer on {port}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn browser(driver: &Driver, javascript: bool) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1360,900", "--no-first-run", "--disable-extensions",
                format!("--user-data-dir={}", driver.profile.path().join("user-data").display()),
            ],
            // 2 = block: the panel must work with JavaScript off.
            "prefs": { "profile.managed_default_content_settings.javascript": if javascript { 1 } else { 2 } },
        }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session")
}

fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/screenshots");
    std::fs::create_dir_all(&dir).expect("artifacts/screenshots");
    dir
}

async fn shot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshots_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
}

async fn text(client: &Client, css: &str) -> String {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .expect("text")
}

async fn click(client: &Client, css: &str) {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Clicks a button that submits a form, and waits until the browser left the current page (the
/// old document's root went stale): a click may return before the navigation it started.
async fn submit(client: &Client, css: &str) {
    let page = client
        .find(Locator::Css("html"))
        .await
        .expect("the current page");
    click(client, css).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while page.tag_name().await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "submitting with {css} loaded no new page"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn path_of(client: &Client) -> String {
    client.current_url().await.expect("url").path().to_owned()
}

/// Loads the panel's page at `path`.
async fn open(client: &Client, app: &App, path: &str) {
    client
        .goto(&format!("{}{path}", app.url()))
        .await
        .expect("goto");
}

async fn log_in(client: &Client, app: &App) {
    open(client, app, "/settings").await;
    assert_eq!(
        path_of(client).await,
        "/login",
        "the panel is behind the login"
    );
    client
        .find(Locator::Id("token"))
        .await
        .expect("token field")
        .send_keys(ADMIN_TOKEN)
        .await
        .expect("type");
    submit(client, "form[action='/login'] button[type=submit]").await;
    assert_ne!(path_of(client).await, "/login", "logged in");
}

/// Containers Docker itself lists for an owner, through the docker CLI (not our backend).
fn docker_containers(owner: &AgentSlug) -> Vec<String> {
    let output = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=sandboxd.owner={owner}"),
        ])
        .output()
        .expect("docker ps");
    assert!(output.status.success(), "docker ps failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn operator_flow_in_a_real_browser_without_javascript() {
    if !browser_or_skip() {
        return;
    }
    let Some(app) = spawn_app(AppSpec {
        kind: Kind::Docker,
        enabled_override: None,
        pools: vec![sandboxd_broker::PoolConfig {
            engine: sandboxd_domain::EngineRef::parse("redis").expect("registered"),
            clone_of: None,
            features: Default::default(),
            min_idle: 1,
            max_total: 2,
        }],
    })
    .await
    else {
        return;
    };
    app.run(|app| async move {
        let driver = start_driver().await;
        let client = browser(&driver, false).await;
        let outcome =
            futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(flow(&app, &client)))
                .await;
        let _ = client.close().await;
        drop(driver);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}

async fn flow(app: &App, client: &Client) {
    // The browser really runs with JavaScript off: a page's script does nothing.
    client
        .goto("data:text/html,<title>before</title><script>document.title='after'</script>")
        .await
        .expect("goto");
    assert_eq!(
        client.title().await.expect("title"),
        "before",
        "JavaScript is off"
    );

    // The login page, then in.
    let first_url = app.url();
    open(client, app, "/login").await;
    shot(client, "01-login").await;
    log_in(client, app).await;

    // Settings → Feature Flags: arm. Stored on, running unchanged, takes effect on restart.
    open(client, app, "/settings").await;
    assert_eq!(
        text(client, "#flag-sandbox-db-enabled .stored").await,
        "off"
    );
    assert_eq!(
        text(client, "#flag-sandbox-db-enabled .running").await,
        "off"
    );
    shot(client, "02-settings-disarmed").await;
    submit(client, "#arm").await;
    assert_eq!(path_of(client).await, "/settings");
    assert_eq!(text(client, "#flag-sandbox-db-enabled .stored").await, "on");
    assert_eq!(
        text(client, "#flag-sandbox-db-enabled .running").await,
        "off"
    );
    let page = text(client, "main").await;
    assert!(page.contains("takes effect on next restart"), "{page}");
    assert!(
        text(client, "#restart-pending")
            .await
            .contains("restart pending")
    );
    shot(client, "03-settings-armed").await;
    assert!(app.stored_switch().await);

    // The daemon restarts: the stored value is now the running one (sessions are gone).
    app.restart().await;
    let second_url = app.url();
    log_in(client, app).await;
    open(client, app, "/settings").await;
    assert_eq!(
        text(client, "#flag-sandbox-db-enabled .running").await,
        "on"
    );
    assert!(client.find(Locator::Id("restart-pending")).await.is_err());
    shot(client, "04-settings-after-restart").await;

    // Projects → a new project → its Sandbox card: postgres + redis, with vector.
    let slug = unique("web");
    open(client, app, "/projects").await;
    client
        .find(Locator::Id("new-slug"))
        .await
        .expect("slug field")
        .send_keys(&slug)
        .await
        .expect("type");
    submit(client, "form[action='/projects'] button[type=submit]").await;
    assert_eq!(path_of(client).await, format!("/projects/{slug}"));
    click(client, "#service-postgres").await;
    click(client, "#service-redis").await;
    click(client, "#feature-postgres-vector").await;
    // What the backend cannot give is greyed out and cannot be checked: MongoDB (no local
    // image is built) and any feature the images lack; everything offered can be.
    assert!(
        !client
            .find(Locator::Id("service-mongo"))
            .await
            .expect("mongo's box")
            .is_enabled()
            .await
            .expect("state"),
        "no MongoDB image here"
    );
    assert!(
        text(client, "#unrunnable-mongo")
            .await
            .contains("Cannot run here")
    );
    for chip in client
        .find_all(Locator::Css("label.chip.unavailable input[type=checkbox]"))
        .await
        .expect("chips")
    {
        assert!(!chip.is_enabled().await.expect("state"));
    }
    let offered = client
        .find_all(Locator::Css(
            "label.chip:not(.unavailable) input[type=checkbox]",
        ))
        .await
        .expect("chips");
    assert!(!offered.is_empty());
    for chip in &offered {
        assert!(chip.is_enabled().await.expect("state"));
    }
    shot(client, "05-project-card-checked").await;
    submit(client, "#save-sandbox").await;
    assert!(
        text(client, ".flash")
            .await
            .contains("Saved: postgres, redis.")
    );
    let project = ProjectSlug::parse(&slug).expect("slug");
    let stored = app.stored_project(&project).await;
    assert_eq!(
        stored
            .sandbox_extensions
            .as_ref()
            .expect("features")
            .to_map()["postgres"],
        ["vector"]
    );
    assert!(
        client
            .find(Locator::Id("feature-postgres-vector"))
            .await
            .expect("checkbox")
            .is_selected()
            .await
            .expect("state")
    );
    shot(client, "06-project-card-saved").await;

    // An agent holding a task requests its sandbox (as it would through the gateway).
    let dev = app.working_developer(&project).await;
    let answer = ok(app
        .broker()
        .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
        .await);
    let postgres = answer
        .evidence
        .as_ref()
        .and_then(|e| e.as_array())
        .and_then(|e| e.iter().find(|s| s["service"] == "postgres"))
        .expect("postgres evidence")
        .clone();
    assert!(
        postgres["available_extensions"]
            .as_array()
            .expect("extensions")
            .iter()
            .any(|e| e == "vector"),
        "{postgres}"
    );
    assert_eq!(docker_containers(&dev.slug).len(), 2, "two containers run");

    // It appears on the Sandboxes page.
    open(client, app, "/sandboxes").await;
    let row = format!("#sandbox-{}", dev.slug);
    let shown = text(client, &row).await;
    for expected in [
        "postgres",
        "redis",
        "docker",
        "live",
        "sandboxd-local/postgres:17",
    ] {
        assert!(shown.contains(expected), "{expected} in {shown}");
    }
    let last_used = text(client, &format!("{row} .last-used")).await;
    assert!(last_used.ends_with(" ago"), "last used: {last_used:?}");
    let html = client.source().await.expect("source");
    assert!(
        !html.contains(postgres["password"].as_str().expect("password")),
        "no credential on the page"
    );
    shot(client, "07-sandboxes-live").await;

    // Tear it down from the panel: open the confirmation, confirm.
    click(client, &format!("{row} details.confirm summary")).await;
    shot(client, "08-sandboxes-confirm-teardown").await;
    submit(
        client,
        &format!("{row} details.confirm button[type=submit]"),
    )
    .await;
    assert_eq!(path_of(client).await, "/sandboxes");
    let flash = text(client, ".flash").await;
    assert!(flash.contains("2 instances removed"), "{flash}");
    assert!(
        client.find(Locator::Css(&row)).await.is_err(),
        "the row is gone"
    );
    shot(client, "09-sandboxes-torn-down").await;

    // Gone from Docker itself.
    assert!(docker_containers(&dev.slug).is_empty(), "no container left");

    // Pools: the configured redis pool (its task is not running here, so it is filling),
    // resized from the panel.
    open(client, app, "/pools").await;
    let pool = text(client, "#pool-redis").await;
    assert!(pool.contains("redis") && pool.contains("filling"), "{pool}");
    for (field, value) in [("min_idle", "0"), ("max_total", "3")] {
        let input = client
            .find(Locator::Css(&format!("#pool-redis input[name={field}]")))
            .await
            .expect("a size field");
        input.clear().await.expect("clear");
        input.send_keys(value).await.expect("type");
    }
    shot(client, "10-pools").await;
    submit(client, "#pool-redis button[type=submit]").await;
    assert_eq!(path_of(client).await, "/pools");
    let flash = text(client, ".flash").await;
    assert!(flash.contains("keeps 0 idle, at most 3"), "{flash}");
    let resized = app.broker().pools();
    assert_eq!((resized[0].min_idle, resized[0].max_total), (0, 3));

    // The audit log shows what happened.
    open(client, app, "/audit").await;
    let audit = text(client, "#audit").await;
    for action in [
        "teardown_sandbox",
        "request_sandbox",
        "set_project",
        "set_setting",
    ] {
        assert!(audit.contains(action), "{action} in the audit page");
    }
    shot(client, "11-audit").await;

    // And no page of the flow ran or shipped a script.
    assert!(!html.contains("<script"));

    // Every form the browser posted carried the page's own origin (what the daemon's Origin
    // guard requires; `Origin: null` would be refused there).
    let origins = app.posted_origins.lock().expect("lock").clone();
    let expected: Vec<String> = [&first_url; 2] // log in, arm
        .into_iter()
        .chain([&second_url; 5]) // log in, create, save, tear down, resize a pool
        .cloned()
        .collect();
    assert_eq!(origins, expected);
}
