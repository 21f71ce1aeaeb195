//! `/v1/settings`: the master switch.

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
    /// When a stored change takes effect.
    pub takes_effect: String,
}

impl From<SettingsView> for Settings {
    fn from(view: SettingsView) -> Self {
        Self {
            daemon_id: view.daemon_id.to_string(),
            sandbox_db_enabled_stored: view.sandbox_db_enabled_stored,
            sandbox_db_enabled_running: view.sandbox_db_enabled_running,
            env_override: view.env_override,
            takes_effect: view.takes_effect.to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSettings {
    /// Persisted at once; takes effect at the next restart.
    pub sandbox_db_enabled: bool,
}
