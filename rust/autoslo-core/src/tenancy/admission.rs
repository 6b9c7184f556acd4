//! Admission at the router boundary: refuse, before any work, a query the fleet cannot serve
//! within its SLO, with a stable reason. A rejected query is an outcome of its own (never met,
//! no cluster, no cost), not a late run that occupied a cluster and slowed its neighbours.
//!
//! [`DeadlineAdmission`] rejects a query whose Stage estimate alone, on the largest cluster size
//! available, exceeds its SLO (`infeasible-deadline`), and a query no cluster can take
//! (`capacity`). The estimate is the predictor's, not the warehouse's truth, so a margin guards
//! against rejecting on a pessimistic estimate; a query with no estimate is admitted.
//! [`BudgetAdmission`] refuses a tenant's query once its estimated spend would pass its budget
//! (`budget`).

use std::collections::HashMap;

use crate::billing::BillingPolicy;
use crate::cluster::ClusterInfo;
use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::trace::RejectReason;
use crate::workload::Query;

/// Decides, at arrival, whether a query is admitted (`None`) or rejected.
pub trait Admission: Send {
    fn decide(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Option<RejectReason>;
    fn name(&self) -> &str;
}

/// Reject infeasible deadlines and queries no cluster can take.
pub struct DeadlineAdmission {
    predictor: Predictor,
    /// Reject only if the estimate exceeds the SLO × this (≥ 1; 1: any excess).
    pub margin: f64,
    /// The largest cluster size the fleet can offer (e.g. the autoscaler's largest spinup size);
    /// `None`: the largest cluster that takes queries now.
    pub largest_size: Option<u32>,
}

impl DeadlineAdmission {
    pub fn new(predictor: Predictor, margin: f64, largest_size: Option<u32>) -> Result<Self> {
        if !(margin.is_finite() && margin >= 1.0) {
            return Err(AutoSloError::out_of_range("admission margin", "≥ 1", margin));
        }
        if let Some(s) = largest_size {
            crate::cluster::check_base_capacity("admission's largest size", s)?;
        }
        Ok(Self { predictor, margin, largest_size })
    }
}

impl Admission for DeadlineAdmission {
    fn decide(&mut self, _now: f64, query: &Query, clusters: &[ClusterInfo]) -> Option<RejectReason> {
        let Some(available) = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.size).max() else {
            return Some(RejectReason::Capacity);
        };
        let size = self.largest_size.map_or(available, |l| l.max(available));
        match self.predictor.stage.estimate(query.text, size) {
            Ok(est) if est > query.slo * self.margin => Some(RejectReason::InfeasibleDeadline),
            _ => None,
        }
    }
    fn name(&self) -> &str {
        "deadline"
    }
}

/// Per-tenant spending budgets, enforced at admission on *estimated* spend: a query's estimate is
/// its Stage runtime on the largest cluster taking queries × that size × the RPU-hour price (what
/// it would cost alone). A tenant whose estimated spend in the current budget window (a day by
/// default, windows aligned to t = 0) plus the query's would pass its budget is refused with
/// reason `budget`; an admitted query's estimate is charged to its tenant's window. Tenants
/// without a budget are not limited. The bill a tenant is finally charged is the chargeback
/// (`Trace::chargeback`), which shares clusters' time by work; the report shows both.
pub struct BudgetAdmission {
    predictor: Predictor,
    billing: BillingPolicy,
    /// Budget in dollars per window, by tenant index.
    budgets: HashMap<u32, f64>,
    window_s: f64,
    spent: HashMap<(u32, u64), f64>,
    /// Another admission consulted first (e.g. [`DeadlineAdmission`]); its rejections stand.
    inner: Option<Box<dyn Admission>>,
}

impl BudgetAdmission {
    pub fn new(predictor: Predictor, billing: BillingPolicy, budgets: HashMap<u32, f64>, window_s: f64, inner: Option<Box<dyn Admission>>) -> Result<Self> {
        if let Some((t, b)) = budgets.iter().find(|(_, b)| !(b.is_finite() && **b >= 0.0)) {
            return Err(AutoSloError::out_of_range(format!("budget of tenant {t}"), "≥ 0 dollars", b));
        }
        if !(window_s.is_finite() && window_s > 0.0) {
            return Err(AutoSloError::out_of_range("budget window", "> 0 s", window_s));
        }
        Ok(Self { predictor, billing, budgets, window_s, spent: HashMap::new(), inner })
    }

