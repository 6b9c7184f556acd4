//! Reservations and weighted sharing of the admission queue when capacity is contested: which
//! waiting query a freed slot goes to.
//!
//! The rule is mClock's dual tags (Gulati, Merchant and Varman, OSDI 2010), with a query's cost
//! its estimated work in seconds (its Stage estimate) instead of one I/O:
//!
//! - **Tags at enqueue.** A tenant with reservation r (work-seconds per second) and weight w
//!   gives its k-th waiting query a reservation tag R_k = max(R_{k−1} + c_{k−1}/r, now) and a
//!   share tag P_k = max(P_{k−1} + c_{k−1}/w, now), where c is the previous query's cost. A
//!   tenant without a reservation has R = ∞.
//! - **Reservations first.** When a slot frees, a query whose R tag is due (R ≤ now) goes first,
//!   the smallest R first: the reserved rate is delivered before anything is shared.
//! - **Weights divide the excess.** Otherwise the smallest P tag goes, and the R tags of that
//!   tenant's waiting queries move back by c/r, so service given by weight does not count
//!   against the reservation (mClock's adjustment).
//! - **A change to mClock:** service given by reservation moves the tenant's P tags back by c/w
//!   as well, so it does not count against the weight either. mClock alone gives a tenant about
//!   the larger of its reservation and its weighted share; with the change a tenant gets its
//!   reservation *plus* its weighted part of what the reservations leave, as the case asks
//!   ("weights divide only the excess").
//! - **Aging (the guaranteed quantum).** A query that has waited `max_wait_s` goes before both,
//!   oldest first, so a batch tenant with a small weight is delayed by at most that long while
//!   capacity frees at all: it is never starved.

use std::collections::HashMap;

use crate::error::{AutoSloError, Result};

/// One population's share of contested capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Reserved rate, in seconds of estimated work per second (0: none).
    pub reservation: f64,
    /// Weight in dividing what the reservations leave (> 0).
    pub weight: f64,
}

impl Default for Share {
    fn default() -> Self {
        Self { reservation: 0.0, weight: 1.0 }
    }
}

/// Shares by tenant index, the share of the others, and the aging bound.
#[derive(Debug, Clone, PartialEq)]
pub struct SharingPolicy {
    pub shares: HashMap<u32, Share>,
    /// The share of every tenant not in `shares`.
    pub default: Share,
    /// A query that has waited this long (s) goes first, whatever its tags.
    pub max_wait_s: f64,
    /// `true` (the default): weights divide only what the reservations leave (the change, see
    /// the module docs). `false`: mClock's literal tags.
    pub excess_only: bool,
}

impl Default for SharingPolicy {
    fn default() -> Self {
        Self { shares: HashMap::new(), default: Share::default(), max_wait_s: f64::INFINITY, excess_only: true }
    }
}

impl SharingPolicy {
    pub fn validate(&self) -> Result<()> {
        for (who, s) in self.shares.iter().map(|(t, s)| (format!("tenant {t}"), s)).chain(std::iter::once(("the default".to_string(), &self.default))) {
            if !(s.reservation.is_finite() && s.reservation >= 0.0) {
                return Err(AutoSloError::InvalidConfig(format!("sharing: {who}'s reservation must be ≥ 0 work-seconds per second, got {}", s.reservation)));
            }
            if !(s.weight.is_finite() && s.weight > 0.0) {
                return Err(AutoSloError::InvalidConfig(format!("sharing: {who}'s weight must be > 0, got {}", s.weight)));
            }
        }
        if self.max_wait_s.is_nan() || self.max_wait_s <= 0.0 {
            return Err(AutoSloError::out_of_range("maximum wait before aging", "> 0 s", self.max_wait_s));
        }
        Ok(())
    }

    fn share(&self, tenant: u32) -> Share {
        self.shares.get(&tenant).copied().unwrap_or(self.default)
    }
}

