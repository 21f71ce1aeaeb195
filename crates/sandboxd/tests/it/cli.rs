//! The CLI without a daemon: provision / ls / teardown / doctor, and bad input refused with a
//! clear error and nothing created.

use serde_json::Value;

use crate::support::{Home, clean_up, instance_dirs, teardown_everything, unique};

#[test]
fn provision_json_ls_and_teardown_twice() {
    let home = Home::new();
    let owner = unique("cli");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        provision_ls_teardown(&home, &owner)
    }));
    clean_up(&home, outcome);
}

fn provision_ls_teardown(home: &Home, owner: &str) {
    let output = home
        .sandboxd()
        .args([
            "provision",
            "--owner",
            owner,
            "--engines",
            "postgres,redis",
            "--features",
            "postgres=pg_trgm",
            "--json",
        ])
        .output()
        .expect("run");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&output.stdout).expect("stable JSON");
    assert_eq!(json["owner"], owner);
    assert_eq!(json["backend"], "process");
    let services = json["services"].as_array().expect("services");
    assert_eq!(services.len(), 2);
    for service in services {
        for key in [
            "service", "host", "port", "user", "password", "database", "url", "features", "env",
        ] {
            assert!(service.get(key).is_some(), "{key} in {service}");
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    for service in services {
        assert!(!stderr.contains(service["password"].as_str().expect("password")));
    }

    let listed: Value = serde_json::from_slice(
        &home
            .sandboxd()
            .args(["ls", "--json"])
            .output()
            .expect("ls")
            .stdout,
    )
    .expect("json");
    // Every backend's instances, other tests' included (they share the Docker engine): ours.
    let ours: Vec<&Value> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter(|i| i["owner"] == owner)
        .collect();
    assert_eq!(ours.len(), 2, "{listed}");
    assert!(ours.iter().all(|i| i["maker"] == "cli"), "{listed}");

    for _ in 0..2 {
        let output = home
            .sandboxd()
            .args(["teardown", "--owner", owner])
            .output()
            .expect("teardown");
        assert!(output.status.success());
    }
    assert!(instance_dirs(home).is_empty());
}

#[test]
fn bad_input_is_refused_with_the_allowed_set_and_creates_nothing() {
    let home = Home::new();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--owner", "ok", "--engines", "oracle"],
            "allowed: postgres, redis, mariadb, mongo",
        ),
        (
            &[
                "--owner",
                "ok",
                "--engines",
                "postgres",
                "--features",
                "postgres=plpython3u",
            ],
            "vector, postgis, pg_trgm, citext, uuid-ossp",
        ),
        (
            &[
                "--owner",
                "ok",
                "--engines",
                "postgres",
                "--features",
                "postgres=vector; DROP TABLE x",
            ],
            "allowed",
        ),
        (
            &["--owner", "x;rm -rf /", "--engines", "postgres"],
            "lowercase letters",
        ),
        (
            &[
                "--owner",
                "ok",
                "--engines",
                "postgres",
                "--features",
                "redis=search",
            ],
            "not in --engines",
        ),
    ];
    for (args, expected) in cases {
        let output = home
            .sandboxd()
            .arg("provision")
            .args(args)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains('\u{1b}'));
    }
    assert!(instance_dirs(&home).is_empty(), "nothing was created");
    teardown_everything(&home);
}

#[test]
fn doctor_reports_what_is_installed_and_what_to_install() {
    let home = Home::new();
    let output = home
        .sandboxd()
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    assert!(output.status.success());
    let checks: Value = serde_json::from_slice(&output.stdout).expect("json");
    let checks = checks.as_array().expect("checks");
    let postgres = checks
        .iter()
        .find(|c| {
            c["subject"]
                .as_str()
                .is_some_and(|s| s.starts_with("postgres (process)"))
        })
        .expect("a postgres check");
    assert_eq!(postgres["ok"], true, "{postgres}");
    // What the process backend really provides of postgres's allowlist, probed: this host's
    // PostgreSQL has contrib's extensions and no pgvector package.
    let features = checks
        .iter()
        .find(|c| c["subject"] == "postgres features (process)")
        .expect("a feature probe line");
    let detail = features["detail"].as_str().expect("detail");
    assert!(detail.contains("pg_trgm"), "{features}");
    assert!(detail.contains("missing: vector"), "{features}");
    assert_eq!(features["ok"], false, "{features}");
    assert!(
        features["fix"].as_str().expect("fix").contains("pgvector"),
        "{features}"
    );
    if let Some(mongo) = checks.iter().find(|c| {
        c["subject"]
            .as_str()
            .is_some_and(|s| s.starts_with("mongo (process)"))
    }) && mongo["ok"] == false
    {
        assert!(
            mongo["fix"].as_str().expect("fix").contains("mongodb"),
            "{mongo}"
        );
    }
}

/// What a terminal leaves on screen of one line: the text after its last carriage return (the
/// progress spinner redraws itself in place), without escape sequences (`ESC [ … letter`).
fn as_the_terminal_shows(line: &str) -> String {
    let last = line
        .trim_end_matches('\r')
        .rsplit('\r')
        .next()
        .unwrap_or_default();
    let mut shown = String::new();
    let mut chars = last.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            shown.push(c);
        }
    }
    shown
}

