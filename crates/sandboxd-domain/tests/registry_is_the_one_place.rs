//! The engine registry is the one place that lists engines: no source file outside
//! `sandboxd-domain/src/engines/` names an engine in a string literal (tests, the tests' kit and
//! the benchmark harness excepted), so adding an engine is one file plus one registry line, and
//! nothing else in the workspace special-cases an engine by name. A line that merely shares a word with an engine
//! (the store's own PostgreSQL URL scheme) says so with a `not-an-engine` comment.

use std::path::{Path, PathBuf};

use sandboxd_domain::engines;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file: comments and everything from its first `#[cfg(test)]` left out.
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => &text,
    };
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//") && !line.contains("not-an-engine"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_production_code_outside_the_registry_names_an_engine() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/ holds this crate");
    let engines_dir = crates.join("sandboxd-domain/src/engines");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(crates).expect("crates/").flatten() {
        let name = krate.file_name().to_string_lossy().into_owned();
        if name.ends_with("-bench") || name.ends_with("-testkit") {
            continue; // the harness and the tests' kit name the engines their images run
        }
        rust_files(&krate.path().join("src"), &mut files);
    }
    assert!(files.len() > 10, "found the sources: {}", files.len());
    let mut offenders = Vec::new();
    // A module's tests in a sibling `tests.rs` (declared `#[cfg(test)] mod tests;`) are tests.
    let is_tests = |f: &PathBuf| f.file_name().is_some_and(|n| n == "tests.rs");
    for file in files
        .iter()
        .filter(|f| !f.starts_with(&engines_dir) && !is_tests(f))
    {
        let code = production_code(file);
        for engine in engines::all() {
            let literal = format!("\"{}\"", engine.name);
            if code.contains(&literal) {
                offenders.push(format!("{} names {literal}", file.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "engines are listed only in the registry:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_registry_lists_every_engine_module() {
    let engines_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engines");
    let modules: Vec<String> = std::fs::read_dir(&engines_dir)
        .expect("engines/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "mod.rs")
        .collect();
    assert_eq!(modules.len(), engines::REGISTRY.len(), "{modules:?}");
}