/// A waiting query's tags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tags {
    pub tenant: u32,
    pub cost: f64,
    pub enqueued: f64,
    reservation: f64,
    share: f64,
}

/// The dual-tag scheduler (see the module docs).
#[derive(Debug, Clone)]
pub struct Sharing {
    policy: SharingPolicy,
    /// Tenant → (next reservation tag, next share tag) before `max(·, now)`.
    next: HashMap<u32, (f64, f64)>,
}

impl Sharing {
    pub fn new(policy: SharingPolicy) -> Result<Self> {
        policy.validate()?;
        Ok(Self { policy, next: HashMap::new() })
    }

    pub fn policy(&self) -> &SharingPolicy {
        &self.policy
    }

    /// Tags for a query of `tenant` costing `cost` s of work, enqueued at `now`.
    pub fn tag(&mut self, now: f64, tenant: u32, cost: f64) -> Tags {
        let s = self.policy.share(tenant);
        let cost = cost.max(0.0);
        let (nr, np) = self.next.get(&tenant).copied().unwrap_or((f64::NEG_INFINITY, f64::NEG_INFINITY));
        let reservation = if s.reservation > 0.0 { nr.max(now) } else { f64::INFINITY };
        let share = np.max(now);
        let next_r = if s.reservation > 0.0 { reservation + cost / s.reservation } else { f64::NEG_INFINITY };
        self.next.insert(tenant, (next_r, share + cost / s.weight));
        Tags { tenant, cost, enqueued: now, reservation, share }
    }

