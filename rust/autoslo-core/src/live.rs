//! The Query Router used live: a real clock, arrivals and completions reported as they happen,
//! clusters added and removed while it routes. This holds the live bookkeeping (the cluster set
//! and its lifecycle, running queries, the router's clock); bindings wrap it in a lock and convert
//! types, nothing more.

use std::collections::{HashMap, HashSet};

use crate::catalog::QueryText;
use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::{Event, Router};
use crate::error::{AutoSloError, Result};
use crate::workload::Query;

/// A router over a live, changing cluster set.
pub struct LiveRouter {
    router: Box<dyn Router>,
    clusters: Vec<ClusterInfo>,
    running: HashMap<u64, (ClusterId, Query)>,
    now: f64,
    /// Ids are never reused: a removed cluster's queries may still be running.
    next_id: ClusterId,
    /// Starting clusters whose manager says when they are ready ([`Self::confirm_ready`]).
    unconfirmed: HashSet<ClusterId>,
}

impl LiveRouter {
    /// A live router with `router` over ready clusters of `sizes` RPU (ids 0, 1, …).
    pub fn new(router: Box<dyn Router>, sizes: &[u32]) -> Result<Self> {
        crate::cluster::check_sizes("a router's clusters", sizes)?;
        let clusters = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| ClusterInfo { id: i as ClusterId, size, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 })
            .collect();
        Ok(LiveRouter { router, clusters, running: HashMap::new(), now: 0.0, next_id: sizes.len() as ClusterId, unconfirmed: HashSet::new() })
    }

    /// Move the clock to `now`. Callers on several threads may report times slightly out of order;
    /// an earlier time is taken as the current time. Clusters whose ready time has come become
    /// ready, except those awaiting their manager's word: their expected ready time, once past,
    /// moves to now (ready any moment). Returns the time used.
    fn advance(&mut self, now: f64) -> Result<f64> {
        if !now.is_finite() {
            return Err(AutoSloError::out_of_range("time", "finite", now));
        }
        self.now = self.now.max(now);
        for c in &mut self.clusters {
            if c.state != ClusterState::Starting {
                continue;
            }
            if self.unconfirmed.contains(&c.id) {
                c.ready_at = c.ready_at.max(self.now);
            } else if c.ready_at <= self.now {
                c.state = ClusterState::Ready;
            }
        }
        Ok(self.now)
    }

    /// Route a query arriving at `arrival` (s) with SLO `slo` (s); returns the chosen cluster.
    pub fn route(&mut self, query_id: u64, text: QueryText, arrival: f64, slo: f64) -> Result<ClusterId> {
        self.route_query(query_id, text, arrival, slo).map(|(c, _)| c)
    }

    /// [`LiveRouter::route`], also returning the query as routed (its arrival is the router's clock).
    pub fn route_query(&mut self, query_id: u64, text: QueryText, arrival: f64, slo: f64) -> Result<(ClusterId, Query)> {
        self.route_inner(query_id, text, arrival, slo, None)
    }

    /// [`LiveRouter::route`] among the clusters `among` only (for example a tenant's reserved
    /// clusters); each must be one the router may use.
    pub fn route_among(&mut self, query_id: u64, text: QueryText, arrival: f64, slo: f64, among: &[ClusterId]) -> Result<ClusterId> {
        self.route_inner(query_id, text, arrival, slo, Some(among)).map(|(c, _)| c)
    }

    fn route_inner(&mut self, query_id: u64, text: QueryText, arrival: f64, slo: f64, among: Option<&[ClusterId]>) -> Result<(ClusterId, Query)> {
        // Whatever the policy (round robin never reads it): a query the log, the reservoir and
        // the predictor could not name later is refused now.
        let text = text.checked()?;
        if !(slo > 0.0 && slo.is_finite()) {
            return Err(AutoSloError::out_of_range("SLO", "a positive number of seconds", slo));
        }
        if self.running.contains_key(&query_id) {
            return Err(AutoSloError::InvalidAction(format!("query {query_id} is already running")));
        }
        if let Some(ids) = among {
            if ids.is_empty() {
                return Err(AutoSloError::InvalidAction("route among no clusters".into()));
            }
            if let Some(id) = ids.iter().find(|&&id| !self.clusters.iter().any(|c| c.id == id)) {
                return Err(AutoSloError::InvalidAction(format!("no cluster {id} to route to")));
            }
        }
        let arrival = self.advance(arrival)?;
        let q = Query { id: query_id, arrival, text, tenant: 0, class: 0, slo };
        self.router.observe(arrival, &Event::Arrival { query: &q });
        let c = match among {
            None => self.router.route(arrival, &q, &self.clusters)?,
            Some(ids) => {
                let some: Vec<ClusterInfo> = self.clusters.iter().filter(|c| ids.contains(&c.id)).cloned().collect();
                self.router.route(arrival, &q, &some)?
            }
        };
        if let Some(ci) = self.clusters.iter_mut().find(|x| x.id == c) {
            ci.running += 1;
        }
        self.running.insert(query_id, (c, q));
        Ok((c, q))
    }

    /// A routed query finished (or timed out) at `now` (s). Returns its cluster and the query.
    pub fn complete(&mut self, query_id: u64, now: f64, timed_out: bool) -> Result<(ClusterId, Query)> {
        let now = self.advance(now)?;
        let (c, q) = self.running.remove(&query_id).ok_or_else(|| AutoSloError::InvalidAction(format!("query {query_id} is not running")))?;
        if let Some(ci) = self.clusters.iter_mut().find(|x| x.id == c) {
            ci.running = ci.running.saturating_sub(1);
        }
        let ev = Event::Completion { query: &q, cluster: c, latency: now - q.arrival, censored: timed_out };
        self.router.observe(now, &ev);
        Ok((c, q))
    }

    /// Move the clock to `now` without an arrival (starting clusters whose time has come become ready).
    pub fn advance_to(&mut self, now: f64) -> Result<f64> {
        self.advance(now)
    }

    /// The clusters the router may use, as the control plane sees them.
    pub fn infos(&self) -> &[ClusterInfo] {
        &self.clusters
    }

    /// The routing policy.
    pub fn router(&self) -> &dyn Router {
        self.router.as_ref()
    }

    /// The id the next [`Self::add_cluster`] will give.
    pub fn next_cluster_id(&self) -> ClusterId {
        self.next_id
    }

    /// Add a cluster of `size` RPU that takes queries from `ready_at` (default: now; starting
    /// until then); returns its id.
    pub fn add_cluster(&mut self, size: u32, ready_at: Option<f64>) -> Result<ClusterId> {
        self.add(size, ready_at, false)
    }

    /// Add a cluster of `size` RPU whose manager will say when it is ready
    /// ([`Self::confirm_ready`]): it stays starting until then, however early or late that is
    /// against `expected_ready_at` (default: now), the router's estimate meanwhile. Returns its id.
    pub fn add_cluster_unconfirmed(&mut self, size: u32, expected_ready_at: Option<f64>) -> Result<ClusterId> {
        self.add(size, expected_ready_at, true)
    }

    fn add(&mut self, size: u32, ready_at: Option<f64>, unconfirmed: bool) -> Result<ClusterId> {
        crate::cluster::check_base_capacity("cluster size", size)?;
        if let Some(t) = ready_at.filter(|t| !t.is_finite()) {
            return Err(AutoSloError::out_of_range("ready_at", "a finite time in seconds", t));
        }
        let now = self.now;
        let id = self.next_id;
        self.next_id += 1;
        let ready = ready_at.unwrap_or(now).max(now);
        let state = if ready <= now && !unconfirmed { ClusterState::Ready } else { ClusterState::Starting };
        if unconfirmed {
            self.unconfirmed.insert(id);
        }
        self.clusters.push(ClusterInfo { id, size, state, requested_at: now, ready_at: ready, running: 0, queued: 0 });
        Ok(id)
    }

    /// The manager says cluster `cluster` is ready at `now` (s): it takes queries from now on, and
    /// its ready time (from which the teardown trigger counts its idleness) is now. Returns
    /// whether that changed anything: `false` for a cluster already ready, or one added and since
    /// removed. A cluster not added yet is an error (the caller may tell again later).
    pub fn confirm_ready(&mut self, cluster: ClusterId, now: f64) -> Result<bool> {
        let now = self.advance(now)?;
        if !self.unconfirmed.remove(&cluster) {
            return if cluster < self.next_id { Ok(false) } else { Err(AutoSloError::InvalidAction(format!("no cluster {cluster} yet"))) };
        }
        let Some(c) = self.clusters.iter_mut().find(|c| c.id == cluster) else { return Ok(false) };
        c.state = ClusterState::Ready;
        c.ready_at = now;
        Ok(true)
    }

    /// Stop routing to a cluster (its running queries still report completions).
    pub fn remove_cluster(&mut self, cluster: ClusterId) -> Result<()> {
        let pos = self.clusters.iter().position(|c| c.id == cluster).ok_or_else(|| AutoSloError::InvalidAction(format!("no cluster {cluster}")))?;
        if self.clusters.len() == 1 {
            return Err(AutoSloError::InvalidAction("cannot remove the last cluster".into()));
        }
        self.clusters.remove(pos);
        self.unconfirmed.remove(&cluster);
        Ok(())
    }

    /// (id, size, running queries) of the clusters the router may use.
    pub fn clusters(&self) -> Vec<(ClusterId, u32, usize)> {
        self.clusters.iter().map(|c| (c.id, c.size, c.running)).collect()
    }

    /// The router's clock (s).
    pub fn now(&self) -> f64 {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::RoundRobin;

    fn text() -> QueryText {
        QueryText { template: 3, instance: 1 }
    }

    #[test]
    fn routes_over_a_changing_cluster_set_and_keeps_the_books() {
        assert!(LiveRouter::new(Box::new(RoundRobin::default()), &[]).is_err());
        assert!(LiveRouter::new(Box::new(RoundRobin::default()), &[16, 0]).is_err());
        let e = LiveRouter::new(Box::new(RoundRobin::default()), &[16, 3]).err().expect("size 3 is refused").to_string();
        assert!(e.starts_with("a router's clusters[1] must be a Redshift Serverless base capacity"), "{e}");
        let mut live = LiveRouter::new(Box::new(RoundRobin::default()), &[16]).unwrap();
        assert!(live.add_cluster(12, None).is_err() && live.add_cluster(24, None).is_ok());
        let e = live.add_cluster(16, Some(f64::NAN)).expect_err("a NaN ready time is refused").to_string();
        assert!(e.starts_with("ready_at must be a finite time in seconds"), "{e}");
        assert!(live.add_cluster(16, Some(f64::INFINITY)).is_err(), "a cluster never ready is refused");
        assert_eq!(live.clusters().len(), 2, "a refused cluster is not added");
        let mut r = LiveRouter::new(Box::new(RoundRobin::default()), &[16]).unwrap();
        assert_eq!(r.route(1, text(), 1.0, 10.0).unwrap(), 0);
        assert!(r.route(1, text(), 2.0, 10.0).is_err(), "a running id is refused");
        assert!(r.route(2, text(), 2.0, 0.0).is_err(), "a non-positive SLO is refused");
        assert!(r.route(2, text(), f64::NAN, 10.0).is_err());
        // Round robin never reads the text, but a text outside the catalog is refused anyway.
        for (template, instance, message) in [(0, 1, "unknown query template 0"), (100, 1, "unknown query template 100"), (3, 0, "a query's instance must be from 1 to 65535, got 0")] {
            let e = r.route(2, QueryText { template, instance }, 2.0, 10.0).unwrap_err().to_string();
            assert!(e.starts_with(message), "{e}");
        }
        assert_eq!(r.clusters()[0].2, 1, "a refused query is not routed");
        // A cluster starting until t = 100 takes nothing before then.
        let c = r.add_cluster(32, Some(100.0)).unwrap();
        assert_eq!(c, 1);
        for id in 10..14 {
            assert_eq!(r.route(id, text(), 50.0, 10.0).unwrap(), 0);
        }
        let after: Vec<ClusterId> = (20..24).map(|id| r.route(id, text(), 150.0, 10.0).unwrap()).collect();
        assert!(after.contains(&1), "ready at 100 s, so used after it: {after:?}");
        // Out-of-order times are taken as now.
        r.complete(1, 120.0, false).unwrap();
        assert_eq!(r.now(), 150.0);
        assert!(r.complete(1, 160.0, false).is_err(), "completed twice");
        let running: usize = r.clusters().iter().map(|c| c.2).sum();
        assert_eq!(running, 8);
        r.remove_cluster(0).unwrap();
        assert!(r.remove_cluster(1).is_err(), "the last cluster stays");
        assert!(r.remove_cluster(7).is_err());
        // Queries on a removed cluster still report completions.
        r.complete(10, 170.0, true).unwrap();
        assert_eq!(r.clusters().len(), 1);
    }

    #[test]
    fn a_cluster_the_manager_confirms_takes_queries_when_it_is_ready_not_when_expected() {
        let state = |r: &LiveRouter, id: ClusterId| r.infos().iter().find(|c| c.id == id).map(|c| (c.state, c.ready_at));
        let mut r = LiveRouter::new(Box::new(RoundRobin::default()), &[16]).unwrap();
        // Later than expected: still starting past its expected time, so round robin keeps to cluster 0.
        let late = r.add_cluster_unconfirmed(32, Some(10.0)).unwrap();
        for id in 0..4 {
            assert_eq!(r.route(id, text(), 20.0 + id as f64, 10.0).unwrap(), 0, "not ready until the manager says so");
        }
        assert_eq!(state(&r, late), Some((ClusterState::Starting, 23.0)), "its expected ready time moves to now once past");
        assert!(r.confirm_ready(late, 30.0).unwrap());
        assert_eq!(state(&r, late), Some((ClusterState::Ready, 30.0)), "ready from the manager's word");
        let after: Vec<ClusterId> = (10..14).map(|id| r.route(id, text(), 31.0, 10.0).unwrap()).collect();
        assert!(after.contains(&late), "{after:?}");
        assert!(!r.confirm_ready(late, 32.0).unwrap(), "a second word changes nothing");
        // Earlier than expected: ready from the word, not from the expected time (300 s on).
        let early = r.add_cluster_unconfirmed(32, Some(340.0)).unwrap();
        assert!(r.confirm_ready(early, 45.0).unwrap());
        assert_eq!(state(&r, early), Some((ClusterState::Ready, 45.0)));
        // Not added yet: an error to retry; added and removed: nothing to do.
        assert!(r.confirm_ready(early + 1, 46.0).is_err());
        let gone = r.add_cluster_unconfirmed(16, None).unwrap();
        r.remove_cluster(gone).unwrap();
        assert!(!r.confirm_ready(gone, 47.0).unwrap());
        // Without the manager's word a cluster is ready at its expected time, as before.
        let plain = r.add_cluster(16, Some(60.0)).unwrap();
        r.advance_to(60.0).unwrap();
        assert_eq!(state(&r, plain), Some((ClusterState::Ready, 60.0)));
    }
}
