//! Execution traces: one row per query with where and how it ran, one row per cluster with what
//! it cost, and their summaries (fleet-wide and per tenant × class).

use std::collections::BTreeMap;

use crate::billing::{BillingPolicy, BillingTimer};
use crate::cluster::{ClusterId, ClusterInfo};
use crate::stats::quantile;
use crate::workload::Workload;

/// How a query ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Finished (in or out of its SLO).
    Completed,
    /// Hit the per-query timeout; its latency is a lower bound (censored).
    TimedOut,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::TimedOut => "timeout",
        }
    }
}

/// One executed query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    /// Index of the query in the workload.
    pub query: usize,
    pub cluster: ClusterId,
    pub cluster_size: u32,
    pub arrival: f64,
    /// When it began executing (`None` if it timed out while queued).
    pub start: Option<f64>,
    pub end: f64,
    /// end − arrival; for a timed-out query, the timeout (a lower bound).
    pub latency: f64,
    pub outcome: Outcome,
    /// Isolated work executed (s), the basis of cost attribution.
    pub work: f64,
    /// Dollars attributed to this query (its cluster's bill split by executed work).
    pub cost: f64,
}

impl TraceRow {
    /// Whether the query met its SLO (a timed-out query never does).
    pub fn met(&self, slo: f64) -> bool {
        self.outcome == Outcome::Completed && self.latency <= slo
    }
    pub fn censored(&self) -> bool {
        self.outcome == Outcome::TimedOut
    }
}

/// One cluster's life and bill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterRecord {
    pub id: ClusterId,
    pub size: u32,
    pub requested_at: f64,
    pub ready_at: f64,
    /// When teardown was requested (`None` if never).
    pub teardown_requested_at: Option<f64>,
    /// When the cluster was (or will be) gone (`None` if never torn down).
    pub gone_at: Option<f64>,
    pub billed_seconds: f64,
    pub cost: f64,
    pub queries: usize,
    /// Why the cluster was spun up (`initial` for the clusters a run starts with).
    pub spinup_reason: &'static str,
    /// Why it was torn down, if it was.
    pub teardown_reason: Option<&'static str>,
}

impl ClusterRecord {
    /// Close a cluster's bill at `end`: its billed seconds until drained and their cost.
    pub fn close(info: &ClusterInfo, timer: &BillingTimer, billing: &BillingPolicy, end: f64, teardown_requested_at: Option<f64>, gone_at: Option<f64>, queries: usize) -> Self {
        let billed_seconds = timer.billed_seconds_until_drained(end);
        Self {
            id: info.id,
            size: info.size,
            requested_at: info.requested_at,
            ready_at: info.ready_at,
            teardown_requested_at,
            gone_at,
            billed_seconds,
            cost: billing.cost(info.size, billed_seconds),
            queries,
            spinup_reason: "requested",
            teardown_reason: teardown_requested_at.map(|_| "requested"),
        }
    }

    /// The same record with the reasons its engine recorded (`close` alone says `requested`).
    pub fn with_reasons(mut self, spinup: &'static str, teardown: Option<&'static str>) -> Self {
        self.spinup_reason = spinup;
        self.teardown_reason = teardown;
        self
    }
}

/// One change of the cluster set, for the cluster-events table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterEvent {
    pub time: f64,
    pub cluster: ClusterId,
    pub size: u32,
    /// `spinup`, `ready`, `teardown` (requested) or `gone`.
    pub kind: &'static str,
    pub reason: &'static str,
}

impl Trace {
    /// Every spinup, readiness, teardown request and disappearance, in time order (ties by
    /// cluster). Initial clusters contribute their `ready` event at t = 0 with reason `initial`.
    pub fn cluster_events(&self) -> Vec<ClusterEvent> {
        let mut ev = Vec::new();
        for c in &self.clusters {
            let e = |time: f64, kind: &'static str, reason: &'static str| ClusterEvent { time, cluster: c.id, size: c.size, kind, reason };
            if c.spinup_reason != "initial" {
                ev.push(e(c.requested_at, "spinup", c.spinup_reason));
            }
            ev.push(e(c.ready_at, "ready", c.spinup_reason));
            if let Some(t) = c.teardown_requested_at {
                ev.push(e(t, "teardown", c.teardown_reason.unwrap_or("requested")));
            }
            if let Some(t) = c.gone_at {
                ev.push(e(t, "gone", c.teardown_reason.unwrap_or("requested")));
            }
        }
        ev.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.cluster.cmp(&b.cluster)));
        ev
    }
}

/// Aggregates over a group of queries.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    pub queries: usize,
    pub violations: usize,
    pub timeouts: usize,
    pub violation_rate: f64,
    pub latency_p50: f64,
    pub latency_p95: f64,
    pub cost: f64,
}

/// A complete execution trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Rows in workload order (row i is query i).
    pub rows: Vec<TraceRow>,
    pub clusters: Vec<ClusterRecord>,
}

/// Split each cluster's billed cost over its queries in proportion to the work each executed
/// (equally if none executed any), so per-query costs add up to the bill.
pub fn attribute_cost_by_work(rows: &mut [TraceRow], clusters: &[ClusterRecord]) {
    let mut work = vec![0.0; clusters.len()];
    let mut n = vec![0usize; clusters.len()];
    for r in rows.iter() {
        work[r.cluster as usize] += r.work;
        n[r.cluster as usize] += 1;
    }
    for r in rows.iter_mut() {
        let c = r.cluster as usize;
        r.cost = if work[c] > 0.0 { clusters[c].cost * r.work / work[c] } else { clusters[c].cost / n[c] as f64 };
    }
}

impl Trace {
    /// Summary over the rows selected by `keep`.
    fn summarize(&self, workload: &Workload, keep: impl Fn(usize) -> bool) -> GroupSummary {
        let qs = workload.queries();
        let mut lat = Vec::new();
        let (mut n, mut viol, mut to, mut cost) = (0, 0, 0, 0.0);
        for r in self.rows.iter().filter(|r| keep(r.query)) {
            n += 1;
            viol += usize::from(!r.met(qs[r.query].slo));
            to += usize::from(r.censored());
            cost += r.cost;
            lat.push(r.latency);
        }
        GroupSummary {
            queries: n,
            violations: viol,
            timeouts: to,
            violation_rate: if n > 0 { viol as f64 / n as f64 } else { 0.0 },
            latency_p50: quantile(&lat, 0.5).unwrap_or(f64::NAN),
            latency_p95: quantile(&lat, 0.95).unwrap_or(f64::NAN),
            cost,
        }
    }

    /// Fleet-wide summary. The cost is the billed cost of all clusters.
    pub fn summary(&self, workload: &Workload) -> GroupSummary {
        let mut s = self.summarize(workload, |_| true);
        s.cost = self.total_cost();
        s
    }

    /// Summary per (tenant, class), by name. Attributed costs sum to the billed cost.
    pub fn per_tenant_class(&self, workload: &Workload) -> BTreeMap<(String, String), GroupSummary> {
        let qs = workload.queries();
        let mut groups: BTreeMap<(u32, u32), ()> = BTreeMap::new();
        for r in &self.rows {
            groups.insert((qs[r.query].tenant, qs[r.query].class), ());
        }
        groups
            .keys()
            .map(|&(t, c)| {
                let s = self.summarize(workload, |i| qs[i].tenant == t && qs[i].class == c);
                ((workload.tenants()[t as usize].clone(), workload.classes()[c as usize].clone()), s)
            })
            .collect()
    }

    /// Total billed cost ($).
    pub fn total_cost(&self) -> f64 {
        self.clusters.iter().map(|c| c.cost).sum()
    }
}
