//! A bound on an emulated run: stop it as soon as its outcome can no longer matter to a search
//! for the cheapest run that meets a violation-rate target (the best plan in hindsight,
//! [`crate::tuner::hindsight`]).
//!
//! Both cuts are exact. A query is known to have missed its SLO once its deadline (arrival +
//! SLO) has passed and it has not completed within it; that count only grows, so once it exceeds
//! what τ allows the run cannot meet τ. The bill only grows too, so once the billed cost so far
//! exceeds the cheapest run already known to meet τ, this run cannot be cheaper. A search that
//! cuts runs this way returns the same best run as one that finishes them all.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::billing::{BillingPolicy, BillingTimer};
use crate::trace::TraceRow;
use crate::workload::Workload;

/// When to stop a run early.
#[derive(Debug, Default)]
pub struct RunBound<'a> {
    /// Stop once more than this many queries are known to have missed their SLO.
    pub violations: Option<usize>,
    /// Per tenant (by index into [`Workload::tenants`]): stop once more than this many of its
    /// queries are known to have missed their SLO.
    pub tenant_violations: Option<Vec<usize>>,
    /// Stop once the billed cost so far exceeds this many dollars (an `f64`'s bits: a search
    /// shares its incumbent's cost with every run in flight, and lowers it as it finds cheaper).
    pub cost: Option<&'a AtomicU64>,
}

/// Why a run was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// More queries late than the target allows (fleet-wide).
    Violations,
    /// More of one tenant's queries late than the target allows.
    TenantViolations,
    /// Dearer already than the cheapest run known to meet the target.
    Cost,
}

impl CutReason {
    pub fn name(&self) -> &'static str {
        match self {
            CutReason::Violations => "violations",
            CutReason::TenantViolations => "tenant-violations",
            CutReason::Cost => "cost",
        }
    }
}

/// A run stopped early: when, why, and what it had reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    pub at: f64,
    pub reason: CutReason,
    /// Queries known to have missed their SLO by then (a lower bound of the run's).
    pub violations: usize,
    /// Billed cost by then ($, a lower bound of the run's).
    pub cost: f64,
    /// Queries that had arrived.
    pub arrived: usize,
}

/// The state a bound needs, updated as the run goes.
pub(super) struct BoundTracker<'a> {
    bound: &'a RunBound<'a>,
    /// (deadline bits, query) of the arrived queries whose deadline has not passed yet.
    deadlines: BinaryHeap<Reverse<(u64, usize)>>,
    late: usize,
    tenant_late: Vec<usize>,
    checked_at: f64,
}

/// How often (s of the run) the bound is checked between arrivals.
const CHECK_EVERY_S: f64 = 60.0;

impl<'a> BoundTracker<'a> {
    pub(super) fn new(bound: &'a RunBound<'a>, w: &Workload) -> Self {
        Self { bound, deadlines: BinaryHeap::new(), late: 0, tenant_late: vec![0; w.tenants().len()], checked_at: f64::NEG_INFINITY }
    }

    /// Query `qi` has arrived.
    pub(super) fn arrived(&mut self, w: &Workload, qi: usize) {
        let q = &w.queries()[qi];
        // Deadlines are ≥ 0, so their bits order as the values do.
        self.deadlines.push(Reverse(((q.arrival + q.slo).max(0.0).to_bits(), qi)));
    }

    /// Whether a check between arrivals is due at `now`.
    pub(super) fn due(&self, now: f64) -> bool {
        now >= self.checked_at + CHECK_EVERY_S
    }

    /// Check the bound at `now`: `rows` are the finished queries' rows, `bills` each cluster's
    /// (size, timer). `Some` when the run should stop.
    pub(super) fn check<'t>(&mut self, now: f64, w: &Workload, rows: &[Option<TraceRow>], bills: impl Iterator<Item = (u32, &'t BillingTimer)>, billing: &BillingPolicy, arrived: usize) -> Option<Cut> {
        self.checked_at = now;
        while let Some(&Reverse((bits, qi))) = self.deadlines.peek() {
            if f64::from_bits(bits) >= now {
                break;
            }
            self.deadlines.pop();
            let q = &w.queries()[qi];
            // Unfinished past its deadline: it can only finish late. Finished: its row says.
            if rows[qi].as_ref().is_none_or(|r| !r.met(q.slo)) {
                self.late += 1;
                self.tenant_late[q.tenant as usize] += 1;
            }
        }
        let mut bills = Some(bills);
        let mut cost = || bills.take().map_or(f64::NAN, |b| b.map(|(size, timer)| billing.cost(size, timer.billed_seconds_at(now))).sum());
        let reason = if self.bound.violations.is_some_and(|v| self.late > v) {
            Some(CutReason::Violations)
        } else if self.bound.tenant_violations.as_ref().is_some_and(|limits| self.tenant_late.iter().zip(limits).any(|(late, limit)| late > limit)) {
            Some(CutReason::TenantViolations)
        } else {
            None
        };
        if let Some(reason) = reason {
            return Some(Cut { at: now, reason, violations: self.late, cost: cost(), arrived });
        }
        if let Some(limit) = self.bound.cost {
            let spent = cost();
            if spent > f64::from_bits(limit.load(Ordering::Relaxed)) {
                return Some(Cut { at: now, reason: CutReason::Cost, violations: self.late, cost: spent, arrived });
            }
        }
        None
    }
}
