//! EXPLAIN text: Redshift's (`XN` operators, distribution tags) and PostgreSQL's, and Redshift's
//! `SYS_QUERY_EXPLAIN` rows (the same node texts, linked by `plan_parent_id`).
//!
//! A node is a line (or a row's `plan_node`) that carries the optimizer's estimate,
//! `Operator [on table [alias]] [DS_… tag]  (cost=startup..total rows=N width=W)`; every other
//! line (`Hash Cond: …`, `Send to leader`, notes on statistics) qualifies the node above it and is
//! skipped. A Redshift distribution tag (`DS_BCAST_INNER`, `DS_DIST_NONE`, …) is counted as an
//! operator of its own, with its join's rows: moving data between slices is work of its own.

use std::collections::BTreeMap;

use super::{snake, PlanNode, PlanSummary, SummarySource};
use crate::error::{AutoSloError, Result};

/// One node of a parsed node text: the operator, its distribution tag if any.
fn parse_node(text: &str) -> Result<(PlanNode, Option<PlanNode>)> {
    let Some(at) = text.find("(cost=") else {
        return Err(AutoSloError::Plan(format!("`{}` has no (cost=… rows=… width=…)", text.trim())));
    };
    let body = text[..at].trim().trim_start_matches("->").trim();
    let est = &text[at + 1..];
    let est = &est[..est.find(')').ok_or_else(|| AutoSloError::Plan(format!("`{}`: unclosed (cost=…", text.trim())))?];
    let mut cost = f64::NAN;
    let mut rows = f64::NAN;
    for kv in est.split_whitespace() {
        if let Some(v) = kv.strip_prefix("cost=") {
            let total = v.rsplit("..").next().unwrap_or(v);
            cost = total.parse().map_err(|_| AutoSloError::Plan(format!("`{}`: cost `{v}` is not a number", text.trim())))?;
        } else if let Some(v) = kv.strip_prefix("rows=") {
            rows = v.parse().map_err(|_| AutoSloError::Plan(format!("`{}`: rows `{v}` is not a number", text.trim())))?;
        }
    }
    if !(cost.is_finite() && rows.is_finite() && cost >= 0.0 && rows >= 0.0) {
        return Err(AutoSloError::Plan(format!("`{}`: needs a cost and rows, non-negative", text.trim())));
    }
    let words: Vec<&str> = body.split_whitespace().collect();
    let tag_at = words.iter().position(|w| w.starts_with("DS_"));
    let (head, tag) = match tag_at {
        Some(k) => (&words[..k], Some(words[k])),
        None => (&words[..], None),
    };
    let on = head.iter().position(|w| *w == "on");
    let using = head.iter().position(|w| *w == "using");
    let op_end = [on, using].into_iter().flatten().min().unwrap_or(head.len());
    let operator = snake(&head[..op_end].join(" "));
    if operator.is_empty() {
        return Err(AutoSloError::Plan(format!("`{}` names no operator", text.trim())));
    }
    let table = on.and_then(|k| head.get(k + 1)).map(|t| table_name(t));
    let node = PlanNode { operator, table, rows, cost };
    let tag = tag.map(|t| PlanNode { operator: snake(t), table: None, rows, cost: 0.0 });
    Ok((node, tag))
}

/// `public."Sales"` → `Sales`, `sales` → `sales`: the last part, unquoted; lower-cased unless quoted.
pub(crate) fn table_name(raw: &str) -> String {
    let last = raw.rsplit('.').next().unwrap_or(raw);
    match last.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => last.to_ascii_lowercase(),
    }
}

