//! Validated names. Each is built only through `parse`, so a value of these types is known to be
//! safe to put in a container name, a directory name, a label or an SQL identifier.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{InputError, quote};

const SLUG_RULE: &str =
    "use 1 to 48 characters: lowercase letters, digits and '-', starting with a letter or digit";

fn is_slug(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 48
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

macro_rules! slug_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(value: &str) -> Result<Self, InputError> {
                if is_slug(value) {
                    Ok(Self(value.to_owned()))
                } else {
                    Err(InputError::InvalidName { kind: $kind, value: quote(value), rule: SLUG_RULE })
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InputError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

slug_type!(
    /// The slug of an agent. A sandbox is owned by exactly one agent, so this is also the owner
    /// key of every instance a backend creates (`sandboxd-<engine>-<agent>`).
    AgentSlug,
    "agent slug"
);
const POOL_SLOT_PREFIX: &str = "pool-";

impl AgentSlug {
    /// The placeholder owner of one warm-pool member until it is handed to an agent:
    /// `pool-` and 8 hex digits from the CSPRNG. No agent can be registered under a slug of
    /// this form ([`Self::is_pool_slot`]), so a member is never mistaken for a sandbox.
    pub fn pool_slot() -> Self {
        let mut bytes = [0u8; 4];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Self(format!("{POOL_SLOT_PREFIX}{}", hex::encode(bytes)))
    }

    /// True for the form [`Self::pool_slot`] makes: reserved, never an agent's.
    pub fn is_pool_slot(&self) -> bool {
        self.0.strip_prefix(POOL_SLOT_PREFIX).is_some_and(|rest| {
            rest.len() == 8
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    }
}

slug_type!(
    /// The slug of a project.
    ProjectSlug,
    "project slug"
);

slug_type!(
    /// The name an operator gives a source (a production Postgres clones are made from).
    SourceName,
    "source name"
);

/// What made an instance: one daemon (the id its store was created with), the CLI's own
/// `sandboxd provision`, or, for an instance from before makers were recorded, `unknown`. A
/// daemon's janitor and reconciler act only on instances of their own id; every other instance
/// is foreign to it, listed and never touched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct DaemonId(String);

impl DaemonId {
    const CLI: &'static str = "cli";
    const UNKNOWN: &'static str = "unknown";

    /// 1 to 16 lowercase letters and digits: it ends instance names (`…-<id>`), so it holds no
    /// '-' and an instance name splits back unambiguously.
    pub fn parse(value: &str) -> Result<Self, InputError> {
        let valid = !value.is_empty()
            && value.len() <= 16
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if valid {
            Ok(Self(value.to_owned()))
        } else {
            Err(InputError::InvalidName {
                kind: "daemon id",
                value: quote(value),
                rule: "use 1 to 16 characters: lowercase letters and digits",
            })
        }
    }

    /// A fresh daemon id: 8 hex digits from the CSPRNG (never `cli` or `unknown`).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 4];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Self(hex::encode(bytes))
    }

    /// The maker of `sandboxd provision`'s instances.
    pub fn cli() -> Self {
        Self(Self::CLI.to_owned())
    }

    /// The maker of an instance whose maker was never recorded.
    pub fn unknown() -> Self {
        Self(Self::UNKNOWN.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DaemonId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DaemonId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The prefix of the rendered environment names (`ROBOCO_TEST` gives `ROBOCO_TEST_DB_HOST`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct EnvPrefix(String);

impl EnvPrefix {
    pub const DEFAULT: &'static str = "ROBOCO_TEST";

    pub fn parse(value: &str) -> Result<Self, InputError> {
        let valid = !value.is_empty()
            && value.len() <= 32
            && value.as_bytes()[0].is_ascii_uppercase()
            && value
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if valid {
            Ok(Self(value.to_owned()))
        } else {
            Err(InputError::InvalidName {
                kind: "environment prefix",
                value: quote(value),
                rule: "use 1 to 32 characters: uppercase letters, digits and '_', starting with a letter",
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `PREFIX_suffix`, the name of one rendered variable.
    pub fn var(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.0)
    }
}

impl Default for EnvPrefix {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl<'de> Deserialize<'de> for EnvPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_ids_are_short_and_dashless() {
        let id = DaemonId::generate();
        assert_eq!(id.as_str().len(), 8);
        assert_eq!(DaemonId::parse(id.as_str()).expect("valid"), id);
        assert_ne!(DaemonId::generate(), id);
        for bad in ["", "a-b", "ABC", "x".repeat(17).as_str(), "a b"] {
            assert!(DaemonId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(DaemonId::parse(DaemonId::cli().as_str()).is_ok());
    }

    #[test]
    fn pool_slots_are_recognised_and_nothing_else_is() {
        let slot = AgentSlug::pool_slot();
        assert!(slot.is_pool_slot(), "{slot}");
        assert_eq!(AgentSlug::parse(slot.as_str()).expect("a valid slug"), slot);
        assert_ne!(AgentSlug::pool_slot(), slot);
        for agent in [
            "pool",
            "pool-1",
            "pool-0123456g",
            "pool-0123456789",
            "dev-pool-01234567",
        ] {
            let agent = AgentSlug::parse(agent).expect("valid");
            assert!(!agent.is_pool_slot(), "{agent}");
        }
    }

    #[test]
    fn slugs_accept_the_documented_alphabet() {
        for good in ["a", "dev-1", "0abc", &"x".repeat(48)] {
            assert!(AgentSlug::parse(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn slugs_refuse_injection_and_odd_input() {
        for bad in [
            "",
            "-lead",
            "UPPER",
            "a b",
            "a;rm -rf /",
            "a/../b",
            "x'--",
            "ünï",
            &"x".repeat(49),
        ] {
            let err = AgentSlug::parse(bad).expect_err(bad);
            assert!(err.to_string().contains("lowercase letters"), "{err}");
        }
    }

    #[test]
    fn env_prefix_default_renders_documented_names() {
        assert_eq!(EnvPrefix::default().var("DB_HOST"), "ROBOCO_TEST_DB_HOST");
        assert!(EnvPrefix::parse("lower").is_err());
        assert!(EnvPrefix::parse("A B").is_err());
    }
}
