//! Usage-based billing (§2 of the paper).
//!
//! The cost of a cluster is price × size × active time, where active time is measured by a timer:
//! initially paused; if paused, it starts when a query arrives at the cluster; if running, it
//! pauses when (i) no query is running on the cluster and (ii) at least `minimum_s` seconds
//! (60 s on Redshift Serverless) have passed since it started. Idle clusters cost nothing.
//!
//! [`BillingTimer`] is the incremental form (driven by arrivals and idle moments), and
//! [`billed_seconds`] the batch form over busy intervals; both agree (property-tested).

use crate::error::{AutoSloError, Result};

/// Price and billing minimum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BillingPolicy {
    /// Dollars per RPU-hour (Redshift Serverless us-east-1: $0.375).
    pub price_per_rpu_hour: f64,
    /// Minimum running time of the timer once started, in seconds.
    pub minimum_s: f64,
}

impl Default for BillingPolicy {
    fn default() -> Self {
        BillingPolicy { price_per_rpu_hour: 0.375, minimum_s: 60.0 }
    }
}

impl BillingPolicy {
    /// Validate the policy.
    pub fn validated(self) -> Result<Self> {
        if !(self.price_per_rpu_hour.is_finite() && self.price_per_rpu_hour >= 0.0) {
            return Err(AutoSloError::out_of_range("price per RPU-hour", "≥ 0", self.price_per_rpu_hour));
        }
        if !(self.minimum_s.is_finite() && self.minimum_s >= 0.0) {
            return Err(AutoSloError::out_of_range("billing minimum", "≥ 0 s", self.minimum_s));
        }
        Ok(self)
    }

