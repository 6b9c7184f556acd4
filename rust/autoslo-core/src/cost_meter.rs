//! Streaming cost attribution: one cluster's bill split over its queries as they run, for a
//! serving control plane that logs each query when it ends (the batch form over a finished
//! trace is [`crate::trace::attribute_cost_by_work`]).
//!
//! The cluster is billed by the timer of §2 ([`BillingTimer`]): from the first query of a busy
//! period, at least the billing minimum, then while queries run. Each billed second goes to
//! queries:
//!
//! 1. A second during which `n` queries run is split equally among them (each gets `1/n` s):
//!    a query's *share* is the integral of `1/n` over its run.
//! 2. A busy period's first `minimum_s` seconds (its *window*) are billed whole, whether or not
//!    queries run throughout. The window's seconds during which none ran, the billing minimum's
//!    top-up included, go to the queries that ran in the window, in proportion to their shares
//!    there (equally if every share is 0). After the window the timer runs only while queries
//!    run, so rule 1 covers every later second.
//!
//! So the seconds attributed to a period's queries sum to the period's billed seconds, and a
//! query's cost is final when it has ended and its period's window is over: at most `minimum_s`
//! after the period began. [`CostMeter::leave`] returns it at once when the window is over, and
//! [`CostMeter::advance`] returns the queries whose cost became final as the window closed.

use std::collections::HashMap;

use crate::billing::BillingTimer;
use crate::error::{AutoSloError, Result};

/// A query whose attributed seconds are final.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settled {
    pub query: u64,
    /// Billed seconds attributed to it (× the cluster's price per second = its cost).
    pub seconds: f64,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    /// The share clock when it joined.
    joined: f64,
    /// Its part of a closed window's unattributed seconds.
    credited: f64,
    /// It ran in the window still open.
    in_window: bool,
}

/// The first `minimum_s` seconds of a busy period, billed whole.
#[derive(Debug, Clone)]
struct Window {
    ends: f64,
    /// Seconds of the window during which a query ran.
    busy_s: f64,
    /// Queries that ran in it and already left, with their shares.
    left: Vec<(u64, f64)>,
}

/// One cluster's billing timer with its bill split over its queries as they run. Every call
/// is O(1) amortised, except that a window's closing visits the queries that ran in it.
#[derive(Debug, Clone)]
pub struct CostMeter {
    timer: BillingTimer,
    minimum_s: f64,
    /// ∫ 1/n dt over the time some query ran (n of them): a running query's share so far is
    /// this clock's advance since it joined.
    share_clock: f64,
    last: f64,
    running: HashMap<u64, Running>,
    window: Option<Window>,
}

impl CostMeter {
    /// A meter of an idle cluster with billing minimum `minimum_s` (≥ 0).
    pub fn new(minimum_s: f64) -> Result<Self> {
        if !(minimum_s.is_finite() && minimum_s >= 0.0) {
            return Err(AutoSloError::out_of_range("billing minimum", "≥ 0 s", minimum_s));
        }
        Ok(Self { timer: BillingTimer::new(minimum_s), minimum_s, share_clock: 0.0, last: f64::NEG_INFINITY, running: HashMap::new(), window: None })
    }

    /// The cluster's billing timer.
    pub fn timer(&self) -> &BillingTimer {
        &self.timer
    }

    /// Queries running on the cluster.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The latest time the meter has seen (−∞ before the first event): later calls are
    /// clamped to it, so times read under a lock never go back.
    pub fn last_event(&self) -> f64 {
        self.last
    }

    fn integrate(&mut self, to: f64) {
        let dt = to - self.last;
        if dt > 0.0 && !self.running.is_empty() {
            self.share_clock += dt / self.running.len() as f64;
            if let Some(w) = &mut self.window {
                w.busy_s += dt;
            }
        }
        self.last = self.last.max(to);
    }

    /// Move the meter's clock to `now` (no earlier than the last event: clamped), closing the
    /// window if it is over. Returns the queries whose attribution became final.
    pub fn advance(&mut self, now: f64) -> Result<Vec<Settled>> {
        if !now.is_finite() {
            return Err(AutoSloError::out_of_range("event time", "finite", now));
        }
        let now = now.max(self.last);
        let mut settled = Vec::new();
        if let Some(ends) = self.window.as_ref().map(|w| w.ends).filter(|&e| now >= e) {
            self.integrate(ends);
            self.close_window(&mut settled);
        }
        self.integrate(now);
        Ok(settled)
    }

