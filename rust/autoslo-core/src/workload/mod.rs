//! Workloads: queries with arrival times, query texts, tenants, workload classes and SLOs.
//!
//! A [`Workload`] is validated on construction: arrivals finite, non-negative and sorted, ids
//! unique, templates known to the catalog, SLOs positive. Nothing is silently dropped: a bad row is
//! an error that names it.

mod base;
mod redbench;

pub use base::{base_workload, phased_workload, BASE_COPIES};
pub use redbench::{redbench_workload, RedbenchConfig};

use std::collections::HashSet;

use crate::catalog::{self, QueryText};
use crate::error::{AutoSloError, Result};
use crate::slo::SloTable;

/// The default tenant and class names used by generators that have a single tenant.
pub const DEFAULT_TENANT: &str = "default";
/// The workload classes the generators know; users may name others.
pub const CLASSES: [&str; 4] = ["dashboard", "adhoc", "report", "backfill"];

/// One query of a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Query {
    pub id: u64,
    /// Arrival time in seconds from the workload's start.
    pub arrival: f64,
    pub text: QueryText,
    /// Index into [`Workload::tenants`].
    pub tenant: u32,
    /// Index into [`Workload::classes`].
    pub class: u32,
    /// Latency SLO in seconds.
    pub slo: f64,
}

/// A validated workload, sorted by arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    queries: Vec<Query>,
    tenants: Vec<String>,
    classes: Vec<String>,
}

/// Column-wise input of a workload (what a table holds). `slo` may be absent (then an
/// [`SloTable`] must be given); `tenant` and `class` default to `"default"` and `"adhoc"`.
#[derive(Debug, Clone, Default)]
pub struct WorkloadColumns {
    pub query_id: Option<Vec<i64>>,
    pub arrival: Vec<f64>,
    pub template: Vec<i64>,
    pub instance: Vec<i64>,
    pub tenant: Option<Vec<String>>,
    pub class: Option<Vec<String>>,
    pub slo: Option<Vec<f64>>,
}

impl Workload {
    /// Build and validate a workload from queries and name tables. O(n).
    pub fn new(queries: Vec<Query>, tenants: Vec<String>, classes: Vec<String>) -> Result<Self> {
        let cat = catalog::tpcds();
        // Ids that ascend (as generated workloads number them) cannot repeat: then no set is kept.
        let ascending = queries.windows(2).all(|p| p[0].id < p[1].id);
        let mut ids = HashSet::with_capacity(if ascending { 0 } else { queries.len() });
        for (row, q) in queries.iter().enumerate() {
            if !(q.arrival.is_finite() && q.arrival >= 0.0) {
                return Err(AutoSloError::out_of_range(format!("arrival of row {row}"), "a finite time ≥ 0 s", q.arrival));
            }
            if row > 0 && q.arrival < queries[row - 1].arrival {
                return Err(AutoSloError::UnsortedArrivals { row, arrival: q.arrival, prev_row: row - 1, prev_arrival: queries[row - 1].arrival });
            }
            if !cat.knows_template(q.text.template) {
                return Err(AutoSloError::UnknownTemplateAt { row, template: q.text.template as i64 });
            }
            if q.text.instance == 0 {
                return Err(AutoSloError::out_of_range(format!("instance of row {row}"), "a query instance from 1 to 65535", 0));
            }
            if !(q.slo.is_finite() && q.slo > 0.0) {
                return Err(AutoSloError::out_of_range(format!("SLO of row {row}"), "a positive number of seconds", q.slo));
            }
            if q.tenant as usize >= tenants.len() || q.class as usize >= classes.len() {
                return Err(AutoSloError::InvalidConfig(format!("row {row} names a tenant or class index outside the name tables")));
            }
            if !ascending && !ids.insert(q.id) {
                return Err(AutoSloError::DuplicateQueryId(q.id));
            }
        }
        Ok(Workload { queries, tenants, classes })
    }

