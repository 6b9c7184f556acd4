//! Stage: the concurrency-unaware latency estimate ℓ̂ of a query on a cluster size (§4.1, [57]).
//!
//! Two tiers, as Stage has them: a cache of measured isolated runtimes per (template, instance,
//! size) — or, for a model trained on a warehouse's history, per (class, size) — and for everything
//! else a gradient-boosted tree ensemble over the query's plan features and the size, trained in
//! Python (xgboost) on isolated executions only and exported to the portable JSON read here. A
//! class's tree inputs have instance 0. Evaluation is a plain tree walk: no Python on the hot path.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Deserialize;

use super::features::{plan_features, FEATURE_VERSION, PLAN_DIM};
use super::trees::{check_format, load_json, TreeJson, Trees};
use crate::catalog::{QueryText, NUM_INSTANCES, NUM_TEMPLATES};
use crate::error::{AutoSloError, Result};

/// Format tag and version of `stage.json`.
pub const STAGE_FORMAT: &str = "autoslo-stage";
pub const STAGE_FORMAT_VERSION: u32 = 1;
/// Inputs of the tree model: plan features, instance, size, log2 size.
pub const STAGE_DIM: usize = PLAN_DIM + 3;

#[derive(Debug, Deserialize)]
struct StageJson {
    format: String,
    format_version: u32,
    feature_version: u32,
    features: Vec<String>,
    base_score: f32,
    trees: Vec<TreeJson>,
    /// (template, instance, rpu, mean isolated runtime s, runs)
    cache: Vec<(u16, u16, u32, f64, u32)>,
    /// (class id, rpu, median isolated runtime s, runs): a model trained on a history.
    #[serde(default)]
    class_cache: Vec<(u64, u32, f64, u32)>,
    /// d ln(runtime) / d ln(size) of the history's classes measured on several sizes: a class
    /// measured on other sizes only is carried to a new one by it.
    #[serde(default)]
    class_size_slope: Option<f64>,
}

/// A Stage model: measured cache plus tree ensemble predicting ln(isolated runtime).
#[derive(Debug, Clone)]
pub struct Stage {
    trees: Trees,
    cache: BTreeMap<(u16, u16, u32), f64>,
    class_cache: HashMap<(u64, u32), f64>,
    /// Each cached class's sizes, for the size-scaling law.
    class_sizes: HashMap<u64, Vec<u32>>,
    class_size_slope: Option<f64>,
    memo: Memo,
}

/// Where a history class's Stage estimate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagePath {
    /// Its class ran alone on this size in training: the median.
    Measured,
    /// Its class ran alone on other sizes: the nearest carried by the size-scaling law.
    SizeLaw,
    /// Neither: the trees, from its plan features.
    Features,
}

impl StagePath {
    /// `measured`, `size_law` or `features`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Measured => "measured",
            Self::SizeLaw => "size_law",
            Self::Features => "features",
        }
    }
}

/// Sizes the memo holds: powers of two from 1 to 2^(MEMO_SIZES − 1) RPU.
const MEMO_SIZES: usize = 11;

/// [`Stage::estimate`] remembered per catalog query text and power-of-two size, filled on first
/// use (0 until then: estimates are positive). An estimate is a pure function of its key, so
/// threads that race on an entry store the same bits. The router asks Stage for the routed query
/// on every cluster it evaluates; the remembered value is one load instead of a tree walk.
#[derive(Clone)]
struct Memo(Arc<[AtomicU64]>);

impl Memo {
    fn new() -> Self {
        Self((0..NUM_TEMPLATES as usize * NUM_INSTANCES as usize * MEMO_SIZES).map(|_| AtomicU64::new(0)).collect())
    }

    /// The entry of a key, if the memo covers it.
    fn slot(&self, text: QueryText, rpu: u32) -> Option<&AtomicU64> {
        let (t, i, s) = (text.template as usize, text.instance as usize, rpu.trailing_zeros() as usize);
        let covered = (1..=NUM_TEMPLATES as usize).contains(&t) && (1..=NUM_INSTANCES as usize).contains(&i) && rpu.is_power_of_two() && s < MEMO_SIZES;
        covered.then(|| &self.0[((t - 1) * NUM_INSTANCES as usize + (i - 1)) * MEMO_SIZES + s])
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memo({} of {} filled)", self.0.iter().filter(|a| a.load(Ordering::Relaxed) != 0).count(), self.0.len())
    }
}

