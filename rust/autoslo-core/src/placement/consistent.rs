//! Consistent placement with bounded load: a hash ring of virtual nodes maps a key (a tenant, a
//! template) to a preferred destination; a membership change moves only the keys whose arc
//! changed owner (≈ 1/(n+1) of them when one of n+1 joins, against n/(n+1) for `hash mod n`).
//! With a load bound, a key whose preferred destination is at its ceiling walks the ring to the
//! next one under it: locality is traded for balance, explicitly.

use crate::error::{AutoSloError, Result};
use crate::rng::splitmix64;

fn hash(x: u64) -> u64 {
    let mut s = x;
    splitmix64(&mut s)
}

/// A hash ring over destination ids, `vnodes` points each.
#[derive(Debug, Clone)]
pub struct ConsistentRing {
    points: Vec<(u64, u32)>,
    members: Vec<u32>,
}

impl ConsistentRing {
    pub fn new(members: &[u32], vnodes: usize) -> Result<Self> {
        if members.is_empty() || vnodes == 0 {
            return Err(AutoSloError::InvalidConfig("a consistent ring needs at least one member and one virtual node each".into()));
        }
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(AutoSloError::InvalidConfig("ring members must be distinct".into()));
        }
        let mut points: Vec<(u64, u32)> = members.iter().flat_map(|&m| (0..vnodes as u64).map(move |v| (hash((u64::from(m) << 32) ^ v ^ 0x5bd1_e995), m))).collect();
        points.sort_unstable();
        Ok(Self { points, members: sorted })
    }

    pub fn members(&self) -> &[u32] {
        &self.members
    }

    fn start(&self, key: u64) -> usize {
        let h = hash(key);
        self.points.partition_point(|p| p.0 < h) % self.points.len()
    }

    /// The preferred destination of `key`.
    pub fn lookup(&self, key: u64) -> u32 {
        self.points[self.start(key)].1
    }

    /// The first destination clockwise from `key` whose `load` is below `ceiling` (`load` is
    /// indexed by member id); the preferred one if every member is at its ceiling.
    pub fn lookup_bounded(&self, key: u64, load: impl Fn(u32) -> f64, ceiling: f64) -> u32 {
        let s = self.start(key);
        (0..self.points.len()).map(|i| self.points[(s + i) % self.points.len()].1).find(|&m| load(m) < ceiling).unwrap_or(self.points[s].1)
    }

    /// Fraction of `keys` whose destination differs between `self` and `other`.
    pub fn remap_fraction(&self, other: &ConsistentRing, keys: u64) -> f64 {
        (0..keys).filter(|&k| self.lookup(k) != other.lookup(k)).count() as f64 / keys as f64
    }
}

/// Fraction of `keys` that `hash mod n` moves when n becomes m.
pub fn modulo_remap_fraction(n: u64, m: u64, keys: u64) -> f64 {
    (0..keys).filter(|&k| hash(k) % n != hash(k) % m).count() as f64 / keys as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_moves_about_one_key_in_n_plus_one_and_modulo_moves_most() {
        let ten: Vec<u32> = (0..10).collect();
        let eleven: Vec<u32> = (0..11).collect();
        let (a, b) = (ConsistentRing::new(&ten, 200).unwrap(), ConsistentRing::new(&eleven, 200).unwrap());
        let ring = a.remap_fraction(&b, 100_000);
        assert!((ring - 1.0 / 11.0).abs() < 0.02, "{ring}");
        // Only keys that moved went to the new member.
        assert!((0..100_000u64).all(|k| a.lookup(k) == b.lookup(k) || b.lookup(k) == 10));
        let modulo = modulo_remap_fraction(10, 11, 100_000);
        assert!((modulo - 10.0 / 11.0).abs() < 0.01, "{modulo}");
    }

    #[test]
    fn a_bounded_lookup_skips_members_at_their_ceiling_and_errors_are_typed() {
        let r = ConsistentRing::new(&[1, 2, 3], 50).unwrap();
        let preferred = r.lookup(42);
        let other = r.lookup_bounded(42, |m| if m == preferred { 10.0 } else { 0.0 }, 5.0);
        assert_ne!(other, preferred);
        assert_eq!(r.lookup_bounded(42, |_| 10.0, 5.0), preferred);
        assert!(ConsistentRing::new(&[], 10).is_err());
        assert!(ConsistentRing::new(&[1, 1], 10).is_err());
    }
}
