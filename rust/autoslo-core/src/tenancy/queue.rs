//! The admission queue at the router boundary: when every cluster is full, a query waits at the
//! boundary instead of being pushed onto a cluster, but only while its deadline still leaves an
//! execution reserve; a query whose wait would spend that reserve is refused with a typed reason
//! instead of becoming a late run.
//!
//! - **Full:** a cluster that takes queries is full when it holds `slots_per_cluster` or more
//!   (running and queued inside it). While every cluster is full, or others already wait, an
//!   arrival waits (first in, first out).
//! - **Bounded:** by count (`max_queued`), by the sum of the waiting queries' estimated runtimes
//!   (`max_queued_work_s`, Stage estimates on the largest cluster taking queries) and by age:
//!   a query may start until `arrival + SLO − estimate × reserve`, its latest start.
//! - **Outcomes:** refused at arrival when the queue is at a bound (`capacity`) or when its
//!   latest start has already passed (`infeasible-deadline`); refused while waiting when its
//!   latest start passes (`expired`), revalidated again when a slot frees, before dispatch.
//! - **Deferred** (optional, [`AdmissionQueue::with_deferral`]): a query of a deferrable class
//!   (batch work) arriving outside the [`Deferral`] window is held until the window opens, if
//!   its deadline still leaves its execution reserve then. From the window's start it runs in
//!   the background: after every query waiting in the foreground, and only on clusters holding
//!   fewer than the deferral's own `slots_per_cluster`, so a day's batch work released at once
//!   does not crowd out the interactive queries arriving then. A deferrable query whose
//!   deadline cannot wait is treated as usual.
//! - **Shared** (optional, [`AdmissionQueue::with_sharing`]): when a slot frees it goes to the
//!   waiting query [`Sharing`] picks (reservations, then weights, with aging) instead of the
//!   oldest.

use std::collections::VecDeque;

use crate::cluster::ClusterInfo;
use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::tenancy::sharing::{Sharing, SharingPolicy, Tags};
use crate::trace::RejectReason;
use crate::workload::Query;

/// Bounds of the admission queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueSettings {
    /// Queries (running and queued inside) at which a cluster counts as full.
    pub slots_per_cluster: usize,
    /// Queries that may wait at once.
    pub max_queued: usize,
    /// Sum of the waiting queries' estimated runtimes (s).
    pub max_queued_work_s: f64,
    /// The execution reserve as a multiple of the estimate (≥ 1).
    pub reserve: f64,
}

impl QueueSettings {
    pub fn validate(&self) -> Result<()> {
        if self.slots_per_cluster == 0 {
            return Err(AutoSloError::out_of_range("slots per cluster", "≥ 1", 0));
        }
        if !(self.max_queued_work_s.is_finite() && self.max_queued_work_s >= 0.0) {
            return Err(AutoSloError::out_of_range("queued work bound", "≥ 0 s", self.max_queued_work_s));
        }
        if !(self.reserve.is_finite() && self.reserve >= 1.0) {
            return Err(AutoSloError::out_of_range("execution reserve", "≥ 1 × the estimate", self.reserve));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    query: usize,
    latest_start: f64,
    estimate: f64,
    /// Its tags when the queue is shared.
    tags: Option<Tags>,
}

/// Batch work deferred to a later window: a daily window of seconds into the day
/// `[from_s, until_s)`, wrapping midnight when `from_s > until_s` (20 h to 6 h: the night).
#[derive(Debug, Clone, PartialEq)]
pub struct Deferral {
    /// Class indices whose queries may be deferred.
    pub classes: Vec<u32>,
    pub from_s: f64,
    pub until_s: f64,
    /// Deferred work runs only on clusters holding fewer queries than this.
    pub slots_per_cluster: usize,
}

const DAY_S: f64 = 86_400.0;

impl Deferral {
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("deferral window start", self.from_s), ("deferral window end", self.until_s)] {
            if !(v.is_finite() && (0.0..=DAY_S).contains(&v)) {
                return Err(AutoSloError::out_of_range(name, "0 to 86,400 s into the day", v));
            }
        }
        if self.from_s.rem_euclid(DAY_S) == self.until_s.rem_euclid(DAY_S) {
            return Err(AutoSloError::InvalidConfig(format!("deferral window: start and end are the same time of day ({} s): the window is empty or the whole day", self.from_s)));
        }
        if self.classes.is_empty() {
            return Err(AutoSloError::InvalidConfig("deferral: no deferrable class given".into()));
        }
        if self.slots_per_cluster == 0 {
            return Err(AutoSloError::out_of_range("deferral slots per cluster", "≥ 1", 0));
        }
        Ok(())
    }

