//! Loading the tree: defaults → file → `SANDBOXD_*` environment, then the refusals the types do
//! not make themselves (a floor that is not 1, the engines named, the pools and experiments'
//! ranges). A value below 1 where a `NonZero*` (or `duration_serde::nonzero_*`) field needs one
//! is refused naming its key.

use std::path::Path;

use figment::Figment;
use figment::error::{Actual, Kind};
use figment::providers::{Env, Format, Serialized, Toml};
use sandboxd_domain::EngineRef;

use super::{ConfigError, Settings};

impl Settings {
    /// Defaults → `file` (if given and present) → `SANDBOXD_*` env.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} does not exist",
                    file.display()
                )));
            }
            figment = figment.merge(Toml::file(file));
        }
        // Only variables naming a settings section are configuration; others sharing the
        // prefix (SANDBOXD_CONFIG, SANDBOXD_LOG, test switches) are not.
        let sections: Vec<String> = serde_json::to_value(Settings::default())
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        figment = figment.merge(
            Env::prefixed("SANDBOXD_")
                .filter(move |key| {
                    let section = key.as_str().split("__").next().unwrap_or_default();
                    sections.iter().any(|s| s.eq_ignore_ascii_case(section))
                })
                .split("__"),
        );
        let settings: Settings = figment.extract().map_err(refusal)?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.broker.max_sandbox_size_mb < sandboxd_domain::DataSize::MIN_MB {
            return Err(ConfigError::Invalid(format!(
                "broker.max_sandbox_size_mb must be at least {} (the least size a project may \
                 ask for)",
                sandboxd_domain::DataSize::MIN_MB
            )));
        }
        for name in self.engines.keys() {
            EngineRef::parse(name)
                .map_err(|e| ConfigError::Invalid(format!("[engines.{name}]: {e}")))?;
        }
        self.pool_configs()?;
        self.experiments_config()?;
        Ok(())
    }
}

/// What figment could not extract. A value below 1 for a field that must be at least 1 (serde's
/// "a nonzero …") names the key as the file spells it, `broker.mcp_sessions_per_agent`, also when
/// it came from the environment (figment would name `BROKER.MCP_SESSIONS_PER_AGENT`); anything
/// else is figment's own message, with the key and where the value came from.
fn refusal(error: figment::Error) -> ConfigError {
    if let Kind::InvalidValue(Actual::Unsigned(0) | Actual::Signed(..=0), expected) = &error.kind
        && expected.starts_with("a nonzero ")
    {
        return ConfigError::Invalid(format!("{} must be at least 1", error.path.join(".")));
    }
    ConfigError::Invalid(error.to_string())
}
