//! A plan's shape: what two servers must agree on for "the clone picks production's plan" —
//! node types, scan and join strategies, the order of a join's inputs, the relations and index
//! names — and nothing that varies with the data (costs, row estimates, widths, workers).

use serde_json::Value;

/// The shape of `EXPLAIN (FORMAT JSON)`'s output (the array or its first `Plan`), as one line:
/// `Hash Join[Inner](Seq Scan{orders}, Hash(Index Scan{customers customers_pkey}))`. None when
/// it is not an `EXPLAIN` document.
pub fn plan_shape(explain: &Value) -> Option<String> {
    let plan = match explain {
        Value::Array(items) => items.first()?.get("Plan")?,
        Value::Object(map) => map.get("Plan").unwrap_or(explain),
        _ => return None,
    };
    let mut out = String::new();
    node(plan, &mut out)?;
    Some(out)
}

fn node(plan: &Value, out: &mut String) -> Option<()> {
    out.push_str(plan.get("Node Type")?.as_str()?);
    let qualifiers: Vec<&str> = ["Strategy", "Join Type", "Partial Mode", "Command"]
        .iter()
        .filter_map(|key| plan.get(*key).and_then(Value::as_str))
        .collect();
    if !qualifiers.is_empty() {
        out.push('[');
        out.push_str(&qualifiers.join(" "));
        out.push(']');
    }
    let targets: Vec<&str> = ["Relation Name", "Index Name", "CTE Name", "Function Name"]
        .iter()
        .filter_map(|key| plan.get(*key).and_then(Value::as_str))
        .collect();
    if !targets.is_empty() {
        out.push('{');
        out.push_str(&targets.join(" "));
        out.push('}');
    }
    if let Some(children) = plan.get("Plans").and_then(Value::as_array) {
        out.push('(');
        for (i, child) in children.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            node(child, out)?;
        }
        out.push(')');
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn explain(plan: Value) -> Value {
        json!([{ "Plan": plan }])
    }

    #[test]
    fn the_shape_names_nodes_order_and_indexes_but_no_numbers() {
        let a = explain(json!({
            "Node Type": "Hash Join", "Join Type": "Inner", "Total Cost": 10.5, "Plan Rows": 3,
            "Plans": [
                { "Node Type": "Seq Scan", "Relation Name": "orders", "Plan Rows": 1000 },
                { "Node Type": "Hash", "Plans": [
                    { "Node Type": "Index Scan", "Relation Name": "customers",
                      "Index Name": "customers_pkey", "Plan Rows": 1 }
                ]}
            ]
        }));
        assert_eq!(
            plan_shape(&a).as_deref(),
            Some("Hash Join[Inner](Seq Scan{orders}, Hash(Index Scan{customers customers_pkey}))")
        );
        let mut b = a.clone();
        b[0]["Plan"]["Total Cost"] = json!(99999);
        b[0]["Plan"]["Plans"][0]["Plan Rows"] = json!(1);
        assert_eq!(plan_shape(&a), plan_shape(&b), "numbers do not count");
    }

    #[test]
    fn swapped_join_inputs_or_another_index_are_another_shape() {
        let one = explain(
            json!({ "Node Type": "Nested Loop", "Join Type": "Inner", "Plans": [
                { "Node Type": "Seq Scan", "Relation Name": "a" },
                { "Node Type": "Index Scan", "Relation Name": "b", "Index Name": "b_x" }
            ]}),
        );
        let swapped = explain(
            json!({ "Node Type": "Nested Loop", "Join Type": "Inner", "Plans": [
                { "Node Type": "Index Scan", "Relation Name": "b", "Index Name": "b_x" },
                { "Node Type": "Seq Scan", "Relation Name": "a" }
            ]}),
        );
        let other_index = explain(
            json!({ "Node Type": "Nested Loop", "Join Type": "Inner", "Plans": [
                { "Node Type": "Seq Scan", "Relation Name": "a" },
                { "Node Type": "Index Scan", "Relation Name": "b", "Index Name": "b_y" }
            ]}),
        );
        assert_ne!(plan_shape(&one), plan_shape(&swapped));
        assert_ne!(plan_shape(&one), plan_shape(&other_index));
    }

    #[test]
    fn anything_else_has_no_shape() {
        assert_eq!(plan_shape(&json!("text")), None);
        assert_eq!(plan_shape(&json!([{ "Plan": { "Rows": 1 } }])), None);
    }
}
