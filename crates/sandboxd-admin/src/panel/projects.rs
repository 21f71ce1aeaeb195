//! Projects: the list, and one project's Sandbox card — a checkbox per engine of the registry
//! and, per engine, a checkbox per feature of its allowlist (greyed out where this sandboxd's
//! backend does not provide it), for an engine that can be a clone, which registered source it
//! clones, and for an engine that keeps its data on disk, the size of its data space. Saving goes
//! through the same validation as the API (registry, allowlists, then the broker, which refuses
//! a feature no backend provides, a clone it cannot make or a size above the ceiling).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures::future::join_all;
use maud::{Markup, html};
use sandboxd_broker::{BrokerError, FeatureProbe};
use sandboxd_domain::engine::FeatureKind;
use sandboxd_domain::{DataSize, EngineRef, ProjectSizes, ProjectSlug, SourceName, engines};
use sandboxd_domain::{Project, Source};

use sandboxd_domain::clock::format_age_since;

use super::layout::{self, Section, badge, csrf_field};
use super::session::PanelSession;
use super::{VerifiedForm, done, failure};
use crate::AppState;
use crate::api::ApiPath;
use crate::api::projects::parse_opt_in;

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

pub async fn create(
    State(state): State<AppState>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let slug = match ProjectSlug::parse(fields.get("slug").unwrap_or_default().trim()) {
        Ok(slug) => slug,
        Err(err) => return done(&state, &session, "/projects", false, err.to_string()),
    };
    let target = format!("/projects/{slug}");
    match state.desk.project(&slug).await {
        Ok(Some(_)) => done(
            &state,
            &session,
            &target,
            false,
            format!("Project {slug} already exists."),
        ),
        Ok(None) => match state.desk.set_project(&slug, None, None).await {
            Ok(_) => done(
                &state,
                &session,
                &target,
                true,
                format!("Project {slug} created."),
            ),
            Err(err) => save_failed(&state, &session, "/projects", err),
        },
        Err(err) => save_failed(&state, &session, "/projects", err),
    }
}

/// The card's sizes (`size:<engine>` = `2G`, or empty for the backend's default).
fn chosen_sizes(fields: &super::form::FormFields) -> Result<ProjectSizes, String> {
    let map: BTreeMap<String, String> = engines::all()
        .filter_map(|engine| {
            let size = fields
                .get(&format!("size:{}", engine.name))
                .map(str::trim)
                .filter(|s| !s.is_empty())?;
            Some((engine.name.to_owned(), size.to_owned()))
        })
        .collect();
    ProjectSizes::parse_map(&map).map_err(|e| e.to_string())
}

/// The card's clone choices (`clone:<engine>` = a source name, or empty for none).
fn chosen_clones(fields: &super::form::FormFields) -> Result<Vec<(EngineRef, SourceName)>, String> {
    let mut clones = Vec::new();
    for engine in engines::all() {
        let Some(source) = fields
            .get(&format!("clone:{}", engine.name))
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        clones.push((
            engine,
            SourceName::parse(source).map_err(|e| e.to_string())?,
        ));
    }
    Ok(clones)
}

fn save_failed(state: &AppState, session: &PanelSession, to: &str, err: BrokerError) -> Response {
    let err = crate::error::ApiError::Broker(err);
    let (status, _, message) = err.parts();
    let message = if status.is_server_error() {
        tracing::error!(error = %err, "panel: saving a project failed");
        "Saving failed; the daemon's log has the cause. Nothing changed.".to_owned()
    } else {
        format!("Not saved: {message}")
    };
    done(state, session, to, false, message)
}

fn feature_noun(engine: EngineRef) -> &'static str {
    match engine.feature_kind {
        FeatureKind::Extension => "extensions",
        FeatureKind::Module => "modules",
    }
}

/// Per engine with an allowlist, what this sandboxd's backend provides (absent while unknown).
type Offered = BTreeMap<EngineRef, Arc<FeatureProbe>>;

/// How long the card waits for a feature probe under way before it shows the allowlist alone.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

