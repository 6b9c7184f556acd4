//! A RAIS-like scaler: Redshift Serverless "AI-driven scaling and optimizations" lets a user pick
//! a price-performance level between cost-optimised and performance-optimised instead of a fixed
//! base capacity, and the service adds or removes capacity to hold it.
//!
//! The service's model is not public; this is our stand-in, named as such. The level is a target
//! load in outstanding (running + queued) queries per RPU of active capacity: `cost` 2.0,
//! `balanced` 1.0, `performance` 0.5. Every 60 s: after 2 consecutive checks above the target,
//! and with no cluster starting, spin up the smallest eligible size that brings the load to the
//! target (the largest if none does); after 5 consecutive checks below half the target, tear down
//! the least-loaded ready cluster if the load stays at or under the target without it.

use crate::cluster::{ClusterInfo, ClusterState};
use crate::control::{Action, Event, Router, Scaler};
use crate::error::{AutoSloError, Result};

/// A price-performance level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Cost,
    Balanced,
    Performance,
}

impl Level {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "cost" => Ok(Self::Cost),
            "balanced" => Ok(Self::Balanced),
            "performance" => Ok(Self::Performance),
            other => Err(AutoSloError::UnknownPolicy { name: other.into(), known: "cost, balanced, performance".into() }),
        }
    }
    /// Target outstanding queries per RPU.
    pub fn target_load(self) -> f64 {
        match self {
            Self::Cost => 2.0,
            Self::Balanced => 1.0,
            Self::Performance => 0.5,
        }
    }
}

/// Checks are this far apart (s).
pub const CHECK_INTERVAL_S: f64 = 60.0;

/// The RAIS-like scaler.
#[derive(Debug, Clone)]
pub struct RaisScaler {
    level: Level,
    sizes: Vec<u32>,
    min_clusters: usize,
    max_clusters: usize,
    over: usize,
    under: usize,
}

impl RaisScaler {
    pub fn new(level: Level, mut sizes: Vec<u32>, min_clusters: usize, max_clusters: usize) -> Result<Self> {
        crate::cluster::check_sizes("eligible sizes", &sizes)?;
        if min_clusters == 0 || max_clusters < min_clusters {
            return Err(AutoSloError::InvalidConfig(format!("need 1 ≤ min_clusters ≤ max_clusters, got {min_clusters} and {max_clusters}")));
        }
        sizes.sort_unstable();
        sizes.dedup();
        Ok(Self { level, sizes, min_clusters, max_clusters, over: 0, under: 0 })
    }

    fn check(&mut self, clusters: &[ClusterInfo]) -> Option<Action> {
        let active: Vec<&ClusterInfo> = clusters.iter().filter(|c| c.accepts_queries()).collect();
        let rpu: f64 = active.iter().map(|c| c.size as f64).sum();
        let outstanding: f64 = active.iter().map(|c| (c.running + c.queued) as f64).sum();
        if rpu <= 0.0 {
            return None;
        }
        let target = self.level.target_load();
        let load = outstanding / rpu;
        if load > target {
            self.over += 1;
            self.under = 0;
        } else if load < target / 2.0 {
            self.under += 1;
            self.over = 0;
        } else {
            self.over = 0;
            self.under = 0;
        }
        let starting = active.iter().any(|c| c.state == ClusterState::Starting);
        if self.over >= 2 && !starting && active.len() < self.max_clusters {
            self.over = 0;
            let size = self.sizes.iter().copied().find(|&s| outstanding / (rpu + s as f64) <= target).unwrap_or(*self.sizes.last().expect("non-empty"));
            return Some(Action::spin_up(size, "rais-scale-out"));
        }
        let ready: Vec<&&ClusterInfo> = active.iter().filter(|c| c.state == ClusterState::Ready).collect();
        if self.under >= 5 && ready.len() > self.min_clusters {
            self.under = 0;
            let least = ready.iter().min_by_key(|c| (c.running + c.queued, c.size, std::cmp::Reverse(c.id)))?;
            if outstanding / (rpu - least.size as f64) <= target {
                return Some(Action::tear_down(least.id, "rais-scale-in"));
            }
        }
        None
    }
}

impl Scaler for RaisScaler {
    fn on_event(&mut self, _now: f64, event: &Event<'_>, clusters: &[ClusterInfo], _router: &dyn Router) -> Vec<Action> {
        match event {
            Event::Tick => self.check(clusters).into_iter().collect(),
            _ => Vec::new(),
        }
    }
    fn tick_interval(&self) -> Option<f64> {
        Some(CHECK_INTERVAL_S)
    }
    fn name(&self) -> &str {
        "rais"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::RoundRobin;

    #[test]
    fn scales_out_after_two_hot_checks_and_in_after_five_cold_ones() {
        let rr = RoundRobin::default();
        let mut s = RaisScaler::new(Level::Balanced, vec![8, 16, 32], 1, 4).unwrap();
        let hot = [ClusterInfo { id: 0, size: 16, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: 30, queued: 10 }];
        assert!(s.on_event(60.0, &Event::Tick, &hot, &rr).is_empty());
        // 40 outstanding on 16 RPU: 32 more RPU bring it to 40/48 ≤ 1.
        assert_eq!(s.on_event(120.0, &Event::Tick, &hot, &rr), vec![Action::spin_up(32, "rais-scale-out")]);
        let cold = [hot[0], ClusterInfo { id: 1, size: 32, running: 0, queued: 0, ..hot[0] }];
        let cold = [ClusterInfo { running: 2, queued: 0, ..cold[0] }, cold[1]];
        let fired: Vec<usize> = (1..=6).filter(|k| !s.on_event(60.0 * *k as f64 + 120.0, &Event::Tick, &cold, &rr).is_empty()).collect();
        assert_eq!(fired, vec![5]);
        assert!(Level::parse("fast").is_err());
    }
}