    /// Whether `t` (s from the workload's start, which is midnight) is inside the window.
    pub fn in_window(&self, t: f64) -> bool {
        let d = t.rem_euclid(DAY_S);
        let (from, until) = (self.from_s.rem_euclid(DAY_S), self.until_s.rem_euclid(DAY_S));
        if from < until {
            from <= d && d < until
        } else {
            d >= from || d < until
        }
    }

    /// The window's next opening strictly after `t`.
    pub fn next_opening(&self, t: f64) -> f64 {
        let open = (t / DAY_S).floor() * DAY_S + self.from_s.rem_euclid(DAY_S);
        if open > t {
            open
        } else {
            open + DAY_S
        }
    }
}

/// What the queue settles next ([`AdmissionQueue::release`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Release {
    /// Route `query` now, among the clusters holding fewer than `slots` queries.
    Route { query: usize, slots: usize },
    /// Refuse `query`, with the reason.
    Refuse { query: usize, reason: RejectReason },
}

/// What the queue decided for an arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offer {
    /// Route it now.
    Admit,
    /// It waits at the boundary.
    Held,
    /// Batch work held until the deferral window opens at `until` (s).
    Deferred { until: f64 },
    /// Refused, with the reason.
    Reject(RejectReason),
}

/// The admission queue (see the module docs).
pub struct AdmissionQueue {
    settings: QueueSettings,
    predictor: Predictor,
    waiting: VecDeque<Waiting>,
    work: f64,
    sharing: Option<Sharing>,
    deferral: Option<Deferral>,
    /// Deferred queries: (opening they wait for, the query as it will wait then, its tenant).
    deferred: Vec<(f64, Waiting, u32)>,
    /// Deferred queries whose window has opened, in arrival order.
    background: VecDeque<Waiting>,
    /// Queries that waited and were dispatched.
    pub dispatched: usize,
    /// Queries deferred to a later window.
    pub deferrals: usize,
}

fn has_room(clusters: &[ClusterInfo], slots: usize) -> bool {
    clusters.iter().any(|c| c.accepts_queries() && c.running + c.queued < slots)
}

impl AdmissionQueue {
    pub fn new(predictor: Predictor, settings: QueueSettings) -> Result<Self> {
        settings.validate()?;
        Ok(Self { settings, predictor, waiting: VecDeque::new(), work: 0.0, sharing: None, deferral: None, deferred: Vec::new(), background: VecDeque::new(), dispatched: 0, deferrals: 0 })
    }

    /// The same queue, dispatching by `policy` (see [`Sharing`]) instead of first in, first out.
    pub fn with_sharing(mut self, policy: SharingPolicy) -> Result<Self> {
        self.sharing = Some(Sharing::new(policy)?);
        Ok(self)
    }