async fn offered(state: &AppState) -> Offered {
    let probes = engines::with_features()
        .map(|engine| async move { (engine, state.desk.offered(engine, PROBE_PATIENCE).await) });
    join_all(probes)
        .await
        .into_iter()
        .filter_map(|(engine, probe)| probe.map(|probe| (engine, probe)))
        .collect()
}

/// Why `feature` of `engine` cannot be chosen here, or None when it can (or nothing is known).
fn lacking(offered: &Offered, engine: EngineRef, feature: &str) -> Option<String> {
    let probe = offered.get(&engine)?;
    if probe.names().contains(&feature) {
        return None;
    }
    let why = probe.missing.get(feature).cloned().unwrap_or_default();
    Some(format!(
        "not provided by this sandboxd ({}): {why}",
        probe.source
    ))
}

/// For an engine that can be a clone: a choice of the registered sources (or none: a fresh
/// instance).
fn clone_choice(engine: EngineRef, project: &Project, sources: &[Source]) -> Markup {
    let current = project
        .sandbox_clones
        .iter()
        .find(|(e, _)| *e == engine)
        .map(|(_, s)| s);
    html! {
        @if sandboxd_broker::clonable(engine) {
            div class="clone-choice small" {
                label {
                    "handed out as "
                    select name={ "clone:" (engine.name) } id={ "clone-" (engine.name) } {
                        option value="" selected[current.is_none()] { "a fresh instance" }
                        @for source in sources {
                            option value=(source.name) selected[current == Some(&source.name)] {
                                "a clone of " (source.name)
                                @if source.snapshot.is_none() { " (no snapshot yet)" }
                            }
                        }
                    }
                }
                @if sources.is_empty() {
                    " " span class="muted" { "(register a source on the " a href="/sources" { "Sources" } " page to clone production)" }
                }
            }
        }
    }
}

/// For an engine that keeps its data on disk: the size of its data space (empty: the backend's
/// default), within the operator's ceiling.
fn size_choice(engine: EngineRef, project: &Project, space: &Space) -> Markup {
    let current = project.sandbox_sizes.get(engine);
    html! {
        @if engine.data_on_disk {
            div class="size-choice small" {
                label {
                    "data space "
                    input type="text" name={ "size:" (engine.name) } id={ "size-" (engine.name) }
                        size="6" maxlength="12" pattern="[0-9]+ *[MmGg]([Ii]?[Bb])?"
                        placeholder=(space.default)
                        value=(current.map(|s| s.to_string()).unwrap_or_default());
                }
                " " span class="muted" { "default " (space.default) ", at most " (space.ceiling) }
            }
        }
    }
}

/// The default data space and the operator's ceiling, shown beside each size.
struct Space {
    default: DataSize,
    ceiling: DataSize,
}

