//! Query plans of a warehouse's own queries, as the Latency Predictor's plan features see them.
//!
//! A [`PlanSummary`] is a plan's operators (each with its estimated rows and cost, and the table
//! it scans, if any) and its depth. It is read from Redshift's EXPLAIN text or `SYS_QUERY_EXPLAIN`
//! rows and PostgreSQL's EXPLAIN text ([`explain_text`]), from PostgreSQL's `EXPLAIN (FORMAT
//! JSON)` ([`explain_json`]), or, for a query that comes without a plan, from its SQL
//! ([`crate::sql::sql_summary`]). A [`PlanSchema`] ([`schema`]) is fitted on a history's
//! summaries (its most frequent operators and tables) and turns any summary into the predictor's
//! fixed-width plan-feature vector.

pub mod explain_json;
pub mod explain_text;
pub mod schema;

pub use explain_json::from_postgres_json;
pub use explain_text::{from_explain_rows, from_explain_text, ExplainRow};
pub use schema::PlanSchema;

/// Where a summary came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SummarySource {
    /// An EXPLAIN plan (operators with the optimizer's row and cost estimates).
    Plan,
    /// The SQL's parse tree (operators without estimates).
    Sql,
}

impl SummarySource {
    /// `plan` or `sql`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Sql => "sql",
        }
    }
}

/// One operator of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanNode {
    /// The operator, in snake case (`seq_scan`, `hash_join`, `ds_bcast_inner`, `aggregate`).
    pub operator: String,
    /// The table it reads, lower-cased, if it scans one.
    pub table: Option<String>,
    /// The optimizer's estimate of its output rows (0 where unknown).
    pub rows: f64,
    /// The optimizer's total cost (0 where unknown).
    pub cost: f64,
}

impl PlanNode {
    /// An operator without estimates.
    pub fn bare(operator: impl Into<String>, table: Option<String>) -> Self {
        Self { operator: operator.into(), table, rows: 0.0, cost: 0.0 }
    }
}

/// A plan's operators and depth.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSummary {
    pub nodes: Vec<PlanNode>,
    /// Levels from the root to the deepest operator (1 for a single operator).
    pub depth: u32,
    pub source: SummarySource,
}

/// `Hash Join` → `hash_join`, `HashAggregate` → `hashaggregate`, `XN Seq Scan` → `seq_scan`.
pub(crate) fn snake(name: &str) -> String {
    let name = name.trim();
    let name = name.strip_prefix("XN ").unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    for w in name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push('_');
        }
        out.push_str(&w.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::snake;

    #[test]
    fn operator_names() {
        assert_eq!(snake("XN Hash Join"), "hash_join");
        assert_eq!(snake(" Seq Scan "), "seq_scan");
        assert_eq!(snake("HashAggregate"), "hashaggregate");
        assert_eq!(snake("DS_BCAST_INNER"), "ds_bcast_inner");
    }
}