    fn estimate(&self, q: &Query, clusters: &[ClusterInfo]) -> f64 {
        let size = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.size).max();
        size.and_then(|s| self.predictor.stage.estimate(q.text, s).ok()).unwrap_or(0.0)
    }

    /// The same queue, deferring batch work to `deferral`'s window.
    pub fn with_deferral(mut self, deferral: Deferral) -> Result<Self> {
        deferral.validate()?;
        self.deferral = Some(deferral);
        Ok(self)
    }

    /// Decide for query `index` (`q`) arriving at `now`.
    pub fn offer(&mut self, now: f64, index: usize, q: &Query, clusters: &[ClusterInfo]) -> Offer {
        if let Some(d) = self.deferral.as_ref().filter(|d| d.classes.contains(&q.class) && !d.in_window(now)) {
            let until = d.next_opening(now);
            let estimate = self.estimate(q, clusters);
            let latest_start = q.arrival + q.slo - estimate * self.settings.reserve;
            if latest_start >= until {
                self.deferred.push((until, Waiting { query: index, latest_start, estimate, tags: None }, q.tenant));
                self.deferrals += 1;
                return Offer::Deferred { until };
            }
        }
        if self.waiting.is_empty() && has_room(clusters, self.settings.slots_per_cluster) {
            return Offer::Admit;
        }
        let estimate = self.estimate(q, clusters);
        let latest_start = q.arrival + q.slo - estimate * self.settings.reserve;
        if latest_start < now {
            return Offer::Reject(RejectReason::InfeasibleDeadline);
        }
        if self.waiting.len() >= self.settings.max_queued || self.work + estimate > self.settings.max_queued_work_s {
            return Offer::Reject(RejectReason::Capacity);
        }
        let tags = self.sharing.as_mut().map(|s| s.tag(now, q.tenant, estimate));
        self.waiting.push_back(Waiting { query: index, latest_start, estimate, tags });
        self.work += estimate;
        Offer::Held
    }

    pub fn settings(&self) -> QueueSettings {
        self.settings
    }

    /// Queries waiting now (deferred ones not counted).
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
    /// Deferred queries: waiting for their window, or in the background once it opened.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len() + self.background.len()
    }
    /// Nothing waits and nothing is deferred.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.deferred.is_empty() && self.background.is_empty()
    }

    /// The next time the queue must be settled (∞ when none): the earliest latest start of a
    /// waiting query (it expires then) or the opening of a deferred query's window.
    pub fn next_expiry(&self) -> f64 {
        let expiry = self.waiting.iter().chain(&self.background).map(|w| w.latest_start).fold(f64::INFINITY, f64::min);
        self.deferred.iter().map(|d| d.0).fold(expiry, f64::min)
    }

    fn remove(&mut self, i: usize) -> Option<Waiting> {
        let w = self.waiting.remove(i)?;
        self.work = (self.work - w.estimate).max(0.0);
        Some(w)
    }

    /// At `now`: the next query to settle, revalidated: [`Release::Refuse`] (`Expired`) for
    /// one whose latest start has passed, [`Release::Route`] for the next to run (the
    /// foreground first, then deferred work in the background), `None` when nothing is due (no
    /// room, or no one waits). Call until `None`, refreshing `clusters` after each dispatch.
    pub fn release(&mut self, now: f64, clusters: &[ClusterInfo]) -> Option<Release> {
        // Deferred queries whose window has opened move to the background, in arrival order.
        if self.deferred.iter().any(|d| d.0 <= now) {
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred).into_iter().partition(|d| d.0 <= now);
            self.deferred = later;
            self.background.extend(due.into_iter().map(|d| d.1));
        }
        if let Some(i) = self.waiting.iter().position(|w| w.latest_start < now) {
            return self.remove(i).map(|w| Release::Refuse { query: w.query, reason: RejectReason::Expired });
        }
        if let Some(i) = self.background.iter().position(|w| w.latest_start < now) {
            return self.background.remove(i).map(|w| Release::Refuse { query: w.query, reason: RejectReason::Expired });
        }
        let slots = self.settings.slots_per_cluster;
        if !self.waiting.is_empty() && has_room(clusters, slots) {
            self.dispatched += 1;
            let next = match self.sharing.as_mut() {
                Some(s) => {
                    let mut tags: Vec<Tags> = self.waiting.iter().filter_map(|w| w.tags).collect();
                    let i = s.pick(now, &mut tags).unwrap_or(0);
                    for (w, t) in self.waiting.iter_mut().zip(tags) {
                        w.tags = Some(t);
                    }
                    i
                }
                None => 0,
            };
            return self.remove(next).map(|w| Release::Route { query: w.query, slots });
        }
        let background_slots = self.deferral.as_ref().map_or(slots, |d| d.slots_per_cluster.min(slots));
        if self.waiting.is_empty() && !self.background.is_empty() && has_room(clusters, background_slots) {
            self.dispatched += 1;
            return self.background.pop_front().map(|w| Release::Route { query: w.query, slots: background_slots });
        }
        None
    }
}
