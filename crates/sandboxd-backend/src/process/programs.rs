//! Finding an engine's programs on this host: the recipe's search directories first (a `*`
//! component matches any directory, the highest version wins), then `PATH`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandboxd_domain::engine::ProcessRecipe;

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
