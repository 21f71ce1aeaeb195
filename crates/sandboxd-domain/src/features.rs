//! Features (Postgres extensions, Redis modules) validated against an engine's allowlist. A
//! `Feature` can only be built from an allowlisted name, so nothing downstream re-validates.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::engine::FeatureSpec;
use crate::engines::EngineRef;
use crate::error::{InputError, allowed_list, quote};

#[derive(Clone, Copy)]
pub struct Feature {
    engine: EngineRef,
    spec: &'static FeatureSpec,
}

impl Feature {
    pub fn parse(engine: EngineRef, name: &str) -> Result<Self, InputError> {
        engine
            .feature(name)
            .map(|spec| Self { engine, spec })
            .ok_or_else(|| InputError::FeatureNotAllowed {
                engine: engine.name,
                given: quote(name),
                allowed: allowed_list(engine.features.iter().map(|f| f.name)),
            })
    }

    pub fn name(&self) -> &'static str {
        self.spec.name
    }

    pub fn engine(&self) -> EngineRef {
        self.engine
    }

    pub fn spec(&self) -> &'static FeatureSpec {
        self.spec
    }
}

impl fmt::Debug for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.engine.name, self.spec.name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.spec.name)
    }
}

impl PartialEq for Feature {
    fn eq(&self, other: &Self) -> bool {
        self.engine == other.engine && self.spec.name == other.spec.name
    }
}
impl Eq for Feature {}
impl PartialOrd for Feature {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Feature {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.engine, self.spec.name).cmp(&(other.engine, other.spec.name))
    }
}

impl Serialize for Feature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.spec.name)
    }
}

/// Features per engine, e.g. `{"postgres": ["vector"]}`: a project's standing set or one call's
/// extra ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureRequest(BTreeMap<EngineRef, BTreeSet<Feature>>);

impl FeatureRequest {
    /// Validates a raw `engine → [feature]` map against the registry and the allowlists.
    pub fn parse_map(raw: &BTreeMap<String, Vec<String>>) -> Result<Self, InputError> {
        let mut request = Self::default();
        for (engine_name, names) in raw {
            let engine = EngineRef::parse(engine_name)?;
            let set = request.0.entry(engine).or_default();
            for name in names {
                set.insert(Feature::parse(engine, name)?);
            }
        }
        request.0.retain(|_, set| !set.is_empty());
        Ok(request)
    }

    /// Parses the CLI form: one `postgres=vector,pg_trgm` item per engine (repeat the flag for
    /// several engines).
    pub fn parse_cli<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Self, InputError> {
        let mut raw: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for item in items {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (engine, features) = item.split_once('=').ok_or_else(|| InputError::Malformed {
                what: "feature list",
                detail: format!(
                    "expected ENGINE=FEATURE[,FEATURE…] (e.g. postgres=vector,pg_trgm), got {}",
                    quote(item)
                ),
            })?;
            raw.entry(engine.trim().to_owned()).or_default().extend(
                features
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned),
            );
        }
        Self::parse_map(&raw)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn engines(&self) -> impl Iterator<Item = EngineRef> + '_ {
        self.0.keys().copied()
    }

    /// Every feature, engine by engine.
    pub fn features(&self) -> impl Iterator<Item = Feature> + '_ {
        self.0.values().flatten().copied()
    }

    pub fn for_engine(&self, engine: EngineRef) -> BTreeSet<Feature> {
        self.0.get(&engine).cloned().unwrap_or_default()
    }

    pub fn insert(&mut self, feature: Feature) {
        self.0.entry(feature.engine()).or_default().insert(feature);
    }

    pub fn merge(&mut self, other: &Self) {
        for feature in other.features() {
            self.insert(feature);
        }
    }

    pub fn to_map(&self) -> BTreeMap<String, Vec<String>> {
        self.0
            .iter()
            .map(|(engine, set)| {
                (
                    engine.name.to_owned(),
                    set.iter().map(|f| f.name().to_owned()).collect(),
                )
            })
            .collect()
    }
}

impl Serialize for FeatureRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(s)
    }
}

impl<'de> Deserialize<'de> for FeatureRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, Vec<String>>::deserialize(d)?;
        Self::parse_map(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_form_parses_and_validates() {
        let request = FeatureRequest::parse_cli(["postgres=vector,pg_trgm", "redis=search"])
            .expect("allowlisted");
        let map = request.to_map();
        assert_eq!(map["postgres"], ["pg_trgm", "vector"]);
        assert_eq!(map["redis"], ["search"]);
    }

    #[test]
    fn features_outside_the_allowlist_are_refused_naming_the_allowed_set() {
        for bad in [
            "postgres=plpython3u",
            "postgres=vector; DROP TABLE x",
            "redis=vector",
            "mongo=anything",
        ] {
            let err = FeatureRequest::parse_cli([bad]).expect_err(bad);
            let text = err.to_string();
            assert!(text.contains("allowed"), "{bad}: {text}");
        }
        let err = FeatureRequest::parse_cli(["postgres=plpython3u"]).expect_err("untrusted");
        assert!(
            err.to_string()
                .contains("vector, postgis, pg_trgm, citext, uuid-ossp")
        );
    }

    #[test]
    fn unknown_engine_in_a_feature_map_is_refused() {
        let err = FeatureRequest::parse_cli(["oracle=x"]).expect_err("unknown");
        assert!(matches!(err, InputError::UnknownEngine { .. }));
    }

    #[test]
    fn json_round_trip() {
        let request: FeatureRequest =
            serde_json::from_str(r#"{"postgres":["vector","citext"],"redis":[]}"#).expect("valid");
        assert_eq!(
            serde_json::to_string(&request).expect("serializes"),
            r#"{"postgres":["citext","vector"]}"#
        );
        assert!(serde_json::from_str::<FeatureRequest>(r#"{"postgres":["plperlu"]}"#).is_err());
    }
}
