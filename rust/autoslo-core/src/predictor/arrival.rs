//! The at-arrival correction: what Iconq+ cannot know when a query is routed.
//!
//! Iconq+ predicts a query's latency from its before-neighbours *and* its after-neighbours — the
//! queries that arrive while it runs. At routing time (Algorithm 1) the after-set is still empty, and
//! the network has learned from complete traces that an empty after-set means nobody came: on
//! loaded clusters its at-arrival predictions are too low (on the training traces by a factor of
//! ×1.6 on 16 RPU, ×2.5 with 10–30 queries running). A router that trusts them packs queries onto
//! the cheapest cluster until SLOs break.
//!
//! The correction is a small gradient-boosted tree model of the residual
//! `ln(latency) − ln(Iconq+ at arrival)` over what the router knows at arrival: cluster size,
//! number of running queries, the at-arrival prediction and the Stage estimate. It is fitted on the
//! training traces by replaying each cluster through the same incremental state the router uses
//! ([`arrival_samples`]), stored as `arrival.json` next to the model, and applied only to the
//! routed query's own prediction. Running queries keep Iconq+'s predictions, which absorb their
//! after-neighbours as they arrive.

use std::path::Path;

use rayon::prelude::*;
use serde::Deserialize;

use super::dataset::{group_rows, TraceQuery};
use super::trees::{check_format, load_json, TreeJson, Trees};
use super::Predictor;
use crate::error::{AutoSloError, Result};

/// Format tag and version of `arrival.json`.
pub const ARRIVAL_FORMAT: &str = "autoslo-arrival";
pub const ARRIVAL_FORMAT_VERSION: u32 = 1;
/// Inputs of the correction, in order.
pub const ARRIVAL_FEATURES: [&str; 5] = ["log2_rpu", "ln1p_running", "ln_prediction", "ln_stage", "ln_prediction_minus_ln_stage"];
pub const ARRIVAL_DIM: usize = ARRIVAL_FEATURES.len();

#[derive(Debug, Deserialize)]
struct ArrivalJson {
    format: String,
    format_version: u32,
    features: Vec<String>,
    base_score: f32,
    trees: Vec<TreeJson>,
}

/// Inputs of the correction for a query predicted `prediction_s` at arrival (Stage `stage_s`) on a
/// cluster of `size` RPU with `running` queries already running.
pub fn arrival_inputs(prediction_s: f64, stage_s: f64, size: u32, running: usize) -> [f32; ARRIVAL_DIM] {
    let (lp, ls) = (prediction_s.max(1e-6).ln(), stage_s.max(1e-6).ln());
    [(size.max(1) as f32).log2(), (running as f32).ln_1p(), lp as f32, ls as f32, (lp - ls) as f32]
}

/// A fitted at-arrival correction (ln-residual trees).
#[derive(Debug, Clone)]
pub struct ArrivalCorrection {
    trees: Trees,
}

impl ArrivalCorrection {
    pub fn load(path: &Path) -> Result<Self> {
        load_json(path, Self::from_json)
    }

    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let bad = |p: String| AutoSloError::model(origin, p);
        let j: ArrivalJson = serde_json::from_str(text).map_err(|e| bad(format!("not an at-arrival correction ({e})")))?;
        check_format(&j.format, ARRIVAL_FORMAT, origin)?;
        if j.format_version != ARRIVAL_FORMAT_VERSION {
            return Err(bad(format!("version {} but this build reads {ARRIVAL_FORMAT_VERSION}; refit with `autoslo predictor arrival`", j.format_version)));
        }
        if j.features != ARRIVAL_FEATURES {
            return Err(bad(format!("features {:?}, expected {ARRIVAL_FEATURES:?}", j.features)));
        }
        Ok(Self { trees: Trees::new(j.base_score, &j.trees, ARRIVAL_DIM, origin)? })
    }

    /// ln(latency / prediction) expected for these inputs.
    pub fn ln_residual(&self, x: &[f32; ARRIVAL_DIM]) -> f64 {
        f64::from(self.trees.eval(x))
    }

    /// The corrected at-arrival prediction (s).
    pub fn correct(&self, prediction_s: f64, stage_s: f64, size: u32, running: usize) -> f64 {
        prediction_s * self.ln_residual(&arrival_inputs(prediction_s, stage_s, size, running)).exp()
    }

    pub fn num_trees(&self) -> usize {
        self.trees.len()
    }

    /// The tree ensemble (for benches and inspection).
    pub fn trees(&self) -> &Trees {
        &self.trees
    }
}

