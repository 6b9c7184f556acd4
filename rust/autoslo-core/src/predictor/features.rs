//! Query and interaction features of the Latency Predictor (§4.1–4.2).
//!
//! A query's features `f(q)` are its plan features (from a real EXPLAIN, see
//! `scripts/build_plan_features.py`) and the log of its Stage estimate on the cluster's size. The
//! interaction feature vector of a target query `q` and a neighbour `n` on a cluster of size `s` is
//!
//! ```text
//! [ f(q) | f(n) | g(t_q; t_n) | S(s) ]
//! g = [ sgn(Δt)·ln(1+|Δt|), clamp(Δt/ℓ̂q, ±50), after flag, self flag ]       Δt = t_n − t_q
//! S = [ s, log2 s, 1/s, ℓ̂q·s, ℓ̂n·s, (ℓ̂q+ℓ̂n)/s ]    (zeros for a model without size features)
//! ```
//!
//! The same function builds the vectors for training (through the Python bindings) and serving, so
//! the two cannot drift apart; `FEATURE_VERSION` is stored in every model's metadata and checked on load.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::error::{AutoSloError, Result};

/// Version of the interaction-feature layout below. Bump it whenever the layout changes.
pub const FEATURE_VERSION: u32 = 1;
/// Number of plan features per template in the bundled table.
pub const PLAN_DIM: usize = 34;
/// Features of one query: plan features and ln(Stage estimate).
pub const QUERY_DIM: usize = PLAN_DIM + 1;
/// Timing features g.
pub const TIMING_DIM: usize = 4;
/// Cluster-size features S.
pub const SIZE_DIM: usize = 6;
/// Length of an interaction feature vector.
pub const INTERACTION_DIM: usize = 2 * QUERY_DIM + TIMING_DIM + SIZE_DIM;
/// Clamp of the arrival gap measured in units of ℓ̂q.
const REL_GAP_CLAMP: f32 = 50.0;

const PLAN_CSV: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/plan_features.csv"));

/// Plan features per TPC-DS template.
#[derive(Debug, Clone)]
pub struct PlanFeatures {
    names: Vec<String>,
    rows: BTreeMap<u16, [f32; PLAN_DIM]>,
}

/// The bundled plan-feature table (parsed once).
pub fn plan_features() -> &'static PlanFeatures {
    static T: OnceLock<PlanFeatures> = OnceLock::new();
    T.get_or_init(|| PlanFeatures::from_csv(PLAN_CSV, "bundled plan_features.csv").expect("bundled plan features parse"))
}

impl PlanFeatures {
    /// Parse the table written by `scripts/build_plan_features.py` (header `template,<34 names>`).
    pub fn from_csv(text: &str, source_name: &str) -> Result<Self> {
        let perr = |line: usize, problem: String| AutoSloError::Parse { source_name: source_name.into(), line, problem };
        let mut lines = text.lines().enumerate();
        let header: Vec<String> = match lines.next() {
            Some((_, h)) => h.split(',').map(|s| s.trim().to_string()).collect(),
            None => return Err(perr(1, "empty".into())),
        };
        if header.len() != PLAN_DIM + 1 || header[0] != "template" {
            return Err(perr(1, format!("expected `template` and {PLAN_DIM} feature columns, got {} columns", header.len())));
        }
        let mut rows = BTreeMap::new();
        for (n, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != PLAN_DIM + 1 {
                return Err(perr(n + 1, format!("expected {} fields, got {}", PLAN_DIM + 1, f.len())));
            }
            let t: u16 = f[0].trim().parse().map_err(|e| perr(n + 1, format!("template: {e}")))?;
            let mut v = [0f32; PLAN_DIM];
            for (k, x) in f[1..].iter().enumerate() {
                v[k] = x.trim().parse().map_err(|e| perr(n + 1, format!("field {}: {e}", k + 2)))?;
                if !v[k].is_finite() {
                    return Err(perr(n + 1, format!("field {} is not finite", k + 2)));
                }
            }
            rows.insert(t, v);
        }
        Ok(Self { names: header[1..].to_vec(), rows })
    }

    /// Feature names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The plan features of a template.
    pub fn get(&self, template: u16) -> Result<&[f32; PLAN_DIM]> {
        self.rows.get(&template).ok_or(AutoSloError::UnknownTemplate { template: template as i64 })
    }
}

/// Names of the interaction-feature vector's components (for model metadata and notebooks).
pub fn interaction_feature_names() -> Vec<String> {
    let plan = plan_features().names();
    let mut v = Vec::with_capacity(INTERACTION_DIM);
    for who in ["q", "n"] {
        v.extend(plan.iter().map(|p| format!("{who}.{p}")));
        v.push(format!("{who}.ln_stage"));
    }
    v.extend(["gap_signed_log", "gap_rel_stage", "after", "self"].map(String::from));
    v.extend(["size", "log2_size", "inv_size", "stage_q_x_size", "stage_n_x_size", "stage_sum_over_size"].map(String::from));
    v
}

