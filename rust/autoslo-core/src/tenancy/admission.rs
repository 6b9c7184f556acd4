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

/// What [`NamedAdmission`] decided of a query: admitted, with the estimated dollars charged to
/// its tenant's budget (0 when its tenant has none), or refused.
pub type AdmissionDecision = std::result::Result<f64, RejectReason>;

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
        self.spent.get(&(tenant, self.window(now))).copied().unwrap_or(0.0)
    }

    fn window(&self, now: f64) -> u64 {
        (now / self.window_s).floor().max(0.0) as u64
    }

    /// When the window that holds `now` began (on the same clock).
    pub fn window_start(&self, now: f64) -> f64 {
        self.window(now) as f64 * self.window_s
    }

    /// When the window that holds `now` ends, and the next begins (on the same clock).
    pub fn window_end(&self, now: f64) -> f64 {
        (self.window(now) + 1) as f64 * self.window_s
    }

    /// Tenant `t`'s budget per window, if it has one.
    pub fn budget(&self, tenant: u32) -> Option<f64> {
        self.budgets.get(&tenant).copied()
    }

    /// Charge `dollars` to tenant `t`'s window that holds `now`, as if its queries had been
    /// admitted: what a restarted service's log says the tenant spent before the restart.
    pub fn charge(&mut self, tenant: u32, now: f64, dollars: f64) -> Result<()> {
        if !(dollars.is_finite() && dollars >= 0.0) {
            return Err(AutoSloError::out_of_range("dollars charged to a budget", "finite and ≥ 0", dollars));
        }
        *self.spent.entry((tenant, self.window(now))).or_insert(0.0) += dollars;
        Ok(())
    }

    /// [`Admission::decide`], with the dollars charged to the tenant's window when admitted.
    pub fn admit(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> AdmissionDecision {
        if let Some(r) = self.inner.as_mut().and_then(|a| a.decide(now, query, clusters)) {
            return Err(r);
        }
        let Some(&budget) = self.budgets.get(&query.tenant) else { return Ok(0.0) };
        let Some(size) = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.size).max() else {
            return Err(RejectReason::Capacity);
        };
        let est = self.predictor.stage.estimate(query.text, size).unwrap_or(0.0);
        let cost = self.billing.cost(size, est);
        let key = (query.tenant, self.window(now));
        let spent = self.spent.entry(key).or_insert(0.0);
        if *spent + cost > budget {
            return Err(RejectReason::Budget);
        }
        *spent += cost;
        Ok(cost)
    }
}

impl Admission for BudgetAdmission {
    fn decide(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Option<RejectReason> {
        self.admit(now, query, clusters).err()
    }
    fn name(&self) -> &str {
        "budget"
    }
}

/// A budgeted tenant's standing in the current window ([`NamedAdmission::budgets`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStatus {
    pub tenant: String,
    /// Dollars per window.
    pub budget: f64,
    /// Estimated dollars admission charged in the window so far.
    pub spent: f64,
    /// When the window began, on the budget windows' clock.
    pub window_start: f64,
}

/// Admission for a control plane that serves queries by tenant *name* (the serving path, where
/// no workload lists the tenants beforehand): [`DeadlineAdmission`] and per-tenant budgets by
/// name ([`BudgetAdmission`]), each optional. Names get indices as they are first seen; the
/// budgeted tenants first.
pub struct NamedAdmission {
    admission: Named,
    tenants: HashMap<String, u32>,
}

/// The admission [`NamedAdmission`] runs.
enum Named {
    Deadline(DeadlineAdmission),
    /// Budgets, after the deadline admission if one was given.
    Budget(BudgetAdmission),
}

impl NamedAdmission {
    /// `deadline`: (margin, largest size) of a [`DeadlineAdmission`]; `budgets`: (dollars per
    /// window by tenant name, window length in s) of a [`BudgetAdmission`] consulted after it.
    /// `None` when neither is given.
    pub fn new(predictor: &Predictor, billing: BillingPolicy, deadline: Option<(f64, Option<u32>)>, budgets: Option<(HashMap<String, f64>, f64)>) -> Result<Option<Self>> {
        let deadline = match deadline {
            Some((margin, largest)) => Some(DeadlineAdmission::new(predictor.clone(), margin, largest)?),
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
            let inner = deadline.map(|d| Box::new(d) as Box<dyn Admission>);
            let budget = BudgetAdmission::new(predictor.clone(), billing, by_index, window_s, inner)?;
            return Ok(Some(Self { admission: Named::Budget(budget), tenants }));
        }
        Ok(deadline.map(|d| Self { admission: Named::Deadline(d), tenants }))
    }

    fn index(&mut self, tenant: &str) -> u32 {
        match self.tenants.get(tenant) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.tenants.len()).unwrap_or(u32::MAX);
                self.tenants.insert(tenant.to_string(), i);
                i
            }
        }
    }

    /// Admit or reject the query of `tenant` with `text` and `slo`, arriving at `now` on the
    /// budget windows' clock, given the clusters as they are; admitted, the dollars charged to
    /// its tenant's budget.
    pub fn decide(&mut self, now: f64, query_id: u64, text: crate::catalog::QueryText, tenant: &str, slo: f64, clusters: &[ClusterInfo]) -> AdmissionDecision {
        let tenant = self.index(tenant);
        let q = Query { id: query_id, arrival: now, text, tenant, class: 0, slo };
        match &mut self.admission {
            Named::Deadline(d) => d.decide(now, &q, clusters).map_or(Ok(0.0), Err),
            Named::Budget(b) => b.admit(now, &q, clusters),
        }
    }

    /// Charge `dollars` to `tenant`'s budget window that holds `now` (the budget windows'
    /// clock), as if its queries had been admitted: a restarted service restores what its log
    /// says each tenant spent. Without budgets, nothing to charge.
    pub fn charge(&mut self, tenant: &str, now: f64, dollars: f64) -> Result<()> {
        let i = self.index(tenant);
        match &mut self.admission {
            Named::Deadline(_) => Ok(()),
            Named::Budget(b) => b.charge(i, now, dollars),
        }
    }

    /// Each budgeted tenant's budget and estimated spend in the window that holds `now` (the
    /// budget windows' clock), by tenant name; empty without budgets.
    pub fn budgets(&self, now: f64) -> Vec<BudgetStatus> {
        let Named::Budget(b) = &self.admission else { return Vec::new() };
        let mut v: Vec<BudgetStatus> = self
            .tenants
            .iter()
            .filter_map(|(name, &i)| b.budget(i).map(|budget| BudgetStatus { tenant: name.clone(), budget, spent: b.spent(i, now), window_start: b.window_start(now) }))
            .collect();
        v.sort_by(|x, y| x.tenant.cmp(&y.tenant));
        v
    }

    /// When the budget window that holds `now` ends (the budget windows' clock): from then a
    /// tenant refused for its budget has its budget again. `None` without budgets.
    pub fn budget_window_end(&self, now: f64) -> Option<f64> {
        match &self.admission {
            Named::Budget(b) => Some(b.window_end(now)),
            Named::Deadline(_) => None,
        }
    }

    /// The admission's name (`deadline`, or `budget` when budgets are enforced).
    pub fn name(&self) -> &str {
        match &self.admission {
            Named::Deadline(d) => d.name(),
            Named::Budget(b) => b.name(),
        }
    }
}
