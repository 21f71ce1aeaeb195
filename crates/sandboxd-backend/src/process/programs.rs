//! Finding an engine's programs on this host: the recipe's search directories first (a `*`
//! component matches any directory, the highest version wins), then `PATH`; and which version
//! of the server they are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sandboxd_domain::engine::{Activation, ProcessContext, ProcessRecipe};
use sandboxd_domain::{Credentials, EngineRef};

/// Resolved program paths, or the first program that was not found.
pub fn resolve(recipe: &ProcessRecipe) -> Result<BTreeMap<&'static str, PathBuf>, &'static str> {
    let dirs = search_dirs(recipe.search_dirs);
    let mut found = BTreeMap::new();
    for program in recipe.programs {
        let path = dirs
            .iter()
            .map(|dir| dir.join(program))
            .chain(path_dirs().map(|dir| dir.join(program)))
            .find(|candidate| is_executable(candidate))
            .ok_or(*program)?;
        found.insert(*program, path);
    }
    Ok(found)
}

/// The module files `engine`'s features are loaded from (Redis: `MODULE LOAD`), outside any
/// package (`scripts/install-deps.sh` unpacks them): what the host provides changes with them.
pub fn feature_libraries(engine: EngineRef) -> impl Iterator<Item = &'static str> {
    engine
        .features
        .iter()
        .filter_map(|spec| match spec.activation {
            Activation::RedisModule { libraries, .. } => Some(libraries),
            Activation::PgExtension { .. } => None,
        })
        .flatten()
        .copied()
}

/// The version of the server `recipe` runs here, as the program prints it (`<server>
/// --version`, nothing started); None when it is not installed or names no version.
pub async fn server_version(recipe: &ProcessRecipe) -> Option<String> {
    let programs = resolve(recipe).ok()?;
    let server = launched_program(recipe, &programs);
    let output = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::process::Command::new(&server)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    crate::versions::version_in(&String::from_utf8_lossy(&output.stdout))
}

/// The program the recipe's `launch` runs (the server, not an install tool), read from a launch
/// plan of placeholders: the recipe names its server there only.
fn launched_program(recipe: &ProcessRecipe, programs: &BTreeMap<&'static str, PathBuf>) -> PathBuf {
    let placeholder = Credentials::generate("version");
    let nowhere = Path::new("/nonexistent");
    let ctx = ProcessContext {
        programs,
        data_dir: nowhere,
        socket_dir: nowhere,
        instance_dir: nowhere,
        port: 0,
        run_as: "nobody",
        daemon_user: "nobody",
        admin: &placeholder,
        agent: &placeholder,
        memory_limit_mb: 0,
        data_limit_mb: 0,
        wal_limit_mb: 0,
    };
    (recipe.launch)(&ctx).0.program
}

fn path_dirs() -> impl Iterator<Item = PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Expands the patterns, newest version first (by natural order of the `*` components).
fn search_dirs(patterns: &[&str]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for pattern in patterns {
        let mut expanded = vec![PathBuf::from("/")];
        for component in Path::new(pattern).components().skip(1) {
            let component = component.as_os_str().to_string_lossy();
            expanded = if component == "*" {
                let mut children: Vec<PathBuf> = expanded
                    .iter()
                    .filter_map(|dir| std::fs::read_dir(dir).ok())
                    .flatten()
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|p| p.is_dir())
                    .collect();
                children.sort_by_key(|dir| std::cmp::Reverse(version_key(dir)));
                children
            } else {
                expanded.into_iter().map(|d| d.join(&*component)).collect()
            };
        }
        dirs.extend(expanded.into_iter().filter(|d| d.is_dir()));
    }
    dirs
}

/// Orders `17` after `9`: numeric runs compare as numbers.
fn version_key(path: &Path) -> Vec<u64> {
    path.to_string_lossy()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|run| run.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_versions_order_naturally() {
        let mut dirs = [PathBuf::from("/x/9/bin"), PathBuf::from("/x/17/bin")];
        dirs.sort_by_key(|dir| std::cmp::Reverse(version_key(dir)));
        assert_eq!(dirs[0], PathBuf::from("/x/17/bin"));
    }

    #[test]
    fn glob_expands_existing_directories_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for version in ["9", "15", "17"] {
            std::fs::create_dir_all(tmp.path().join(version).join("bin")).expect("mkdir");
        }
        let pattern = format!("{}/*/bin", tmp.path().display());
        let dirs = search_dirs(&[pattern.as_str()]);
        assert_eq!(dirs.len(), 3);
        assert!(dirs[0].ends_with("17/bin"), "{dirs:?}");
    }
}
