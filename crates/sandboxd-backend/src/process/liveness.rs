//! Is a process alive, and is it still the instance we started? Read from `/proc`, and
//! signalled only once that is proven: the pid, its start time and its uid must all match what
//! the daemon recorded (in metadata no instance can write), and a signal goes through a pidfd
//! taken before the check, so a pid recycled in between can never receive it.

use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
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

/// The real uid a pid runs as (`/proc/<pid>/status`).
pub fn uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the daemon recorded of an instance's server when it started it.
#[derive(Debug, Clone, Copy)]
pub struct Recorded {
    pub pid: i32,
    pub start_ticks: u64,
    /// The uid it runs as; None in metadata written before it was recorded.
    pub uid: Option<u32>,
}

impl Recorded {
    /// True when the pid runs, started at the recorded time (not a zombie, not a recycled
    /// pid) and as the recorded uid.
    pub fn is_alive(&self) -> bool {
        let started_then = matches!(
            stat(self.pid),
            Some((state, ticks)) if ticks == self.start_ticks && state != 'Z' && state != 'X'
        );
        started_then && self.uid.is_none_or(|uid| uid_of(self.pid) == Some(uid))
    }

    /// A pidfd of the recorded process, when it is still that process.
    fn pidfd(&self) -> Option<OwnedFd> {
        let fd = pidfd_open(Pid::from_raw(self.pid)?, PidfdFlags::empty()).ok()?;
        // Checked after the pidfd is held: from here the fd names this process or a dead one.
        self.is_alive().then_some(fd)
    }

    /// Signals the recorded process, only when it is still that process.
    fn signal(&self, signal: Signal) -> bool {
        self.pidfd()
            .is_some_and(|fd| pidfd_send_signal(&fd, signal).is_ok())
    }

    /// Kills the process group the recorded process leads, only while it is still that
    /// process and leads its own group (it was spawned with `process_group(0)`).
    fn kill_group(&self) {
        let Some(_held) = self.pidfd() else {
            return;
        };
        let Some(pid) = Pid::from_raw(self.pid) else {
            return;
        };
        // While the pidfd is held the leader's pid cannot be reused, so the group is its.
        if rustix::process::getpgid(Some(pid)).is_ok_and(|group| group == pid) {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
    }
}

/// True when `pid` runs and started at `start_ticks` (not a zombie, not a recycled pid).
pub fn is_alive(pid: i32, start_ticks: u64) -> bool {
    Recorded {
        pid,
        start_ticks,
        uid: None,
    }
    .is_alive()
}

/// Asks the recorded process to stop with `graceful`, waits up to `grace`, then kills its whole
/// process group. Returns once the process is gone (or a zombie awaiting its parent). Anything
/// that is not the recorded process is never signalled: what is left of the instance then is
/// found by its cgroup and killed there.
pub async fn stop(server: Recorded, graceful: Signal, grace: Duration) {
    if !server.signal(graceful) {
        return;
    }
    let started = Instant::now();
    while server.is_alive() && started.elapsed() < grace {
        sleep(Duration::from_millis(10)).await;
    }
    // Every helper process the server forked is in its group.
    server.kill_group();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_alive() && Instant::now() < deadline {
        sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_or_uid_is_not() {
        let pid = i32::try_from(std::process::id()).expect("pid fits");
        let (state, ticks) = stat(pid).expect("self is listed");
        assert_ne!(state, 'Z');
        assert!(is_alive(pid, ticks));
        assert!(!is_alive(pid, ticks + 1));
        let uid = uid_of(pid).expect("own uid");
        assert_eq!(uid, nix::unistd::getuid().as_raw());
        let me = |uid| Recorded {
            pid,
            start_ticks: ticks,
            uid: Some(uid),
        };
        assert!(me(uid).is_alive());
        assert!(!me(uid + 1).is_alive());
    }
}
