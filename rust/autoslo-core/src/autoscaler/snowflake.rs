//! Snowflake's multi-cluster warehouse scaling policies, `standard` and `economy`, on our
//! clusters.
//!
//! What Snowflake documents publicly (docs.snowflake.com, "Multi-cluster warehouses", "Setting
//! the scaling policy for a multi-cluster warehouse"), and what is implemented here:
//! - Every cluster of a warehouse has the warehouse's size; the warehouse runs between a minimum
//!   and a maximum cluster count (auto-scale mode).
//! - **Standard** starts a cluster "immediately when either a query is queued or the system
//!   detects that there's one more query than the currently-running clusters can execute"; "each
//!   successive cluster waits to start 20 seconds after the prior one has started". It shuts a
//!   cluster down after 2 to 3 consecutive successful checks, performed at 1-minute intervals,
//!   "which determine whether the load on the least-loaded cluster could be redistributed to the
//!   other clusters without spinning up the cluster again". We use 2 checks.
//! - **Economy** starts a cluster "only if the system estimates there's enough query load to keep
//!   the cluster busy for at least 6 minutes", and shuts one down after 5 to 6 consecutive
//!   successful checks. We use 5.
//!
//! Our reading of the undocumented parts: a cluster "can execute" `max_concurrency` queries at once
//! (Snowflake's `MAX_CONCURRENCY_LEVEL`, default 8); "the currently-running clusters" are the
//! started ones (ready or starting, as Snowflake clusters start in seconds); a queued query counts
//! only while no cluster is starting (one is already on its way); economy's "load to keep a
//! cluster busy for 6 minutes" is the queued queries' isolated work at the warehouse size (catalog
//! mean per size) reaching 360 s. Redistribution: the least-loaded ready cluster's running and
//! queued queries fit in the other ready clusters' free slots.

use crate::catalog;
use crate::cluster::{ClusterInfo, ClusterState};
use crate::control::{Action, Event, Router, Scaler};
use crate::error::{AutoSloError, Result};

/// Which of Snowflake's scaling policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Standard,
    Economy,
}

/// Successive starts are at least this far apart under `standard` (s).
pub const STANDARD_START_SPACING_S: f64 = 20.0;
/// Shutdown checks run at this interval (s).
pub const CHECK_INTERVAL_S: f64 = 60.0;
/// Economy's busy horizon (s).
pub const ECONOMY_BUSY_S: f64 = 360.0;

/// A Snowflake-style multi-cluster warehouse scaler.
#[derive(Debug, Clone)]
pub struct SnowflakeScaler {
    policy: Policy,
    size: Option<u32>,
    min_clusters: usize,
    max_clusters: usize,
    max_concurrency: usize,
    last_start: f64,
    successes: usize,
    next_check: f64,
}

impl SnowflakeScaler {
    /// `size` of every added cluster (`None`: the largest active cluster's size).
    pub fn new(policy: Policy, size: Option<u32>, min_clusters: usize, max_clusters: usize, max_concurrency: usize) -> Result<Self> {
        if let Some(s) = size {
            crate::cluster::check_base_capacity("warehouse size", s)?;
        }
        if min_clusters == 0 || max_clusters < min_clusters {
            return Err(AutoSloError::InvalidConfig(format!("need 1 ≤ min_clusters ≤ max_clusters, got {min_clusters} and {max_clusters}")));
        }
        if max_concurrency == 0 {
            return Err(AutoSloError::out_of_range("max concurrency", "≥ 1", 0));
        }
        Ok(Self { policy, size, min_clusters, max_clusters, max_concurrency, last_start: f64::NEG_INFINITY, successes: 0, next_check: CHECK_INTERVAL_S })
    }

    fn needed_shutdown_checks(&self) -> usize {
        match self.policy {
            Policy::Standard => 2,
            Policy::Economy => 5,
        }
    }

