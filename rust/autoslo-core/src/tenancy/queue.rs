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

/// What the queue decided for an arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Route it now.
    Admit,
    /// It waits at the boundary.
    Held,
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
    /// Queries that waited and were dispatched.
    pub dispatched: usize,
}

fn has_room(clusters: &[ClusterInfo], slots: usize) -> bool {
    clusters.iter().any(|c| c.accepts_queries() && c.running + c.queued < slots)
}

impl AdmissionQueue {
    pub fn new(predictor: Predictor, settings: QueueSettings) -> Result<Self> {
        settings.validate()?;
        Ok(Self { settings, predictor, waiting: VecDeque::new(), work: 0.0, sharing: None, dispatched: 0 })
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

    /// Decide for query `index` (`q`) arriving at `now`.
    pub fn offer(&mut self, now: f64, index: usize, q: &Query, clusters: &[ClusterInfo]) -> Offer {
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

    /// Queries waiting now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The earliest latest start of a waiting query (∞ when none waits): when one expires.
    pub fn next_expiry(&self) -> f64 {
        self.waiting.iter().map(|w| w.latest_start).fold(f64::INFINITY, f64::min)
    }

    fn remove(&mut self, i: usize) -> Option<Waiting> {
        let w = self.waiting.remove(i)?;
        self.work = (self.work - w.estimate).max(0.0);
        Some(w)
    }

    /// At `now`: the next waiting query to settle, revalidated: `Some((query, None))` to route
    /// now, `Some((query, Some(Expired)))` for one whose latest start has passed, `None` when
    /// nothing is due (no room, or no one waits). Call until `None`, refreshing `clusters`
    /// after each dispatch.
    pub fn release(&mut self, now: f64, clusters: &[ClusterInfo]) -> Option<(usize, Option<RejectReason>)> {
        if let Some(i) = self.waiting.iter().position(|w| w.latest_start < now) {
            return self.remove(i).map(|w| (w.query, Some(RejectReason::Expired)));
        }
        if !self.waiting.is_empty() && has_room(clusters, self.settings.slots_per_cluster) {
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
            return self.remove(next).map(|w| (w.query, None));
        }
        None
    }
}