    /// Build from columns. Rows must already be sorted by arrival (an unsorted input is an error,
    /// never silently reordered). Missing SLOs are filled from `slo_table`. O(n).
    pub fn from_columns(cols: WorkloadColumns, slo_table: Option<&SloTable>) -> Result<Self> {
        let n = cols.arrival.len();
        let check_len = |name: &str, len: usize| {
            if len == n {
                Ok(())
            } else {
                Err(AutoSloError::BadColumn { column: name.into(), problem: format!("has {len} rows, `arrival` has {n}") })
            }
        };
        check_len("template", cols.template.len())?;
        check_len("instance", cols.instance.len())?;
        let mut tenants = Interner::default();
        let mut classes = Interner::default();
        let tenant_idx: Vec<u32> = match &cols.tenant {
            Some(v) => {
                check_len("tenant", v.len())?;
                v.iter().map(|s| tenants.get(s)).collect()
            }
            None => vec![tenants.get(DEFAULT_TENANT); n],
        };
        let class_idx: Vec<u32> = match &cols.class {
            Some(v) => {
                check_len("class", v.len())?;
                v.iter().map(|s| classes.get(s)).collect()
            }
            None => vec![classes.get("adhoc"); n],
        };
        if let Some(v) = &cols.query_id {
            check_len("query_id", v.len())?;
        }
        if let Some(v) = &cols.slo {
            check_len("slo", v.len())?;
        }
        let mut queries = Vec::with_capacity(n);
        for row in 0..n {
            let id = match &cols.query_id {
                Some(v) if v[row] < 0 => return Err(AutoSloError::out_of_range(format!("query_id of row {row}"), "≥ 0", v[row])),
                Some(v) => v[row] as u64,
                None => row as u64,
            };
            let template = cols.template[row];
            if !(1..=catalog::NUM_TEMPLATES as i64).contains(&template) {
                return Err(AutoSloError::UnknownTemplateAt { row, template });
            }
            let instance = cols.instance[row];
            if !(1..=u16::MAX as i64).contains(&instance) {
                return Err(AutoSloError::out_of_range(format!("instance of row {row}"), "a query instance from 1 to 65535", instance));
            }
            let template = template as u16;
            let slo = match (&cols.slo, slo_table) {
                (Some(v), _) => v[row],
                (None, Some(t)) => t.slo(template, &classes.names[class_idx[row] as usize])?,
                (None, None) => {
                    return Err(AutoSloError::BadColumn {
                        column: "slo".into(),
                        problem: "missing: give each query's SLO in seconds, or κ (kappa=, --kappa) to make it κ × its template's baseline".into(),
                    })
                }
            };
            queries.push(Query {
                id,
                arrival: cols.arrival[row],
                text: QueryText { template, instance: instance as u16 },
                tenant: tenant_idx[row],
                class: class_idx[row],
                slo,
            });
        }
        Workload::new(queries, tenants.names, classes.names)
    }

    /// Re-assign every query's SLO from a table.
    pub fn with_slos(mut self, table: &SloTable) -> Result<Self> {
        for q in &mut self.queries {
            q.slo = table.slo(q.text.template, &self.classes[q.class as usize])?;
        }
        Ok(self)
    }

    pub fn queries(&self) -> &[Query] {
        &self.queries
    }
    pub fn tenants(&self) -> &[String] {
        &self.tenants
    }
    pub fn classes(&self) -> &[String] {
        &self.classes
    }
    pub fn len(&self) -> usize {
        self.queries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }
    /// Name of a query's tenant.
    pub fn tenant_name(&self, q: &Query) -> &str {
        &self.tenants[q.tenant as usize]
    }
    /// Name of a query's class.
    pub fn class_name(&self, q: &Query) -> &str {
        &self.classes[q.class as usize]
    }
    /// Time of the last arrival (0 when empty).
    pub fn horizon(&self) -> f64 {
        self.queries.last().map_or(0.0, |q| q.arrival)
    }
}

/// Interns names into dense indices, in first-seen order.
#[derive(Default)]
pub(crate) struct Interner {
    pub(crate) names: Vec<String>,
    index: std::collections::HashMap<String, u32>,
}

impl Interner {
    pub(crate) fn get(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> WorkloadColumns {
        WorkloadColumns { arrival: vec![0.0, 1.0, 2.5], template: vec![1, 2, 3], instance: vec![1, 1, 2], ..Default::default() }
    }

    #[test]
    fn columns_build_and_validate() {
        let t = SloTable::paper(2.0).unwrap();
        let w = Workload::from_columns(cols(), Some(&t)).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w.class_name(&w.queries()[0]), "adhoc");
        assert!((w.queries()[0].slo - 6.408).abs() < 1e-12);

        let mut c = cols();
        c.arrival[2] = 0.5;
        assert!(matches!(Workload::from_columns(c, Some(&t)), Err(AutoSloError::UnsortedArrivals { row: 2, .. })));
        let mut c = cols();
        c.arrival[0] = -1.0;
        assert!(Workload::from_columns(c, Some(&t)).unwrap_err().to_string().contains("arrival of row 0"));
        let mut c = cols();
        c.template[1] = 120;
        assert!(matches!(Workload::from_columns(c, Some(&t)), Err(AutoSloError::UnknownTemplateAt { row: 1, template: 120 })));
        let mut c = cols();
        c.query_id = Some(vec![5, 5, 6]);
        assert_eq!(Workload::from_columns(c, Some(&t)), Err(AutoSloError::DuplicateQueryId(5)));
        let mut c = cols();
        c.instance.pop();
        assert!(matches!(Workload::from_columns(c, Some(&t)), Err(AutoSloError::BadColumn { .. })));
        assert!(matches!(Workload::from_columns(cols(), None), Err(AutoSloError::BadColumn { column, .. }) if column == "slo"));
        let mut c = cols();
        c.slo = Some(vec![1.0, 0.0, 1.0]);
        assert!(Workload::from_columns(c, None).is_err());
    }
}
