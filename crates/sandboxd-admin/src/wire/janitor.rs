//! `/v1/janitor`: what one janitor pass examined and reaped.

use sandboxd_broker::JanitorReport;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReapedOut {
    pub instance: String,
    /// `owner_gone`, `max_lifetime`, `idle` or `dead`.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JanitorOut {
    /// Instances the backends listed.
    pub examined: usize,
    pub reaped: Vec<ReapedOut>,
    /// Skipped: younger than the grace window.
    pub kept_young: usize,
    /// Made by another daemon or the CLI: listed, never touched.
    pub foreign: usize,
    /// Stored sandbox records whose instances no backend lists any more.
    pub forgotten: usize,
}

impl From<JanitorReport> for JanitorOut {
    fn from(r: JanitorReport) -> Self {
        Self {
            examined: r.examined,
            reaped: r
                .reaped
                .into_iter()
                .map(|(instance, reason)| ReapedOut {
                    instance,
                    reason: reason.as_str().to_owned(),
                })
                .collect(),
            kept_young: r.kept_young,
            foreign: r.foreign,
            forgotten: r.forgotten,
        }
    }
}
