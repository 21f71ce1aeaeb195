//! `[admin]`: the panel's logins. `admin_config` hands them to the operator surface with the
//! daemon's admin token.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use sandboxd_admin::AdminConfig;
use sandboxd_backend::duration_serde;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::Settings;

/// The operator surface: the panel's logins. The admin token itself is
/// `server.admin_token_file` or `SANDBOXD_ADMIN_TOKEN`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// How long a panel login lasts. Zero would make every login expire at once.
    #[serde(rename = "session_ttl_secs", with = "duration_serde::nonzero_secs")]
    pub session_ttl: Duration,
    /// Mark the panel's cookies `Secure`: only behind a TLS proxy (a browser drops them over
    /// plain HTTP).
    pub secure_cookies: bool,
    /// Panel logins held at once; the one closest to expiring is dropped past this.
    pub max_sessions: NonZeroUsize,
    /// Wrong panel login tokens one client (IP, IPv6 by /64) may send per window; past that,
    /// 429 (the right token always logs in). Zero would refuse every panel login.
    pub login_attempts: NonZeroU32,
    /// Zero would count attempts over no time at all.
    #[serde(rename = "login_window_secs", with = "duration_serde::nonzero_secs")]
    pub login_window: Duration,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            session_ttl: AdminConfig::DEFAULT_SESSION_TTL,
            secure_cookies: false,
            max_sessions: NonZeroUsize::new(AdminConfig::DEFAULT_MAX_SESSIONS)
                .expect("the panel's default holds logins"),
            login_attempts: NonZeroU32::new(AdminConfig::DEFAULT_LOGIN_ATTEMPTS)
                .expect("the panel's default admits attempts"),
            login_window: AdminConfig::DEFAULT_LOGIN_WINDOW,
        }
    }
}

impl Settings {
    /// The operator surface's configuration, with the daemon's admin token.
    pub fn admin_config(&self, admin_token: SecretString) -> AdminConfig {
        AdminConfig {
            admin_token,
            session_ttl: self.admin.session_ttl,
            secure_cookies: self.admin.secure_cookies,
            max_sessions: self.admin.max_sessions.get(),
            login_attempts: self.admin.login_attempts.get(),
            login_window: self.admin.login_window,
        }
    }
}
