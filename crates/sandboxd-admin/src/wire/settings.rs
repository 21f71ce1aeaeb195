//! `/v1/settings`: the master switch; `/v1/restart`: the restart that applies a stored change.

use sandboxd_broker::SettingsView;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The master switch (§2): the stored value, the value this running daemon uses, and the
/// environment override if one is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Settings {
    /// This daemon's identity (created with its store): the `maker` of every sandbox it makes.
    pub daemon_id: String,
    pub sandbox_db_enabled_stored: bool,
    pub sandbox_db_enabled_running: bool,
    /// `ROBOCO_SANDBOX_DB_ENABLED` as read at start; it wins over the stored value.
    pub env_override: Option<bool>,
    /// The override as it is set in the daemon's environment (`ROBOCO_SANDBOX_DB_ENABLED=on`):
    /// while set, the stored value does not rule, not even after a restart (which keeps the
    /// environment). Null when the stored value rules.
    #[serde(rename = "override", default)]
    pub override_env: Option<String>,
    /// When a stored change takes effect.
    pub takes_effect: String,
    /// True when the stored value differs from the running one and will rule after a restart.
    #[serde(default)]
    pub restart_pending: bool,
    /// When this run of the daemon started (Unix ms); a restart shows as a new value.
    #[serde(default)]
    pub running_since_ms: i64,
}

impl From<SettingsView> for Settings {
    fn from(view: SettingsView) -> Self {
        Self {
            override_env: view.override_text(),
            restart_pending: view.restart_pending(),
            daemon_id: view.daemon_id.to_string(),
            sandbox_db_enabled_stored: view.sandbox_db_enabled_stored,
            sandbox_db_enabled_running: view.sandbox_db_enabled_running,
            env_override: view.env_override,
            takes_effect: view.takes_effect.to_owned(),
            running_since_ms: view.running_since_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSettings {
    /// Persisted at once; takes effect at the next restart.
    pub sandbox_db_enabled: bool,
}

/// The answer to `POST /v1/restart`, sent before the daemon drains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RestartOut {
    /// `restarting`.
    pub status: String,
    /// The run being replaced (`running_since_ms` of `/v1/settings`): the restart is done when
    /// `/v1/settings` answers with a newer one.
    pub running_since_ms: i64,
    pub message: String,
}
