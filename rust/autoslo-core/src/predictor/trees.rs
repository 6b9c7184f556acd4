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

/// Ensembles whose trees are at most this deep are also laid out complete ([`Complete`]).
const COMPLETE_UP_TO: usize = 8;
/// A [`Split`]'s feature bits: the index, and whether a NaN input goes right.
const FEATURE_MASK: u32 = u32::MAX >> 1;
const NAN_RIGHT: u32 = !FEATURE_MASK;

/// An internal node of a [`Complete`] tree.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Feature index, with [`NAN_RIGHT`] set when a NaN input takes the right branch.
    feature: u32,
    threshold: f32,
}

/// Every tree as a complete binary tree of one depth: node `k`'s children at `2k + 1` and
/// `2k + 2`, a leaf above the full depth repeated into every slot below it. A walk is then
/// `depth` steps without a data-dependent branch, over about a quarter of the bytes: the at-arrival
/// correction and Stage walk a few hundred trees per routed query, where mispredicted branches
/// cost more than the comparisons. Same leaves, same summation order: equal to [`Trees::walk`]
/// bit for bit.
#[derive(Debug, Clone)]
struct Complete {
    depth: usize,
    /// 2^depth − 1 splits per tree, breadth first.
    splits: Vec<Split>,
    /// 2^depth leaf values per tree.
    leaves: Vec<f32>,
}

impl Complete {
    /// The layout of `trees`, or `None` when one is deeper than [`COMPLETE_UP_TO`].
    fn new(trees: &[Vec<Node>]) -> Option<Self> {
        let depth = trees.iter().map(|t| depth(t)).max().unwrap_or(0);
        if depth > COMPLETE_UP_TO {
            return None;
        }
        let (internal, leaves) = ((1usize << depth) - 1, 1usize << depth);
        let mut c = Self { depth, splits: Vec::with_capacity(trees.len() * internal), leaves: Vec::with_capacity(trees.len() * leaves) };
        for t in trees {
            let base = (c.splits.len(), c.leaves.len());
            c.splits.resize(base.0 + internal, Split { feature: 0, threshold: 0.0 });
            c.leaves.resize(base.1 + leaves, 0.0);
            c.fill(t, 0, 0, base);
        }
        Some(c)
    }

    /// Lay out the subtree of `t`'s node `src` at complete position `k` (tree offsets `base`).
    fn fill(&mut self, t: &[Node], src: usize, k: usize, base: (usize, usize)) {
        let internal = (1usize << self.depth) - 1;
        if k >= internal {
            // Validation made every node this deep a leaf (the depth is the deepest tree's).
            self.leaves[base.1 + k - internal] = t[src].value;
            return;
        }
        let n = t[src];
        let (left, right) = if n.split < 0 {
            // A leaf above the full depth: the same leaf under both branches, whatever the split.
            (src, src)
        } else {
            self.splits[base.0 + k] = Split { feature: n.split as u32 | if n.default_left { 0 } else { NAN_RIGHT }, threshold: n.threshold };
            (n.left as usize, n.right as usize)
        };
        self.fill(t, left, 2 * k + 1, base);
        self.fill(t, right, 2 * k + 2, base);
    }

    fn eval(&self, base_score: f32, x: &[f32]) -> f32 {
        // Without a NaN input, no split needs its NaN rule.
        if x.iter().any(|v| v.is_nan()) {
            self.sum::<true>(base_score, x)
        } else {
            self.sum::<false>(base_score, x)
        }
    }

    fn sum<const NAN: bool>(&self, base_score: f32, x: &[f32]) -> f32 {
        let width = 1usize << self.depth;
        let trees = self.leaves.len() / width;
        let mut y = base_score;
        // LANES trees walk side by side, so that their chains of dependent loads overlap.
        let full = trees - trees % LANES;
        for t in (0..full).step_by(LANES) {
            let k: [usize; LANES] = self.walk_lanes::<LANES, NAN>(t, x);
            for (j, k) in k.iter().enumerate() {
                y += self.leaves[(t + j) * width + k];
            }
        }
        for t in full..trees {
            let [k] = self.walk_lanes::<1, NAN>(t, x);
            y += self.leaves[t * width + k];
        }
        y
    }

    /// The leaf each of trees `t .. t + N` reaches for `x` (index among its leaves). `NAN`: whether
    /// `x` may hold a NaN.
    #[inline(always)]
    fn walk_lanes<const N: usize, const NAN: bool>(&self, t: usize, x: &[f32]) -> [usize; N] {
        let internal = (1usize << self.depth) - 1;
        let splits = &self.splits[t * internal..(t + N) * internal];
        let mut k = [0usize; N];
        for _ in 0..self.depth {
            for (j, k) in k.iter_mut().enumerate() {
                let s = splits[j * internal + *k];
                let v = x[(s.feature & FEATURE_MASK) as usize];
                // Right when v ≥ threshold, or v is NaN and NaN goes right: the walk's rule.
                let right = (v >= s.threshold) | (NAN && v.is_nan() && s.feature & NAN_RIGHT != 0);
                *k = 2 * *k + 1 + usize::from(right);
            }
        }
        k.map(|k| k - internal)
    }
}

