//! The Sandbox card of a project's page: a checkbox per engine of the registry (greyed out, with
//! why, where this sandboxd's backend cannot run it) and per feature of its allowlist (greyed
//! out where the backend does not provide it), the source an engine is cloned from, and the
//! size of an engine's data space.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use maud::{Markup, html};
use sandboxd_broker::FeatureProbe;
use sandboxd_domain::clone::Privacy;
use sandboxd_domain::engine::FeatureKind;
use sandboxd_domain::{DataSize, EngineRef, Project, Source, engines};

use crate::AppState;
use crate::panel::layout::csrf_field;
use crate::panel::session::PanelSession;

fn feature_noun(engine: EngineRef) -> &'static str {
    match engine.feature_kind {
        FeatureKind::Extension => "extensions",
        FeatureKind::Module => "modules",
    }
}

/// Per engine with an allowlist, what this sandboxd's backend provides (absent while unknown).
type Offered = BTreeMap<EngineRef, Arc<FeatureProbe>>;

/// The engines this sandboxd's backend cannot run, each with why and what provides it.
pub(super) type Unrunnable = BTreeMap<EngineRef, String>;

pub(super) async fn unrunnable(state: &AppState) -> Unrunnable {
    let all: Vec<EngineRef> = engines::all().collect();
    state.desk.unrunnable(&all).await
}

/// How long the card waits for a feature probe under way before it shows the allowlist alone.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

/// What `project`'s agents are offered per engine: of the image its clone runs, where the
/// engine is a clone.
pub(super) async fn offered(state: &AppState, project: &Project) -> Offered {
    let probes = engines::with_features().map(|engine| async move {
        (
            engine,
            state.desk.offered_in(project, engine, PROBE_PATIENCE).await,
        )
    });
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
/// instance), each under its own privacy mode and, for a source that keeps values, without them.
fn clone_choice(engine: EngineRef, project: &Project, sources: &[Source]) -> Markup {
    let current = project
        .sandbox_clones
        .iter()
        .find(|(e, _)| *e == engine)
        .map(|(_, choice)| choice.to_string());
    let options: Vec<(String, String)> = sources
        .iter()
        .flat_map(|source| {
            let pending = if source.snapshot.is_none() {
                " (no snapshot yet)"
            } else {
                ""
            };
            let own = (
                source.name.to_string(),
                format!(
                    "a clone of {} ({}){pending}",
                    source.name,
                    source.privacy.as_str()
                ),
            );
            let stripped = (source.privacy == Privacy::KeepValues).then(|| {
                (
                    format!("{}:{}", source.name, Privacy::NoValues.as_str()),
                    format!(
                        "a clone of {} without sample values (no-values){pending}",
                        source.name
                    ),
                )
            });
            std::iter::once(own).chain(stripped)
        })
        .collect();
    // A choice the list does not offer (keep-values written out on the command line) stays.
    let unlisted = current
        .clone()
        .filter(|current| !options.iter().any(|(value, _)| value == current));
    html! {
        @if sandboxd_broker::clonable(engine) {
            div class="clone-choice small" {
                label {
                    "handed out as "
                    select name={ "clone:" (engine.name) } id={ "clone-" (engine.name) } {
                        option value="" selected[current.is_none()] { "a fresh instance" }
                        @for (value, text) in &options {
                            option value=(value) selected[current.as_ref() == Some(value)] {
                                (text)
                            }
                        }
                        @if let Some(value) = &unlisted {
                            option value=(value) selected { "a clone of " (value) }
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
pub(super) struct Space {
    pub(super) default: DataSize,
    pub(super) ceiling: DataSize,
}

/// The Sandbox card: every engine of the registry, every feature of its allowlist; an engine
/// this sandboxd's backend cannot run, or a feature it does not provide, cannot be newly chosen
/// (one already chosen stays checked, so saving other changes keeps it).
pub(super) fn sandbox_card(
    session: &PanelSession,
    project: &Project,
    unrunnable: &Unrunnable,
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
                "and only those this sandboxd's backend provides. Services it cannot run and "
                "features it lacks are greyed out (hover a feature for what provides it)."
            }
            form method="post" action={ "/projects/" (project.slug) } {
                (csrf_field(session))
                table class="grid services" {
                    thead { tr { th { "Service" } th { "Extensions and modules" } } }
                    tbody {
                        @for engine in engines::all() {
                            @let chosen = extensions.for_engine(engine);
                            @let opted = services.contains(&engine);
                            @let cannot = unrunnable.get(&engine);
                            tr {
                                td class="service" {
                                    label class={ "check" @if cannot.is_some() { " unavailable" } }
                                        title=[cannot] {
                                        input type="checkbox" name="service" value=(engine.name)
                                            id={ "service-" (engine.name) }
                                            checked[opted]
                                            disabled[cannot.is_some() && !opted];
                                        strong { (engine.title) }
                                        " " code class="muted" { (engine.name) }
                                    }
                                    @if let Some(why) = cannot {
                                        div class="unrunnable small muted" id={ "unrunnable-" (engine.name) } {
                                            @if opted {
                                                "Cannot run here, so its agents are refused it: "
                                            } @else {
                                                "Cannot run here: "
                                            }
                                            (why)
                                        }
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
