//! `/v1/sources`: production Postgres servers clones are made from (SPEC §7). A DSN goes in and
//! never comes back out: answers carry the source's name, privacy mode, refresh interval, last
//! snapshot with its summary (what it holds, what a clone of it lacks and why), last error and
//! how it is reached over TLS (mode, roots, a warning when that protects nothing on the
//! network) only.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sandboxd_domain::Source;
use sandboxd_domain::SourceName;
use sandboxd_domain::clone::Privacy;
use sandboxd_domain::error::InputError;
use secrecy::SecretString;

use super::{ApiJson, ApiPath, TAG};
use crate::AppState;
use crate::error::ApiError;
use crate::wire::{ErrorBody, PutSource, SourceOut};

/// `source` with its TLS. A DSN that can no longer be read (registered before a rule that now
/// refuses it) shows no TLS rather than failing the answer; the log says why.
async fn out(state: &AppState, source: Source) -> Result<SourceOut, ApiError> {
    let tls = match state.desk.source_tls(&source.name).await {
        Ok(tls) => tls,
        Err(sandboxd_broker::BrokerError::Source(why)) => {
            tracing::warn!(source = %source.name, "reading the TLS of a source: {why}");
            None
        }
        Err(err) => return Err(err.into()),
    };
    Ok(SourceOut::new(source, tls))
}

fn not_found(name: &SourceName) -> sandboxd_broker::BrokerError {
    sandboxd_broker::BrokerError::NotFound {
        what: "source",
        id: name.to_string(),
    }
}

/// Every source, by name, each with its latest snapshot's summary.
#[utoipa::path(get, path = "/v1/sources", tag = TAG,
    responses(
        (status = 200, body = Vec<SourceOut>),
        (status = 401, body = ErrorBody),
    ))]
pub async fn list_sources(State(state): State<AppState>) -> Result<Json<Vec<SourceOut>>, ApiError> {
    let mut answer = Vec::new();
    for source in state.desk.sources().await? {
        answer.push(out(&state, source).await?);
    }
    Ok(Json(answer))
}

/// One source.
#[utoipa::path(get, path = "/v1/sources/{name}", tag = TAG,
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, body = SourceOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ))]
pub async fn get_source(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<SourceOut>, ApiError> {
    let name = SourceName::parse(&name)?;
    let source = state
        .desk
        .source(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(out(&state, source).await?))
}

/// Registers a source, or replaces its DSN and settings (its snapshot goes with the old DSN).
/// The DSN's syntax and TLS keys are checked (`sslmode` as libpq's, `verify-full` by default
/// for a host that is not loopback; `sslrootcert=/path` a PEM file sandboxd reads); nothing
/// connects until a snapshot is taken. The answer's `tls.warning` says when the mode protects
/// nothing on the network.
#[utoipa::path(put, path = "/v1/sources/{name}", tag = TAG,
    params(("name" = String, Path, description = "The source's name")),
    request_body = PutSource,
    responses(
        (status = 200, body = SourceOut),
        (status = 400, description = "Invalid name, malformed DSN (an unknown sslmode, a CA \
            file that cannot be read) or unknown privacy mode; nothing changed", body = ErrorBody),
        (status = 401, body = ErrorBody),
    ))]
pub async fn put_source(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PutSource>,
) -> Result<Json<SourceOut>, ApiError> {
    let name = SourceName::parse(&name)?;
    let privacy = match body.privacy.as_deref() {
        None => Privacy::default(),
        Some(text) => Privacy::parse(text).ok_or_else(|| InputError::Malformed {
            what: "privacy",
            detail: format!("{text:?} is not a privacy mode; allowed: keep-values, no-values"),
        })?,
    };
    let dsn = SecretString::from(body.dsn);
    let source = state
        .desk
        .put_source(&name, &dsn, privacy, body.refresh_secs.unwrap_or(0))
        .await?;
    Ok(Json(out(&state, source).await?))
}

/// Removes a source and its snapshot; refused while a project clones it.
#[utoipa::path(delete, path = "/v1/sources/{name}", tag = TAG,
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "A project clones it", body = ErrorBody),
    ))]
pub async fn remove_source(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let name = SourceName::parse(&name)?;
    if state.desk.remove_source(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&name).into())
    }
}

/// Takes a snapshot of the source now (read-only, through `pg_dump` of its major version)
/// and answers the source with it: `snapshot.summary` counts what it holds and says what a
/// clone of it lacks and why.
#[utoipa::path(post, path = "/v1/sources/{name}/snapshot", tag = TAG,
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, body = SourceOut),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 502, description = "The source could not be read (unreachable, refused \
            the login, pg_dump failed); the message says why, never the DSN", body = ErrorBody),
    ))]
pub async fn snapshot_source(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<SourceOut>, ApiError> {
    let name = SourceName::parse(&name)?;
    let source = state
        .desk
        .snapshot_source(&name, sandboxd_domain::Actor::Operator)
        .await?;
    Ok(Json(out(&state, source).await?))
}
