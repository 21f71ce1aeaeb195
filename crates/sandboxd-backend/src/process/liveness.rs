//! Is a process alive, and is it still the one we started? Read from `/proc`.

use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::time::{Instant, sleep};

/// State letter and start time (clock ticks after boot) of a pid, or None when it is gone.
pub fn stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces or ')'.
    let after_name = &text[text.rfind(')')? + 2..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 overall is the 20th after the state (field 3).
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, start_ticks))
}

/// True when `pid` runs and started at `start_ticks` (not a zombie, not a recycled pid).
pub fn is_alive(pid: i32, start_ticks: u64) -> bool {
    matches!(stat(pid), Some((state, ticks)) if ticks == start_ticks && state != 'Z' && state != 'X')
}

/// Asks the process to stop with `graceful`, waits up to `grace`, then kills its whole process
/// group. Returns once the process is gone (or a zombie awaiting its parent).
pub async fn stop(pid: i32, start_ticks: u64, graceful: Signal, grace: Duration) {
    if !is_alive(pid, start_ticks) {
        return;
    }
    let target = Pid::from_raw(pid);
    let _ = kill(target, graceful);
    let started = Instant::now();
    while is_alive(pid, start_ticks) && started.elapsed() < grace {
        sleep(Duration::from_millis(10)).await;
    }
    // The instance leads its own process group (it was spawned with process_group(0)), so this
    // reaches every helper process it forked too.
    let _ = killpg(target, Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_alive(pid, start_ticks) && Instant::now() < deadline {
        sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let pid = i32::try_from(std::process::id()).expect("pid fits");
        let (state, ticks) = stat(pid).expect("self is listed");
        assert_ne!(state, 'Z');
        assert!(is_alive(pid, ticks));
        assert!(!is_alive(pid, ticks + 1));
    }
}
