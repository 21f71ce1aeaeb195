//! The MCP tools of a role: one per verb in its manifest, with the verb's JSON schema, a title,
//! honest annotations, the output schema its answers conform to, and a description an agent's
//! model can act on.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandboxd_domain::engines::EngineRef;
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::verbs;

/// What the caller's project lets it ask for, shown in the schemas so a model cannot guess wrong.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    /// The engines the project opted into; `None` when it did not opt in (the schema then lists
    /// no choice, and `request_sandbox` answers why).
    pub services: Option<Vec<EngineRef>>,
    /// Per opted-in engine, the features a call may add: its allowlist ∩ what this sandboxd's
    /// backend provides (the allowlist while that is not known yet).
    pub features: BTreeMap<EngineRef, Vec<&'static str>>,
    /// The project's standing features: active in every sandbox without asking.
    pub standing: BTreeMap<EngineRef, Vec<&'static str>>,
}

impl Offer {
    /// What the tool's description adds: the standing features, so a model does not ask again.
    fn standing_note(&self) -> Option<String> {
        if self.standing.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .standing
            .iter()
            .map(|(engine, names)| format!("{} {}", engine.name, names.join(", ")))
            .collect();
        Some(format!(
            "Your project's sandboxes always have these features active: {}.",
            list.join("; ")
        ))
    }
}

fn object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn input_schema(verb: Verb, offer: &Offer) -> JsonObject {
    let mut schema = verbs::schema(verb);
    if verb == Verb::RequestSandbox
        && let Some(services) = &offer.services
    {
        let names: Vec<&str> = services.iter().map(|engine| engine.name).collect();
        let properties = &mut schema["properties"];
        properties["services"]["items"] = serde_json::json!({"type": "string", "enum": names});
        let per_engine: serde_json::Map<String, serde_json::Value> = services
            .iter()
            .map(|engine| {
                let offered = offer.features.get(engine).cloned().unwrap_or_default();
                (
                    engine.name.to_owned(),
                    serde_json::json!({
                        "type": "array",
                        "items": {"type": "string", "enum": offered},
                        "uniqueItems": true,
                    }),
                )
            })
            .collect();
        let extensions = &mut properties["extensions"];
        extensions["properties"] = serde_json::Value::Object(per_engine);
        extensions["additionalProperties"] = serde_json::Value::Bool(false);
    }
    object(schema)
}

fn annotations(verb: Verb) -> ToolAnnotations {
    let hints = verbs::hints(verb);
    ToolAnnotations::with_title(verbs::title(verb))
        .read_only(hints.read_only)
        .destructive(hints.destructive)
        .idempotent(hints.idempotent)
        .open_world(hints.open_world)
}

fn description(verb: Verb, offer: &Offer) -> String {
    let text = verbs::description(verb);
    match offer.standing_note() {
        Some(note) if verb == Verb::RequestSandbox => format!("{text} {note}"),
        _ => text.to_owned(),
    }
}

fn tool(verb: Verb, offer: &Offer, output: &Arc<JsonObject>) -> Tool {
    Tool::new(
        verb.name(),
        description(verb, offer),
        Arc::new(input_schema(verb, offer)),
    )
    .with_title(verbs::title(verb))
    .with_annotations(annotations(verb))
    .with_raw_output_schema(output.clone())
}

/// Exactly the role's verbs, in a stable order.
pub fn tools_for(role: &RoleSpec, offer: &Offer) -> Vec<Tool> {
    let output = Arc::new(object(verbs::output_schema()));
    Verb::ALL
        .into_iter()
        .filter(|verb| role.allows(*verb))
        .map(|verb| tool(verb, offer, &output))
        .collect()
}