/// One routed-at-arrival observation from a trace replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrivalSample {
    pub inputs: [f32; ARRIVAL_DIM],
    /// Iconq+'s prediction at arrival (ln s).
    pub ln_prediction: f64,
    /// ln(latency), a lower bound if censored.
    pub ln_latency: f64,
    pub censored: bool,
    pub size: u32,
    /// Stage estimate (s) and queries running at arrival (the inputs before transformation).
    pub stage_s: f64,
    pub running: usize,
}

/// Replay every (run, cluster) of a trace through the incremental predictor, in arrival order with
/// completions applied as they happened, and record each query's at-arrival prediction and inputs
/// next to its observed latency. Rows with zero latency are skipped. Groups run in parallel.
pub fn arrival_samples(p: &Predictor, rows: &[TraceQuery]) -> Result<Vec<ArrivalSample>> {
    for (i, r) in rows.iter().enumerate() {
        if !(r.end >= r.arrival && r.arrival.is_finite() && r.end.is_finite()) || r.cluster_size == 0 {
            return Err(AutoSloError::BadColumn { column: "end".into(), problem: format!("row {i}: end {} before arrival {} or size 0", r.end, r.arrival) });
        }
    }
    let groups = group_rows(rows)?;
    let parts: Vec<Vec<ArrivalSample>> = groups
        .par_iter()
        .map(|g| -> Result<Vec<ArrivalSample>> {
            let size = rows[g[0] as usize].cluster_size;
            let mut state = p.cluster(size)?;
            // Running queries' (end, id), latest end first: the next to finish is last.
            let mut ends: Vec<(f64, u64)> = Vec::new();
            let mut out = Vec::with_capacity(g.len());
            for &i in g {
                let r = &rows[i as usize];
                while ends.last().is_some_and(|&(e, _)| e <= r.arrival) {
                    let (_, id) = ends.pop().expect("checked non-empty");
                    state.complete(id)?;
                }
                let running = state.len();
                let f = p.featurizer().query(r.query_id, r.query, r.arrival, size)?;
                let u = state.add_arrival(p.kernel(), f)?;
                ends.insert(ends.partition_point(|&(e, _)| e > r.end), (r.end, r.query_id));
                let latency = r.end - r.arrival;
                if latency > 0.0 {
                    out.push(ArrivalSample {
                        inputs: arrival_inputs(u.prediction, f.stage_s, size, running),
                        ln_prediction: u.prediction.ln(),
                        ln_latency: latency.ln(),
                        censored: r.censored,
                        size,
                        stage_s: f.stage_s,
                        running,
                    });
                }
            }
            Ok(out)
        })
        .collect::<Result<_>>()?;
    Ok(parts.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(features: &str) -> String {
        format!(
            r#"{{"format":"autoslo-arrival","format_version":1,"features":{features},"base_score":0.1,
            "trees":[{{"split":[1,-1,-1],"threshold":[1.0,0,0],"left":[1,0,0],"right":[2,0,0],"default_left":[true,false,false],"value":[0,0.0,0.5]}}]}}"#
        )
    }

    #[test]
    fn corrects_by_the_running_count() {
        let c = ArrivalCorrection::from_json(&doc(&serde_json::to_string(&ARRIVAL_FEATURES).unwrap()), "t").unwrap();
        // ln1p(0) = 0 < 1 → +0.1; ln1p(5) ≈ 1.79 ≥ 1 → +0.6.
        assert!((c.correct(10.0, 5.0, 16, 0) - 10.0 * 0.1f64.exp()).abs() < 1e-5);
        assert!((c.correct(10.0, 5.0, 16, 5) - 10.0 * 0.6f64.exp()).abs() < 1e-4);
        let x = arrival_inputs(10.0, 5.0, 16, 5);
        assert_eq!(x[0], 4.0);
        assert!((x[4] - 2f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn rejects_other_layouts() {
        let e = ArrivalCorrection::from_json(&doc(r#"["a","b","c","d","e"]"#), "t").unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
        assert!(ArrivalCorrection::from_json("{}", "t").is_err());
        let v2 = doc(&serde_json::to_string(&ARRIVAL_FEATURES).unwrap()).replace("\"format_version\":1", "\"format_version\":2");
        assert!(ArrivalCorrection::from_json(&v2, "t").unwrap_err().to_string().contains("refit"));
    }
}