    /// Which of `waiting` (in arrival order) a freed slot goes to at `now`, and apply mClock's
    /// adjustment when it goes by weight. `None` only when `waiting` is empty.
    pub fn pick(&mut self, now: f64, waiting: &mut [Tags]) -> Option<usize> {
        let min_by = |key: &dyn Fn(&Tags) -> Option<f64>| -> Option<usize> {
            waiting.iter().enumerate().filter_map(|(i, t)| key(t).map(|k| (i, k))).min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0))).map(|(i, _)| i)
        };
        let max_wait = self.policy.max_wait_s;
        if let Some(i) = min_by(&|t| (now - t.enqueued >= max_wait).then_some(t.enqueued)) {
            return Some(i);
        }
        if let Some(i) = min_by(&|t| (t.reservation <= now).then_some(t.reservation)) {
            if self.policy.excess_only {
                // Served by reservation: the tenant's share tags move back (the change to mClock).
                let (tenant, cost) = (waiting[i].tenant, waiting[i].cost);
                let back = cost / self.policy.share(tenant).weight;
                self.move_back(waiting, i, tenant, |t| &mut t.share, back, |n| &mut n.1);
            }
            return Some(i);
        }
        let i = min_by(&|t| Some(t.share))?;
        let (tenant, cost) = (waiting[i].tenant, waiting[i].cost);
        let s = self.policy.share(tenant);
        if s.reservation > 0.0 {
            // Served by weight: the tenant's reservation tags move back (mClock's adjustment).
            self.move_back(waiting, i, tenant, |t| &mut t.reservation, cost / s.reservation, |n| &mut n.0);
        }
        Some(i)
    }

    /// Move the tag `field` of `tenant`'s other waiting queries, and its next tag, back by `by`.
    fn move_back(&mut self, waiting: &mut [Tags], served: usize, tenant: u32, field: fn(&mut Tags) -> &mut f64, by: f64, next: fn(&mut (f64, f64)) -> &mut f64) {
        for (_, t) in waiting.iter_mut().enumerate().filter(|(j, t)| *j != served && t.tenant == tenant) {
            *field(t) -= by;
        }
        if let Some(n) = self.next.get_mut(&tenant) {
            *next(n) -= by;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tenant always has work waiting; one slot frees every `1 / rate` seconds, each query
    /// costs 1 s: the work each tenant received over `seconds`.
    fn backlogged(policy: SharingPolicy, tenants: u32, rate: f64, seconds: f64) -> Vec<f64> {
        let mut s = Sharing::new(policy).unwrap();
        let mut waiting: Vec<Tags> = Vec::new();
        let mut got = vec![0.0; tenants as usize];
        let mut now = 0.0;
        while now < seconds {
            for t in 0..tenants {
                while waiting.iter().filter(|w| w.tenant == t).count() < 4 {
                    waiting.push(s.tag(now, t, 1.0));
                }
            }
            let i = s.pick(now, &mut waiting).unwrap();
            got[waiting.remove(i).tenant as usize] += 1.0;
            now += 1.0 / rate;
        }
        got
    }

    #[test]
    fn without_shares_backlogged_tenants_split_evenly() {
        let got = backlogged(SharingPolicy::default(), 3, 9.0, 100.0);
        assert!(got.iter().all(|g| (g - 300.0).abs() <= 2.0), "{got:?}");
    }

    #[test]
    fn the_reservation_is_delivered_and_weights_divide_only_the_excess() {
        // Capacity 10 work-s/s; tenant 0 reserves 4; weights 1 : 1 : 2 divide the other 6.
        let shares = HashMap::from([(0, Share { reservation: 4.0, weight: 1.0 }), (2, Share { reservation: 0.0, weight: 2.0 })]);
        let got = backlogged(SharingPolicy { shares, ..Default::default() }, 3, 10.0, 200.0);
        let total: f64 = got.iter().sum();
        let share: Vec<f64> = got.iter().map(|g| g / total).collect();
        // Reserved 0.4, plus a quarter of the 0.6 left: 0.55; tenant 1 a quarter (0.15), tenant 2 half (0.3).
        assert!((share[0] - 0.55).abs() < 0.02 && (share[1] - 0.15).abs() < 0.02 && (share[2] - 0.30).abs() < 0.02, "{share:?}");
    }

    #[test]
    fn literal_mclock_gives_the_larger_of_reservation_and_weighted_share() {
        let shares = HashMap::from([(0, Share { reservation: 4.0, weight: 1.0 }), (2, Share { reservation: 0.0, weight: 2.0 })]);
        let got = backlogged(SharingPolicy { shares, excess_only: false, ..Default::default() }, 3, 10.0, 200.0);
        let total: f64 = got.iter().sum();
        let share: Vec<f64> = got.iter().map(|g| g / total).collect();
        // Its reservation (0.4) exceeds its weighted quarter, so it gets 0.4; 1 : 2 divide the 0.6 left.
        assert!((share[0] - 0.40).abs() < 0.02 && (share[1] - 0.20).abs() < 0.02 && (share[2] - 0.40).abs() < 0.02, "{share:?}");
    }

    #[test]
    fn a_reservation_beyond_capacity_takes_it_all_but_aging_still_serves_the_rest() {
        let shares = HashMap::from([(0, Share { reservation: 100.0, weight: 1.0 })]);
        let starved = backlogged(SharingPolicy { shares: shares.clone(), ..Default::default() }, 2, 10.0, 100.0);
        assert_eq!(starved[1], 0.0, "{starved:?}");
        let aged = backlogged(SharingPolicy { shares, max_wait_s: 5.0, ..Default::default() }, 2, 10.0, 100.0);
        assert!(aged[1] > 0.0, "{aged:?}");
    }

    #[test]
    fn bad_shares_are_errors_naming_the_tenant() {
        let bad = SharingPolicy { shares: HashMap::from([(3, Share { reservation: -1.0, weight: 1.0 })]), ..Default::default() };
        assert!(Sharing::new(bad).unwrap_err().to_string().contains("tenant 3"));
        let zero = SharingPolicy { default: Share { reservation: 0.0, weight: 0.0 }, ..Default::default() };
        assert!(Sharing::new(zero).is_err());
        assert!(Sharing::new(SharingPolicy { max_wait_s: 0.0, ..Default::default() }).is_err());
    }
}