    /// Dollars for `seconds` of active time on a cluster of `rpu`.
    pub fn cost(&self, rpu: u32, seconds: f64) -> f64 {
        self.price_per_rpu_hour * rpu as f64 * seconds / 3600.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TimerState {
    Paused,
    /// Running with at least one query present.
    Busy { since: f64 },
    /// Running with no query present; pauses at `pause_at` unless a query arrives first.
    Draining { since: f64, pause_at: f64 },
}

/// The incremental billing timer of one cluster. Every method is O(1).
#[derive(Debug, Clone, PartialEq)]
pub struct BillingTimer {
    minimum_s: f64,
    state: TimerState,
    accrued_s: f64,
    last_event: f64,
}

impl BillingTimer {
    /// A paused timer with the given billing minimum (s).
    pub fn new(minimum_s: f64) -> Self {
        BillingTimer { minimum_s, state: TimerState::Paused, accrued_s: 0.0, last_event: f64::NEG_INFINITY }
    }

    fn advance(&mut self, now: f64) -> Result<()> {
        if !now.is_finite() {
            return Err(AutoSloError::out_of_range("event time", "finite", now));
        }
        if now < self.last_event {
            return Err(AutoSloError::TimeWentBackwards { now, last: self.last_event });
        }
        self.last_event = now;
        if let TimerState::Draining { since, pause_at } = self.state {
            if now >= pause_at {
                self.accrued_s += pause_at - since;
                self.state = TimerState::Paused;
            }
        }
        Ok(())
    }

    /// The time of the last event the timer has seen (−∞ before the first).
    pub fn last_event(&self) -> f64 {
        self.last_event
    }

    /// A query arrived at the cluster at `now`.
    pub fn on_arrival(&mut self, now: f64) -> Result<()> {
        self.advance(now)?;
        self.state = match self.state {
            TimerState::Paused => TimerState::Busy { since: now },
            TimerState::Busy { since } | TimerState::Draining { since, .. } => TimerState::Busy { since },
        };
        Ok(())
    }

    /// The last query on the cluster finished (or left) at `now`: the timer will pause at
    /// max(now, start + minimum) unless a query arrives before then.
    pub fn on_idle(&mut self, now: f64) -> Result<()> {
        self.advance(now)?;
        if let TimerState::Busy { since } = self.state {
            self.state = TimerState::Draining { since, pause_at: now.max(since + self.minimum_s) };
        }
        Ok(())
    }

    /// Whether the timer is running at `now` (given no further events).
    pub fn is_running(&self, now: f64) -> bool {
        match self.state {
            TimerState::Paused => false,
            TimerState::Busy { .. } => true,
            TimerState::Draining { pause_at, .. } => now < pause_at,
        }
    }

    /// Billed seconds up to `now` (`now` ≥ the last event), given no further events.
    pub fn billed_seconds_at(&self, now: f64) -> f64 {
        let now = now.max(self.last_event);
        self.accrued_s
            + match self.state {
                TimerState::Paused => 0.0,
                TimerState::Busy { since } => now - since,
                TimerState::Draining { since, pause_at } => now.min(pause_at) - since,
            }
    }

    /// Billed seconds once the timer pauses, if the cluster drains (its last running query
    /// finishes) at `drain_at` and nothing else arrives: `ClusterCostUntilDrained` in seconds.
    pub fn billed_seconds_until_drained(&self, drain_at: f64) -> f64 {
        self.accrued_s
            + match self.state {
                TimerState::Paused => 0.0,
                TimerState::Busy { since } => drain_at.max(self.last_event).max(since + self.minimum_s) - since,
                TimerState::Draining { since, pause_at } => pause_at - since,
            }
    }
}

/// `ClusterCostUntilDrained` (Algorithm 1, lines 3 and 12): the dollars a cluster of `rpu` will
/// have been billed when its timer pauses, if its running queries finish by `drain_at`.
/// When `arrival_at` is given, a query is first added at that time (the counterfactual "after").
pub fn cluster_cost_until_drained(timer: &BillingTimer, policy: &BillingPolicy, rpu: u32, arrival_at: Option<f64>, drain_at: f64) -> Result<f64> {
    let seconds = match arrival_at {
        Some(t) => {
            let mut t2 = timer.clone();
            t2.on_arrival(t)?;
            t2.billed_seconds_until_drained(drain_at)
        }
        None => timer.billed_seconds_until_drained(drain_at),
    };
    Ok(policy.cost(rpu, seconds))
}

/// Batch form: billed seconds for a set of busy intervals `[start, end]` (a query present from
/// start to end, both included) with billing minimum `minimum_s`. O(n log n). As in the timer,
/// a query that starts while another is present (even at the instant that one ends) or before
/// the minimum has run out continues the window; one that starts when the timer pauses opens a
/// new one.
pub fn billed_seconds(intervals: &[(f64, f64)], minimum_s: f64) -> Result<f64> {
    let mut iv = intervals.to_vec();
    for &(a, b) in &iv {
        if !(a.is_finite() && b.is_finite() && a <= b) {
            return Err(AutoSloError::out_of_range("busy interval", "finite with start ≤ end", format!("[{a}, {b}]")));
        }
    }
    iv.sort_by(|x, y| x.0.total_cmp(&y.0));
    let Some(&(first_a, first_b)) = iv.first() else { return Ok(0.0) };
    let (mut since, mut busy_until, mut total) = (first_a, first_b, 0.0);
    for &(a, b) in &iv[1..] {
        let pause_at = busy_until.max(since + minimum_s);
        if a < pause_at || a <= busy_until {
            busy_until = busy_until.max(b);
        } else {
            total += pause_at - since;
            since = a;
            busy_until = b;
        }
    }
    Ok(total + busy_until.max(since + minimum_s) - since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_query_that_starts_as_another_ends_continues_the_window() {
        // Found by the Python property test: [0, 1] and [1, 1] with a 1 s minimum are one window
        // for the timer (the second arrives while the first is present), so 1 s, not 2.
        assert_eq!(billed_seconds(&[(0.0, 1.0), (1.0, 1.0)], 1.0).unwrap(), 1.0);
        let mut t = BillingTimer::new(1.0);
        t.on_arrival(0.0).unwrap();
        t.on_arrival(1.0).unwrap();
        t.on_idle(1.0).unwrap();
        assert_eq!(t.billed_seconds_at(10.0), 1.0);
        // Once the first has ended and the minimum has run out, a new arrival opens a window.
        assert_eq!(billed_seconds(&[(0.0, 1.0), (3.0, 3.5)], 1.0).unwrap(), 2.0);
    }

    #[test]
    fn timer_follows_the_papers_rule() {
        let mut t = BillingTimer::new(60.0);
        assert_eq!(t.billed_seconds_at(10.0), 0.0, "idle clusters cost nothing");
        t.on_arrival(100.0).unwrap();
        t.on_idle(110.0).unwrap(); // query ran 10 s: billed the 60 s minimum
        assert_eq!(t.billed_seconds_at(130.0), 30.0);
        assert_eq!(t.billed_seconds_at(1000.0), 60.0);
        t.on_arrival(150.0).unwrap(); // arrives within the minimum: same window continues
        t.on_idle(200.0).unwrap();
        assert_eq!(t.billed_seconds_at(1000.0), 100.0);
        t.on_arrival(500.0).unwrap(); // new window
        t.on_idle(700.0).unwrap();
        assert_eq!(t.billed_seconds_at(1000.0), 300.0);
        assert!(t.on_arrival(600.0).is_err(), "time cannot go backwards");
        let p = BillingPolicy::default();
        assert!((p.cost(16, 3600.0) - 6.0).abs() < 1e-12);
    }

    #[test]
    fn cost_until_drained() {
        let p = BillingPolicy::default();
        let mut t = BillingTimer::new(60.0);
        // A paused cluster: adding a query starts a window billed to max(drain, start + 60).
        assert_eq!(cluster_cost_until_drained(&t, &p, 16, None, 0.0).unwrap(), 0.0);
        let c = cluster_cost_until_drained(&t, &p, 16, Some(10.0), 20.0).unwrap();
        assert!((c - p.cost(16, 60.0)).abs() < 1e-12);
        t.on_arrival(0.0).unwrap();
        assert!((cluster_cost_until_drained(&t, &p, 32, None, 500.0).unwrap() - p.cost(32, 500.0)).abs() < 1e-12);
    }

    /// Busy intervals → the incremental timer's event sequence (arrivals at starts, idle when the
    /// number of present queries drops to zero).
    fn incremental(intervals: &[(f64, f64)], minimum: f64, at: f64) -> f64 {
        let mut events: Vec<(f64, i32)> = intervals.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
        // Arrivals before departures at equal times keep a cluster busy across a hand-over.
        events.sort_by(|x, y| x.0.total_cmp(&y.0).then(y.1.cmp(&x.1)));
        let mut t = BillingTimer::new(minimum);
        let mut present = 0;
        for (time, d) in events {
            if time > at {
                break;
            }
            present += d;
            if d > 0 {
                t.on_arrival(time).unwrap();
            } else if present == 0 {
                t.on_idle(time).unwrap();
            }
        }
        t.billed_seconds_at(at)
    }

    fn intervals() -> impl Strategy<Value = Vec<(f64, f64)>> {
        prop::collection::vec((0.0f64..5000.0, 0.0f64..400.0), 0..40).prop_map(|v| v.into_iter().map(|(a, d)| (a, a + d)).collect())
    }

    proptest! {
        #[test]
        fn batch_and_incremental_agree(iv in intervals(), minimum in 0.0f64..120.0) {
            let batch = billed_seconds(&iv, minimum).unwrap();
            let inc = incremental(&iv, minimum, 1e9);
            prop_assert!((batch - inc).abs() < 1e-6, "batch {} inc {}", batch, inc);
            prop_assert!(batch >= 0.0);
            // Never less than the union of busy time, never more than the busy time plus one minimum per interval.
            let mut sorted = iv.clone();
            sorted.sort_by(|x, y| x.0.total_cmp(&y.0));
            let (mut union, mut reach) = (0.0, f64::NEG_INFINITY);
            for &(a, b) in &sorted {
                union += (b - a.max(reach)).max(0.0);
                reach = reach.max(b);
            }
            let busy: f64 = iv.iter().map(|(a, b)| b - a).sum();
            prop_assert!(batch >= union - 1e-6 && batch <= busy + minimum * iv.len() as f64 + 1e-6);
        }

        #[test]
        fn billing_is_monotone_in_time_and_never_negative(iv in intervals(), minimum in 0.0f64..120.0, t1 in 0.0f64..6000.0, dt in 0.0f64..1000.0) {
            let a = incremental(&iv, minimum, t1);
            let b = incremental(&iv, minimum, t1 + dt);
            prop_assert!(a >= 0.0 && b >= a - 1e-9);
        }

        /// The router's branch and bound rests on this: adding a query never lowers
        /// ClusterCostUntilDrained, whatever the timer's state, for any drain no earlier than before.
        #[test]
        fn an_arrival_never_lowers_the_cost_until_drained(iv in intervals(), minimum in 0.0f64..120.0, t in 0.0f64..6000.0, d1 in 0.0f64..800.0, extra in 0.0f64..800.0, rpu in 1u32..64) {
            let mut timer = BillingTimer::new(minimum);
            let mut events: Vec<(f64, i32)> = iv.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
            events.sort_by(|x, y| x.0.total_cmp(&y.0).then(y.1.cmp(&x.1)));
            let mut present = 0;
            for (time, d) in events.into_iter().take_while(|e| e.0 <= t) {
                present += d;
                if d > 0 { timer.on_arrival(time).unwrap() } else if present == 0 { timer.on_idle(time).unwrap() }
            }
            let p = BillingPolicy::default();
            let before = cluster_cost_until_drained(&timer, &p, rpu, None, t + d1).unwrap();
            let after = cluster_cost_until_drained(&timer, &p, rpu, Some(t), t + d1 + extra).unwrap();
            prop_assert!(before >= 0.0 && after >= before, "before {} after {}", before, after);
        }
    }
}
