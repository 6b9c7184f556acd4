//! Spinup and teardown times of clusters: a fixed δ (the paper uses 300 s), or drawn from the
//! 35 timed create/attach/delete cycles of real Redshift Serverless workgroups
//! (`workgroup_lifecycle.csv`, derived from `workgroup_lifecycle_timings.yml`).

use crate::error::{AutoSloError, Result};
use crate::rng::Rng;

const LIFECYCLE_CSV: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/workgroup_lifecycle.csv"));

/// How long clusters take to become ready and to go away.
#[derive(Debug, Clone, PartialEq)]
pub enum Lifecycle {
    /// Fixed durations in seconds.
    Fixed { spinup_s: f64, teardown_s: f64 },
    /// Drawn uniformly from the measured cycles of the nearest measured size (in log2 RPU).
    Measured,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::Fixed { spinup_s: 300.0, teardown_s: 200.0 }
    }
}

/// Measured (rpu, ready_s, teardown_s) cycles.
pub fn measured_cycles() -> Vec<(u32, f64, f64)> {
    LIFECYCLE_CSV
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse().expect("bundled lifecycle"), f[2].parse().expect("bundled lifecycle"), f[3].parse().expect("bundled lifecycle"))
        })
        .collect()
}

impl Lifecycle {
    pub(crate) fn validate(&self) -> Result<()> {
        if let Lifecycle::Fixed { spinup_s, teardown_s } = self {
            for (what, v) in [("spinup time", spinup_s), ("teardown time", teardown_s)] {
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(AutoSloError::out_of_range(what, "≥ 0 s", v));
                }
            }
        }
        Ok(())
    }

    /// (spinup, teardown) seconds for a cluster of `size`.
    pub fn draw(&self, size: u32, rng: &mut Rng, cycles: &[(u32, f64, f64)]) -> (f64, f64) {
        match self {
            Lifecycle::Fixed { spinup_s, teardown_s } => (*spinup_s, *teardown_s),
            Lifecycle::Measured => {
                let dist = |s: u32| ((s as f64).log2() - (size as f64).log2()).abs();
                let best = cycles.iter().map(|c| dist(c.0)).fold(f64::INFINITY, f64::min);
                let near: Vec<&(u32, f64, f64)> = cycles.iter().filter(|c| dist(c.0) == best).collect();
                let c = near[rng.below(near.len())];
                (c.1, c.2)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_cycles_match_the_readme() {
        let c = measured_cycles();
        assert_eq!(c.len(), 32); // successful cycles
        let mut ready: Vec<f64> = c.iter().filter(|x| x.0 != 4).map(|x| x.1).collect();
        ready.sort_by(f64::total_cmp);
        let med = ready[ready.len() / 2];
        assert!((55.0..90.0).contains(&med), "median ready {med}");
        let mut rng = Rng::new(1);
        for _ in 0..20 {
            let (up, down) = Lifecycle::Measured.draw(4, &mut rng, &c);
            assert!(up > 60.0 && down > 150.0);
        }
    }
}
