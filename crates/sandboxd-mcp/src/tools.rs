//! The MCP tools of a role: one per verb in its manifest, with the verb's JSON schema and a
//! description an agent's model can act on.

use std::sync::Arc;

use rmcp::model::Tool;
use sandboxd_domain::roles::{RoleSpec, Verb};
use sandboxd_domain::verbs;

fn tool(verb: Verb) -> Tool {
    let schema = match verbs::schema(verb) {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(verb.name(), verbs::description(verb), Arc::new(schema))
}

/// Exactly the role's verbs, in a stable order.
pub fn tools_for(role: &RoleSpec) -> Vec<Tool> {
    Verb::ALL
        .into_iter()
        .filter(|verb| role.allows(*verb))
        .map(tool)
        .collect()
}
