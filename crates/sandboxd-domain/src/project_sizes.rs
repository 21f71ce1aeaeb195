//! A project's data space per engine (`sandboxd projects set … --size postgres=2G`), each within
//! [`DataSize`]'s bounds; the broker holds each below the operator's ceiling.

use std::collections::BTreeMap;
use std::fmt;

use crate::engines::EngineRef;
use crate::error::{InputError, allowed_list};
use crate::space::DataSize;

/// A project's data space sizes per engine, each for an engine that keeps its data on disk
/// ([`crate::Engine::data_on_disk`]); an engine not named gets its backend's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectSizes(BTreeMap<EngineRef, DataSize>);

impl ProjectSizes {
    /// `{"postgres": "2G"}` as an operator wrote it: known engines that keep their data on
    /// disk, sizes as [`DataSize::parse`] reads them.
    pub fn parse_map(map: &BTreeMap<String, String>) -> Result<Self, InputError> {
        let mut sizes = BTreeMap::new();
        for (engine, size) in map {
            let engine = EngineRef::parse(engine.trim())?;
            if !engine.data_on_disk {
                return Err(InputError::Malformed {
                    what: "sandbox_sizes",
                    detail: format!(
                        "{engine} keeps its data in memory, sized by the memory cap; sizes are \
                         for {}",
                        allowed_list(
                            crate::engines::all()
                                .filter(|e| e.data_on_disk)
                                .map(|e| e.name)
                        )
                    ),
                });
            }
            sizes.insert(engine, DataSize::parse(size)?);
        }
        Ok(Self(sizes))
    }

    /// Sizes in MiB per engine, as a store keeps them; an engine that does not keep its data on
    /// disk is an error naming it.
    pub fn from_mb(map: &BTreeMap<String, u64>) -> Result<Self, InputError> {
        let text: BTreeMap<String, String> = map
            .iter()
            .map(|(engine, mb)| (engine.clone(), DataSize::from_mb(*mb).to_string()))
            .collect();
        Self::parse_map(&text)
    }

    pub fn get(&self, engine: EngineRef) -> Option<DataSize> {
        self.0.get(&engine).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (EngineRef, DataSize)> + '_ {
        self.0.iter().map(|(engine, size)| (*engine, *size))
    }

    /// `{"postgres": "2G"}`.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(engine, size)| (engine.name.to_owned(), size.to_string()))
            .collect()
    }

    /// `{"postgres": 2048}`.
    pub fn to_mb(&self) -> BTreeMap<String, u64> {
        self.iter()
            .map(|(engine, size)| (engine.name.to_owned(), size.mb()))
            .collect()
    }
}

/// `postgres=2G, mariadb=1G`, or `default` when none is set.
impl fmt::Display for ProjectSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("default");
        }
        let parts: Vec<String> = self
            .iter()
            .map(|(engine, size)| format!("{engine}={size}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_sizes_name_only_engines_whose_data_is_on_disk() {
        let map = BTreeMap::from([
            ("postgres".to_owned(), "2G".to_owned()),
            ("mariadb".to_owned(), "1024M".to_owned()),
        ]);
        let sizes = ProjectSizes::parse_map(&map).expect("valid");
        let pg = EngineRef::parse("postgres").expect("registered");
        assert_eq!(sizes.get(pg), Some(DataSize::from_mb(2048)));
        assert_eq!(sizes.to_string(), "mariadb=1G, postgres=2G");
        assert_eq!(
            ProjectSizes::from_mb(&sizes.to_mb()).expect("round trip"),
            sizes
        );
        let redis = BTreeMap::from([("redis".to_owned(), "1G".to_owned())]);
        let err = ProjectSizes::parse_map(&redis).expect_err("in memory");
        assert!(err.to_string().contains("memory cap"), "{err}");
        let unknown = BTreeMap::from([("oracle".to_owned(), "1G".to_owned())]);
        assert!(ProjectSizes::parse_map(&unknown).is_err());
        assert_eq!(ProjectSizes::default().to_string(), "default");
    }
}
