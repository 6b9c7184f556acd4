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
    /// Refused at admission, before any work (never met; latency 0, no cluster, no cost).
    Rejected(RejectReason),
    /// Its execution failed and was not recovered (live mode: the cluster was lost on every
    /// attempt, or the SQL raised an error). Never met.
    Failed,
    /// The run was stopped (e.g. Ctrl-C) before the query finished. Never met.
    Cancelled,
}

/// Why admission refused a query (stable names, for reports and alerts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// Even alone on the largest cluster available, the query's estimated runtime exceeds its SLO.
    InfeasibleDeadline,
    /// No cluster can take the query (nor the admission queue hold it).
    Capacity,
    /// It waited at the admission queue until its deadline no longer left time to run.
    Expired,
    /// Its tenant's estimated spend would pass the tenant's budget.
    Budget,
}

impl RejectReason {
    /// What the reason means, in words.
    pub fn describe(self) -> &'static str {
        match self {
            RejectReason::InfeasibleDeadline => "its estimated runtime alone on the largest cluster exceeds its SLO",
            RejectReason::Capacity => "no cluster can take it",
            RejectReason::Expired => "it waited until its deadline left no time to run",
            RejectReason::Budget => "its tenant's estimated spend would pass the tenant's budget",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RejectReason::InfeasibleDeadline => "infeasible-deadline",
            RejectReason::Capacity => "capacity",
            RejectReason::Expired => "expired",
            RejectReason::Budget => "budget",
        }
    }
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::TimedOut => "timeout",
            Outcome::Rejected(_) => "rejected",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// One executed query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    /// Index of the query in the workload.
    pub query: usize,
    /// Where it ran (`None`: rejected at admission).
    pub cluster: Option<ClusterId>,
    pub cluster_size: Option<u32>,
    pub arrival: f64,
    /// When it began executing (`None` if it timed out while queued).
    pub start: Option<f64>,
    pub end: f64,
    /// end − arrival; for a timed-out query, the timeout (a lower bound).
    pub latency: f64,
    pub outcome: Outcome,
    /// Isolated work executed (s), the basis of cost attribution.
    pub work: f64,
    /// Dollars attributed to this query ([`attribute_cost_by_work`]).
    pub cost: f64,
    /// The same in whole micro-dollars, the chargeback's unit: these sum to the clusters'
    /// [`ClusterRecord::cost_micro_usd`] exactly.
    pub cost_micro_usd: i64,
}

impl TraceRow {
    /// Whether the query met its SLO (a timed-out query never does).
    pub fn met(&self, slo: f64) -> bool {
        self.outcome == Outcome::Completed && self.latency <= slo
    }
    pub fn censored(&self) -> bool {
        self.outcome == Outcome::TimedOut
    }
    pub fn rejected(&self) -> bool {
        matches!(self.outcome, Outcome::Rejected(_))
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
    /// `spinup`, `ready`, `teardown` (requested) or `gone`; a router may add `ejected` and
    /// `reentered`.
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
        ev.extend(self.extra_events.iter().copied());
        ev.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.cluster.cmp(&b.cluster)));
        ev
    }
}

/// Aggregates over a group of queries.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    pub queries: usize,
    /// Queries that missed their SLO (late, timed out or rejected).
    pub violations: usize,
    pub timeouts: usize,
    /// Queries rejected at admission.
    pub rejected: usize,
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
    /// Events a policy recorded beside the engine's own (e.g. a router's ejections and
    /// re-entries); [`Trace::cluster_events`] merges them in.
    pub extra_events: Vec<ClusterEvent>,
}

impl ClusterRecord {
    /// The bill in whole micro-dollars (rounded), the unit in which attribution is exact.
    pub fn cost_micro_usd(&self) -> i64 {
        (self.cost * 1e6).round() as i64
    }
}

/// Split `total` whole units over `weights` (≥ 0, not all 0) by the largest-remainder method:
/// shares are integers that sum to `total` exactly; remainders are broken by position.
fn largest_remainder(total: i64, weights: &[f64]) -> Vec<i64> {
    split_by_remainder(total, weights, true)
}