/// `doctor` fits the terminal (a pty that `script` opens, 72 columns), `COLUMNS` when it is set
/// (80), else 100 columns when piped: one block per check, `[status] subject` then the finding
/// and the fix, required checks apart from optional ones, and a one-line verdict at the end.
#[test]
fn doctor_fits_the_terminal_separates_optional_checks_and_ends_with_a_verdict() {
    const COLUMNS: usize = 72;
    let home = Home::new();
    let doctor = home.sandboxd();
    let mut on_terminal = std::process::Command::new("script");
    on_terminal
        .args(["--quiet", "--return", "--command"])
        .arg(format!(
            "stty cols {COLUMNS} rows 60 && exec {} doctor",
            doctor.get_program().to_string_lossy()
        ))
        .arg("/dev/null");
    for (key, value) in doctor.get_envs() {
        match value {
            Some(value) => on_terminal.env(key, value),
            None => on_terminal.env_remove(key),
        };
    }
    on_terminal.env_remove("COLUMNS");
    let output = on_terminal.output().expect("script (util-linux)");
    assert!(output.status.success(), "{output:?}");
    let shown = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<String> = shown.lines().map(as_the_terminal_shows).collect();
    assert!(lines.len() > 10, "a report on the terminal:\n{shown}");
    for line in &lines {
        assert!(line.chars().count() <= COLUMNS, "{line:?} in\n{shown}");
    }

    let json = home
        .sandboxd()
        .args(["doctor", "--json"])
        .output()
        .expect("doctor --json");
    let checks: Value = serde_json::from_slice(&json.stdout).expect("--json parses");
    let checks = checks.as_array().expect("checks");
    for (columns, width) in [(Some("80"), 80), (None, 100)] {
        let mut piped = home.sandboxd();
        piped.arg("doctor").env_remove("COLUMNS");
        if let Some(columns) = columns {
            piped.env("COLUMNS", columns);
        }
        let piped = piped.output().expect("doctor");
        // Ready: nothing this process-backend home relies on is missing.
        assert!(piped.status.success(), "{piped:?}");
        let piped = String::from_utf8_lossy(&piped.stdout);
        for line in piped.lines() {
            assert!(
                line.chars().count() <= width,
                "{width}: {line:?} in\n{piped}"
            );
        }
        for check in checks {
            let subject = check["subject"].as_str().expect("subject");
            let status = match (check["ok"] == true, check["required"] == true) {
                (true, _) => "ok",
                (false, true) => "MISSING",
                (false, false) => "not available (optional)",
            };
            assert!(
                piped
                    .lines()
                    .any(|l| l.trim_start() == format!("[{status}] {subject}")),
                "[{status}] {subject} in\n{piped}"
            );
        }
        // The verdict is the last paragraph: its first line is not indented.
        let verdict = piped
            .lines()
            .rev()
            .find(|l| !l.starts_with(' '))
            .expect("a verdict");
        assert!(verdict.starts_with("ready: process backend"), "{piped}");
    }
    // The process backend's missing pgvector is an optional feature, said as such; the Docker
    // backend this home does not use is optional whatever it lacks.
    let features = checks
        .iter()
        .find(|c| c["subject"] == "postgres features (process)")
        .expect("a feature line");
    assert_eq!(features["required"], false, "{features}");
    assert!(
        checks
            .iter()
            .filter(|c| c["backend"] == "docker")
            .all(|c| c["required"] == false),
        "{checks:?}"
    );
    let logs = checks
        .iter()
        .find(|c| c["subject"] == "logs")
        .expect("a logs line");
    assert!(
        logs["detail"]
            .as_str()
            .expect("detail")
            .contains("server.log"),
        "{logs}"
    );
}

/// With no image configured, Docker runs each engine from the first of its images present (the
/// official one, else the locally built one): `provision --backend docker` works out of the box,
/// and `doctor` and `ls` say which image runs.
#[test]
fn docker_without_image_config_runs_the_images_that_are_there() {
    let built = std::process::Command::new("docker")
        .args(["image", "inspect", "sandboxd-local/postgres:17"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !built {
        sandboxd_testkit::skip(
            "docker_without_image_config",
            "no Docker engine answers, or the local images are not built",
        );
        return;
    }
    let home = Home::new();
    let owner = unique("imgs");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let output = home
            .sandboxd()
            .args([
                "provision",
                "--owner",
                &owner,
                "--engines",
                "postgres,redis",
            ])
            .args(["--backend", "docker", "--json"])
            .output()
            .expect("provision");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let json: Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(json["backend"], "docker", "{json}");

        let doctor = home
            .sandboxd()
            .args(["doctor", "--json"])
            .output()
            .expect("doctor");
        let checks: Value = serde_json::from_slice(&doctor.stdout).expect("json");
        let postgres = checks
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["subject"] == "postgres (docker)")
            .expect("a postgres (docker) check");
        assert_eq!(postgres["ok"], true, "{postgres}");
        // The local image carries every allowlisted extension, and doctor found them there.
        let features = checks
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["subject"] == "postgres features (docker)")
            .expect("a feature probe line for docker");
        assert_eq!(features["ok"], true, "{features}");
        assert!(
            features["detail"]
                .as_str()
                .expect("detail")
                .starts_with("citext, pg_trgm, postgis, uuid-ossp, vector from image "),
            "{features}"
        );
        let detail = postgres["detail"].as_str().expect("detail");
        let image = detail
            .strip_prefix("runs image ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("names the image: {detail}"));
        assert!(
            ["postgres:16-alpine", "sandboxd-local/postgres:17"].contains(&image),
            "{detail}"
        );

        let listed: Value = serde_json::from_slice(
            &home
                .sandboxd()
                .args(["ls", "--json"])
                .output()
                .expect("ls")
                .stdout,
        )
        .expect("json");
        let ours = listed
            .as_array()
            .expect("list")
            .iter()
            .find(|i| i["owner"] == owner.as_str() && i["engine"] == "postgres")
            .unwrap_or_else(|| panic!("our postgres in {listed}"));
        assert_eq!(ours["image"], image, "{ours}");
    }));
    let _ = home
        .sandboxd()
        .args(["teardown", "--owner", &owner])
        .output();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
