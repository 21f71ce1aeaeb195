//! `/v1/projects`: a project and its sandbox opt-in.

use std::collections::BTreeMap;

use sandboxd_domain::Project;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectOut {
    pub slug: String,
    /// Engines the project opted into; `null` when not opted in.
    pub sandbox_services: Option<Vec<String>>,
    /// Standing features per engine, e.g. `{"<engine>": ["<feature>"]}`.
    pub sandbox_extensions: Option<BTreeMap<String, Vec<String>>>,
    /// Engines handed out as clones: `{"<engine>": "<source>"}`, or
    /// `"<source>:no-values"` for a project whose clones get no sample values from a source
    /// that keeps them; empty when none.
    #[serde(default)]
    pub sandbox_clones: BTreeMap<String, String>,
    /// The data space of engines with one of their own, `{"postgres": "2G"}`; the others get
    /// their backend's default. Empty when none.
    #[serde(default)]
    pub sandbox_sizes: BTreeMap<String, String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Project> for ProjectOut {
    fn from(p: Project) -> Self {
        Self {
            slug: p.slug.to_string(),
            sandbox_services: p
                .sandbox_services
                .map(|s| s.iter().map(|e| e.name.to_owned()).collect()),
            sandbox_extensions: p.sandbox_extensions.map(|e| e.to_map()),
            sandbox_clones: p
                .sandbox_clones
                .iter()
                .map(|(e, s)| (e.name.to_owned(), s.to_string()))
                .collect(),
            sandbox_sizes: p.sandbox_sizes.to_map(),
            created_at_ms: p.created_at_ms,
            updated_at_ms: p.updated_at_ms,
        }
    }
}

/// A project's sandbox opt-in. Both fields replace what is stored; `null` or an empty list
/// means "not opted in". Engines and features are validated against the registry and each
/// engine's allowlist; features may only name opted-in engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutProject {
    #[serde(default)]
    pub sandbox_services: Option<Vec<String>>,
    #[serde(default)]
    pub sandbox_extensions: Option<BTreeMap<String, Vec<String>>>,
    /// Engines handed out as clones of a registered source, `{"<engine>": "<source>"}` (under
    /// the source's privacy mode) or `{"<engine>": "<source>:no-values"}` (this project's
    /// clones get no sample values; `keep-values` only from a source that keeps them);
    /// absent: unchanged, `{}`: none.
    #[serde(default)]
    pub sandbox_clones: Option<BTreeMap<String, String>>,
    /// The data space of opted-in engines that keep their data on disk, `{"postgres": "2G",
    /// "mariadb": "1G"}` (whole M or G, at least 256M, at most the operator's ceiling
    /// `broker.max_sandbox_size_mb`); absent: unchanged, `{}`: every engine at its backend's
    /// default.
    #[serde(default)]
    pub sandbox_sizes: Option<BTreeMap<String, String>>,
}
