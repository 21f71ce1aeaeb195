//! The engine registry: the one place that lists engines, and [`EngineRef`], the handle every
//! other layer holds. Adding an engine is one file here and one line in [`REGISTRY`].

use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::engine::Engine;
use crate::error::{InputError, allowed_list, quote};

pub mod mariadb;
pub mod mongo;
pub mod postgres;
pub mod redis;

/// Every engine sandboxd can provision, in the order they are shown to people.
pub static REGISTRY: &[&Engine] = &[
    &postgres::POSTGRES,
    &redis::REDIS,
    &mariadb::MARIADB,
    &mongo::MONGO,
];

pub fn all() -> impl Iterator<Item = EngineRef> {
    REGISTRY.iter().map(|engine| EngineRef(engine))
}

/// Engines whose feature allowlist is not empty: the only ones a backend is probed for.
pub fn with_features() -> impl Iterator<Item = EngineRef> {
    all().filter(|engine| !engine.features.is_empty())
}

/// The registered names, comma-separated, for "allowed: …" messages.
pub fn allowed_names() -> String {
    allowed_list(REGISTRY.iter().map(|e| e.name))
}

pub fn lookup(name: &str) -> Result<EngineRef, InputError> {
    all()
        .find(|engine| engine.name == name)
        .ok_or_else(|| InputError::UnknownEngine {
            given: quote(name),
            allowed: allowed_names(),
        })
}

/// Parses a comma-separated list of engine names (`postgres,redis`), refusing duplicates.
pub fn parse_list(csv: &str) -> Result<Vec<EngineRef>, InputError> {
    let mut engines = Vec::new();
    for name in csv.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let engine = lookup(name)?;
        if !engines.contains(&engine) {
            engines.push(engine);
        }
    }
    if engines.is_empty() {
        return Err(InputError::Malformed {
            what: "engine list",
            detail: format!("name at least one engine; allowed: {}", allowed_names()),
        });
    }
    Ok(engines)
}

/// A handle to a registered engine: cheap to copy, compared and ordered by name, serialized as
/// its name.
#[derive(Clone, Copy)]
pub struct EngineRef(&'static Engine);

impl EngineRef {
    /// Looks a name up in the registry.
    pub fn parse(name: &str) -> Result<Self, InputError> {
        lookup(name)
    }

    pub fn get(self) -> &'static Engine {
        self.0
    }
}

impl std::ops::Deref for EngineRef {
    type Target = Engine;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl fmt::Debug for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl PartialEq for EngineRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}
impl Eq for EngineRef {}

impl Hash for EngineRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl PartialOrd for EngineRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EngineRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name.cmp(other.0.name)
    }
}

impl std::str::FromStr for EngineRef {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for EngineRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> Deserialize<'de> for EngineRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use secrecy::ExposeSecret;

    use super::*;
    use crate::credentials::Credentials;
    use crate::engine::{Endpoint, Protocol};
    use crate::names::EnvPrefix;

    #[test]
    fn names_are_unique_and_lookup_round_trips() {
        let names: BTreeSet<_> = REGISTRY.iter().map(|e| e.name).collect();
        assert_eq!(names.len(), REGISTRY.len());
        for engine in all() {
            assert_eq!(lookup(engine.name).expect("registered"), engine);
        }
    }

    #[test]
    fn unknown_engine_names_the_allowed_set_and_escapes_input() {
        let err = lookup("oracle\n<b>").expect_err("not registered");
        let text = err.to_string();
        assert!(text.contains("postgres, redis, mariadb, mongo"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn documented_defaults() {
        let expect = [
            ("postgres", "postgres:16-alpine", 60, Protocol::Postgres),
            ("redis", "redis:8-alpine", 15, Protocol::Redis),
            ("mariadb", "mariadb:11", 60, Protocol::Mysql),
            ("mongo", "mongo:8", 60, Protocol::Mongo),
        ];
        for (name, image, deadline, protocol) in expect {
            let engine = lookup(name).expect("registered");
            assert_eq!(engine.default_image(), image);
            assert_eq!(engine.readiness_deadline.as_secs(), deadline);
            assert_eq!(engine.protocol, protocol);
        }
    }

    #[test]
    fn allowlists_match_the_spec() {
        let features = |name: &str| -> Vec<&str> {
            lookup(name)
                .expect("registered")
                .features
                .iter()
                .map(|f| f.name)
                .collect()
        };
        assert_eq!(
            features("postgres"),
            ["vector", "postgis", "pg_trgm", "citext", "uuid-ossp"]
        );
        assert_eq!(features("redis"), ["search", "json", "bloom"]);
        assert!(features("mongo").is_empty());
        assert!(features("mariadb").is_empty());
    }

    #[test]
    fn every_engine_renders_its_documented_env_names() {
        let creds = Credentials::generate("sandbox");
        let prefix = EnvPrefix::default();
        let expected: [(&str, &[&str]); 4] = [
            (
                "postgres",
                &[
                    "ROBOCO_TEST_DB_HOST",
                    "ROBOCO_TEST_DB_PORT",
                    "ROBOCO_TEST_DB_USER",
                    "ROBOCO_TEST_DB_PASSWORD",
                    "ROBOCO_TEST_DB_NAME",
                    "DATABASE_URL",
                ],
            ),
            (
                "redis",
                &[
                    "ROBOCO_TEST_REDIS_HOST",
                    "ROBOCO_TEST_REDIS_PORT",
                    "ROBOCO_TEST_REDIS_PASSWORD",
                    "REDIS_URL",
                ],
            ),
            (
                "mongo",
                &[
                    "ROBOCO_TEST_MONGO_HOST",
                    "ROBOCO_TEST_MONGO_PORT",
                    "ROBOCO_TEST_MONGO_USER",
                    "ROBOCO_TEST_MONGO_PASSWORD",
                    "ROBOCO_TEST_MONGO_DB",
                    "MONGODB_URI",
                ],
            ),
            (
                "mariadb",
                &[
                    "ROBOCO_TEST_MYSQL_HOST",
                    "ROBOCO_TEST_MYSQL_PORT",
                    "ROBOCO_TEST_MYSQL_USER",
                    "ROBOCO_TEST_MYSQL_PASSWORD",
                    "MYSQL_URL",
                ],
            ),
        ];
        for (name, vars) in expected {
            let engine = lookup(name).expect("registered");
            let endpoint = Endpoint {
                host: "127.0.0.1",
                port: 4242,
                user: &creds.user,
                password: &creds.password,
                database: "sandbox",
            };
            let (url, env) = engine.render(&endpoint, &prefix);
            for var in vars {
                assert!(env.contains_key(*var), "{name}: {var} missing in {env:?}");
            }
            assert!(url.contains(creds.password.expose_secret()));
            assert!(url.contains(":4242"));
        }
    }

    #[test]
    fn prefix_is_configurable() {
        let creds = Credentials::generate("sandbox");
        let endpoint = Endpoint {
            host: "h",
            port: 1,
            user: &creds.user,
            password: &creds.password,
            database: "d",
        };
        let prefix = EnvPrefix::parse("ACME").expect("valid");
        let (_, env) = lookup("postgres")
            .expect("registered")
            .render(&endpoint, &prefix);
        assert!(env.contains_key("ACME_DB_HOST"));
        assert!(!env.keys().any(|k| k.starts_with("ROBOCO_TEST")));
    }
}