/// [`largest_remainder`], handing out the units left after the floors by selecting the shares
/// that get one (`select`) or by sorting every share by remainder (the plain form, kept to check
/// the selection against).
fn split_by_remainder(total: i64, weights: &[f64], select: bool) -> Vec<i64> {
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut shares: Vec<i64> = exact.iter().map(|x| x.floor() as i64).collect();
    let mut left = total - shares.iter().sum::<i64>();
    if left <= 0 {
        return shares;
    }
    let rem: Vec<f64> = exact.iter().map(|x| x - x.floor()).collect();
    // Largest remainder first, then position: a total order.
    let first = |a: &usize, b: &usize| rem[*b].total_cmp(&rem[*a]).then(a.cmp(b));
    let mut order: Vec<usize> = (0..weights.len()).collect();
    if let Some(k) = usize::try_from(left).ok().filter(|&k| select && k < order.len()) {
        // Fewer units than shares (the usual case): each of the first `k` in that order gets one,
        // so selecting them is enough, and they are the same ones a full sort would put first.
        order.select_nth_unstable_by(k, first);
        for &i in &order[..k] {
            shares[i] += 1;
        }
        return shares;
    }
    order.sort_by(first);
    for &i in order.iter().cycle() {
        if left <= 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

/// Cost attribution: every cluster's bill goes to queries, so attributed costs sum to the
/// billed cost (exactly, in whole micro-dollars). The rule (documented in `docs/tenancy.md`):
///
/// 1. A cluster's bill goes to the queries it executed, in proportion to the work (isolated
///    seconds) each executed there; equally among them if none executed any (all timed out
///    queued). Idle time, the spinup and the billing minimum are part of the bill, so they follow
///    the queries that used the cluster.
/// 2. A cluster that executed no query (spun up for load that went elsewhere) was provisioned for
///    the queries that arrived while it was billed (from its request until it was gone, or the
///    run's end): its bill goes to them, in proportion to their work, wherever they ran; to every
///    query of the run if none arrived then. Queries rejected at admission caused no work and
///    pay nothing (unless every query was rejected).
/// 3. Micro-dollar shares are whole numbers by the largest-remainder method, so each cluster's
///    shares sum to its rounded bill; `cost` (dollars) is the same split in floating point.
pub fn attribute_cost_by_work(rows: &mut [TraceRow], clusters: &[ClusterRecord]) {
    for r in rows.iter_mut() {
        r.cost = 0.0;
        r.cost_micro_usd = 0;
    }
    if rows.is_empty() {
        return;
    }
    let run_end = rows.iter().map(|r| r.end).fold(0.0, f64::max);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); clusters.len()];
    for (i, r) in rows.iter().enumerate() {
        if let Some(m) = r.cluster.and_then(|c| members.get_mut(c as usize)) {
            m.push(i);
        }
    }
    // Rejected queries caused no work and pay nothing; if every query was rejected, a bill
    // still needs payers: all of them, equally.
    let executed: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].rejected()).collect();
    let fallback: Vec<usize> = if executed.is_empty() { (0..rows.len()).collect() } else { executed };
    // Emulated traces list queries in arrival order: then the queries arriving during a
    // cluster's life are a range, found by binary search (a month of autoscaling has thousands
    // of clusters that ran nothing).
    let sorted = fallback.windows(2).all(|w| rows[w[0]].arrival <= rows[w[1]].arrival);
    for (c, mine) in clusters.iter().zip(members) {
        let payers: Vec<usize> = if !mine.is_empty() {
            mine
        } else {
            let during = arrived_during(rows, &fallback, sorted, c.requested_at, c.gone_at.unwrap_or(run_end));
            if during.is_empty() {
                fallback.clone()
            } else {
                during
            }
        };
        let work: Vec<f64> = payers.iter().map(|&i| rows[i].work.max(0.0)).collect();
        let weights = if work.iter().sum::<f64>() > 0.0 { work } else { vec![1.0; payers.len()] };
        let total: f64 = weights.iter().sum();
        let micro = largest_remainder(c.cost_micro_usd(), &weights);
        for ((&i, w), m) in payers.iter().zip(&weights).zip(micro) {
            rows[i].cost += c.cost * w / total;
            rows[i].cost_micro_usd += m;
        }
    }
}