    fn maybe_start(&mut self, now: f64, clusters: &[ClusterInfo]) -> Option<Action> {
        // One pass, no allocation: this runs on every routed query.
        let (mut active, mut largest, mut starting, mut outstanding, mut queued) = (0usize, 0u32, false, 0usize, 0usize);
        for c in clusters.iter().filter(|c| c.accepts_queries()) {
            active += 1;
            largest = largest.max(c.size);
            starting |= c.state == ClusterState::Starting;
            outstanding += c.running + c.queued;
            queued += c.queued;
        }
        if active == 0 || active >= self.max_clusters {
            return None;
        }
        let size = self.size.unwrap_or(largest);
        let start = match self.policy {
            Policy::Standard => now - self.last_start >= STANDARD_START_SPACING_S && (outstanding > active * self.max_concurrency || (queued > 0 && !starting)),
            Policy::Economy => {
                let cat = catalog::tpcds();
                let backlog: f64 = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.queued as f64 * cat.mean_runtime_at(c.size)).sum();
                !starting && backlog >= ECONOMY_BUSY_S
            }
        };
        start.then(|| {
            self.last_start = now;
            Action::spin_up(size, "snowflake-start")
        })
    }

    fn shutdown_check(&mut self, clusters: &[ClusterInfo]) -> Option<Action> {
        let ready: Vec<&ClusterInfo> = clusters.iter().filter(|c| c.state == ClusterState::Ready).collect();
        if ready.len() <= self.min_clusters {
            self.successes = 0;
            return None;
        }
        let load = |c: &ClusterInfo| c.running + c.queued;
        let least = ready.iter().min_by_key(|c| (load(c), std::cmp::Reverse(c.id)))?;
        let spare: usize = ready.iter().filter(|c| c.id != least.id).map(|c| self.max_concurrency.saturating_sub(load(c))).sum();
        if load(least) <= spare {
            self.successes += 1;
        } else {
            self.successes = 0;
        }
        (self.successes >= self.needed_shutdown_checks()).then(|| {
            self.successes = 0;
            Action::tear_down(least.id, "snowflake-shutdown")
        })
    }
}

impl Scaler for SnowflakeScaler {
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[ClusterInfo], _router: &dyn Router) -> Vec<Action> {
        let mut out = Vec::new();
        if matches!(event, Event::Routed { .. } | Event::Tick) {
            out.extend(self.maybe_start(now, clusters));
        }
        if matches!(event, Event::Tick) && now >= self.next_check {
            self.next_check = now + CHECK_INTERVAL_S;
            out.extend(self.shutdown_check(clusters));
        }
        out
    }
    fn tick_interval(&self) -> Option<f64> {
        Some(10.0)
    }
    fn name(&self) -> &str {
        match self.policy {
            Policy::Standard => "snowflake-standard",
            Policy::Economy => "snowflake-economy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::RoundRobin;

    fn info(id: u32, state: ClusterState, running: usize, queued: usize) -> ClusterInfo {
        ClusterInfo { id, size: 16, state, requested_at: 0.0, ready_at: 0.0, running, queued }
    }

    #[test]
    fn standard_starts_on_queueing_spaced_20_s_and_economy_waits_for_six_minutes_of_work() {
        let rr = RoundRobin::default();
        let mut s = SnowflakeScaler::new(Policy::Standard, None, 1, 3, 8).unwrap();
        let busy = [info(0, ClusterState::Ready, 8, 1)];
        assert_eq!(s.on_event(0.0, &Event::Tick, &busy, &rr), vec![Action::spin_up(16, "snowflake-start")]);
        let two = [info(0, ClusterState::Ready, 8, 9), info(1, ClusterState::Starting, 0, 0)];
        assert!(s.on_event(10.0, &Event::Tick, &two, &rr).is_empty(), "20 s spacing");
        assert_eq!(s.on_event(20.0, &Event::Tick, &two, &rr).len(), 1, "17 outstanding > 2 × 8");
        let quiet = [info(0, ClusterState::Ready, 3, 0)];
        assert!(s.on_event(100.0, &Event::Tick, &quiet, &rr).is_empty());
        let mut e = SnowflakeScaler::new(Policy::Economy, Some(16), 1, 3, 8).unwrap();
        assert!(e.on_event(0.0, &Event::Tick, &[info(0, ClusterState::Ready, 8, 1)], &rr).is_empty(), "one queued query is not six minutes of work");
        assert_eq!(e.on_event(1.0, &Event::Tick, &[info(0, ClusterState::Ready, 8, 200)], &rr).len(), 1);
    }

    #[test]
    fn shutdown_needs_consecutive_successful_checks() {
        let rr = RoundRobin::default();
        let c = [info(0, ClusterState::Ready, 2, 0), info(1, ClusterState::Ready, 1, 0)];
        for (policy, checks) in [(Policy::Standard, 2), (Policy::Economy, 5)] {
            let mut s = SnowflakeScaler::new(policy, None, 1, 3, 8).unwrap();
            let mut fired = None;
            for k in 1..=6 {
                let a = s.on_event(60.0 * k as f64, &Event::Tick, &c, &rr);
                if !a.is_empty() {
                    assert_eq!(a, vec![Action::tear_down(1, "snowflake-shutdown")]);
                    fired = Some(k);
                    break;
                }
            }
            assert_eq!(fired, Some(checks));
        }
        // Never below the minimum.
        let mut s = SnowflakeScaler::new(Policy::Standard, None, 2, 3, 8).unwrap();
        assert!((1..=5).all(|k| s.on_event(60.0 * k as f64, &Event::Tick, &c, &rr).is_empty()));
    }
}