/// Trees a [`Complete`] walk advances together.
const LANES: usize = 8;

/// Edges from the root to the deepest leaf of a validated tree (children after parents).
fn depth(t: &[Node]) -> usize {
    let mut d = vec![0usize; t.len()];
    for k in (0..t.len()).rev() {
        if t[k].split >= 0 {
            d[k] = 1 + d[t[k].left as usize].max(d[t[k].right as usize]);
        }
    }
    d[0]
}

/// A validated tree ensemble over `dim` inputs: `base_score + Σ leaf values`.
#[derive(Debug, Clone)]
pub struct Trees {
    dim: usize,
    base_score: f32,
    trees: Vec<Vec<Node>>,
    complete: Option<Complete>,
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
        let complete = Complete::new(&out);
        Ok(Self { dim, base_score, trees: out, complete })
    }

    /// The ensemble's output for `x` (length `dim`; NaN inputs take each split's default branch).
    pub fn eval(&self, x: &[f32]) -> f32 {
        debug_assert_eq!(x.len(), self.dim);
        match &self.complete {
            Some(c) => c.eval(self.base_score, x),
            None => self.walk(x),
        }
    }

    /// [`Trees::eval`] by following each tree's child indices (the layout as exported).
    pub fn walk(&self, x: &[f32]) -> f32 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// A random tree of irregular shape, at most `max_depth` deep, in the exported layout.
    fn random_tree(rng: &mut Rng, dim: usize, max_depth: usize) -> TreeJson {
        let mut t = TreeJson { split: vec![], threshold: vec![], left: vec![], right: vec![], default_left: vec![], value: vec![] };
        // A leaf with value 0, turned into a split or given a value when its turn comes.
        let push = |t: &mut TreeJson| {
            t.split.push(-1);
            t.threshold.push(0.0);
            t.left.push(0);
            t.right.push(0);
            t.default_left.push(false);
            t.value.push(0.0);
            t.split.len() - 1
        };
        // Breadth first, so children come after their parent.
        let mut queue = std::collections::VecDeque::from([(push(&mut t), 0usize)]);
        while let Some((k, d)) = queue.pop_front() {
            if d < max_depth && (d == 0 || rng.uniform() < 0.7) {
                t.split[k] = rng.below(dim) as i32;
                t.threshold[k] = (rng.uniform() * 2.0 - 1.0) as f32;
                t.default_left[k] = rng.uniform() < 0.5;
                let (l, r) = (push(&mut t), push(&mut t));
                (t.left[k], t.right[k]) = (l as u32, r as u32);
                queue.extend([(l, d + 1), (r, d + 1)]);
            } else {
                t.value[k] = rng.normal() as f32;
            }
        }
        t
    }

    #[test]
    fn the_complete_layout_equals_the_walk_bit_for_bit() {
        let mut rng = Rng::new(3);
        for max_depth in [1, 3, 4, 6, COMPLETE_UP_TO, COMPLETE_UP_TO + 2] {
            let dim = 5;
            let trees: Vec<TreeJson> = (0..40).map(|_| random_tree(&mut rng, dim, max_depth)).collect();
            let m = Trees::new(0.25, &trees, dim, "test").unwrap();
            assert_eq!(m.complete.is_some(), max_depth <= COMPLETE_UP_TO, "the deepest random tree reaches max_depth");
            for i in 0..500 {
                // Inputs around the thresholds, on them, and NaN.
                let x: Vec<f32> = (0..dim)
                    .map(|j| match (i + j) % 7 {
                        0 => f32::NAN,
                        1 => trees[i % trees.len()].threshold[0],
                        _ => (rng.uniform() * 2.4 - 1.2) as f32,
                    })
                    .collect();
                assert_eq!(m.eval(&x).to_bits(), m.walk(&x).to_bits(), "depth {max_depth}, input {x:?}");
            }
        }
        // One leaf: depth 0.
        let leaf = TreeJson { split: vec![-1], threshold: vec![0.0], left: vec![0], right: vec![0], default_left: vec![true], value: vec![1.5] };
        let m = Trees::new(0.5, &[leaf], 2, "test").unwrap();
        assert_eq!(m.eval(&[0.0, f32::NAN]), 2.0);
    }
}