/// The Sandbox card: every engine of the registry, every feature of its allowlist; a feature
/// this sandboxd's backend does not provide cannot be newly chosen.
fn sandbox_card(
    session: &PanelSession,
    project: &Project,
    offered: &Offered,
    sources: &[Source],
    space: &Space,
) -> Markup {
    let services = project.sandbox_services.clone().unwrap_or_default();
    let extensions = project.sandbox_extensions.clone().unwrap_or_default();
    html! {
        section class="card" id="sandbox-card" {
            h2 { "Sandbox" }
            p class="muted" {
                "Services this project's developers and QA agents may request with "
                code { "request_sandbox" } ". The first request provisions the whole set; "
                "extensions are activated by the daemon, only from each engine's allowlist, "
                "and only those this sandboxd's backend provides (the others are greyed out; "
                "hover for what provides them)."
            }
            form method="post" action={ "/projects/" (project.slug) } {
                (csrf_field(session))
                table class="grid services" {
                    thead { tr { th { "Service" } th { "Extensions and modules" } } }
                    tbody {
                        @for engine in engines::all() {
                            @let chosen = extensions.for_engine(engine);
                            tr {
                                td class="service" {
                                    label class="check" {
                                        input type="checkbox" name="service" value=(engine.name)
                                            id={ "service-" (engine.name) }
                                            checked[services.contains(&engine)];
                                        strong { (engine.title) }
                                        " " code class="muted" { (engine.name) }
                                    }
                                    (clone_choice(engine, project, sources))
                                    (size_choice(engine, project, space))
                                }
                                td {
                                    @if engine.features.is_empty() {
                                        span class="muted small" { "no " (feature_noun(engine)) " to choose" }
                                    } @else {
                                        div class="chips" {
                                            @for feature in engine.features {
                                                @let checked = chosen.iter().any(|f| f.name() == feature.name);
                                                @let lacks = lacking(offered, engine, feature.name);
                                                label class={ "chip" @if lacks.is_some() { " unavailable" } }
                                                    title=(lacks.clone().unwrap_or_else(|| feature.summary.to_owned())) {
                                                    input type="checkbox" name="feature"
                                                        value={ (engine.name) ":" (feature.name) }
                                                        id={ "feature-" (engine.name) "-" (feature.name) }
                                                        checked[checked]
                                                        disabled[lacks.is_some() && !checked];
                                                    (feature.name)
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                div class="form-actions" {
                    button class="primary" type="submit" id="save-sandbox" { "Save" }
                    span class="muted small" { "No service checked means the project is not opted in." }
                }
            }
        }
    }
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
    let offered = offered(&state).await;
    let body = html! {
        (sandbox_card(&session, &project, &offered, &sources, &Space {
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

pub async fn save(
    State(state): State<AppState>,
    ApiPath(slug): ApiPath<String>,
    VerifiedForm { session, fields }: VerifiedForm,
) -> Response {
    let slug = match ProjectSlug::parse(&slug) {
        Ok(slug) => slug,
        Err(err) => return failure(&session, Section::Projects, "Project", err),
    };
    let target = format!("/projects/{slug}");
    match state.desk.project(&slug).await {
        Ok(Some(_)) => {}
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
        Err(err) => return save_failed(&state, &session, &target, err),
    }
    let services: Vec<String> = fields.all("service").map(str::to_owned).collect();
    let mut features: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for value in fields.all("feature") {
        let (engine, feature) = value.split_once(':').unwrap_or((value, ""));
        features
            .entry(engine.to_owned())
            .or_default()
            .push(feature.to_owned());
    }
    let (services, extensions) = match parse_opt_in(Some(&services), Some(&features)) {
        Ok(parsed) => parsed,
        Err(err) => {
            let (_, _, message) = err.parts();
            return done(
                &state,
                &session,
                &target,
                false,
                format!("Not saved: {message}"),
            );
        }
    };
    let clones = match chosen_clones(&fields) {
        Ok(clones) => clones,
        Err(message) => {
            return done(
                &state,
                &session,
                &target,
                false,
                format!("Not saved: {message}"),
            );
        }
    };
    let sizes = match chosen_sizes(&fields) {
        Ok(sizes) => sizes,
        Err(message) => {
            return done(
                &state,
                &session,
                &target,
                false,
                format!("Not saved: {message}"),
            );
        }
    };
    // Refused before anything is stored, as the API does.
    let opted = services.as_deref().unwrap_or_default();
    let checked = match state.desk.check_project_clones(opted, &clones).await {
        Ok(()) => state.desk.check_project_sizes(opted, &sizes),
        Err(err) => Err(err),
    };
    if let Err(err) = checked {
        return save_failed(&state, &session, &target, err);
    }
    let saved = match state.desk.set_project(&slug, services, extensions).await {
        Ok(_) => match state.desk.set_project_clones(&slug, clones).await {
            Ok(_) => state.desk.set_project_sizes(&slug, sizes).await,
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    match saved {
        Ok(project) => {
            let summary = match &project.sandbox_services {
                Some(services) if !services.is_empty() => services
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => "not opted in".to_owned(),
            };
            done(
                &state,
                &session,
                &target,
                true,
                format!("Saved: {summary}."),
            )
        }
        Err(err) => save_failed(&state, &session, &target, err),
    }
}
