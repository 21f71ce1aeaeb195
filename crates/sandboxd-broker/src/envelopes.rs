//! The error envelopes several verbs share: internal failures (logged here and shown to the agent
//! as nothing internal) and out-of-order moves. A verb's own refusal is a plain
//! `ErrorEnvelope::new`; arguments that do not fit are refused by `sandboxd_domain::call`.

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::lifecycle::OutOfOrder;

/// An internal failure: the cause goes to the log, the agent gets a generic retryable error.
pub fn internal(operation: &str, cause: &dyn std::fmt::Display) -> ErrorEnvelope {
    tracing::error!(operation, error = %cause, "internal failure");
    ErrorEnvelope::new(
        ErrorCode::Internal,
        format!("sandboxd failed while {operation}; the operator's log has the cause"),
        "retry the same call in a little while; if it keeps failing, tell the operator",
    )
}

pub fn out_of_order(err: OutOfOrder) -> ErrorEnvelope {
    ErrorEnvelope::new(ErrorCode::OutOfOrder, err.message, err.remediate)
}
