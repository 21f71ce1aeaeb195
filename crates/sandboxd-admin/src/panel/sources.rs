//! Sources: the production Postgres servers clones are made from (SPEC §7) — each with its
//! privacy mode, refresh interval, the server version and age of its latest snapshot and what it
//! holds and left out (a line, opened for the counts and reasons), why the
//! last attempt failed, how it is reached over TLS (a warning when that protects nothing on the
//! network), and which projects clone it; buttons to take a snapshot now and to
//! remove it; and a form that registers a source or replaces its DSN. The DSN goes in through
//! a password field and is never shown back, not even to the operator who typed it.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use sandboxd_broker::SourceTls;
use sandboxd_domain::SourceName;
use sandboxd_domain::clock::format_age_since;
use sandboxd_domain::clone::Privacy;
use sandboxd_domain::{Actor, Source};
use secrecy::SecretString;

use super::layout::{self, Section, badge, csrf_field};
use super::session::PanelSession;
use super::{VerifiedForm, done, failure};
use crate::AppState;
use crate::api::ApiPath;

/// The flash text of a broker refusal: the caller's mistake as the broker said it, an
/// internal failure as nothing internal (the log has its cause).
fn refusal(err: sandboxd_broker::BrokerError, what: &str) -> String {
    let err = crate::error::ApiError::from(err);
    let (status, _, message) = err.parts();
    if status.is_server_error() {
        tracing::error!(error = %err, "panel: {what} failed");
        format!("{what} failed; the daemon's log has the cause.")
    } else {
        message
    }
}

fn snapshot_cell(source: &Source) -> Markup {
    html! {
        @match &source.snapshot {
            Some(snapshot) => {
                strong class="version" { (snapshot.server_version) }
                div class="muted small age" {
                    "snapshot " (format_age_since(snapshot.taken_at_ms)) " old · took "
                    (snapshot.took_ms) " ms"
                }
                @if let Some(contents) = &snapshot.contents {
                    details class="small snapshot-summary" id={ "summary-" (source.name) } {
                        summary { (contents.line()) }
                        @for line in contents.lines() {
                            div { (line) }
                        }
                    }
                }
            }
            None => span class="muted" { "no snapshot yet" },
        }
        @if let Some(error) = &source.last_error {
            div class="small last-error" {
                (badge("bad", "last attempt failed")) " " (error)
            }
        }
    }
}

fn tls_cell(tls: Option<&SourceTls>) -> Markup {
    html! {
        @match tls {
            Some(tls) => {
                strong class="tls-mode" { (tls.mode.as_str()) }
                @if tls.warning().is_some() {
                    " " (badge("warn", "unverified"))
                } @else if tls.mode.verifies() {
                    " " (badge("ok", "verified"))
                }
                div class="muted small" { (tls.summary()) }
                @if let Some(warning) = tls.warning() {
                    div class="small tls-warning" { (warning) }
                }
            }
            None => span class="muted" { "its DSN cannot be read" },
        }
    }
}

fn source_row(
    session: &PanelSession,
    source: &Source,
    tls: Option<&SourceTls>,
    cloned_by: &[String],
) -> Markup {
    html! {
        tr id=(format!("source-{}", source.name)) {
            td { strong { (source.name) } }
            td { (snapshot_cell(source)) }
            td class="tls" { (tls_cell(tls)) }
            td {
                (source.privacy.as_str())
                div class="muted small" {
                    @if source.refresh_secs == 0 {
                        "on demand"
                    } @else {
                        "every " (source.refresh_secs) " s"
                    }
                }
            }
            td class="cloned-by" {
                @if cloned_by.is_empty() {
                    span class="muted" { "—" }
                } @else {
                    @for project in cloned_by {
                        a href={ "/projects/" (project) } { (project) } " "
                    }
                }
            }
            td class="actions" {
                form method="post" action={ "/sources/" (source.name) "/snapshot" } class="inline" {
                    (csrf_field(session))
                    button type="submit" id={ "snapshot-" (source.name) } { "Snapshot now" }
                }
                details class="confirm" {
                    summary { "Remove…" }
                    form method="post" action={ "/sources/" (source.name) "/remove" } class="inline" {
                        (csrf_field(session))
                        button class="danger" type="submit" id={ "remove-" (source.name) } {
                            "Remove " (source.name) " and its snapshot"
                        }
                    }
                }
            }
        }
    }
}

