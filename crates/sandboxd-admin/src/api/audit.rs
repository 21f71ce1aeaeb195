//! `/v1/audit`: the audit log, newest first, a page at a time, filtered by agent, project and
//! outcome.

use axum::Json;
use axum::extract::State;
use sandboxd_domain::Actor;
use sandboxd_domain::audit::{AuditFilter, OutcomeFilter};
use sandboxd_domain::{AgentSlug, InputError, ProjectSlug};

use super::{ApiQuery, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::ErrorBody;
use crate::wire::{AuditPageOut, AuditQuery};

/// An outcome filter: `ok`, `failed`, or one error code (lowercase letters, digits, `_`).
pub(crate) fn parse_outcome(value: &str) -> Result<OutcomeFilter, InputError> {
    match value {
        "ok" => Ok(OutcomeFilter::Ok),
        "failed" => Ok(OutcomeFilter::Failed),
        code if !code.is_empty()
            && code.len() <= 64
            && code
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
        {
            Ok(OutcomeFilter::Is(code.to_owned()))
        }
        other => Err(InputError::Malformed {
            what: "outcome filter",
            detail: format!(
                "use ok, failed, or an error code such as sandbox_disabled; got {}",
                sandboxd_domain::error::quote(other)
            ),
        }),
    }
}

/// A page cursor is an audit entry id: letters, digits, `-` and `_` only.
fn parse_cursor(value: &str) -> Result<String, InputError> {
    if !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(value.to_owned())
    } else {
        Err(InputError::Malformed {
            what: "page cursor",
            detail: "pass the next_before of the previous page as before".into(),
        })
    }
}

/// Builds the store's filter from the query; empty fields mean "any".
pub(crate) fn filter_of(query: &AuditQuery) -> Result<AuditFilter, InputError> {
    fn given(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }
    Ok(AuditFilter {
        actor: given(&query.agent)
            .map(AgentSlug::parse)
            .transpose()?
            .map(Actor::Agent),
        project: given(&query.project).map(ProjectSlug::parse).transpose()?,
        outcome: given(&query.outcome).map(parse_outcome).transpose()?,
        before: given(&query.before).map(parse_cursor).transpose()?,
        limit: query.limit.unwrap_or(0),
    })
}

/// One page of the audit log.
#[utoipa::path(get, path = "/v1/audit", tag = TAG,
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPageOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_audit(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPageOut>, ApiError> {
    let filter = filter_of(&query)?;
    Ok(Json(state.desk.audit_log(&filter).await?.into()))
}