/// A plan from EXPLAIN's text output (Redshift or PostgreSQL), nested by indentation.
pub fn from_explain_text(text: &str) -> Result<PlanSummary> {
    let mut nodes = Vec::new();
    let mut stack: Vec<usize> = Vec::new(); // indents of the nodes above
    let mut depth = 0u32;
    for (n, line) in text.lines().enumerate() {
        if !line.contains("(cost=") {
            continue;
        }
        let indent = line.find("->").unwrap_or_else(|| line.len() - line.trim_start().len());
        while stack.last().is_some_and(|&i| i >= indent) {
            stack.pop();
        }
        stack.push(indent);
        depth = depth.max(stack.len() as u32);
        let (node, tag) = parse_node(line).map_err(|e| AutoSloError::Plan(format!("line {}: {e}", n + 1)))?;
        nodes.push(node);
        nodes.extend(tag);
    }
    if nodes.is_empty() {
        return Err(AutoSloError::Plan("no plan node (no line with `(cost=`)".into()));
    }
    Ok(PlanSummary { nodes, depth, source: SummarySource::Plan })
}

/// One row of Redshift's `SYS_QUERY_EXPLAIN`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainRow {
    pub query_id: i64,
    pub child_query_sequence: i64,
    pub plan_node_id: i64,
    /// 0 (or the node's own id) for a root.
    pub plan_parent_id: i64,
    pub plan_node: String,
}

