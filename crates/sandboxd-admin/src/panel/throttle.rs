//! The panel login's rate limit: each client may send a limited number of wrong tokens per
//! window; past that its wrong tokens are refused (429 with `Retry-After`) without an audit row
//! each, so a burst of wrong tokens cannot fill the audit log. Only wrong tokens are charged:
//! the login compares the token (in constant time) first, and the right one always logs in and
//! gives its client's budget back, so a process that shares the operator's address (every local
//! process, on loopback) cannot lock the operator out by spending the budget. Guessing is bounded
//! by the token, not by this budget: a generated one has 256 bits, and the admin API takes its
//! bearer token on every request without a budget anyway.
//!
//! A client is its IP address, IPv6 addresses grouped by /64 (one host usually holds a whole
//! /64). Forwarded-for headers are not trusted: behind a reverse proxy every client shares the
//! proxy's address, and so shares one budget.
//!
//! Memory is bounded too: at most `MAX_CLIENTS` clients are tracked; past that the one whose last
//! attempt is oldest is forgotten.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

/// How many clients are tracked at once.
const MAX_CLIENTS: usize = 4096;

/// Who is logging in, as far as the rate limit is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    /// IPv4 as is (also when mapped into IPv6); IPv6 by its /64 prefix.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !u128::from(u64::MAX);
                    Self(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
            v4 => Self(v4),
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V6(prefix) => write!(f, "{prefix}/64"),
            v4 => write!(f, "{v4}"),
        }
    }
}

/// The connection's peer address, as the server recorded it (`ConnectInfo`). A server that did
/// not record one puts every request in one shared budget (unspecified address): stricter, never
/// looser.
impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let ip = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        Ok(Self::of(ip))
    }
}

/// A refused attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// When the client may try again.
    pub retry_after: Duration,
    /// True for the first refusal since the client reached the limit: the one worth an audit
    /// row and a log line.
    pub first: bool,
}

#[derive(Debug, Default)]
struct Attempts {
    /// The attempts inside the window, oldest first; never more than the limit.
    at: VecDeque<Instant>,
    /// Whether this client's current refusal run was already reported.
    reported: bool,
}

#[derive(Debug)]
pub struct LoginThrottle {
    attempts_per_window: usize,
    window: Duration,
    /// A std mutex: every critical section is a map lookup and a few pushes, never held across
    /// an await.
    clients: Mutex<HashMap<Client, Attempts>>,
}

impl LoginThrottle {
    pub fn new(attempts_per_window: u32, window: Duration) -> Self {
        Self {
            attempts_per_window: usize::try_from(attempts_per_window.max(1)).unwrap_or(usize::MAX),
            window,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Charges a wrong token of `client` to its budget (one lock, so concurrent attempts cannot
    /// overrun it), or refuses it when the budget is spent. A right token is never charged: it
    /// gives the budget back ([`LoginThrottle::succeeded`]).
    pub fn charge(&self, client: Client) -> Result<(), Limited> {
        self.charge_at(client, Instant::now())
    }

    fn charge_at(&self, client: Client, now: Instant) -> Result<(), Limited> {
        // A panic while holding the lock cannot leave the map half-updated (each step is one
        // push, pop or insert), so a poisoned lock is still usable.
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if !clients.contains_key(&client) && clients.len() >= MAX_CLIENTS {
            self.make_room(&mut clients, now);
        }
        let attempts = clients.entry(client).or_default();
        while let Some(&oldest) = attempts.at.front() {
            if now.duration_since(oldest) < self.window {
                break;
            }
            attempts.at.pop_front();
            attempts.reported = false;
        }
        match attempts.at.front() {
            Some(&oldest) if attempts.at.len() >= self.attempts_per_window => {
                let first = !attempts.reported;
                attempts.reported = true;
                // Whole seconds, rounded up: `Retry-After` has no fractions.
                let wait = self.window.saturating_sub(now.duration_since(oldest));
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                Err(Limited {
                    retry_after: Duration::from_secs(secs.max(1)),
                    first,
                })
            }
            _ => {
                attempts.at.push_back(now);
                Ok(())
            }
        }
    }

    /// The admin token was right: the client's earlier attempts no longer count.
    pub fn succeeded(&self, client: Client) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&client);
    }

    /// Forgets clients with no attempt left in the window; if none, the one whose last attempt
    /// is oldest.
    fn make_room(&self, clients: &mut HashMap<Client, Attempts>, now: Instant) {
        clients.retain(|_, a| {
            a.at.back()
                .is_some_and(|&t| now.duration_since(t) < self.window)
        });
        if clients.len() >= MAX_CLIENTS {
            let stalest = clients
                .iter()
                .min_by_key(|(_, a)| a.at.back().copied())
                .map(|(client, _)| *client);
            if let Some(client) = stalest {
                clients.remove(&client);
            }
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(ip: &str) -> Client {
        Client::of(ip.parse().expect("an IP"))
    }

    #[test]
    fn a_client_gets_its_budget_per_window_and_one_report() {
        let throttle = LoginThrottle::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let a = client("10.0.0.1");
        for i in 0..3 {
            assert_eq!(throttle.charge_at(a, t0 + Duration::from_secs(i)), Ok(()));
        }
        let refused = throttle.charge_at(a, t0 + Duration::from_secs(10));
        assert_eq!(
            refused,
            Err(Limited {
                retry_after: Duration::from_secs(50),
                first: true
            })
        );
        let again = throttle.charge_at(a, t0 + Duration::from_millis(10_500));
        assert_eq!(
            again,
            Err(Limited {
                retry_after: Duration::from_secs(50),
                first: false
            }),
            "reported once; 49.5 s rounds up"
        );
        // Another client has its own budget.
        assert_eq!(throttle.charge_at(client("10.0.0.2"), t0), Ok(()));
        // A minute after the first attempt, one slot is free again, and a new run is reported.
        assert_eq!(throttle.charge_at(a, t0 + Duration::from_secs(60)), Ok(()));
        let next = throttle.charge_at(a, t0 + Duration::from_millis(60_500));
        assert_eq!(next.map_err(|l| l.first), Err(true));
        // A success gives the budget back.
        throttle.succeeded(a);
        assert_eq!(throttle.charge_at(a, t0 + Duration::from_secs(62)), Ok(()));
    }

    #[test]
    fn ipv6_hosts_share_their_64_and_mapped_ipv4_is_ipv4() {
        assert_eq!(client("2001:db8:1:2::1"), client("2001:db8:1:2:ffff::9"));
        assert_ne!(client("2001:db8:1:2::1"), client("2001:db8:1:3::1"));
        assert_eq!(client("::ffff:10.0.0.1"), client("10.0.0.1"));
        assert_eq!(client("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn the_number_of_tracked_clients_is_bounded() {
        let throttle = LoginThrottle::new(1, Duration::from_secs(60));
        let t0 = Instant::now();
        for n in 0..(MAX_CLIENTS as u32 + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            let _ = throttle.charge_at(Client::of(ip), t0 + Duration::from_millis(n.into()));
        }
        assert_eq!(throttle.tracked(), MAX_CLIENTS);
        // The stalest went first: the newest client is still refused.
        let newest = IpAddr::V4(std::net::Ipv4Addr::from(
            0x0a00_0000 + MAX_CLIENTS as u32 + 9,
        ));
        let later = t0 + Duration::from_secs(1);
        assert!(throttle.charge_at(Client::of(newest), later).is_err());
    }
}
