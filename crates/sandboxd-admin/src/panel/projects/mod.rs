//! Projects: the list, and one project's Sandbox card — a checkbox per engine of the registry
//! (greyed out where this sandboxd's backend cannot run it) and, per engine, a checkbox per feature of its allowlist (greyed out where this sandboxd's
//! backend does not provide it), for an engine that can be a clone, which registered source it
//! clones, and for an engine that keeps its data on disk, the size of its data space. Saving goes
//! through the same validation as the API (registry, allowlists, then the broker, which refuses
//! an engine the backend cannot run, a feature no backend provides, a clone it cannot make or a size above the ceiling).
//!
//! `card.rs` renders the Sandbox card; `save.rs` takes the forms (a new project, the card).

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use sandboxd_broker::BrokerError;
use sandboxd_domain::clock::format_age_since;
use sandboxd_domain::{Project, ProjectSlug};

use super::failure;
use super::layout::{self, Section, badge, csrf_field};
use super::session::PanelSession;
use crate::AppState;
use crate::api::ApiPath;
use card::{Space, offered, sandbox_card, unrunnable};

mod card;
mod save;

pub use save::{create, save};

fn services_cell(project: &Project) -> Markup {
    html! {
        @match &project.sandbox_services {
            Some(services) if !services.is_empty() => {
                @for engine in services {
                    (badge("info", engine.name)) " "
                }
            }
            _ => span class="muted" { "not opted in" },
        }
    }
}

fn extensions_cell(project: &Project) -> Markup {
    html! {
        @match &project.sandbox_extensions {
            Some(extensions) if !extensions.is_empty() => {
                @for (engine, features) in extensions.to_map() {
                    span class="kv" { (engine) ": " (features.join(", ")) } " "
                }
            }
            _ => span class="muted" { "—" },
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let projects = match state.desk.projects().await {
        Ok(projects) => projects,
        Err(err) => return failure(&session, Section::Projects, "Projects", err),
    };
    let body = html! {
        section class="card" {
            @if projects.is_empty() {
                p class="empty" { "No projects yet. Create one below, then opt it into sandboxes." }
            } @else {
                table class="grid" id="projects" {
                    thead { tr { th { "Project" } th { "Sandbox services" } th { "Extensions" } th class="num" { "Updated" } } }
                    tbody {
                        @for project in &projects {
                            tr {
                                td { a href={ "/projects/" (project.slug) } { (project.slug) } }
                                td { (services_cell(project)) }
                                td { (extensions_cell(project)) }
                                td class="num" { (format_age_since(project.updated_at_ms)) " ago" }
                            }
                        }
                    }
                }
            }
        }
        section class="card" {
            h2 { "New project" }
            form class="inline" method="post" action="/projects" {
                (csrf_field(&session))
                label for="new-slug" { "Slug" }
                input id="new-slug" name="slug" required maxlength="48" pattern="[a-z0-9][a-z0-9-]*"
                    placeholder="my-project";
                button class="primary" type="submit" { "Create" }
            }
        }
    };
    layout::page(
        Section::Projects,
        "Projects",
        &session,
        flash.as_ref(),
        body,
    )
    .into_response()
}

pub async fn show(
    State(state): State<AppState>,
    Extension(session): Extension<PanelSession>,
    ApiPath(slug): ApiPath<String>,
) -> Response {
    let flash = state.sessions.take_flash(&session.id);
    let slug = match ProjectSlug::parse(&slug) {
        Ok(slug) => slug,
        Err(err) => return failure(&session, Section::Projects, "Project", err),
    };
    let project = match state.desk.project(&slug).await {
        Ok(Some(project)) => project,
        Ok(None) => {
            return failure(
                &session,
                Section::Projects,
                "Project",
                BrokerError::NotFound {
                    what: "project",
                    id: slug.to_string(),
                },
            );
        }
        Err(err) => return failure(&session, Section::Projects, "Project", err),
    };
    let (agents, tasks, sources) = match tokio::join!(
        state.desk.agents(Some(&slug)),
        state.desk.tasks(Some(&slug), None),
        state.desk.sources(),
    ) {
        (Ok(agents), Ok(tasks), Ok(sources)) => (agents, tasks, sources),
        (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
            return failure(&session, Section::Projects, "Project", err);
        }
    };
    let (unrunnable, offered) = tokio::join!(unrunnable(&state), offered(&state, &project));
    let body = html! {
        (sandbox_card(&session, &project, &unrunnable, &offered, &sources, &Space {
            default: state.desk.default_sandbox_size(),
            ceiling: state.desk.max_sandbox_size(),
        }))
        div class="columns" {
            section class="card" {
                h2 { "Agents" }
                @if agents.is_empty() {
                    p class="empty" { "No agents. Spawn one with " code { "sandboxd agents spawn" } "." }
                } @else {
                    table class="grid" {
                        thead { tr { th { "Agent" } th { "Role" } th class="num" { "Age" } } }
                        tbody {
                            @for agent in &agents {
                                tr {
                                    td { code { (agent.slug) } }
                                    td { (agent.role) }
                                    td class="num" { (format_age_since(agent.created_at_ms)) }
                                }
                            }
                        }
                    }
                }
            }
            section class="card" {
                h2 { "Tasks" }
                @if tasks.is_empty() {
                    p class="empty" { "No tasks. Add one with " code { "sandboxd tasks add" } "." }
                } @else {
                    table class="grid" {
                        thead { tr { th { "Task" } th { "Title" } th { "State" } th { "Held by" } } }
                        tbody {
                            @for task in &tasks {
                                tr {
                                    td { code { (task.id) } }
                                    td { (task.title) }
                                    td { (badge(if task.state.is_claimed() { "warn" } else { "info" }, task.state.as_str())) }
                                    td { @if let Some(agent) = &task.claimed_by { code { (agent) } } @else { span class="muted" { "—" } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout::page_under(
        Section::Projects,
        Some(("/projects", "Projects")),
        project.slug.as_str(),
        &session,
        flash.as_ref(),
        body,
    )
    .into_response()
}
