//! The audit log: filters (agent, project, outcome) in a GET form, newest first, paged with the
//! store's cursor.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use sandboxd_domain::audit::AuditPage;

use super::layout::{self, Section, outcome, time};
use super::session::PanelSession;
use crate::AppState;
use crate::api::ApiQuery;
use crate::api::audit::filter_of;
use crate::error::ApiError;
use crate::wire::{AuditQuery, actor_text};

const PAGE: u32 = 50;

/// The query string of a link that keeps the filters and moves the cursor.
fn link(query: &AuditQuery, before: Option<&str>) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (key, value) in [
        ("agent", query.agent.as_deref()),
        ("project", query.project.as_deref()),
        ("outcome", query.outcome.as_deref()),
        ("before", before),
    ] {
        if let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) {
            out.append_pair(key, value);
        }
    }
    format!("/audit?{}", out.finish())
}

fn filters(query: &AuditQuery) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form class="filters" method="get" action="/audit" {
            label { "Agent" input name="agent" value=(value(&query.agent)) placeholder="any"; }
            label { "Project" input name="project" value=(value(&query.project)) placeholder="any"; }
            label {
                "Outcome"
                input name="outcome" value=(value(&query.outcome)) placeholder="ok, failed or a code"
                    list="outcomes";
            }
            datalist id="outcomes" { option value="ok" {} option value="failed" {} }
            button class="primary" type="submit" { "Filter" }
            a class="button" href="/audit" { "Clear" }
        }
    }
}

fn entries(page: &AuditPage) -> Markup {
    html! {
        @if page.entries.is_empty() {
            p class="empty" { "No entries match." }
        } @else {
            table class="grid audit" id="audit" {
                thead {
                    tr {
                        th { "Time (UTC)" } th { "Actor" } th { "Action" } th { "Subject" }
                        th { "Project" } th { "Outcome" } th class="num" { "ms" } th { "Detail" }
                    }
                }
                tbody {
                    @for entry in &page.entries {
                        tr {
                            td class="nowrap" { (time(entry.at_ms)) }
                            td class="nowrap" { code { (actor_text(&entry.actor)) } }
                            td class="nowrap" { (entry.action) }
                            td class="nowrap" { code { (entry.subject) } }
                            td class="nowrap" { @if let Some(p) = &entry.project { (p) } @else { span class="muted" { "—" } } }
                            td { (outcome(&entry.outcome)) }
                            td class="num" { (entry.duration_ms) }
                            td class="detail" { (entry.detail) }
                        }
                    }
                }
            }
        }
    }
}

pub async fn show(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
    query: Result<ApiQuery<AuditQuery>, ApiError>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let query = match query {
        Ok(ApiQuery(query)) => query,
        Err(err) => return super::failure(&session, Section::Audit, "Audit log", err),
    };
    let filter = filter_of(&query).map(|mut f| {
        f.limit = query.limit.unwrap_or(PAGE);
        f
    });
    let (status, page, error) = match filter {
        Ok(filter) => match state.desk.audit_log(&filter).await {
            Ok(page) => (StatusCode::OK, Some(page), None),
            Err(err) => {
                let (status, _, message) = ApiError::Broker(err).parts();
                (status, None, Some(message))
            }
        },
        Err(err) => (StatusCode::BAD_REQUEST, None, Some(err.to_string())),
    };
    let body = html! {
        section class="card" {
            (filters(&query))
            @if let Some(error) = &error {
                div class="flash flash-error" role="alert" { "Filter refused: " (error) }
            }
            @if let Some(page) = &page {
                p class="muted small" {
                    (page.entries.len()) " of " (page.total) " matching entries"
                    @if query.before.is_some() { " (older page)" }
                }
                (entries(page))
                nav class="pager" {
                    @if query.before.is_some() {
                        a class="button" href=(link(&query, None)) { "← Newest" }
                    }
                    @if let Some(next) = &page.next_before {
                        a class="button" id="older" href=(link(&query, Some(next))) { "Older →" }
                    }
                }
            }
        }
    };
    (
        status,
        layout::page(Section::Audit, "Audit log", &session, flash.as_ref(), body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_keep_filters_and_encode_them() {
        let query = AuditQuery {
            agent: Some("dev-1".into()),
            project: None,
            outcome: Some("a&b".into()),
            before: Some("x".into()),
            limit: None,
        };
        assert_eq!(
            link(&query, Some("c1")),
            "/audit?agent=dev-1&outcome=a%26b&before=c1"
        );
        assert_eq!(link(&query, None), "/audit?agent=dev-1&outcome=a%26b");
    }
}
