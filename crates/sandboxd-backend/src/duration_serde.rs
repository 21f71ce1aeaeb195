//! A `Duration` in a settings file as a whole number: `#[serde(rename = "grace_secs", with =
//! "duration_serde::secs")] grace: Duration` reads and writes `grace_secs = 180`. The backends'
//! configs and the binary's settings tree share these, so every `*_secs` and `*_ms` key means the
//! same thing and no settings struct has to mirror a config field by field.
//!
//! `nonzero_secs` and `nonzero_millis` refuse 0 the way a `NonZero*` field does (serde's "a
//! nonzero u64"), for a duration that must be at least 1.

use std::num::NonZeroU64;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Whole milliseconds of `duration`, saturated at `u64::MAX`.
fn whole_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds (a fraction of a second is dropped when written).
pub mod secs {
    use super::*;

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(duration.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

/// Whole seconds, or unset.
pub mod opt_secs {
    use super::*;

    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => serializer.serialize_some(&duration.as_secs()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|secs| secs.map(Duration::from_secs))
    }
}

/// Whole milliseconds.
pub mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(whole_millis(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// Whole seconds, at least 1.
pub mod nonzero_secs {
    use super::*;

    pub use super::secs::serialize;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        NonZeroU64::deserialize(deserializer).map(|secs| Duration::from_secs(secs.get()))
    }
}

/// Whole milliseconds, at least 1.
pub mod nonzero_millis {
    use super::*;

    pub use super::millis::serialize;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        NonZeroU64::deserialize(deserializer).map(|millis| Duration::from_millis(millis.get()))
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Keys {
        #[serde(rename = "grace_secs", with = "secs")]
        grace: Duration,
        #[serde(rename = "idle_secs", with = "opt_secs")]
        idle: Option<Duration>,
        #[serde(rename = "backoff_ms", with = "nonzero_millis")]
        backoff: Duration,
    }

    #[test]
    fn keys_are_whole_numbers_both_ways_and_a_nonzero_one_refuses_0() {
        let keys = Keys {
            grace: Duration::from_secs(180),
            idle: None,
            backoff: Duration::from_millis(1500),
        };
        let json = serde_json::to_value(&keys).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"grace_secs": 180, "idle_secs": null, "backoff_ms": 1500})
        );
        assert_eq!(Keys::deserialize(&json).expect("deserializes"), keys);
        let some = serde_json::json!({"grace_secs": 0, "idle_secs": 7, "backoff_ms": 1});
        let read = Keys::deserialize(&some).expect("deserializes");
        assert_eq!(read.idle, Some(Duration::from_secs(7)));
        let zero = serde_json::json!({"grace_secs": 1, "idle_secs": null, "backoff_ms": 0});
        let err = Keys::deserialize(&zero).expect_err("0 refused");
        assert!(err.to_string().contains("a nonzero u64"), "{err}");
    }
}