    /// Estimated dollars spent by tenant `t` in the window that holds `now`.
    pub fn spent(&self, tenant: u32, now: f64) -> f64 {
        self.spent.get(&(tenant, (now / self.window_s).floor() as u64)).copied().unwrap_or(0.0)
    }
}

impl Admission for BudgetAdmission {
    fn decide(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Option<RejectReason> {
        if let Some(r) = self.inner.as_mut().and_then(|a| a.decide(now, query, clusters)) {
            return Some(r);
        }
        let Some(&budget) = self.budgets.get(&query.tenant) else { return None };
        let Some(size) = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.size).max() else {
            return Some(RejectReason::Capacity);
        };
        let est = self.predictor.stage.estimate(query.text, size).unwrap_or(0.0);
        let cost = self.billing.cost(size, est);
        let key = (query.tenant, (now / self.window_s).floor() as u64);
        let spent = self.spent.entry(key).or_insert(0.0);
        if *spent + cost > budget {
            return Some(RejectReason::Budget);
        }
        *spent += cost;
        None
    }
    fn name(&self) -> &str {
        "budget"
    }
}

/// Admission for a control plane that serves queries by tenant *name* (the serving path, where
/// no workload lists the tenants beforehand): [`DeadlineAdmission`] and per-tenant budgets by
/// name ([`BudgetAdmission`]), each optional. Names get indices as they are first seen; the
/// budgeted tenants first.
pub struct NamedAdmission {
    admission: Box<dyn Admission>,
    tenants: HashMap<String, u32>,
}

impl NamedAdmission {
    /// `deadline`: (margin, largest size) of a [`DeadlineAdmission`]; `budgets`: (dollars per
    /// window by tenant name, window length in s) of a [`BudgetAdmission`] consulted after it.
    /// `None` when neither is given.
    pub fn new(predictor: &Predictor, billing: BillingPolicy, deadline: Option<(f64, Option<u32>)>, budgets: Option<(HashMap<String, f64>, f64)>) -> Result<Option<Self>> {
        let mut admission: Option<Box<dyn Admission>> = match deadline {
            Some((margin, largest)) => Some(Box::new(DeadlineAdmission::new(predictor.clone(), margin, largest)?)),
            None => None,
        };
        let mut tenants = HashMap::new();
        if let Some((per_name, window_s)) = budgets {
            let mut names: Vec<(String, f64)> = per_name.into_iter().collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            let mut by_index = HashMap::new();
            for (i, (name, budget)) in names.into_iter().enumerate() {
                let i = u32::try_from(i).map_err(|_| AutoSloError::InvalidConfig("more than 2^32 budgeted tenants".into()))?;
                tenants.insert(name, i);
                by_index.insert(i, budget);
            }
            admission = Some(Box::new(BudgetAdmission::new(predictor.clone(), billing, by_index, window_s, admission)?));
        }
        Ok(admission.map(|admission| Self { admission, tenants }))
    }

    /// Admit (`None`) or reject the query of `tenant` with `text` and `slo`, arriving at `now`
    /// on the budget windows' clock, given the clusters as they are.
    pub fn decide(&mut self, now: f64, query_id: u64, text: crate::catalog::QueryText, tenant: &str, slo: f64, clusters: &[ClusterInfo]) -> Option<RejectReason> {
        let tenant = match self.tenants.get(tenant) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.tenants.len()).unwrap_or(u32::MAX);
                self.tenants.insert(tenant.to_string(), i);
                i
            }
        };
        let q = Query { id: query_id, arrival: now, text, tenant, class: 0, slo };
        self.admission.decide(now, &q, clusters)
    }

    /// The admission's name (`deadline`, or `budget` when budgets are enforced).
    pub fn name(&self) -> &str {
        self.admission.name()
    }
}
