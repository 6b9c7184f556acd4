//! Reservations: clusters held for premium tenants. A premium tenant's queries may go to every
//! cluster; other tenants' queries go to the unreserved ones, and (with `borrow_idle`) to a
//! reserved cluster only while it runs and queues nothing. Queries are not preempted, so a
//! borrowed cluster returns to its tenants when the borrowed query ends: borrowing trades some
//! of the reservation for utilisation, and is off by default. Clusters the autoscaler adds are
//! unreserved. If no unreserved cluster can take a query, it may use any (the reservation never
//! makes a query unroutable).
//!
//! The reservation wraps any router: it hides the reserved clusters from the wrapped policy
//! (they appear as draining) for non-premium queries, and forwards everything else.

use crate::cluster::{ClusterId, ClusterInfo};
use crate::control::{route_hiding, Event, Router};
use crate::error::Result;
use crate::router::AutoSloRouter;
use crate::workload::Query;

/// Which population is premium (tenants by workload index, optionally only some of their
/// classes) and which clusters it holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reservation {
    pub premium_tenants: Vec<u32>,
    /// Only these classes of the premium tenants (workload class indices); `None`: all.
    pub premium_classes: Option<Vec<u32>>,
    pub reserved_clusters: Vec<ClusterId>,
    pub borrow_idle: bool,
}

impl Reservation {
    /// Whether `query` belongs to the premium population.
    pub fn is_premium(&self, query: &Query) -> bool {
        self.premium_tenants.contains(&query.tenant) && self.premium_classes.as_ref().is_none_or(|c| c.contains(&query.class))
    }
}

/// A router that enforces a [`Reservation`] around another router.
pub struct ReservedRouter {
    inner: Box<dyn Router>,
    reservation: Reservation,
    name: String,
    view: Vec<ClusterInfo>,
}

impl ReservedRouter {
    pub fn new(inner: Box<dyn Router>, reservation: Reservation) -> Self {
        let name = format!("{}+reservation", inner.name());
        Self { inner, reservation, name, view: Vec::new() }
    }
}

impl Router for ReservedRouter {
    fn route(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Result<ClusterId> {
        let r = &self.reservation;
        if r.is_premium(query) {
            return self.inner.route(now, query, clusters);
        }
        route_hiding(self.inner.as_mut(), now, query, clusters, &mut self.view, |c| r.reserved_clusters.contains(&c.id) && !(r.borrow_idle && c.running == 0 && c.queued == 0))
    }
    fn observe(&mut self, now: f64, event: &Event<'_>) {
        self.inner.observe(now, event);
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn as_autoslo(&self) -> Option<&AutoSloRouter> {
        self.inner.as_autoslo()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::QueryText;
    use crate::cluster::ClusterState;
    use crate::control::RoundRobin;

    fn cluster(id: ClusterId, running: usize) -> ClusterInfo {
        ClusterInfo { id, size: 16, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running, queued: 0 }
    }
    fn query(id: u64, tenant: u32) -> Query {
        Query { id, arrival: 0.0, text: QueryText { template: 1, instance: 1 }, tenant, class: 0, slo: 10.0 }
    }

    #[test]
    fn premium_queries_use_every_cluster_and_others_only_the_unreserved() {
        let res = Reservation { premium_tenants: vec![0], premium_classes: None, reserved_clusters: vec![0], borrow_idle: false };
        let mut r = ReservedRouter::new(Box::new(RoundRobin::default()), res.clone());
        let cs = [cluster(0, 3), cluster(1, 3), cluster(2, 3)];
        let others: Vec<ClusterId> = (0..30).map(|i| r.route(0.0, &query(i, 1), &cs).unwrap()).collect();
        assert!(!others.contains(&0) && others.contains(&1) && others.contains(&2));
        let premium: Vec<ClusterId> = (0..30).map(|i| r.route(0.0, &query(100 + i, 0), &cs).unwrap()).collect();
        assert!(premium.contains(&0));
        // Borrowing: an idle reserved cluster is lent.
        let mut lend = ReservedRouter::new(Box::new(RoundRobin::default()), Reservation { borrow_idle: true, ..res.clone() });
        let idle = [cluster(0, 0), cluster(1, 3)];
        assert!((0..10).any(|i| lend.route(0.0, &query(i, 1), &idle).unwrap() == 0));
        // Only reserved clusters left: the query still gets one.
        let mut only = ReservedRouter::new(Box::new(RoundRobin::default()), res);
        assert_eq!(only.route(0.0, &query(1, 1), &[cluster(0, 5)]).unwrap(), 0);
        assert_eq!(only.name(), "round-robin+reservation");
        // Only the premium tenant's class 0 is premium: its class 1 is kept off the reservation.
        let mut dash = ReservedRouter::new(Box::new(RoundRobin::default()), Reservation { premium_classes: Some(vec![0]), ..Reservation { premium_tenants: vec![0], reserved_clusters: vec![0], ..Default::default() } });
        let batch = Query { class: 1, ..query(5, 0) };
        assert!((0..10).all(|_| dash.route(0.0, &batch, &cs).unwrap() != 0));
    }
}
