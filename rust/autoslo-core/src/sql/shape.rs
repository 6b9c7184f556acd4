//! What a query's parse tree says, for a query that comes without a plan: its operators (select
//! blocks, base-table scans, joins, filters and predicates, aggregates and GROUP BY, windows,
//! subqueries, CTEs, set operations, DISTINCT, CASE, sorts, limits) and the tables it reads, as a
//! [`PlanSummary`] without estimates (every `rows` 0). Its depth is the nesting of its queries
//! (1 for a query without subqueries). A CTE's name is not a table.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, ObjectName, Query, Select, SetExpr, Statement, TableFactor, Visit, Visitor};
use sqlparser::parser::Parser;

use super::Dialect;
use crate::error::{AutoSloError, Result};
use crate::plan::explain_text::table_name;
use crate::plan::{PlanNode, PlanSummary, SummarySource};

/// Aggregate functions counted as `aggregate` (by name, lower case).
const AGGREGATES: [&str; 16] = ["count", "sum", "avg", "min", "max", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop", "listagg", "median", "percentile_cont", "approximate", "array_agg"];

/// The parse-tree summary of `sql` (one statement) in `dialect`.
pub fn sql_summary(sql: &str, dialect: Dialect) -> Result<PlanSummary> {
    let statements = Parser::parse_sql(dialect.parser(), sql).map_err(|e| AutoSloError::Sql(e.to_string()))?;
    let statement = match statements.as_slice() {
        [s] => s,
        [] => return Err(AutoSloError::Sql("no statement".into())),
        more => return Err(AutoSloError::Sql(format!("{} statements, expected one", more.len()))),
    };
    Ok(summary_of(statement))
}

/// A statement's class and parse-tree summary from one tokenization (what featurising a new
/// statement at routing time costs). The class is an error if the tokenizer cannot read it; the
/// summary, if the parser cannot.
pub fn class_and_summary(sql: &str, dialect: Dialect) -> Result<(super::QueryClass, Result<PlanSummary>)> {
    let tokens = sqlparser::tokenizer::Tokenizer::new(dialect.parser(), sql).tokenize().map_err(|e| AutoSloError::Sql(e.to_string()))?;
    let text = super::identity::normalize_tokens(&tokens, sql.len())?;
    let class = super::QueryClass { id: super::identity::hash_text(&text), text };
    let parsed = Parser::new(dialect.parser()).with_tokens(tokens).parse_statements().map_err(|e| AutoSloError::Sql(e.to_string()));
    let summary = parsed.and_then(|st| match st.as_slice() {
        [s] => Ok(summary_of(s)),
        [] => Err(AutoSloError::Sql("no statement".into())),
        more => Err(AutoSloError::Sql(format!("{} statements, expected one", more.len()))),
    });
    Ok((class, summary))
}

/// Whether `sql` is a read (a SELECT, or a WITH … SELECT), as the history keeps it.
pub fn is_select(statement: &Statement) -> bool {
    matches!(statement, Statement::Query(_))
}

pub(crate) fn summary_of(statement: &Statement) -> PlanSummary {
    let mut v = Shape::default();
    let _ = statement.visit(&mut v);
    let mut nodes: Vec<PlanNode> = v.ops.into_iter().map(|o| PlanNode::bare(o, None)).collect();
    nodes.extend(v.tables.into_iter().filter(|t| !v.ctes.contains(t)).map(|t| PlanNode::bare("scan", Some(t))));
    PlanSummary { nodes, depth: v.max_depth.max(1), source: SummarySource::Sql }
}

#[derive(Default)]
struct Shape {
    ops: Vec<&'static str>,
    /// Every relation read, in order (CTE references among them, removed at the end).
    tables: Vec<String>,
    ctes: BTreeSet<String>,
    depth: u32,
    max_depth: u32,
}

impl Visitor for Shape {
    type Break = ();

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        self.depth += 1;
        self.max_depth = self.max_depth.max(self.depth);
        if self.depth > 1 {
            self.ops.push("subquery");
        }
        if let Some(with) = &q.with {
            for c in &with.cte_tables {
                self.ops.push("cte");
                self.ctes.insert(table_name(&c.alias.name.to_string()));
            }
        }
        if q.order_by.is_some() {
            self.ops.push("sort");
        }
        if q.limit_clause.is_some() || q.fetch.is_some() {
            self.ops.push("limit");
        }
        if let SetExpr::SetOperation { .. } = q.body.as_ref() {
            self.ops.push("set_operation");
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, s: &Select) -> ControlFlow<()> {
        self.ops.push("select");
        if s.distinct.is_some() {
            self.ops.push("distinct");
        }
        // Joins: explicit ones, and the comma joins of a FROM list.
        let explicit: usize = s.from.iter().map(|t| t.joins.len()).sum();
        for _ in 0..explicit + s.from.len().saturating_sub(1) {
            self.ops.push("join");
        }
        if s.selection.is_some() {
            self.ops.push("filter");
        }
        if s.having.is_some() || s.qualify.is_some() {
            self.ops.push("filter");
        }
        let grouped = match &s.group_by {
            sqlparser::ast::GroupByExpr::All(_) => true,
            sqlparser::ast::GroupByExpr::Expressions(e, _) => !e.is_empty(),
        };
        if grouped {
            self.ops.push("group_by");
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, .. } = t {
            if let Some(n) = last_part(name) {
                self.tables.push(n);
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        match e {
            Expr::BinaryOp { op, .. } if is_comparison(op) => self.ops.push("predicate"),
            Expr::In { .. } | Expr::Between { .. } | Expr::Like { .. } | Expr::ILike { .. } | Expr::IsNull(_) | Expr::IsNotNull(_) | Expr::Exists { .. } => self.ops.push("predicate"),
            Expr::Case { .. } => self.ops.push("case"),
            Expr::Function(f) => {
                if f.over.is_some() {
                    self.ops.push("window");
                } else if last_part(&f.name).is_some_and(|n| AGGREGATES.contains(&n.as_str())) {
                    self.ops.push("aggregate");
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq | BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq)
}

fn last_part(name: &ObjectName) -> Option<String> {
    name.0.last().and_then(|p| p.as_ident()).map(|i| if i.quote_style.is_some() { i.value.clone() } else { i.value.to_lowercase() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(s: &PlanSummary) -> Vec<&str> {
        let mut v: Vec<&str> = s.nodes.iter().map(|n| n.operator.as_str()).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_tpch_like_query() {
        let sql = "with big as (select o_custkey, sum(o_totalprice) s from orders group by o_custkey)
            select c_name, b.s, rank() over (order by b.s desc)
            from customer c join big b on c.c_custkey = b.o_custkey, nation n
            where c.c_nationkey = n.n_nationkey and n.n_name in ('FRANCE', 'GERMANY')
              and exists (select 1 from lineitem l where l.l_orderkey = c.c_custkey)
            order by b.s desc limit 10";
        let s = sql_summary(sql, Dialect::Redshift).unwrap();
        let tables: BTreeSet<&str> = s.nodes.iter().filter_map(|n| n.table.as_deref()).collect();
        assert_eq!(tables, BTreeSet::from(["orders", "customer", "nation", "lineitem"]));
        let o = ops(&s);
        let count = |k: &str| o.iter().filter(|x| **x == k).count();
        assert_eq!(count("cte"), 1);
        assert_eq!(count("join"), 2);
        assert_eq!(count("window"), 1);
        assert_eq!(count("aggregate"), 1);
        assert_eq!(count("group_by"), 1);
        assert_eq!(count("subquery"), 2); // the CTE's body and the EXISTS
        assert_eq!(count("sort"), 1);
        assert_eq!(count("limit"), 1);
        assert_eq!(count("select"), 3);
        assert!(count("predicate") >= 4);
        assert_eq!(s.depth, 2);
        assert!(s.nodes.iter().all(|n| n.rows == 0.0));
        assert_eq!(s.source, SummarySource::Sql);
    }

    #[test]
    fn one_tokenization_gives_the_same_class_and_summary() {
        let sql = "select a, count(*) from t join u on t.k = u.k where x in (1, 2) group by a";
        let (c, s) = class_and_summary(sql, Dialect::Postgres).unwrap();
        assert_eq!(c, super::super::QueryClass::of(sql, Dialect::Postgres).unwrap());
        assert_eq!(s.unwrap(), sql_summary(sql, Dialect::Postgres).unwrap());
        let (_, bad) = class_and_summary("select from where", Dialect::Postgres).unwrap();
        assert!(bad.is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash_on_a_worker_thread() {
        // A rayon worker's stack (2 MB): the parser's depth limit stops first.
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let nest = |n: usize| format!("select {}1{} from t", "(".repeat(n), ")".repeat(n));
                assert!(class_and_summary(&nest(30), Dialect::Redshift).unwrap().1.is_ok());
                assert!(class_and_summary(&nest(5_000), Dialect::Redshift).unwrap().1.is_err());
                let sub = |n: usize| format!("select * from {}t{}", "(select * from ".repeat(n), ") x".repeat(n));
                assert!(class_and_summary(&sub(20), Dialect::Redshift).unwrap().1.is_ok());
                assert!(class_and_summary(&sub(2_000), Dialect::Redshift).unwrap().1.is_err());
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn errors_and_statement_kinds() {
        assert!(sql_summary("selec x from", Dialect::Postgres).is_err());
        assert!(sql_summary("select 1; select 2", Dialect::Postgres).unwrap_err().to_string().contains("2 statements"));
        let st = Parser::parse_sql(Dialect::Redshift.parser(), "insert into t values (1)").unwrap();
        assert!(!is_select(&st[0]));
        let st = Parser::parse_sql(Dialect::Redshift.parser(), "with a as (select 1) select * from a").unwrap();
        assert!(is_select(&st[0]));
        let s = summary_of(&st[0]);
        assert!(s.nodes.iter().all(|n| n.table.is_none()), "a CTE is not a table");
    }
}