    /// The window is over: its seconds without a running query go to the queries that ran in
    /// it, in proportion to their shares there.
    fn close_window(&mut self, settled: &mut Vec<Settled>) {
        let Some(w) = self.window.take() else { return };
        let unattributed = (self.minimum_s - w.busy_s).max(0.0);
        let clock = self.share_clock;
        let mut still: Vec<(u64, f64)> = self.running.iter().filter(|(_, r)| r.in_window).map(|(&q, r)| (q, clock - r.joined)).collect();
        still.sort_unstable_by_key(|s| s.0);
        let total: f64 = w.left.iter().chain(&still).map(|s| s.1).sum();
        let n = w.left.len() + still.len();
        let part = |share: f64| if total > 0.0 { unattributed * share / total } else { unattributed / n as f64 };
        for &(q, share) in &w.left {
            settled.push(Settled { query: q, seconds: share + part(share) });
        }
        for (q, share) in still {
            if let Some(r) = self.running.get_mut(&q) {
                r.credited += part(share);
                r.in_window = false;
            }
        }
    }

    /// Query `query` starts running on the cluster at `now`. Returns the queries whose
    /// attribution became final before it (a window that closed).
    pub fn join(&mut self, query: u64, now: f64) -> Result<Vec<Settled>> {
        if self.running.contains_key(&query) {
            return Err(AutoSloError::InvalidAction(format!("query {query} already runs on the cluster")));
        }
        let settled = self.advance(now)?;
        let now = self.last;
        if !self.timer.is_running(now) {
            // A new busy period: its window opens (the last one closed when the timer paused,
            // no earlier than its end).
            self.window = Some(Window { ends: now + self.minimum_s, busy_s: 0.0, left: Vec::new() });
        }
        self.timer.on_arrival(now)?;
        self.running.insert(query, Running { joined: self.share_clock, credited: 0.0, in_window: self.window.is_some() });
        Ok(settled)
    }

    /// Query `query` stops running on the cluster at `now`. Returns its attributed seconds if
    /// they are final (else they come from a later [`CostMeter::advance`], once the window it
    /// ran in closes), and the other queries whose attribution became final.
    pub fn leave(&mut self, query: u64, now: f64) -> Result<(Option<f64>, Vec<Settled>)> {
        if !self.running.contains_key(&query) {
            return Err(AutoSloError::InvalidAction(format!("query {query} does not run on the cluster")));
        }
        let settled = self.advance(now)?;
        let r = self.running.remove(&query).expect("checked above; advance keeps running queries");
        let share = self.share_clock - r.joined;
        if self.running.is_empty() {
            self.timer.on_idle(self.last)?;
        }
        match (&mut self.window, r.in_window) {
            (Some(w), true) => {
                w.left.push((query, share));
                Ok((None, settled))
            }
            _ => Ok((Some(share + r.credited), settled)),
        }
    }

