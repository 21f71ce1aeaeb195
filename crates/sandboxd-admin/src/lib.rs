//! The operator surface: everything an operator (a person, or the orchestrator running agents)
//! reaches over HTTP. [`router`] serves it as one axum router the daemon merges with the agent
//! gateway's.
//!
//! Parts:
//! - `api/`: the admin API under `/v1` (JSON, `Authorization: Bearer <admin token>`), one file
//!   per resource; each handler carries its OpenAPI description, and the router and the
//!   document at `/v1/openapi.json` are built from the same `routes!` lists, so they cannot
//!   drift.
//! - [`wire`]: the API's wire types, public so a client (the `sandboxd` CLI) decodes the very
//!   types the daemon encodes; the broker's types are not the wire format.
//! - `auth.rs`: the admin token, compared in constant time.
//! - `error.rs`: caller mistakes (4xx, a clear message naming what is allowed) apart from
//!   internal failures (500, a generic message; the cause is logged).
//! - `panel/`: the web panel, server-rendered with maud, no JavaScript: an admin login with
//!   in-memory sessions (HttpOnly, SameSite=Strict cookie), a budget of wrong tokens per client
//!   (429 past it, no audit row per refused attempt; the right token always logs in), a CSRF
//!   token in every form (checked by the extractor every POST handler reads its form through),
//!   and the Settings, Projects, Sandboxes and Audit pages.
//! - `metrics.rs`: `/metrics`, the broker's Prometheus text.
//!
//! What this crate will not do: touch the store or a backend (it asks the broker's
//! [`OperatorDesk`], which audits every change), decide anything the broker
//! decides, or show a credential anywhere but the one answer that hands out an agent token.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use sandboxd_broker::OperatorDesk;
use secrecy::SecretString;

mod api;
mod auth;
mod error;
mod metrics;
mod panel;
pub mod wire;

pub use api::openapi;

/// How the operator surface is set up. Only the admin token has no default; the daemon sets the
/// rest from its `[admin]` settings.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The admin token: the API's bearer token and the panel's login secret.
    pub admin_token: SecretString,
    /// How long a panel login lasts.
    pub session_ttl: Duration,
    /// Mark the panel's cookies `Secure` (only when the daemon is reached over HTTPS, e.g.
    /// behind a TLS proxy; over plain loopback HTTP a browser would drop them).
    pub secure_cookies: bool,
    /// Panel sessions held at once; the oldest is dropped past this.
    pub max_sessions: usize,
    /// Wrong tokens one client (IP address, IPv6 by /64) may send to the panel login per
    /// `login_window`; past that its wrong tokens answer 429 until the oldest leaves the window.
    /// The right token is compared first and always logs in, and gives the budget back.
    pub login_attempts: u32,
    pub login_window: Duration,
}

impl AdminConfig {
    pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
    pub const DEFAULT_MAX_SESSIONS: usize = 256;
    /// Enough for an operator's typos, far too few to guess a 256-bit token.
    pub const DEFAULT_LOGIN_ATTEMPTS: u32 = 5;
    pub const DEFAULT_LOGIN_WINDOW: Duration = Duration::from_secs(60);

    pub fn new(admin_token: SecretString) -> Self {
        Self {
            admin_token,
            session_ttl: Self::DEFAULT_SESSION_TTL,
            secure_cookies: false,
            max_sessions: Self::DEFAULT_MAX_SESSIONS,
            login_attempts: Self::DEFAULT_LOGIN_ATTEMPTS,
            login_window: Self::DEFAULT_LOGIN_WINDOW,
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub desk: OperatorDesk,
    pub token: Arc<auth::AdminToken>,
    pub sessions: Arc<panel::session::Sessions>,
    pub login_throttle: Arc<panel::throttle::LoginThrottle>,
    pub config: Arc<AdminConfig>,
}

/// The admin API (`/v1/...`, `/v1/openapi.json`), `/metrics` and the panel (`/`).
pub fn router(desk: OperatorDesk, config: AdminConfig) -> Router {
    let state = AppState {
        desk,
        token: Arc::new(auth::AdminToken::new(&config.admin_token)),
        sessions: Arc::new(panel::session::Sessions::new(
            config.session_ttl,
            config.max_sessions,
        )),
        login_throttle: Arc::new(panel::throttle::LoginThrottle::new(
            config.login_attempts,
            config.login_window,
        )),
        config: Arc::new(config),
    };
    Router::new()
        .merge(api::router(state.clone()))
        .merge(panel::router(state.clone()))
        .merge(metrics::router())
        .with_state(state)
}
