//! The project forms: a new project, and a project's Sandbox card saved through the same
//! validation as the API.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use sandboxd_broker::BrokerError;
use sandboxd_domain::clone::CloneChoice;
use sandboxd_domain::{EngineRef, ProjectSizes, ProjectSlug, engines};

use crate::AppState;
use crate::api::ApiPath;
use crate::api::projects::parse_opt_in;
use crate::panel::form::FormFields;
use crate::panel::layout::Section;
use crate::panel::session::PanelSession;
use crate::panel::{VerifiedForm, done, failure};

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
fn chosen_sizes(fields: &FormFields) -> Result<ProjectSizes, String> {
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

/// The card's clone choices (`clone:<engine>` = `source` or `source:privacy`, or empty for
/// none).
fn chosen_clones(fields: &FormFields) -> Result<Vec<(EngineRef, CloneChoice)>, String> {
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
            CloneChoice::parse(source).map_err(|e| e.to_string())?,
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
