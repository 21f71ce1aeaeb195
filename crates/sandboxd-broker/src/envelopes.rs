//! The error envelopes several verbs share: internal failures (logged here and shown to the agent
//! as nothing internal), out-of-order moves, and arguments that do not fit a verb's schema. A
//! verb's own refusal is a plain `ErrorEnvelope::new`.

use sandboxd_domain::envelope::{ErrorCode, ErrorEnvelope};
use sandboxd_domain::error::quote;
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

/// Arguments that do not fit the verb's schema. The parser's text may quote the caller's input,
/// so it is escaped and cut.
pub fn bad_arguments(verb: &str, err: &dyn std::fmt::Display) -> ErrorEnvelope {
    let detail = quote(&err.to_string());
    ErrorEnvelope::new(
        ErrorCode::InvalidArgument,
        format!("the arguments of {verb} do not fit its schema: {detail}"),
        format!("call {verb} again with arguments matching the schema in tools/list"),
    )
}
