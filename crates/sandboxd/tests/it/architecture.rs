//! ARCHITECTURE.md's dependency table is the truth about how our crates depend on each other:
//! this compares it with what `cargo metadata` says.

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

fn actual(workspace: &Path) -> Graph {
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
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
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
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the workspace root");
    let documented = documented(workspace);
    let actual = actual(workspace);
    assert!(!documented.is_empty(), "the table was found");
    assert_eq!(
        documented, actual,
        "ARCHITECTURE.md's dependency table is out of date"
    );
}
