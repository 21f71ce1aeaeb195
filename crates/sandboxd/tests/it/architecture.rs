//! ARCHITECTURE.md's dependency table is the truth about how our crates depend on each other:
//! this compares it with what `cargo metadata` says, and checks the boundaries the types hold:
//! which desk each gateway is handed, that nobody re-exports the store, and which one crate
//! imports each heavy dependency, and that no source file grows past what a reader holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn documented(workspace: &Path) -> Graph {
    let text = std::fs::read_to_string(workspace.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut graph = Graph::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with("`sandboxd") {
            continue;
        }
        let krate = cells[1].trim_matches('`').to_owned();
        let deps = cells[2]
            .split(',')
            .map(|d| d.trim().trim_matches('`').to_owned())
            .filter(|d| d.starts_with("sandboxd"))
            .collect();
        graph.insert(krate, deps);
    }
    graph
}

/// What `cargo metadata` says of the workspace's own packages.
fn cargo_metadata(workspace: &Path) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace)
        .output()
        .expect("cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

fn actual(workspace: &Path) -> Graph {
    let meta = cargo_metadata(workspace);
    let mut graph = Graph::new();
    for package in meta["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("name").to_owned();
        let deps = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null()) // normal dependencies; dev and build ones are not layers
            .filter_map(|d| d["name"].as_str())
            .filter(|d| d.starts_with("sandboxd"))
            .map(str::to_owned)
            .collect();
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn the_documented_dependency_table_matches_cargo_metadata() {
    let documented = documented(workspace());
    let actual = actual(workspace());
    assert!(!documented.is_empty(), "the table was found");
    assert_eq!(
        documented, actual,
        "ARCHITECTURE.md's dependency table is out of date"
    );
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the workspace root")
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                found.push((path, text));
            }
        }
    }
    assert!(!found.is_empty(), "no sources under {}", dir.display());
    found
}

/// The lines of a crate's sources that name `word` as a whole identifier, except where
/// `allowed` says the match is something else (a variant, a longer name).
fn naming(krate: &str, word: &str, allowed: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    for (path, text) in sources(&workspace().join("crates").join(krate).join("src")) {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let mut rest = code;
            while let Some(at) = rest.find(word) {
                let before = rest[..at].chars().next_back();
                let after = rest[at + word.len()..].chars().next();
                let identifier =
                    |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                let excused = allowed.iter().any(|a| code.contains(a));
                if !identifier(before) && !identifier(after) && !excused {
                    hits.push(format!("{}:{}: {line}", path.display(), number + 1));
                    break;
                }
                rest = &rest[at + word.len()..];
            }
        }
    }
    hits
}

#[test]
fn the_agent_gateway_holds_only_the_agent_desk() {
    // The MCP crate is handed an AgentDesk: it can name neither the broker nor the operator's
    // desk, so no operator operation is reachable from an agent's request.
    for word in [
        "Broker",
        "OperatorDesk",
        "sandboxd_store",
        "sandboxd_backend",
    ] {
        let hits = naming("sandboxd-mcp", word, &[]);
        assert!(
            hits.is_empty(),
            "the MCP crate names {word}:\n{}",
            hits.join("\n")
        );
    }
    let hits = naming("sandboxd-mcp", "AgentDesk", &[]);
    assert!(!hits.is_empty(), "the check looks at the right crate");
}

#[test]
fn the_operator_surface_holds_only_the_operator_desk() {
    // `ApiError::Broker` is the variant that carries a BrokerError, not the broker.
    let hits = naming(
        "sandboxd-admin",
        "Broker",
        &["ApiError::Broker", "Broker(#[from]"],
    );
    assert!(
        hits.is_empty(),
        "the admin crate names the broker:\n{}",
        hits.join("\n")
    );
    for word in ["AgentDesk", "sandboxd_store"] {
        let hits = naming("sandboxd-admin", word, &[]);
        assert!(
            hits.is_empty(),
            "the admin crate names {word}:\n{}",
            hits.join("\n")
        );
    }
}

#[test]
fn no_crate_re_exports_the_store() {
    // The store's handle is the daemon's: a crate that re-exported it would hand it to its
    // own callers (the gateways reach the broker's desks only).
    let mut hits = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates")).expect("crates") {
        let krate = entry.expect("entry").path();
        let name = krate
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name == "sandboxd-store" || !krate.join("src").is_dir() {
            continue;
        }
        for (path, text) in sources(&krate.join("src")) {
            for (number, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("pub use sandboxd_store") {
                    hits.push(format!("{}:{}: {line}", path.display(), number + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "the store is re-exported:\n{}",
        hits.join("\n")
    );
}

#[test]
fn heavy_dependencies_stay_in_their_one_crate() {
    // One crate each speaks Docker and Kubernetes, SQL to the store, and WebAssembly: the
    // others reach them through that crate's types.
    let expected: BTreeMap<&str, BTreeSet<&str>> = [
        ("bollard", BTreeSet::from(["sandboxd-backend"])),
        ("kube", BTreeSet::from(["sandboxd-backend"])),
        ("sqlx", BTreeSet::from(["sandboxd-store"])),
        ("wasmtime", BTreeSet::from(["sandboxd-experiments"])),
    ]
    .into();
    let meta = cargo_metadata(workspace());
    let mut actual: BTreeMap<&str, BTreeSet<&str>> =
        expected.keys().map(|k| (*k, BTreeSet::new())).collect();
    for package in meta["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("name");
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            if dep["kind"].is_null()
                && let Some(users) = actual.get_mut(dep_name)
            {
                users.insert(name);
            }
        }
    }
    assert_eq!(actual, expected);
}

#[test]
fn no_source_file_is_longer_than_a_reader_holds() {
    // Small modules, one concept each: past ~500 lines of code (its in-file tests and a
    // sibling `tests.rs` aside) a file mixes concerns and should be split by concept.
    const MAX_LINES: usize = 500;
    let mut long = Vec::new();
    for krate in std::fs::read_dir(workspace().join("crates")).expect("crates/") {
        let src = krate.expect("entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        for (path, text) in sources(&src) {
            if path.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let code = text.lines().take_while(|l| *l != "#[cfg(test)]").count();
            if code > MAX_LINES {
                long.push(format!("{}: {code} lines", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these by concept: {long:#?}");
}
