//! The plan-feature schema of a warehouse's own history: which operators and tables get a slot.
//!
//! The layout is the bundled TPC-DS table's ([`crate::predictor::features`], `PLAN_DIM` = 34), so a
//! model trained on a history has the bundled model's shape and kernels:
//!
//! ```text
//! n_operators, depth, log_total_card, log_max_card,
//! op_<o>_count × 10, op_<o>_log_card × 10, table_<t>_log_rows × 10
//! ```
//!
//! `log_*` is ln(1 + x) of the optimizer's row estimates (total and largest over the plan's
//! operators; per operator slot, the sum over its nodes); `table_<t>_log_rows` is ln(1 + the
//! largest row estimate of a scan of `t`), or 1 for a table named by SQL alone (no estimate: the
//! slot then says "read"). The 10 operators and 10 tables are those in the most queries of the
//! history it is fitted on, each query weighted by its executions, ties broken by name; a slot
//! nobody fills stays 0. An operator or table outside the schema counts only in `n_operators` and
//! the totals. The schema is saved with the model and loaded with it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{PlanSummary, SummarySource};
use crate::error::{AutoSloError, Result};
use crate::predictor::features::PLAN_DIM;

/// Operator slots.
pub const TOP_OPERATORS: usize = 10;
/// Table slots.
pub const TOP_TABLES: usize = 10;
const GLOBALS: usize = 4;
const _: () = assert!(GLOBALS + 2 * TOP_OPERATORS + TOP_TABLES == PLAN_DIM);
/// Version of the layout above.
pub const SCHEMA_VERSION: u32 = 1;

/// Which operators and tables have a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSchema {
    pub version: u32,
    /// At most [`TOP_OPERATORS`] operator names, most frequent first.
    pub operators: Vec<String>,
    /// At most [`TOP_TABLES`] table names, most frequent first.
    pub tables: Vec<String>,
}

fn top(weights: BTreeMap<String, f64>, k: usize) -> Vec<String> {
    let mut v: Vec<(String, f64)> = weights.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().take(k).map(|(n, _)| n).collect()
}

