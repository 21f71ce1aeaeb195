//! What every error answer carries.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What every error answer carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `unauthorized`, `invalid_name`, `unknown_engine`, `feature_not_allowed`,
    /// `invalid_input`, `malformed_json`, `not_found`, `conflict`, `internal`.
    pub error: String,
    /// What went wrong and how to fix it; never a credential, never internal detail.
    pub message: String,
}
