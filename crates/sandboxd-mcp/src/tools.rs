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
    /// The engines the project opted into that this sandboxd's backend runs; `None` when it
    /// did not opt in or none runs here (the schema then lists no choice, and
    /// `request_sandbox` answers why).
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

/// An array of `offered` names; an empty offer is `maxItems: 0`, not `enum: []`, which some
/// function-calling validators reject.
fn names_array(offered: &[&str], nothing_offered: &str) -> serde_json::Value {
    if offered.is_empty() {
        serde_json::json!({"type": "array", "maxItems": 0, "description": nothing_offered})
    } else {
        serde_json::json!({
            "type": "array",
            "items": {"type": "string", "enum": offered},
            "uniqueItems": true,
        })
    }
}

fn input_schema(verb: Verb, offer: &Offer) -> JsonObject {
    let mut schema = verbs::schema(verb);
    let Some(services) = &offer.services else {
        return object(schema);
    };
    let names: Vec<&str> = services.iter().map(|engine| engine.name).collect();
    let properties = &mut schema["properties"];
    match verb {
        Verb::RequestSandbox => {
            properties["services"]["items"] = serde_json::json!({"type": "string", "enum": names});
            let per_engine: serde_json::Map<String, serde_json::Value> = services
                .iter()
                .map(|engine| {
                    let offered = offer.features.get(engine).cloned().unwrap_or_default();
                    let none = format!("no {} features are offered here", engine.name);
                    (engine.name.to_owned(), names_array(&offered, &none))
                })
                .collect();
            let extensions = &mut properties["extensions"];
            extensions["properties"] = serde_json::Value::Object(per_engine);
            extensions["additionalProperties"] = serde_json::Value::Bool(false);
        }
        Verb::ResetSandbox => {
            properties["services"]["items"] = serde_json::json!({"type": "string", "enum": names});
        }
        Verb::SandboxSql | Verb::RunExperiment => {
            properties["service"]["enum"] = serde_json::json!(names);
        }
        _ => {}
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

#[cfg(test)]
mod tests {
    use sandboxd_domain::engines;

    use super::*;

    fn offer() -> Offer {
        let postgres = EngineRef::parse("postgres").expect("postgres");
        let redis = EngineRef::parse("redis").expect("redis");
        Offer {
            services: Some(vec![postgres, redis]),
            features: [(postgres, vec!["citext"]), (redis, vec![])].into(),
            standing: BTreeMap::new(),
        }
    }

    #[test]
    fn every_service_argument_is_an_enum_of_the_projects_engines() {
        let offer = offer();
        let names = serde_json::json!(["postgres", "redis"]);
        let sql = input_schema(Verb::SandboxSql, &offer);
        assert_eq!(sql["properties"]["service"]["enum"], names);
        let experiment = input_schema(Verb::RunExperiment, &offer);
        assert_eq!(experiment["properties"]["service"]["enum"], names);
        let reset = input_schema(Verb::ResetSandbox, &offer);
        assert_eq!(reset["properties"]["services"]["items"]["enum"], names);
        let request = input_schema(Verb::RequestSandbox, &offer);
        assert_eq!(request["properties"]["services"]["items"]["enum"], names);
    }

    #[test]
    fn an_engine_without_offered_features_has_no_empty_enum() {
        let request = input_schema(Verb::RequestSandbox, &offer());
        let extensions = &request["properties"]["extensions"]["properties"];
        assert_eq!(
            extensions["postgres"]["items"]["enum"],
            serde_json::json!(["citext"])
        );
        assert!(extensions["redis"].get("items").is_none(), "{extensions}");
        assert_eq!(extensions["redis"]["maxItems"], 0);
        let text = serde_json::to_string(&request).expect("json");
        assert!(!text.contains("\"enum\":[]"), "{text}");
        assert!(engines::all().count() >= 2);
    }

    #[test]
    fn max_rows_says_the_range_it_accepts() {
        let sql = input_schema(Verb::SandboxSql, &Offer::default());
        let max_rows = &sql["properties"]["max_rows"];
        assert_eq!(max_rows["minimum"], 1, "{max_rows}");
        assert_eq!(max_rows["maximum"], 1000, "{max_rows}");
    }
}
