//! Covering ejected capacity. Ejection hides a slow cluster but does not replace it: the load
//! chapter's warning that placement cannot create capacity. [`EjectionCover`] is a scaler that
//! wraps another one and, while a cluster is ejected or on probation after its re-entry, keeps a
//! cover cluster of the same size; once the ejected cluster is cleared (back in service for as
//! long as its last ejection, with no new evidence against it) the cover is drained and torn
//! down, and the cluster carries its share again. If the ejected cluster itself is gone (the
//! inner scaler tore it down), its cover is released as well: the inner scaler owns the fleet's
//! size; the cover only undoes what ejection took away.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::{Action, Event, Router, Scaler};
use crate::error::Result;

/// Reason recorded for a cover's spinup.
pub const COVER_SPINUP: &str = "ejection-cover";
/// Reason recorded for a cover's teardown.
pub const COVER_TEARDOWN: &str = "ejection-cleared";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cover {
    /// Spinup requested; its id is the next new cluster seen.
    Requested,
    Active(ClusterId),
}

/// A scaler that covers ejected clusters (see the module doc) beside `inner`.
pub struct EjectionCover {
    inner: Box<dyn Scaler>,
    unhealthy: Arc<Mutex<Vec<bool>>>,
    /// Ejected cluster → its cover.
    covers: BTreeMap<ClusterId, Cover>,
    /// Every cluster with a lower id has been seen (ids are dense and increasing; a gone
    /// cluster leaves the list the scaler is given, so its length says nothing).
    seen: usize,
    name: String,
}

impl EjectionCover {
    /// Cover the clusters `unhealthy` flags (the handle of an
    /// [`EjectingRouter`](super::EjectingRouter)), beside `inner`.
    pub fn new(inner: Box<dyn Scaler>, unhealthy: Arc<Mutex<Vec<bool>>>) -> Self {
        let name = format!("{}+ejection-cover", inner.name());
        Self { inner, unhealthy, covers: BTreeMap::new(), seen: 0, name }
    }

    fn cover_actions(&mut self, clusters: &[ClusterInfo]) -> Vec<Action> {
        // New clusters take the requested covers, in request order (actions are applied in order).
        let next_id = clusters.iter().map(|c| c.id as usize + 1).max().unwrap_or(0);
        if self.seen == 0 {
            self.seen = next_id;
        }
        for c in clusters.iter().filter(|c| c.id as usize >= self.seen) {
            if let Some(slot) = self.covers.values_mut().find(|v| **v == Cover::Requested) {
                *slot = Cover::Active(c.id);
            }
        }
        self.seen = self.seen.max(next_id);
        let unhealthy = self.unhealthy.lock().map(|u| u.clone()).unwrap_or_else(|e| e.into_inner().clone());
        let info = |id: ClusterId| clusters.iter().find(|c| c.id == id);
        let mut out = Vec::new();
        // Release covers no longer needed, and forget covers someone else tore down.
        let mut done = Vec::new();
        for (&ejected, &cover) in &self.covers {
            let needed = unhealthy.get(ejected as usize).copied().unwrap_or(false) && info(ejected).is_some_and(ClusterInfo::accepts_queries);
            if let Cover::Active(id) = cover {
                let live = info(id).filter(|c| c.accepts_queries());
                match live {
                    None => {
                        done.push(ejected);
                    }
                    // A starting cover with queries waiting cannot be torn down yet.
                    Some(c) if !needed && (c.state == ClusterState::Ready || c.queued + c.running == 0) => {
                        out.push(Action::tear_down(id, COVER_TEARDOWN));
                        done.push(ejected);
                    }
                    Some(_) => {}
                }
            }
        }
        for e in done {
            self.covers.remove(&e);
        }
        for c in clusters {
            let flagged = unhealthy.get(c.id as usize).copied().unwrap_or(false);
            let is_cover = self.covers.values().any(|v| *v == Cover::Active(c.id));
            if flagged && c.accepts_queries() && !is_cover && !self.covers.contains_key(&c.id) {
                self.covers.insert(c.id, Cover::Requested);
                out.push(Action::spin_up(c.size, COVER_SPINUP));
            }
        }
        out
    }
}

impl Scaler for EjectionCover {
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[ClusterInfo], router: &dyn Router) -> Vec<Action> {
        let mut out = self.inner.on_event(now, event, clusters, router);
        // The inner scaler's teardowns of covers or of covered clusters are seen at the next event.
        let torn: Vec<ClusterId> = out.iter().filter_map(|a| if let Action::TearDown { cluster, .. } = a { Some(*cluster) } else { None }).collect();
        let mine = self.cover_actions(clusters);
        out.extend(mine.into_iter().filter(|a| !matches!(a, Action::TearDown { cluster, .. } if torn.contains(cluster))));
        out
    }
    fn check(&self, router: &dyn Router) -> Result<()> {
        self.inner.check(router)
    }
    fn take_failures(&mut self) -> Vec<(f64, String)> {
        self.inner.take_failures()
    }
    fn decisions(&self) -> &[crate::autoscaler::Decision] {
        self.inner.decisions()
    }
    fn tick_interval(&self) -> Option<f64> {
        self.inner.tick_interval()
    }
    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{RoundRobin, StaticScaler};

    fn info(id: ClusterId, state: ClusterState) -> ClusterInfo {
        ClusterInfo { id, size: 16, state, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 }
    }

    #[test]
    fn an_ejected_cluster_gets_one_cover_released_once_it_is_cleared() {
        let flags = Arc::new(Mutex::new(vec![false, false]));
        let mut s = EjectionCover::new(Box::new(StaticScaler), flags.clone());
        let rr = RoundRobin::default();
        let two = [info(0, ClusterState::Ready), info(1, ClusterState::Ready)];
        assert!(s.on_event(0.0, &Event::Tick, &two, &rr).is_empty());
        flags.lock().unwrap()[1] = true;
        assert_eq!(s.on_event(1.0, &Event::Tick, &two, &rr), vec![Action::spin_up(16, COVER_SPINUP)]);
        let three = [info(0, ClusterState::Ready), info(1, ClusterState::Ready), info(2, ClusterState::Starting)];
        assert!(s.on_event(2.0, &Event::Tick, &three, &rr).is_empty(), "one cover per ejected cluster, and a cover is not covered");
        flags.lock().unwrap()[1] = false;
        let three = [info(0, ClusterState::Ready), info(1, ClusterState::Ready), info(2, ClusterState::Ready)];
        assert_eq!(s.on_event(3.0, &Event::Tick, &three, &rr), vec![Action::tear_down(2, COVER_TEARDOWN)]);
        assert!(s.on_event(4.0, &Event::Tick, &three, &rr).is_empty());
    }

    #[test]
    fn a_covered_cluster_torn_down_by_another_scaler_releases_its_cover() {
        let flags = Arc::new(Mutex::new(vec![true, false]));
        let mut s = EjectionCover::new(Box::new(StaticScaler), flags);
        let rr = RoundRobin::default();
        let two = [info(0, ClusterState::Ready), info(1, ClusterState::Ready)];
        assert_eq!(s.on_event(0.0, &Event::Tick, &two, &rr).len(), 1);
        let gone = [info(0, ClusterState::Gone), info(1, ClusterState::Ready), info(2, ClusterState::Ready)];
        assert_eq!(s.on_event(1.0, &Event::Tick, &gone, &rr), vec![Action::tear_down(2, COVER_TEARDOWN)]);
    }
}