impl Stage {
    /// Load `stage.json` from a file.
    pub fn load(path: &Path) -> Result<Self> {
        load_json(path, Self::from_json)
    }

    /// Parse and validate a Stage model (`origin` names it in errors).
    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let bad = |p: String| AutoSloError::model(origin, p);
        let j: StageJson = serde_json::from_str(text).map_err(|e| bad(format!("not a Stage model ({e})")))?;
        check_format(&j.format, STAGE_FORMAT, origin)?;
        if j.format_version != STAGE_FORMAT_VERSION || j.feature_version != FEATURE_VERSION {
            return Err(bad(format!(
                "version {}/features {} but this build reads version {STAGE_FORMAT_VERSION}/features {FEATURE_VERSION}; retrain with `autoslo predictor train`",
                j.format_version, j.feature_version
            )));
        }
        if j.features.len() != STAGE_DIM {
            return Err(bad(format!("{} input features, expected {STAGE_DIM}", j.features.len())));
        }
        let trees = Trees::new(j.base_score, &j.trees, STAGE_DIM, origin)?;
        let mut cache = BTreeMap::new();
        for &(t, i, rpu, mean, _) in &j.cache {
            if !(mean > 0.0 && mean.is_finite()) || rpu == 0 {
                return Err(bad(format!("cache entry ({t}, {i}, {rpu}) has runtime {mean}")));
            }
            cache.insert((t, i, rpu), mean);
        }
        let mut class_cache = HashMap::with_capacity(j.class_cache.len());
        for &(c, rpu, runtime, _) in &j.class_cache {
            if !(runtime > 0.0 && runtime.is_finite()) || rpu == 0 {
                return Err(bad(format!("class cache entry ({c}, {rpu}) has runtime {runtime}")));
            }
            class_cache.insert((c, rpu), runtime);
        }
        if let Some(b) = j.class_size_slope.filter(|b| !(b.is_finite() && (-2.0..=1.0).contains(b))) {
            return Err(bad(format!("class size slope {b} is not in [-2, 1]")));
        }
        let mut class_sizes: HashMap<u64, Vec<u32>> = HashMap::new();
        for &(c, rpu) in class_cache.keys() {
            class_sizes.entry(c).or_default().push(rpu);
        }
        Ok(Self { trees, cache, class_cache, class_sizes, class_size_slope: j.class_size_slope, memo: Memo::new() })
    }

    /// Tree inputs of a query on `rpu`.
    pub fn inputs(text: QueryText, rpu: u32) -> Result<[f32; STAGE_DIM]> {
        Ok(Self::plan_inputs(plan_features().get(text.template)?, text.instance, rpu))
    }

    /// Tree inputs of a query with plan features `plan` (instance 0 for a history's class).
    pub fn plan_inputs(plan: &[f32; PLAN_DIM], instance: u16, rpu: u32) -> [f32; STAGE_DIM] {
        let mut x = [0f32; STAGE_DIM];
        x[..PLAN_DIM].copy_from_slice(plan);
        x[PLAN_DIM] = instance as f32;
        x[PLAN_DIM + 1] = rpu as f32;
        x[PLAN_DIM + 2] = (rpu as f32).log2();
        x
    }

    /// ℓ̂ of a history's class: its median isolated runtime on `rpu` if the training history
    /// measured one; else, if it measured the class on other sizes, the nearest one (in log size)
    /// carried by the size-scaling law (`class_size_slope`); else the tree estimate from its plan
    /// features.
    pub fn estimate_class(&self, class: u64, plan: &[f32; PLAN_DIM], rpu: u32) -> Result<f64> {
        Ok(self.estimate_class_path(class, plan, rpu)?.0)
    }

    /// [`Stage::estimate_class`] and which path gave it.
    pub fn estimate_class_path(&self, class: u64, plan: &[f32; PLAN_DIM], rpu: u32) -> Result<(f64, StagePath)> {
        if rpu == 0 {
            return Err(AutoSloError::out_of_range("cluster size", "≥ 1 RPU", rpu));
        }
        if let Some(&m) = self.class_cache.get(&(class, rpu)) {
            return Ok((m, StagePath::Measured));
        }
        if let (Some(b), Some(sizes)) = (self.class_size_slope, self.class_sizes.get(&class)) {
            let ln = |s: u32| f64::from(s).ln();
            if let Some(&s0) = sizes.iter().min_by(|a, b| (ln(**a) - ln(rpu)).abs().total_cmp(&(ln(**b) - ln(rpu)).abs()).then(a.cmp(b))) {
                return Ok((self.class_cache[&(class, s0)] * (f64::from(rpu) / f64::from(s0)).powf(b), StagePath::SizeLaw));
            }
        }
        Ok((self.model_estimate_plan(plan, rpu)?, StagePath::Features))
    }

    /// The tree ensemble's estimate (s) for a class's plan features, ignoring the cache.
    pub fn model_estimate_plan(&self, plan: &[f32; PLAN_DIM], rpu: u32) -> Result<f64> {
        if rpu == 0 {
            return Err(AutoSloError::out_of_range("cluster size", "≥ 1 RPU", rpu));
        }
        Ok((self.trees.eval(&Self::plan_inputs(plan, 0, rpu)) as f64).exp())
    }

    /// Whether the class cache holds a measurement for this class and size.
    pub fn is_class_cached(&self, class: u64, rpu: u32) -> bool {
        self.class_cache.contains_key(&(class, rpu))
    }

    /// The tree ensemble's estimate (s), ignoring the cache.
    pub fn model_estimate(&self, text: QueryText, rpu: u32) -> Result<f64> {
        if rpu == 0 {
            return Err(AutoSloError::out_of_range("cluster size", "≥ 1 RPU", rpu));
        }
        let x = Self::inputs(text, rpu)?;
        let y = self.trees.eval(&x);
        Ok((y as f64).exp())
    }

    /// ℓ̂: the measured mean if the (template, instance, size) was measured, else the tree estimate.
    pub fn estimate(&self, text: QueryText, rpu: u32) -> Result<f64> {
        let slot = self.memo.slot(text, rpu);
        if let Some(bits) = slot.map(|a| a.load(Ordering::Relaxed)).filter(|&b| b != 0) {
            return Ok(f64::from_bits(bits));
        }
        let e = match self.cache.get(&(text.template, text.instance, rpu)) {
            Some(&m) => m,
            None => self.model_estimate(text, rpu)?,
        };
        if let Some(a) = slot {
            a.store(e.to_bits(), Ordering::Relaxed);
        }
        Ok(e)
    }

    /// Whether the cache holds a measurement for this query and size.
    pub fn is_cached(&self, text: QueryText, rpu: u32) -> bool {
        self.cache.contains_key(&(text.template, text.instance, rpu))
    }

    pub fn num_trees(&self) -> usize {
        self.trees.len()
    }

    /// The tree ensemble (for benches and inspection).
    pub fn trees(&self) -> &Trees {
        &self.trees
    }

    pub fn cache_len(&self) -> usize {
        self.cache.len() + self.class_cache.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(cache: &str) -> String {
        let names: Vec<String> = (0..STAGE_DIM).map(|i| format!("\"f{i}\"")).collect();
        format!(
            r#"{{"format":"autoslo-stage","format_version":1,"feature_version":{FEATURE_VERSION},"features":[{}],"base_score":1.0,
            "trees":[{{"split":[{},-1,-1],"threshold":[8.0,0,0],"left":[1,0,0],"right":[2,0,0],"default_left":[true,false,false],"value":[0,-0.5,0.5]}}],
            "cache":[{cache}]}}"#,
            names.join(","),
            PLAN_DIM + 1
        )
    }

    #[test]
    fn walks_trees_and_prefers_the_cache() {
        let s = Stage::from_json(&tiny("[1,1,4,42.0,2]"), "test").unwrap();
        let t = QueryText { template: 1, instance: 1 };
        assert!((s.model_estimate(t, 4).unwrap() - 0.5f64.exp()).abs() < 1e-6);
        assert!((s.model_estimate(t, 16).unwrap() - 1.5f64.exp()).abs() < 1e-5);
        assert_eq!(s.estimate(t, 4).unwrap(), 42.0);
        assert!(s.is_cached(t, 4) && !s.is_cached(t, 8));
        assert!(s.estimate(t, 0).is_err());
    }

    #[test]
    fn remembered_estimates_equal_computed_ones() {
        let s = Stage::from_json(&tiny("[1,1,4,42.0,2]"), "test").unwrap();
        let t = QueryText { template: 1, instance: 1 };
        let far = QueryText { template: 1, instance: NUM_INSTANCES + 5 };
        // Covered and measured, covered and modelled, sizes and instances the memo leaves out.
        let keys = [(t, 4), (t, 16), (t, 1), (t, 1024), (t, 2048), (t, 24), (far, 16)];
        for round in 0..2 {
            for &(text, rpu) in &keys {
                let want = s.cache.get(&(text.template, text.instance, rpu)).copied().unwrap_or_else(|| s.model_estimate(text, rpu).unwrap());
                assert_eq!(s.estimate(text, rpu).unwrap().to_bits(), want.to_bits(), "round {round}, {text:?} on {rpu}");
            }
        }
        assert!(s.memo.slot(t, 16).is_some() && s.memo.slot(t, 24).is_none() && s.memo.slot(far, 16).is_none() && s.memo.slot(t, 2048).is_none());
        assert_eq!(format!("{:?}", s.memo), format!("Memo(4 of {} filled)", NUM_TEMPLATES as usize * NUM_INSTANCES as usize * MEMO_SIZES));
        assert!(s.estimate(QueryText { template: 0, instance: 1 }, 16).is_err());
    }

    #[test]
    fn classes_use_their_cache_then_the_trees() {
        let s = Stage::from_json(&tiny("").replace("\"cache\":[]", "\"cache\":[],\"class_cache\":[[18446744073709551615,8,3.5,4]]"), "test").unwrap();
        let plan = [0f32; PLAN_DIM];
        assert_eq!(s.estimate_class(u64::MAX, &plan, 8).unwrap(), 3.5);
        assert!(s.is_class_cached(u64::MAX, 8) && !s.is_class_cached(u64::MAX, 16));
        assert!((s.estimate_class(u64::MAX, &plan, 16).unwrap() - 1.5f64.exp()).abs() < 1e-5);
        assert!(s.estimate_class(1, &plan, 0).is_err());
        assert!(Stage::from_json(&tiny("").replace("\"cache\":[]", "\"cache\":[],\"class_cache\":[[1,8,0.0,1]]"), "t").is_err());
        // Measured on 8 RPU only: 32 RPU by the size-scaling law, from the nearest size.
        let law = Stage::from_json(&tiny("").replace("\"cache\":[]", "\"cache\":[],\"class_cache\":[[5,8,4.0,3],[5,128,1.0,3]],\"class_size_slope\":-0.5"), "t").unwrap();
        let (e, path) = law.estimate_class_path(5, &plan, 32).unwrap();
        assert_eq!(path, StagePath::SizeLaw);
        assert!((e - 2.0).abs() < 1e-12, "{e}");
        assert_eq!(law.estimate_class_path(5, &plan, 128).unwrap(), (1.0, StagePath::Measured));
        assert_eq!(law.estimate_class_path(6, &plan, 8).unwrap().1, StagePath::Features);
        assert!(Stage::from_json(&tiny("").replace("\"cache\":[]", "\"cache\":[],\"class_size_slope\":3.0"), "t").is_err());
    }

    #[test]
    fn rejects_bad_models() {
        assert!(Stage::from_json("{}", "x").is_err());
        assert!(Stage::from_json(&tiny("[1,1,4,-1.0,2]"), "x").is_err());
        let cyclic = tiny("").replace("\"left\":[1,0,0]", "\"left\":[0,0,0]");
        assert!(Stage::from_json(&cyclic, "x").unwrap_err().to_string().contains("bad feature index or child"));
        let old = tiny("").replace("\"format_version\":1", "\"format_version\":9");
        assert!(Stage::from_json(&old, "x").unwrap_err().to_string().contains("retrain"));
    }
}
