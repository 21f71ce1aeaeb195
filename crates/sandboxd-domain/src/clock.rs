//! The one clock: wall-clock Unix milliseconds as every layer records them (store rows, Docker
//! labels, metadata files), how old such a timestamp is, and the one way an age is written for
//! people (tables, the panel).
//!
//! Reading the system clock is the only thing here that is not a pure function; it is kept in
//! the domain so every layer agrees on one definition.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `time` in Unix milliseconds (0 before the epoch).
pub fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// How long ago `at_ms` was (zero for a time in the future).
pub fn age_of(at_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(now_ms().saturating_sub(at_ms)).unwrap_or(0))
}

/// An age for people, at most two units: `4s`, `2m`, `1h 1m`, `3d 4h`.
pub fn format_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// [`format_age`] of the time since `at_ms`.
pub fn format_age_since(at_ms: i64) -> String {
    format_age(age_of(at_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_well() {
        let secs = Duration::from_secs;
        assert_eq!(format_age(secs(4)), "4s");
        assert_eq!(format_age(secs(125)), "2m");
        assert_eq!(format_age(secs(3_660)), "1h 1m");
        assert_eq!(format_age(secs(7_500)), "2h 5m");
        assert_eq!(format_age(secs(86_400 * 3 + 3_600 * 4)), "3d 4h");
    }

    #[test]
    fn future_times_have_no_age() {
        assert_eq!(age_of(now_ms() + 60_000), Duration::ZERO);
        assert_eq!(format_age_since(now_ms() + 60_000), "0s");
        assert!(age_of(now_ms() - 5_000) >= Duration::from_secs(5));
    }

    #[test]
    fn times_before_the_epoch_are_zero() {
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_millis(1_500)), 1_500);
    }
}