/// The queries of `candidates` (indices into `rows`) that arrived in `[from, until]`, in the
/// order of `candidates`; by binary search if `sorted` (their arrivals ascend), else by a scan.
fn arrived_during(rows: &[TraceRow], candidates: &[usize], sorted: bool, from: f64, until: f64) -> Vec<usize> {
    if sorted {
        let a = candidates.partition_point(|&i| rows[i].arrival < from);
        let b = a + candidates[a..].partition_point(|&i| rows[i].arrival <= until);
        candidates[a..b].to_vec()
    } else {
        candidates.iter().copied().filter(|&i| rows[i].arrival >= from && rows[i].arrival <= until).collect()
    }
}

/// One tenant's chargeback: what its queries caused, in whole micro-dollars.
#[derive(Debug, Clone, PartialEq)]
pub struct Chargeback {
    pub tenant: String,
    pub queries: usize,
    /// Isolated seconds of work its queries executed.
    pub work_s: f64,
    pub cost_micro_usd: i64,
}

impl Trace {
    /// Summary over the rows selected by `keep`.
    fn summarize(&self, workload: &Workload, keep: impl Fn(usize) -> bool) -> GroupSummary {
        let qs = workload.queries();
        let mut lat = Vec::new();
        let (mut n, mut viol, mut to, mut rej, mut cost) = (0, 0, 0, 0, 0.0);
        for r in self.rows.iter().filter(|r| keep(r.query)) {
            n += 1;
            viol += usize::from(!r.met(qs[r.query].slo));
            to += usize::from(r.censored());
            rej += usize::from(r.rejected());
            cost += r.cost;
            if !r.rejected() {
                lat.push(r.latency);
            }
        }
        GroupSummary {
            queries: n,
            violations: viol,
            timeouts: to,
            rejected: rej,
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

    /// Per-tenant chargeback (tenants in name order). The costs sum to the clusters' bills in
    /// micro-dollars exactly (rows attributed by [`attribute_cost_by_work`]).
    pub fn chargeback(&self, workload: &Workload) -> Vec<Chargeback> {
        let qs = workload.queries();
        let mut by: BTreeMap<&str, Chargeback> = BTreeMap::new();
        for r in &self.rows {
            let name = workload.tenant_name(&qs[r.query]);
            let e = by.entry(name).or_insert_with(|| Chargeback { tenant: name.to_string(), queries: 0, work_s: 0.0, cost_micro_usd: 0 });
            e.queries += 1;
            e.work_s += r.work;
            e.cost_micro_usd += r.cost_micro_usd;
        }
        by.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cluster(id: ClusterId, cost: f64, requested_at: f64, gone_at: Option<f64>) -> ClusterRecord {
        ClusterRecord { id, size: 8, requested_at, ready_at: requested_at, teardown_requested_at: gone_at, gone_at, billed_seconds: 60.0, cost, queries: 0, spinup_reason: "initial", teardown_reason: None }
    }

    fn row(query: usize, cluster: ClusterId, arrival: f64, work: f64) -> TraceRow {
        TraceRow { query, cluster: Some(cluster), cluster_size: Some(8), arrival, start: Some(arrival), end: arrival + work, latency: work, outcome: Outcome::Completed, work, cost: -1.0, cost_micro_usd: -1 }
    }

    #[test]
    fn an_unused_cluster_is_paid_by_the_queries_that_arrived_while_it_was_billed() {
        // Cluster 1 served nothing while billed from 100 s to 300 s; queries 1 and 2 arrived then.
        let clusters = [cluster(0, 1.0, 0.0, None), cluster(1, 0.3, 100.0, Some(300.0))];
        let mut rows = [row(0, 0, 10.0, 1.0), row(1, 0, 150.0, 1.0), row(2, 0, 250.0, 2.0), row(3, 0, 400.0, 1.0)];
        attribute_cost_by_work(&mut rows, &clusters);
        let micro: Vec<i64> = rows.iter().map(|r| r.cost_micro_usd).collect();
        assert_eq!(micro, vec![200_000, 300_000, 600_000, 200_000]);
        assert_eq!(micro.iter().sum::<i64>(), 1_300_000);
        // Largest remainders: 1 µ$ over three equal shares goes to the first.
        assert_eq!(largest_remainder(1, &[1.0, 1.0, 1.0]), vec![1, 0, 0]);
        assert_eq!(largest_remainder(10, &[1.0, 2.0]), vec![3, 7]);
    }

    proptest! {
        #[test]
        fn the_largest_remainders_selected_are_those_a_full_sort_finds(
            total in 0i64..5_000_000,
            weights in prop::collection::vec(prop::sample::select(vec![0.0, 0.5, 1.0, 1.0, 3.0, 7.25, 120.0, 1e-9]), 1..200),
        ) {
            prop_assume!(weights.iter().sum::<f64>() > 0.0);
            let shares = largest_remainder(total, &weights);
            prop_assert_eq!(shares.iter().sum::<i64>(), total);
            prop_assert_eq!(shares, split_by_remainder(total, &weights, false));
        }

        #[test]
        fn attributed_micro_dollars_sum_to_the_bill_exactly(
            costs in prop::collection::vec((0.0f64..50.0, 0.0f64..3000.0, prop::option::of(0.0f64..3000.0)), 1..6),
            queries in prop::collection::vec((0usize..6, 0.0f64..4000.0, prop::sample::select(vec![0.0, 0.5, 3.0, 120.0])), 1..60),
        ) {
            let clusters: Vec<ClusterRecord> = costs.iter().enumerate().map(|(i, &(cost, at, gone))| cluster(i as ClusterId, cost, at, gone.map(|g| at + g))).collect();
            let mut rows: Vec<TraceRow> = queries.iter().enumerate().map(|(i, &(c, arrival, work))| row(i, (c % clusters.len()) as ClusterId, arrival, work)).collect();
            attribute_cost_by_work(&mut rows, &clusters);
            let billed: i64 = clusters.iter().map(ClusterRecord::cost_micro_usd).sum();
            prop_assert_eq!(rows.iter().map(|r| r.cost_micro_usd).sum::<i64>(), billed);
            prop_assert!(rows.iter().all(|r| r.cost_micro_usd >= 0 && r.cost >= 0.0));
            let dollars: f64 = clusters.iter().map(|c| c.cost).sum();
            prop_assert!((rows.iter().map(|r| r.cost).sum::<f64>() - dollars).abs() <= 1e-9 * dollars.max(1.0));
        }

        #[test]
        fn the_binary_search_finds_the_queries_the_scan_finds(
            mut arrivals in prop::collection::vec(prop::sample::select(vec![0.0, 5.0, 10.0, 10.0, 20.0, 35.5, 60.0]), 0..40),
            skip in prop::collection::vec(any::<bool>(), 40),
            from in prop::sample::select(vec![-1.0, 0.0, 5.0, 10.0, 12.0, 60.0, 61.0]),
            len in prop::sample::select(vec![-1.0, 0.0, 4.9, 10.0, 100.0]),
        ) {
            arrivals.sort_by(f64::total_cmp);
            let rows: Vec<TraceRow> = arrivals.iter().enumerate().map(|(i, &a)| row(i, 0, a, 1.0)).collect();
            let candidates: Vec<usize> = (0..rows.len()).filter(|&i| !skip[i]).collect();
            prop_assert_eq!(arrived_during(&rows, &candidates, true, from, from + len), arrived_during(&rows, &candidates, false, from, from + len));
        }
    }
}
