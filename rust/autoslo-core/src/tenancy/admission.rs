//! Admission at the router boundary: refuse, before any work, a query the fleet cannot serve
//! within its SLO, with a stable reason. A rejected query is an outcome of its own (never met,
//! no cluster, no cost), not a late run that occupied a cluster and slowed its neighbours.
//!
//! [`DeadlineAdmission`] rejects a query whose Stage estimate alone, on the largest cluster size
//! available, exceeds its SLO (`infeasible-deadline`), and a query no cluster can take
//! (`capacity`). The estimate is the predictor's, not the warehouse's truth, so a margin guards
//! against rejecting on a pessimistic estimate; a query with no estimate is admitted.

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
        if largest_size == Some(0) {
            return Err(AutoSloError::out_of_range("admission's largest size", "≥ 1 RPU", 0));
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
