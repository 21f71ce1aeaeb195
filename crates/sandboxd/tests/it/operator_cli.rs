//! The operator commands (`projects`, `agents`, `tasks`, `sandboxes`, `settings`, `janitor`)
//! against a real `sandboxd serve`: human tables, `--json`, refusals with exit code 2, a
//! sandbox an agent requested over MCP torn down from the CLI.

use std::panic::AssertUnwindSafe;
use std::process::Output;

use futures::FutureExt;

use serde_json::{Value, json};

use crate::support::{
    ADMIN_TOKEN, Home, TestDaemon, sandbox_dirs, spawn_daemon, teardown_everything, unique,
};

fn cli(home: &Home, daemon: &TestDaemon, args: &[&str]) -> Output {
    home.sandboxd()
        .env("SANDBOXD_URL", &daemon.url)
        .args(args)
        .output()
        .expect("run sandboxd")
}

/// `cli` with `input` on its stdin.
fn cli_with_stdin(home: &Home, daemon: &TestDaemon, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = home
        .sandboxd()
        .env("SANDBOXD_URL", &daemon.url)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sandboxd");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("sandboxd ends")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

fn refused(output: &Output, code: i32, needle: &str) {
    assert_eq!(output.status.code(), Some(code), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(needle), "{needle:?} in {stderr}");
}

#[tokio::test]
async fn operator_commands_drive_a_running_daemon() {
    let home = Home::new();
    let daemon = spawn_daemon(&home);
    let outcome = AssertUnwindSafe(flow(&home, &daemon)).catch_unwind().await;
    // Whatever happened: stop the daemon, tear down what is left, check nothing is.
    drop(daemon);
    teardown_everything(&home);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn flow(home: &Home, daemon: &TestDaemon) {
    let project = unique("proj");
    sources(home, daemon, &project);

    // projects set / ls
    let out = stdout(&cli(
        home,
        daemon,
        &[
            "projects",
            "set",
            &project,
            "--services",
            "postgres,redis",
            "--features",
            "postgres=pg_trgm",
            "--size",
            "postgres=1G",
        ],
    ));
    assert!(
        out.contains(&project) && out.contains("postgres, redis"),
        "{out}"
    );
    assert!(out.contains("postgres: pg_trgm"), "{out}");
    assert!(out.contains("postgres=1G"), "{out}");
    let listed = json_of(&cli(home, daemon, &["projects", "ls", "--json"]));
    assert_eq!(listed[0]["sandbox_services"], json!(["postgres", "redis"]));
    // Sizes within the operator's ceiling only, for engines whose data is on disk; a refusal
    // stores nothing, not even the rest of the call.
    for (sizes, needle) in [
        (
            "postgres=8G",
            "postgres=8G is above this sandboxd's ceiling of 2G (broker.max_sandbox_size_mb = 2048)",
        ),
        ("redis=1G", "redis keeps its data in memory"),
        ("postgres=2048", "give a whole number and a unit"),
        (
            "mariadb=1G",
            "a size for mariadb, which is not in sandbox_services",
        ),
    ] {
        refused(
            &cli(
                home,
                daemon,
                &[
                    "projects",
                    "set",
                    &project,
                    "--services",
                    "postgres",
                    "--size",
                    sizes,
                ],
            ),
            2,
            needle,
        );
    }
    let listed = json_of(&cli(home, daemon, &["projects", "ls", "--json"]));
    assert_eq!(listed[0]["sandbox_sizes"], json!({"postgres": "1G"}));
    assert_eq!(listed[0]["sandbox_services"], json!(["postgres", "redis"]));
    refused(
        &cli(
            home,
            daemon,
            &["projects", "set", &project, "--services", "oracle"],
        ),
        2,
        "postgres, redis, mariadb, mongo",
    );
    refused(
        &cli(
            home,
            daemon,
            &[
                "projects",
                "set",
                &project,
                "--services",
                "postgres",
                "--features",
                "postgres=plperlu",
            ],
        ),
        2,
        "vector, postgis, pg_trgm, citext, uuid-ossp",
    );
    // This host's PostgreSQL has no pgvector: the process backend refuses it, naming the package.
    refused(
        &cli(
            home,
            daemon,
            &[
                "projects",
                "set",
                &project,
                "--services",
                "postgres",
                "--features",
                "postgres=vector",
            ],
        ),
        2,
        "feature vector of postgres is not available on this sandboxd's process backend",
    );
    refused(
        &cli(
            home,
            daemon,
            &["projects", "set", "../x", "--services", "postgres"],
        ),
        2,
        "invalid project slug",
    );
    let listed = json_of(&cli(home, daemon, &["projects", "ls", "--json"]));
    assert_eq!(
        listed.as_array().expect("list").len(),
        1,
        "nothing else created"
    );
    assert_eq!(
        listed[0]["sandbox_extensions"],
        json!({"postgres": ["pg_trgm"]})
    );

    // agents spawn / ls
    let slug = unique("dev");
    let spawn = [
        "agents",
        "spawn",
        "--slug",
        &slug,
        "--role",
        "developer",
        "--project",
        &project,
    ];
    let out = stdout(&cli(home, daemon, &spawn));
    let token = out
        .lines()
        .find_map(|l| l.strip_prefix("token:"))
        .expect("a token line")
        .trim()
        .to_owned();
    assert!(
        out.contains("ROBOCO_SANDBOX_SERVICES_AVAILABLE=postgres,redis"),
        "{out}"
    );
    assert!(out.contains("request_sandbox()"), "{out}");
    let out = stdout(&cli(home, daemon, &["agents", "ls", "--project", &project]));
    assert!(out.contains(&slug) && out.contains("developer"), "{out}");
    assert!(!out.contains(&token), "the token is shown once");
    refused(&cli(home, daemon, &spawn), 2, "already exists");

    // tasks add / ls
    let out = stdout(&cli(
        home,
        daemon,
        &[
            "tasks",
            "add",
            "--project",
            &project,
            "--title",
            "make the tests pass",
        ],
    ));
    assert!(out.starts_with("added t-"), "{out}");
    let tasks = json_of(&cli(
        home,
        daemon,
        &[
            "tasks",
            "ls",
            "--project",
            &project,
            "--state",
            "open",
            "--json",
        ],
    ));
    assert_eq!(tasks[0]["title"], "make the tests pass");
    refused(
        &cli(home, daemon, &["tasks", "ls", "--state", "finished"]),
        2,
        "in_progress",
    );

    // settings: the daemon runs with ROBOCO_SANDBOX_DB_ENABLED=1, which overrides the store.
    let out = stdout(&cli(home, daemon, &["settings"]));
    assert!(
        out.contains("sandbox_db_enabled") && out.contains("ROBOCO_SANDBOX_DB_ENABLED=on"),
        "{out}"
    );
    let stored = json_of(&cli(
        home,
        daemon,
        &["settings", "set", "sandbox_db_enabled=false", "--json"],
    ));
    assert_eq!(stored["sandbox_db_enabled_stored"], false);
    assert_eq!(stored["sandbox_db_enabled_running"], true);
    refused(
        &cli(
            home,
            daemon,
            &["settings", "set", "sandbox_db_enabled=maybe"],
        ),
        2,
        "true/false",
    );
    refused(
        &cli(home, daemon, &["settings", "set", "colour=blue"]),
        2,
        "unknown setting",
    );

    // An agent requests a sandbox over MCP; the CLI lists it and tears it down.
    let agent = daemon.client(&token).await;
    agent.ok("give_me_work", json!({})).await;
    let handed = agent.ok("request_sandbox", json!({})).await;
    // The project's size reached the instance: the evidence says it, its tmpfs is it.
    let services = handed["evidence"].as_array().expect("evidence");
    let pg = services
        .iter()
        .find(|s| s["service"] == "postgres")
        .expect("postgres");
    assert_eq!(pg["size_mb"], 1024, "{pg}");
    let dir = sandbox_dirs(home)
        .into_iter()
        .find(|d| d.to_string_lossy().contains("sandboxd-postgres-"))
        .expect("the postgres instance directory");
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    let mount = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(dir.to_str().expect("utf-8")))
        .unwrap_or_else(|| panic!("{} is a tmpfs of its own", dir.display()));
    assert!(
        mount.contains("size=1048576k") && mount.contains("nr_inodes=524288"),
        "{mount}"
    );
    let info = agent.ok("sandbox_info", json!({})).await;
    let described = info["evidence"]
        .as_array()
        .and_then(|e| e.iter().find(|s| s["service"] == "postgres").cloned())
        .expect("postgres described");
    assert_eq!(described["size_mb"], 1024, "{described}");
    let out = stdout(&cli(home, daemon, &["sandboxes", "ls"]));
    assert!(
        out.contains(&slug) && out.contains("postgres, redis") && out.contains("live"),
        "{out}"
    );
    // Within 100 columns by default; `--wide` adds the maker and each instance.
    for line in out.lines() {
        assert!(line.chars().count() <= 100, "{line:?} in\n{out}");
    }
    assert!(!out.contains("sandboxd-postgres-"), "{out}");
    let wide = stdout(&cli(home, daemon, &["sandboxes", "ls", "--wide"]));
    assert!(
        wide.contains("sandboxd-postgres-") && wide.contains("made by"),
        "{wide}"
    );
    assert_eq!(sandbox_dirs(home).len(), 2);
    let out = stdout(&cli(home, daemon, &["sandboxes", "rm", &slug]));
    assert!(out.contains("tore down 2 instance(s)"), "{out}");
    assert!(sandbox_dirs(home).is_empty(), "the instances are gone");
    assert_eq!(
        json_of(&cli(home, daemon, &["sandboxes", "ls", "--json"])),
        json!([])
    );

    // janitor run
    let out = stdout(&cli(home, daemon, &["janitor", "run"]));
    assert!(out.starts_with("examined "), "{out}");

    // agents rm
    let out = stdout(&cli(home, daemon, &["agents", "rm", &slug]));
    assert!(out.contains(&slug));
    refused(
        &cli(home, daemon, &["agents", "rm", &slug]),
        2,
        "does not exist",
    );

    // The token from the token file works; a wrong one and an unreachable daemon fail clearly.
    let file = home.dir.path().join("cli-admin.token");
    std::fs::write(&file, format!("{ADMIN_TOKEN}\n")).expect("token file");
    let output = home
        .sandboxd()
        .env_remove("SANDBOXD_ADMIN_TOKEN")
        .env("SANDBOXD_SERVER__ADMIN_TOKEN_FILE", &file)
        .env("SANDBOXD_URL", &daemon.url)
        .args(["agents", "ls"])
        .output()
        .expect("run");
    stdout(&output);
    let output = home
        .sandboxd()
        .env("SANDBOXD_ADMIN_TOKEN", "not-the-admin-token")
        .env("SANDBOXD_URL", &daemon.url)
        .args(["projects", "ls"])
        .output()
        .expect("run");
    refused(&output, 1, "refused the admin token");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let output = cli(
        home,
        daemon,
        &[
            "projects",
            "ls",
            "--url",
            &format!("http://127.0.0.1:{closed}"),
        ],
    );
    refused(&output, 1, "cannot reach sandboxd");
}

/// `sources add|ls|snapshot|rm` and `projects set --clone`: the DSN goes in on stdin and never
/// comes out; a source nothing answers for fails its snapshot saying why.
fn sources(home: &Home, daemon: &TestDaemon, project: &str) {
    let password = "pw-cli-5e1f0a";
    let dsn = format!("host=127.0.0.1 port=1 user=ro password={password} dbname=shop\n");
    let added = cli_with_stdin(
        home,
        daemon,
        &[
            "sources",
            "add",
            "shop",
            "--dsn",
            "-",
            "--privacy",
            "no-values",
        ],
        &dsn,
    );
    let out = stdout(&added);
    assert!(
        out.contains("shop") && out.contains("no-values") && out.contains("none yet"),
        "{out}"
    );
    refused(
        &cli(
            home,
            daemon,
            &[
                "sources",
                "add",
                "other",
                "--dsn",
                "host=x",
                "--privacy",
                "some",
            ],
        ),
        2,
        "keep-values, no-values",
    );
    let listed = json_of(&cli(home, daemon, &["sources", "ls", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["name"], "shop");
    let snapshot = cli(home, daemon, &["sources", "snapshot", "shop"]);
    assert_eq!(snapshot.status.code(), Some(1), "{snapshot:?}");
    let stderr = String::from_utf8_lossy(&snapshot.stderr);
    assert!(stderr.contains("connect"), "{stderr}");
    let table = stdout(&cli(home, daemon, &["sources", "ls"]));
    assert!(
        table.contains("connect"),
        "the last error is listed: {table}"
    );
    assert!(table.contains("holds"), "the summary's column: {table}");
    assert_eq!(listed[0]["snapshot"], serde_json::Value::Null, "none yet");
    // Each source's TLS is shown; one that checks nothing off loopback is warned of when it is
    // added, listed and checked.
    let remote = cli_with_stdin(
        home,
        daemon,
        &["sources", "add", "remote", "--dsn", "-"],
        &format!("host=db.example.internal user=ro password={password} sslmode=require\n"),
    );
    let warned = String::from_utf8_lossy(&remote.stderr);
    assert!(
        stdout(&remote).contains("require UNVERIFIED")
            && warned
                .contains("warning: source remote: sslmode=require on a host that is not loopback"),
        "{remote:?}"
    );
    let table = stdout(&cli(home, daemon, &["sources", "ls"]));
    assert!(
        table.contains("prefer (default)") && table.contains("require UNVERIFIED"),
        "{table}"
    );
    let doctor = cli(home, daemon, &["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        report.contains("clone source shop") && report.contains("the last snapshot failed"),
        "{report}"
    );
    // A check's block: its `[status] subject` heading and the indented lines below it.
    let line = |subject: &str| {
        let mut lines = report
            .lines()
            .skip_while(|l| !l.ends_with(&format!("] {subject}")));
        let head = lines
            .next()
            .unwrap_or_else(|| panic!("a {subject} block: {report}"));
        let body: Vec<&str> = lines.take_while(|l| l.starts_with("      ")).collect();
        // Wrapped lines joined again, one space between words.
        format!("{head} {}", body.join(" "))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The master switch says where its value comes from.
    let switch = line("master switch");
    assert!(
        switch.contains("the running daemon: on (from the ROBOCO_SANDBOX_DB_ENABLED=on override)"),
        "{report}"
    );
    let shop = line("clone source shop TLS");
    assert!(
        !shop.contains("MISSING") && shop.contains("prefer"),
        "{report}"
    );
    let weak = line("clone source remote TLS");
    assert!(
        weak.contains("MISSING") && weak.contains("verify-full"),
        "{report}"
    );
    assert!(stdout(&cli(home, daemon, &["sources", "rm", "remote"])).contains("removed remote"));
    assert!(!format!("{remote:?} {table} {report}").contains(password));

    let out = stdout(&cli(
        home,
        daemon,
        &[
            "projects",
            "set",
            project,
            "--services",
            "postgres",
            "--clone",
            "postgres=shop",
        ],
    ));
    assert!(out.contains("postgres of shop"), "{out}");
    // Privacy per project from the one source: an unknown mode, and values asked of a source
    // registered without them, are refused naming what is allowed, and nothing changes.
    let set_clone = |choice: &str| {
        cli(
            home,
            daemon,
            &[
                "projects",
                "set",
                project,
                "--services",
                "postgres,redis",
                "--clone",
                &format!("postgres={choice}"),
            ],
        )
    };
    refused(
        &set_clone("shop:hidden"),
        2,
        "allowed: keep-values, no-values",
    );
    refused(&set_clone("shop:keep-values"), 2, "registered no-values");
    let stored = json_of(&cli(home, daemon, &["projects", "ls", "--json"]));
    let ours = stored
        .as_array()
        .and_then(|all| all.iter().find(|p| p["slug"] == project))
        .cloned()
        .unwrap_or_else(|| panic!("{project} in {stored}"));
    assert_eq!(ours["sandbox_clones"]["postgres"], "shop", "{ours}");
    assert_eq!(ours["sandbox_services"], json!(["postgres"]), "{ours}");
    let strict = stdout(&set_clone("shop:no-values"));
    assert!(strict.contains("postgres of shop (no-values)"), "{strict}");
    let in_use = cli(home, daemon, &["sources", "rm", "shop"]);
    assert_ne!(in_use.status.code(), Some(0), "{in_use:?}");
    assert!(
        String::from_utf8_lossy(&in_use.stderr).contains(project),
        "{in_use:?}"
    );
    stdout(&cli(
        home,
        daemon,
        &[
            "projects",
            "set",
            project,
            "--services",
            "postgres",
            "--no-clones",
        ],
    ));
    assert!(stdout(&cli(home, daemon, &["sources", "rm", "shop"])).contains("removed shop"));
    for output in [added, snapshot, in_use] {
        let all = format!("{output:?}");
        assert!(!all.contains(password), "{all}");
    }
}