fn register_form(session: &PanelSession) -> Markup {
    html! {
        section class="card" id="register-source" {
            h2 { "Register or replace a source" }
            p class="muted" {
                "A libpq DSN (" code { "host=… port=… user=… password=… dbname=…" } " or a "
                code { "postgresql://" } " URL) for a role that may read the catalog and the "
                "statistics (a member of " code { "pg_read_all_data" } ", say). sandboxd only "
                "opens read-only transactions with it, seals it at rest and never shows it "
                "again; agents never reach it. Replacing a source's DSN drops its snapshot."
            }
            p class="muted" {
                "TLS as libpq's " code { "sslmode" } " says; without one, "
                code { "verify-full" } " for a host that is not loopback. Name the CA that "
                "signed production's certificate with " code { "sslrootcert=/path/ca.pem" }
                " (a file on sandboxd's machine), else the machine's system roots are trusted."
            }
            form method="post" action="/sources" {
                (csrf_field(session))
                div class="fields" {
                    label { "Name " input type="text" name="name" required pattern="[a-z0-9][a-z0-9-]*" size="16"; }
                    label { "DSN " input type="password" name="dsn" required autocomplete="off" size="48"; }
                    label {
                        "Privacy "
                        select name="privacy" {
                            option value="keep-values" selected { "keep-values" }
                            option value="no-values" { "no-values (no sample values)" }
                        }
                    }
                    label { "Refresh every " input type="number" name="refresh_secs" min="0" value="0" size="6"; " s (0: on demand)" }
                }
                div class="form-actions" {
                    button class="primary" type="submit" id="save-source" { "Save source" }
                }
            }
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let (sources, projects) = match tokio::join!(state.desk.sources(), state.desk.projects()) {
        (Ok(sources), Ok(projects)) => (sources, projects),
        (Err(err), _) | (_, Err(err)) => {
            return failure(&session, Section::Sources, "Sources", err);
        }
    };
    let mut tls = Vec::with_capacity(sources.len());
    for source in &sources {
        tls.push(match state.desk.source_tls(&source.name).await {
            Ok(found) => found,
            Err(sandboxd_broker::BrokerError::Source(why)) => {
                tracing::warn!(source = %source.name, "reading the TLS of a source: {why}");
                None
            }
            Err(err) => return failure(&session, Section::Sources, "Sources", err),
        });
    }
    let cloned_by = |source: &Source| -> Vec<String> {
        projects
            .iter()
            .filter(|p| {
                p.sandbox_clones
                    .iter()
                    .any(|(_, c)| c.source == source.name)
            })
            .map(|p| p.slug.to_string())
            .collect()
    };
    let body = html! {
        section class="card" {
            h2 { "Clone sources" }
            p class="muted" {
                "Production Postgres servers whose schema, planner statistics and planner "
                "settings (no rows) a project's sandboxes can clone, so " code { "EXPLAIN" }
                " on a sandbox picks the plan production would. A project chooses a source for "
                "its Postgres on its Sandbox card."
            }
            @if sources.is_empty() {
                p class="empty" id="no-sources" { "No source is registered." }
            } @else {
                table class="grid" id="sources" {
                    thead { tr {
                        th { "Source" } th { "Latest snapshot" } th { "TLS" }
                        th { "Privacy, refresh" } th { "Cloned by" } th { "" }
                    } }
                    tbody {
                        @for (source, tls) in sources.iter().zip(&tls) {
                            (source_row(&session, source, tls.as_ref(), &cloned_by(source)))
                        }
                    }
                }
            }
        }
        (register_form(&session))
    };
    layout::page(Section::Sources, "Sources", &session, flash.as_ref(), body).into_response()
}

pub async fn save(
    State(state): State<AppState>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let field = |name: &str| fields.get(name).map(str::trim).unwrap_or_default();
    let name = match SourceName::parse(field("name")) {
        Ok(name) => name,
        Err(err) => {
            return done(
                &state,
                &session,
                "/sources",
                false,
                format!("Not saved: {err}"),
            );
        }
    };
    let Some(privacy) = Privacy::parse(field("privacy")) else {
        return done(
            &state,
            &session,
            "/sources",
            false,
            "Not saved: privacy must be keep-values or no-values; nothing changed.".to_owned(),
        );
    };
    let refresh_secs = match field("refresh_secs") {
        "" => 0,
        text => match text.parse::<u64>() {
            Ok(secs) => secs,
            Err(_) => {
                return done(
                    &state,
                    &session,
                    "/sources",
                    false,
                    "Not saved: refresh must be a whole number of seconds (0: on demand); \
                     nothing changed."
                        .to_owned(),
                );
            }
        },
    };
    // Not trimmed: a DSN is taken as typed.
    let dsn = SecretString::from(fields.get("dsn").unwrap_or_default().to_owned());
    match state
        .desk
        .put_source(&name, &dsn, privacy, refresh_secs)
        .await
    {
        Ok(source) => {
            let warning = match state.desk.source_tls(&source.name).await {
                Ok(Some(tls)) => tls.warning(),
                _ => None,
            };
            done(
                &state,
                &session,
                "/sources",
                true,
                match warning {
                    None => format!("Saved source {}; take a snapshot to clone it.", source.name),
                    Some(warning) => format!(
                        "Saved source {}; take a snapshot to clone it. Warning: {warning}.",
                        source.name
                    ),
                },
            )
        }
        Err(err) => done(
            &state,
            &session,
            "/sources",
            false,
            format!("Not saved: {}", refusal(err, "saving a source")),
        ),
    }
}

pub async fn snapshot(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    let name = match SourceName::parse(&name) {
        Ok(name) => name,
        Err(err) => return failure(&session, Section::Sources, "Sources", err),
    };
    match state.desk.snapshot_source(&name, Actor::Operator).await {
        Ok(source) => {
            let version = source
                .snapshot
                .map(|s| s.server_version)
                .unwrap_or_default();
            done(
                &state,
                &session,
                "/sources",
                true,
                format!("Took a snapshot of {name} ({version})."),
            )
        }
        Err(err) => done(
            &state,
            &session,
            "/sources",
            false,
            format!(
                "No snapshot of {name}: {}",
                refusal(err, "taking a snapshot")
            ),
        ),
    }
}

pub async fn remove(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    VerifiedForm { session, .. }: VerifiedForm,
) -> Response {
    let name = match SourceName::parse(&name) {
        Ok(name) => name,
        Err(err) => return failure(&session, Section::Sources, "Sources", err),
    };
    match state.desk.remove_source(&name).await {
        Ok(true) => done(
            &state,
            &session,
            "/sources",
            true,
            format!("Removed source {name} and its snapshot."),
        ),
        Ok(false) => done(
            &state,
            &session,
            "/sources",
            false,
            format!("There is no source {name}."),
        ),
        Err(err) => done(
            &state,
            &session,
            "/sources",
            false,
            format!("Not removed: {}", refusal(err, "removing a source")),
        ),
    }
}