/// One query as the predictor sees it on one cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryFeatures {
    pub id: u64,
    pub arrival: f64,
    /// Stage's isolated-runtime estimate on this cluster's size (s).
    pub stage_s: f64,
    /// `f(q)`: plan features and ln ℓ̂q.
    pub f: [f32; QUERY_DIM],
}

impl QueryFeatures {
    /// Features of a query of `template` arriving at `arrival` with Stage estimate `stage_s`.
    pub fn new(id: u64, template: u16, arrival: f64, stage_s: f64) -> Result<Self> {
        Self::from_plan(id, plan_features().get(template)?, arrival, stage_s)
    }

    /// Features of a query with plan features `plan` (a TPC-DS template's, or a history class's).
    pub fn from_plan(id: u64, plan: &[f32; PLAN_DIM], arrival: f64, stage_s: f64) -> Result<Self> {
        if !(stage_s > 0.0 && stage_s.is_finite()) {
            return Err(AutoSloError::out_of_range("Stage estimate", "positive and finite", stage_s));
        }
        if !arrival.is_finite() {
            return Err(AutoSloError::out_of_range("arrival", "finite", arrival));
        }
        let mut f = [0f32; QUERY_DIM];
        f[..PLAN_DIM].copy_from_slice(plan);
        f[PLAN_DIM] = stage_s.ln() as f32;
        Ok(Self { id, arrival, stage_s, f })
    }

    /// Whether `self` comes before `other` in arrival order (ties broken by id).
    pub fn before(&self, other: &QueryFeatures) -> bool {
        (self.arrival, self.id) < (other.arrival, other.id)
    }
}

/// Which feature groups a model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureOptions {
    /// Include the cluster-size features S (the +Size variant and later).
    pub size_features: bool,
}

/// Write the interaction vector of target `q` and neighbour `n` (possibly `q` itself) on a cluster
/// of `size` RPU into `out`.
pub fn interaction(q: &QueryFeatures, n: &QueryFeatures, size: u32, opts: FeatureOptions, out: &mut [f32; INTERACTION_DIM]) {
    out[..QUERY_DIM].copy_from_slice(&q.f);
    out[QUERY_DIM..2 * QUERY_DIM].copy_from_slice(&n.f);
    let dt = n.arrival - q.arrival;
    let g = 2 * QUERY_DIM;
    out[g] = (dt.signum() * dt.abs().ln_1p()) as f32;
    out[g + 1] = ((dt / q.stage_s) as f32).clamp(-REL_GAP_CLAMP, REL_GAP_CLAMP);
    let is_self = q.id == n.id;
    out[g + 2] = f32::from(!is_self && q.before(n));
    out[g + 3] = f32::from(is_self);
    let s0 = g + TIMING_DIM;
    if opts.size_features {
        let s = size as f64;
        let v = [s, s.log2(), 1.0 / s, q.stage_s * s, n.stage_s * s, (q.stage_s + n.stage_s) / s];
        for (o, x) in out[s0..].iter_mut().zip(v) {
            *o = x as f32;
        }
    } else {
        out[s0..].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_table_covers_all_templates() {
        let t = plan_features();
        assert_eq!(t.names().len(), PLAN_DIM);
        for tpl in 1..=99u16 {
            assert!(t.get(tpl).is_ok(), "template {tpl}");
        }
        assert!(t.get(100).is_err());
        assert_eq!(interaction_feature_names().len(), INTERACTION_DIM);
    }

    #[test]
    fn interaction_layout() {
        let q = QueryFeatures::new(1, 5, 10.0, 4.0).unwrap();
        let n = QueryFeatures::new(2, 7, 30.0, 8.0).unwrap();
        let mut x = [0f32; INTERACTION_DIM];
        interaction(&q, &n, 16, FeatureOptions { size_features: true }, &mut x);
        let g = 2 * QUERY_DIM;
        assert!((x[g] - (20f64.ln_1p() as f32)).abs() < 1e-6);
        assert_eq!(x[g + 1], 5.0);
        assert_eq!((x[g + 2], x[g + 3]), (1.0, 0.0));
        assert_eq!(x[g + 4], 16.0);
        assert_eq!(x[g + 9], 0.75);
        interaction(&q, &q, 16, FeatureOptions { size_features: false }, &mut x);
        assert_eq!((x[g], x[g + 2], x[g + 3]), (0.0, 0.0, 1.0));
        assert!(x[g + 4..].iter().all(|&v| v == 0.0));
        assert!(QueryFeatures::new(1, 5, 0.0, 0.0).is_err());
        assert!(QueryFeatures::new(1, 500, 0.0, 1.0).is_err());
    }
}
