//! PostgreSQL's `EXPLAIN (FORMAT JSON)`: `[{"Plan": {"Node Type": …, "Relation Name": …,
//! "Plan Rows": …, "Total Cost": …, "Plans": [ … ]}}]` (the outer list or object may be left off).

use serde_json::Value;

use super::explain_text::table_name;
use super::{snake, PlanNode, PlanSummary, SummarySource};
use crate::error::{AutoSloError, Result};

/// A plan from PostgreSQL's EXPLAIN JSON.
pub fn from_postgres_json(text: &str) -> Result<PlanSummary> {
    let v: Value = serde_json::from_str(text).map_err(|e| AutoSloError::Plan(format!("not JSON: {e}")))?;
    let top = match &v {
        Value::Array(a) => a.first().ok_or_else(|| AutoSloError::Plan("an empty JSON list".into()))?,
        other => other,
    };
    let root = top.get("Plan").unwrap_or(top);
    let mut nodes = Vec::new();
    let depth = walk(root, 1, "Plan", &mut nodes)?;
    Ok(PlanSummary { nodes, depth, source: SummarySource::Plan })
}

fn walk(node: &Value, depth: u32, path: &str, out: &mut Vec<PlanNode>) -> Result<u32> {
    let kind = node.get("Node Type").and_then(Value::as_str).ok_or_else(|| AutoSloError::Plan(format!("{path}: no \"Node Type\"")))?;
    let num = |key: &str| -> Result<f64> {
        match node.get(key) {
            None => Ok(0.0),
            Some(x) => x.as_f64().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| AutoSloError::Plan(format!("{path} ({kind}): \"{key}\" is {x}, not a non-negative number"))),
        }
    };
    let table = node.get("Relation Name").and_then(Value::as_str).map(table_name);
    out.push(PlanNode { operator: snake(kind), table, rows: num("Plan Rows")?, cost: num("Total Cost")? });
    let mut deepest = depth;
    if let Some(children) = node.get("Plans") {
        let children = children.as_array().ok_or_else(|| AutoSloError::Plan(format!("{path} ({kind}): \"Plans\" is not a list")))?;
        for (k, c) in children.iter().enumerate() {
            deepest = deepest.max(walk(c, depth + 1, &format!("{path}.Plans[{k}]"), out)?);
        }
    }
    Ok(deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_json() {
        let j = r#"[{"Plan": {"Node Type": "Aggregate", "Plan Rows": 1, "Total Cost": 40.5,
            "Plans": [{"Node Type": "Hash Join", "Join Type": "Inner", "Plan Rows": 100, "Total Cost": 40.0,
              "Plans": [{"Node Type": "Seq Scan", "Relation Name": "lineitem", "Schema": "public", "Plan Rows": 3000, "Total Cost": 30.0},
                        {"Node Type": "Hash", "Plan Rows": 10, "Total Cost": 5.0,
                         "Plans": [{"Node Type": "Seq Scan", "Relation Name": "orders", "Plan Rows": 10, "Total Cost": 5.0}]}]}]}}]"#;
        let p = from_postgres_json(j).unwrap();
        let ops: Vec<&str> = p.nodes.iter().map(|n| n.operator.as_str()).collect();
        assert_eq!(ops, ["aggregate", "hash_join", "seq_scan", "hash", "seq_scan"]);
        assert_eq!(p.depth, 4);
        assert_eq!(p.nodes[2].table.as_deref(), Some("lineitem"));
        assert_eq!(p.nodes[2].rows, 3000.0);
        // The bare Plan object reads the same.
        let inner = &serde_json::from_str::<Value>(j).unwrap()[0]["Plan"];
        assert_eq!(from_postgres_json(&inner.to_string()).unwrap(), p);
    }

    #[test]
    fn bad_json() {
        assert!(from_postgres_json("{").unwrap_err().to_string().contains("not JSON"));
        assert!(from_postgres_json("[]").is_err());
        let e = from_postgres_json(r#"{"Plan": {"Node Type": "Sort", "Plans": [{"Plan Rows": 3}]}}"#).unwrap_err().to_string();
        assert!(e.contains("Plan.Plans[0]") && e.contains("Node Type"), "{e}");
        let e = from_postgres_json(r#"{"Node Type": "Sort", "Plan Rows": -1}"#).unwrap_err().to_string();
        assert!(e.contains("Plan Rows"), "{e}");
    }
}
