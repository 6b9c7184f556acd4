//! Gradient-boosted regression trees exported from xgboost to portable JSON, walked in Rust.
//!
//! Used by [`super::stage`] (isolated runtimes) and [`super::arrival`] (the at-arrival correction).
//! Loading validates every tree so that evaluation cannot index out of bounds or loop.

use std::path::Path;

use serde::Deserialize;

use crate::error::{AutoSloError, Result};

/// Load a model JSON file through `parse(text, origin)`, the origin being the path.
pub fn load_json<T>(path: &Path, parse: impl FnOnce(&str, &str) -> Result<T>) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| AutoSloError::model(path.display(), format!("cannot read: {e}")))?;
    parse(&text, &path.display().to_string())
}

/// A model file's `format` tag must be `expected`.
pub fn check_format(found: &str, expected: &str, origin: &str) -> Result<()> {
    if found != expected {
        return Err(AutoSloError::model(origin, format!("format `{found}`, expected `{expected}`")));
    }
    Ok(())
}

/// One tree as exported by `autoslo.predictor.stage._export_trees` (node arrays, root first).
#[derive(Debug, Deserialize)]
pub struct TreeJson {
    split: Vec<i32>,
    threshold: Vec<f32>,
    left: Vec<u32>,
    right: Vec<u32>,
    default_left: Vec<bool>,
    value: Vec<f32>,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    /// Feature index, or -1 for a leaf.
    split: i32,
    threshold: f32,
    left: u32,
    right: u32,
    default_left: bool,
    value: f32,
}

/// A validated tree ensemble over `dim` inputs: `base_score + Σ leaf values`.
#[derive(Debug, Clone)]
pub struct Trees {
    dim: usize,
    base_score: f32,
    trees: Vec<Vec<Node>>,
}

impl Trees {
    /// Validate exported trees (`origin` names the file in errors).
    pub fn new(base_score: f32, trees: &[TreeJson], dim: usize, origin: &str) -> Result<Self> {
        let bad = |p: String| AutoSloError::model(origin, p);
        if !base_score.is_finite() {
            return Err(bad(format!("base score {base_score} is not finite")));
        }
        let mut out = Vec::with_capacity(trees.len());
        for (ti, t) in trees.iter().enumerate() {
            let n = t.split.len();
            if n == 0 || [t.threshold.len(), t.left.len(), t.right.len(), t.default_left.len(), t.value.len()].iter().any(|&l| l != n) {
                return Err(bad(format!("tree {ti}: node arrays are empty or of different lengths")));
            }
            let mut nodes = Vec::with_capacity(n);
            for k in 0..n {
                let node = Node { split: t.split[k], threshold: t.threshold[k], left: t.left[k], right: t.right[k], default_left: t.default_left[k], value: t.value[k] };
                if node.split >= 0 {
                    // Children strictly after their parent: every walk terminates.
                    let ok = (node.split as usize) < dim && (node.left as usize) < n && (node.right as usize) < n && node.left as usize > k && node.right as usize > k;
                    if !ok {
                        return Err(bad(format!("tree {ti} node {k}: bad feature index or child")));
                    }
                } else if !node.value.is_finite() {
                    return Err(bad(format!("tree {ti} node {k}: leaf value is not finite")));
                }
                nodes.push(node);
            }
            out.push(nodes);
        }
        Ok(Self { dim, base_score, trees: out })
    }

    /// The ensemble's output for `x` (length `dim`; NaN inputs take each split's default branch).
    pub fn eval(&self, x: &[f32]) -> f32 {
        debug_assert_eq!(x.len(), self.dim);
        let mut y = self.base_score;
        for t in &self.trees {
            let mut k = 0usize;
            loop {
                let n = &t[k];
                if n.split < 0 {
                    y += n.value;
                    break;
                }
                let v = x[n.split as usize];
                k = if v.is_nan() {
                    if n.default_left { n.left } else { n.right }
                } else if v < n.threshold {
                    n.left
                } else {
                    n.right
                } as usize;
            }
        }
        y
    }

    pub fn len(&self) -> usize {
        self.trees.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trees.is_empty()
    }
}
