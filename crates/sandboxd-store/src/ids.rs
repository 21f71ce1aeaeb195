//! Time-ordered ids for rows that are listed newest first (tasks, audit entries).

use std::sync::Mutex;

use rand::RngCore;
use sandboxd_domain::clock::now_ms;

/// The last (milliseconds, sequence) handed out by this process. A mutex, not an atomic, because
/// the pair must advance together.
static LAST: Mutex<(i64, u32)> = Mutex::new((0, 0));

/// A 24-character id that sorts by creation time: 12 hex digits of milliseconds, 4 of a
/// per-process sequence (strictly increasing within this process even if the clock steps back),
/// and 8 random ones so ids from several daemon replicas never collide.
pub(crate) fn time_ordered_id() -> String {
    let (ms, seq) = {
        let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = now_ms().max(last.0);
        let next = if now == last.0 {
            if last.1 >= 0xffff {
                (now + 1, 0)
            } else {
                (now, last.1 + 1)
            }
        } else {
            (now, 0)
        };
        *last = next;
        next
    };
    let random = rand::rng().next_u32();
    format!("{:012x}{seq:04x}{random:08x}", ms.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_strictly_increasing() {
        let ids: Vec<String> = (0..70_000).map(|_| time_ordered_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|id| id.len() == 24));
    }
}