/// The plans of `SYS_QUERY_EXPLAIN` rows, per query id (a rewritten query's child sequences
/// together). An error names the row (0-based, in the order given) whose node text cannot be
/// read, whose parent is missing, or whose node id repeats.
pub fn from_explain_rows(rows: &[ExplainRow]) -> Result<BTreeMap<i64, PlanSummary>> {
    // (query, sequence) → node id → (row, parent).
    let mut trees: BTreeMap<(i64, i64), BTreeMap<i64, (usize, i64)>> = BTreeMap::new();
    for (k, r) in rows.iter().enumerate() {
        let tree = trees.entry((r.query_id, r.child_query_sequence)).or_default();
        if tree.insert(r.plan_node_id, (k, r.plan_parent_id)).is_some() {
            return Err(AutoSloError::Plan(format!("row {k}: query {} sequence {} repeats plan_node_id {}", r.query_id, r.child_query_sequence, r.plan_node_id)));
        }
    }
    let mut out: BTreeMap<i64, PlanSummary> = BTreeMap::new();
    for ((query, _), tree) in &trees {
        let mut depth_of: BTreeMap<i64, u32> = BTreeMap::new();
        let mut nodes = Vec::new();
        let mut depth = 0;
        for (&id, &(k, _)) in tree {
            // Walk up to the root (at most the tree's size: a cycle is an error).
            let mut d = 1u32;
            let mut at = id;
            loop {
                let (_, parent) = tree[&at];
                if parent == 0 || parent == at {
                    break;
                }
                if !tree.contains_key(&parent) {
                    let r = &rows[tree[&at].0];
                    return Err(AutoSloError::Plan(format!("row {}: query {} node {}: parent {} is not among its plan's rows", tree[&at].0, r.query_id, r.plan_node_id, parent)));
                }
                d += 1;
                if d as usize > tree.len() {
                    return Err(AutoSloError::Plan(format!("row {k}: query {query}: plan_parent_id links form a cycle")));
                }
                at = parent;
            }
            depth_of.insert(id, d);
            depth = depth.max(d);
            let (node, tag) = parse_node(&rows[k].plan_node).map_err(|e| AutoSloError::Plan(format!("row {k}: {e}")))?;
            nodes.push(node);
            nodes.extend(tag);
        }
        let s = out.entry(*query).or_insert(PlanSummary { nodes: Vec::new(), depth: 0, source: SummarySource::Plan });
        s.nodes.extend(nodes);
        s.depth = s.depth.max(depth);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDSHIFT: &str = "XN Merge  (cost=1000000000136.38..1000000000137.82 rows=576 width=35)
  Merge Key: sum(sales.pricepaid)
  ->  XN Network  (cost=1000000000136.38..1000000000137.82 rows=576 width=35)
        Send to leader
        ->  XN Sort  (cost=1000000000136.38..1000000000137.82 rows=576 width=35)
              Sort Key: sum(sales.pricepaid)
              ->  XN HashAggregate  (cost=98.41..104.17 rows=576 width=35)
                    ->  XN Hash Join DS_BCAST_INNER  (cost=90.00..97.00 rows=1000 width=35)
                          Hash Cond: (\"outer\".eventid = \"inner\".eventid)
                          ->  XN Seq Scan on sales  (cost=0.00..1724.56 rows=172456 width=14)
                          ->  XN Hash  (cost=87.98..87.98 rows=8798 width=17)
                                ->  XN Seq Scan on event  (cost=0.00..87.98 rows=8798 width=17)
----- Tables missing statistics: event -----";

    #[test]
    fn redshift_text() {
        let p = from_explain_text(REDSHIFT).unwrap();
        let ops: Vec<&str> = p.nodes.iter().map(|n| n.operator.as_str()).collect();
        assert_eq!(ops, ["merge", "network", "sort", "hashaggregate", "hash_join", "ds_bcast_inner", "seq_scan", "hash", "seq_scan"]);
        assert_eq!(p.depth, 7);
        assert_eq!(p.nodes[6].table.as_deref(), Some("sales"));
        assert_eq!(p.nodes[6].rows, 172456.0);
        assert_eq!(p.nodes[6].cost, 1724.56);
        assert_eq!(p.nodes[5].rows, 1000.0);
        assert_eq!(p.source, SummarySource::Plan);
    }

    #[test]
    fn postgres_text() {
        let t = "Hash Join  (cost=10.00..50.00 rows=100 width=8) (actual time=0.1..0.2 rows=90 loops=1)
  Hash Cond: (o.k = l.k)
  ->  Seq Scan on public.lineitem l  (cost=0.00..30.00 rows=3000 width=4)
  ->  Hash  (cost=5.00..5.00 rows=10 width=4)
        ->  Index Scan using orders_pk on \"Orders\" o  (cost=0.29..5.00 rows=10 width=4)";
        let p = from_explain_text(t).unwrap();
        let ops: Vec<(&str, Option<&str>)> = p.nodes.iter().map(|n| (n.operator.as_str(), n.table.as_deref())).collect();
        assert_eq!(ops, [("hash_join", None), ("seq_scan", Some("lineitem")), ("hash", None), ("index_scan", Some("Orders"))]);
        assert_eq!(p.depth, 3);
    }

    #[test]
    fn bad_text() {
        assert!(from_explain_text("Seq Scan on t").is_err());
        let e = from_explain_text("X  (cost=1..2 rows=abc width=3)").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("abc"), "{e}");
    }

    fn row(q: i64, id: i64, parent: i64, node: &str) -> ExplainRow {
        ExplainRow { query_id: q, child_query_sequence: 1, plan_node_id: id, plan_parent_id: parent, plan_node: node.into() }
    }

    #[test]
    fn explain_rows() {
        let rows = vec![
            row(7, 1, 0, "XN Aggregate  (cost=10.00..10.00 rows=1 width=8)"),
            row(7, 2, 1, "XN Hash Join DS_DIST_NONE  (cost=1.00..9.00 rows=50 width=8)"),
            row(7, 3, 2, "XN Seq Scan on t  (cost=0.00..5.00 rows=500 width=8)"),
            row(7, 4, 2, "XN Hash  (cost=0.50..0.50 rows=5 width=8)"),
            row(7, 5, 4, "XN Seq Scan on u  (cost=0.00..0.50 rows=5 width=8)"),
            row(8, 1, 0, "XN Seq Scan on v  (cost=0.00..1.00 rows=10 width=8)"),
        ];
        let m = from_explain_rows(&rows).unwrap();
        assert_eq!(m[&7].depth, 4);
        assert_eq!(m[&7].nodes.len(), 6);
        assert_eq!(m[&8].depth, 1);
        let mut bad = rows.clone();
        bad[4].plan_parent_id = 9;
        let e = from_explain_rows(&bad).unwrap_err().to_string();
        assert!(e.contains("row 4") && e.contains("parent 9"), "{e}");
        let mut dup = rows;
        dup[3].plan_node_id = 3;
        assert!(from_explain_rows(&dup).unwrap_err().to_string().contains("repeats"));
    }
}