impl PlanSchema {
    /// The schema of a history: `(summary, weight)` per query class, the weight its executions.
    pub fn fit<'a>(summaries: impl IntoIterator<Item = (&'a PlanSummary, f64)>) -> Self {
        let mut ops: BTreeMap<String, f64> = BTreeMap::new();
        let mut tables: BTreeMap<String, f64> = BTreeMap::new();
        for (s, w) in summaries {
            let w = if w.is_finite() && w > 0.0 { w } else { 0.0 };
            for o in s.nodes.iter().map(|n| &n.operator).collect::<BTreeSet<_>>() {
                *ops.entry(o.clone()).or_default() += w;
            }
            for t in s.nodes.iter().filter_map(|n| n.table.as_ref()).collect::<BTreeSet<_>>() {
                *tables.entry(t.clone()).or_default() += w;
            }
        }
        Self { version: SCHEMA_VERSION, operators: top(ops, TOP_OPERATORS), tables: top(tables, TOP_TABLES) }
    }

    /// A schema from its JSON (as [`PlanSchema::to_json`] writes it), checked.
    pub fn from_json(text: &str) -> Result<Self> {
        let s: Self = serde_json::from_str(text).map_err(|e| AutoSloError::Plan(format!("plan schema: {e}")))?;
        s.check()?;
        Ok(s)
    }

    /// This schema as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a plan schema serialises")
    }

    fn check(&self) -> Result<()> {
        if self.version != SCHEMA_VERSION {
            return Err(AutoSloError::Plan(format!("plan schema version {} (this build reads {SCHEMA_VERSION})", self.version)));
        }
        for (what, names, k) in [("operators", &self.operators, TOP_OPERATORS), ("tables", &self.tables, TOP_TABLES)] {
            if names.len() > k {
                return Err(AutoSloError::Plan(format!("plan schema: {} {what}, at most {k}", names.len())));
            }
            if names.iter().collect::<BTreeSet<_>>().len() != names.len() || names.iter().any(String::is_empty) {
                return Err(AutoSloError::Plan(format!("plan schema: {what} must be distinct and non-empty")));
            }
        }
        Ok(())
    }

    /// The [`PLAN_DIM`] feature names, in order (unfilled slots are `op_slot<k>_…`, `table_slot<k>_…`).
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = ["n_operators", "depth", "log_total_card", "log_max_card"].map(String::from).to_vec();
        let op = |k: usize| self.operators.get(k).cloned().unwrap_or_else(|| format!("slot{k}"));
        v.extend((0..TOP_OPERATORS).map(|k| format!("op_{}_count", op(k))));
        v.extend((0..TOP_OPERATORS).map(|k| format!("op_{}_log_card", op(k))));
        v.extend((0..TOP_TABLES).map(|k| format!("table_{}_log_rows", self.tables.get(k).cloned().unwrap_or_else(|| format!("slot{k}")))));
        v
    }

    /// The plan-feature vector of `s`.
    pub fn vector(&self, s: &PlanSummary) -> [f32; PLAN_DIM] {
        let mut v = [0f64; PLAN_DIM];
        v[0] = s.nodes.len() as f64;
        v[1] = f64::from(s.depth);
        v[2] = s.nodes.iter().map(|n| n.rows).sum::<f64>().ln_1p();
        v[3] = s.nodes.iter().map(|n| n.rows).fold(0.0, f64::max).ln_1p();
        let mut card = [0f64; TOP_OPERATORS];
        for n in &s.nodes {
            if let Some(k) = self.operators.iter().position(|o| *o == n.operator) {
                v[GLOBALS + k] += 1.0;
                card[k] += n.rows;
            }
        }
        for (k, c) in card.iter().enumerate() {
            v[GLOBALS + TOP_OPERATORS + k] = c.ln_1p();
        }
        let t0 = GLOBALS + 2 * TOP_OPERATORS;
        for n in &s.nodes {
            if let Some(k) = n.table.as_ref().and_then(|t| self.tables.iter().position(|x| x == t)) {
                let x = match s.source {
                    SummarySource::Plan => n.rows.ln_1p(),
                    SummarySource::Sql => 1.0,
                };
                v[t0 + k] = v[t0 + k].max(x);
            }
        }
        v.map(|x| x as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{from_explain_text, PlanNode};
    use super::*;

    fn plan(nodes: &[(&str, Option<&str>, f64)], source: SummarySource) -> PlanSummary {
        PlanSummary { nodes: nodes.iter().map(|&(o, t, r)| PlanNode { operator: o.into(), table: t.map(String::from), rows: r, cost: 0.0 }).collect(), depth: 2, source }
    }

    #[test]
    fn fit_ranks_by_weighted_presence_and_vectorises() {
        let a = plan(&[("hash_join", None, 100.0), ("seq_scan", Some("t"), 1000.0), ("seq_scan", Some("u"), 10.0)], SummarySource::Plan);
        let b = plan(&[("sort", None, 5.0), ("seq_scan", Some("u"), 50.0)], SummarySource::Plan);
        let s = PlanSchema::fit([(&a, 1.0), (&b, 3.0)]);
        assert_eq!(s.operators, ["seq_scan", "sort", "hash_join"]);
        assert_eq!(s.tables, ["u", "t"]);
        let names = s.names();
        assert_eq!(names.len(), PLAN_DIM);
        assert_eq!(names[4], "op_seq_scan_count");
        assert_eq!(names[7], "op_slot3_count");
        assert_eq!(names[24], "table_u_log_rows");
        let v = s.vector(&a);
        assert_eq!(v[0], 3.0);
        assert_eq!(v[4], 2.0); // two seq scans
        assert!((v[14] - (1010f64.ln_1p() as f32)).abs() < 1e-5);
        assert!((v[24] - (10f64.ln_1p() as f32)).abs() < 1e-5);
        assert!((v[25] - (1000f64.ln_1p() as f32)).abs() < 1e-5);
        assert_eq!(&v[4..14], &[2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // SQL-only summaries mark the tables read.
        let c = plan(&[("scan", Some("t"), 0.0)], SummarySource::Sql);
        assert_eq!(s.vector(&c)[25], 1.0);
    }

    #[test]
    fn json_round_trip_and_checks() {
        let p = from_explain_text("XN Seq Scan on t  (cost=0.00..1.00 rows=10 width=4)").unwrap();
        let s = PlanSchema::fit([(&p, 1.0)]);
        assert_eq!(PlanSchema::from_json(&s.to_json()).unwrap(), s);
        assert!(PlanSchema::from_json(r#"{"version": 2, "operators": [], "tables": []}"#).is_err());
        assert!(PlanSchema::from_json(r#"{"version": 1, "operators": ["a", "a"], "tables": []}"#).is_err());
        assert!(PlanSchema::from_json(r#"{"version": 1, "operators": [], "tables": [], "extra": 1}"#).unwrap_err().to_string().contains("extra"));
    }
}
