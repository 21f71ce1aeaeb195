//! Unix-millisecond timestamps, as instances record them (labels, metadata files), and ages
//! measured from them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `time` in Unix milliseconds (0 before the epoch).
pub(crate) fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// How long ago `created_at_ms` was (zero for a time in the future).
pub(crate) fn age(created_at_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(now_ms().saturating_sub(created_at_ms)).unwrap_or(0))
}