    /// Close the books at `now`, when nothing more will run (the service stopped): queries
    /// still running leave, the window (if open) runs to its end, as the timer bills it, and
    /// every attribution not yet returned is.
    pub fn close(&mut self, now: f64) -> Result<Vec<Settled>> {
        let mut out = self.advance(now)?;
        let mut left: Vec<u64> = self.running.keys().copied().collect();
        left.sort_unstable();
        for q in left {
            let (mine, others) = self.leave(q, now)?;
            out.extend(others);
            if let Some(seconds) = mine {
                out.push(Settled { query: q, seconds });
            }
        }
        if let Some(ends) = self.window.as_ref().map(|w| w.ends) {
            out.extend(self.advance(ends)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seconds_of(s: &[Settled], q: u64) -> f64 {
        s.iter().filter(|x| x.query == q).map(|x| x.seconds).sum()
    }

    #[test]
    fn a_short_query_alone_pays_the_minimum_once_its_window_is_over() {
        let mut m = CostMeter::new(60.0).unwrap();
        assert!(m.join(1, 100.0).unwrap().is_empty());
        let (mine, _) = m.leave(1, 110.0).unwrap();
        assert_eq!(mine, None, "not final within the window");
        assert!(m.advance(159.0).unwrap().is_empty());
        assert_eq!(m.advance(160.0).unwrap(), vec![Settled { query: 1, seconds: 60.0 }]);
        assert_eq!(m.timer().billed_seconds_at(1000.0), 60.0);
    }

    #[test]
    fn overlapping_queries_split_the_seconds_they_share_and_the_window_by_their_shares() {
        let mut m = CostMeter::new(60.0).unwrap();
        m.join(1, 0.0).unwrap();
        m.join(2, 10.0).unwrap();
        // 0–10: 1 alone (10 s); 10–20: both (5 s each); then 2 alone 20–30 (10 s).
        assert_eq!(m.leave(1, 20.0).unwrap().0, None);
        assert_eq!(m.leave(2, 30.0).unwrap().0, None);
        // 30 s of the window ran nothing: 15 s each (equal shares of 15 s).
        let s = m.advance(60.0).unwrap();
        assert_eq!((seconds_of(&s, 1), seconds_of(&s, 2)), (30.0, 30.0));
        // A query running past the window: its part of the window is credited, and it is
        // final as it leaves.
        m.join(3, 100.0).unwrap();
        m.join(4, 100.0).unwrap();
        assert_eq!(m.leave(4, 120.0).unwrap().0, None);
        assert!(m.advance(160.0).unwrap().iter().all(|x| x.query == 4));
        let (mine, _) = m.leave(3, 200.0).unwrap();
        // 3: 10 (shared 100–120) + 80 (alone 120–200); its window ran queries throughout.
        assert_eq!(mine, Some(90.0));
        assert_eq!(m.timer().billed_seconds_at(1000.0), 160.0);
    }

    #[test]
    fn a_gap_inside_the_window_is_billed_and_goes_to_the_queries_around_it() {
        let mut m = CostMeter::new(60.0).unwrap();
        m.join(1, 0.0).unwrap();
        m.leave(1, 10.0).unwrap();
        m.join(2, 40.0).unwrap(); // within the minimum: the same busy period
        let s = m.advance(60.0).unwrap();
        // 1 ran 10 s and left; 2 ran 20 s so far: the 30 s gap goes 1:2 = 10:20.
        assert_eq!(seconds_of(&s, 1), 20.0);
        let (mine, _) = m.leave(2, 100.0).unwrap();
        assert_eq!(mine, Some(80.0));
        assert_eq!(m.timer().billed_seconds_at(1000.0), 100.0);
        assert!(m.leave(2, 101.0).is_err() && m.join(5, f64::NAN).is_err());
    }

    #[test]
    fn closing_ends_what_runs_and_the_window() {
        let mut m = CostMeter::new(60.0).unwrap();
        m.join(1, 0.0).unwrap();
        m.join(2, 5.0).unwrap();
        let s = m.close(20.0).unwrap();
        assert_eq!(s.iter().map(|x| x.query).collect::<Vec<_>>(), vec![1, 2]);
        assert!((s.iter().map(|x| x.seconds).sum::<f64>() - 60.0).abs() < 1e-12);
        assert_eq!(m.running(), 0);
    }

    proptest! {
        /// Every query's attribution is returned once, never negative, no later than its
        /// window's end, and the attributions sum to the timer's bill.
        #[test]
        fn attributed_seconds_sum_to_the_bill(steps in prop::collection::vec((0.0f64..40.0, 0u8..3), 1..120), minimum in prop::sample::select(vec![0.0, 1.0, 30.0, 60.0])) {
            let mut m = CostMeter::new(minimum).unwrap();
            let (mut t, mut next, mut running): (f64, u64, Vec<u64>) = (0.0, 0, Vec::new());
            let mut got: HashMap<u64, f64> = HashMap::new();
            let take = |s: Vec<Settled>, got: &mut HashMap<u64, f64>| -> std::result::Result<(), TestCaseError> {
                for x in s {
                    prop_assert!(x.seconds >= -1e-12, "{:?}", x);
                    prop_assert!(got.insert(x.query, x.seconds).is_none(), "twice: {}", x.query);
                }
                Ok(())
            };
            for (dt, what) in steps {
                // Ties are common: half the steps take no time.
                t += if dt < 20.0 { 0.0 } else { dt };
                match what {
                    0 | 1 if running.len() < 8 => {
                        let s = m.join(next, t).unwrap();
                        take(s, &mut got)?;
                        running.push(next);
                        next += 1;
                    }
                    _ if !running.is_empty() => {
                        let q = running.remove(running.len() / 2);
                        let (mine, s) = m.leave(q, t).unwrap();
                        take(s, &mut got)?;
                        if let Some(seconds) = mine {
                            take(vec![Settled { query: q, seconds }], &mut got)?;
                        }
                    }
                    _ => take(m.advance(t).unwrap(), &mut got)?,
                }
            }
            if running.is_empty() {
                // Nothing runs: everything is final once a window's length has passed.
                take(m.advance(t + minimum).unwrap(), &mut got)?;
                prop_assert_eq!(got.len() as u64, next, "final within the minimum");
            }
            take(m.close(t + minimum).unwrap(), &mut got)?;
            let billed = m.timer().billed_seconds_at(f64::MAX);
            prop_assert_eq!(got.len() as u64, next, "every query once");
            let sum: f64 = got.values().sum();
            prop_assert!((sum - billed).abs() <= 1e-9 * billed.max(1.0), "attributed {} billed {}", sum, billed);
        }
    }
}
