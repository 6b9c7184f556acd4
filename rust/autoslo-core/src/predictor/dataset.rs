//! Training and evaluation samples of Iconq+ from execution traces (§4.3, §8.3.2).
//!
//! Queries are grouped by (run, cluster). A query `q`'s before-neighbours are the queries that
//! arrived before it and were still running at its arrival; its after-neighbours arrived while it
//! ran. Each query gives one sample with its full neighbour sets, labelled with ln(latency) — a lower
//! bound (censored) if it timed out. With probability `censored_prob` per after-neighbour `a_{j+1}`,
//! a censored sample with the partial after-set `a_1..a_j` is added, labelled with
//! ln(t(a_{j+1}) − t(q)): the query was still running when `a_{j+1}` arrived.
//!
//! Interaction vectors are stored compactly as (target row, neighbour row, timing + size part);
//! `x = [f(target) | f(neighbour) | extra]` rebuilds them, in Rust ([`Dataset::vector`]) and in Python.

use rayon::prelude::*;

use super::features::{interaction, FeatureOptions, QueryFeatures, INTERACTION_DIM, QUERY_DIM};
use super::iconq::{predict_sequence, Kernel};
use super::classes::{Featurizer, QueryRef};
use crate::error::{AutoSloError, Result};
use crate::rng::{derive_seed, Rng};

/// Length of the per-pair part (timing and size features).
pub const EXTRA_DIM: usize = INTERACTION_DIM - 2 * QUERY_DIM;

/// One executed query of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceQuery {
    /// Which trace (run) it belongs to.
    pub run: u32,
    pub query_id: u64,
    pub query: QueryRef,
    pub cluster: i64,
    pub cluster_size: u32,
    pub arrival: f64,
    pub end: f64,
    /// Timed out (or aborted): end − arrival is a lower bound.
    pub censored: bool,
}

/// How samples are built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DatasetOptions {
    pub features: FeatureOptions,
    /// After-neighbours in arrival order (Iconq+) or reversed (Iconq's bidirectional layout).
    pub after_chronological: bool,
    /// Probability of a censored partial-neighbour-set sample per after-neighbour (0 disables).
    pub censored_prob: f64,
    /// Seed of the censored sampling.
    pub seed: u64,
    /// Keep timed-out queries as censored samples (otherwise they are dropped).
    pub keep_timeouts: bool,
}

/// One sample: a target query, its neighbour sequences and its label.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Row of the target in [`Dataset::queries`].
    pub target: u32,
    /// Pair rows [off, off + len) of the before sequence (before-neighbours then the query itself).
    pub before: (u32, u32),
    /// Pair rows of the after sequence, in the order the model ingests them.
    pub after: (u32, u32),
    /// ln(latency) or, if censored, ln(lower bound).
    pub ln_label: f32,
    pub censored: bool,
    /// A sampled partial neighbour set (censored by construction).
    pub partial: bool,
}

/// Samples with their compact interaction vectors.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// Per input row: its features on its cluster.
    pub queries: Vec<QueryFeatures>,
    pub rows: Vec<TraceQuery>,
    pub pair_target: Vec<u32>,
    pub pair_neighbour: Vec<u32>,
    pub pair_extra: Vec<[f32; EXTRA_DIM]>,
    pub samples: Vec<Sample>,
}

impl Dataset {
    /// Build samples from trace rows (any order; grouped by run and cluster here), each query's
    /// features from `features` (a model's Stage, and its classes for a history's queries).
    pub fn build(rows: &[TraceQuery], features: &Featurizer<'_>, opts: DatasetOptions) -> Result<Self> {
        if !(0.0..=1.0).contains(&opts.censored_prob) {
            return Err(AutoSloError::out_of_range("censored_prob", "in [0, 1]", opts.censored_prob));
        }
        let mut queries = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            if !(r.end >= r.arrival && r.arrival.is_finite() && r.end.is_finite()) || r.cluster_size == 0 {
                return Err(AutoSloError::BadColumn { column: "end".into(), problem: format!("row {i}: end {} before arrival {} or size 0", r.end, r.arrival) });
            }
            queries.push(features.query(r.query_id, r.query, r.arrival, r.cluster_size)?);
        }
        let groups = group_rows(rows)?;
        // Per group, the samples' pair lists (built in parallel, concatenated in group order).
        type Part = (Vec<(u32, u32, [f32; EXTRA_DIM])>, Vec<Sample>);
        let parts: Vec<Part> = groups
            .par_iter()
            .enumerate()
            .map(|(gi, g)| group_samples(g, rows, &queries, opts, derive_seed(opts.seed, gi as u64)))
            .collect();
        let mut ds = Dataset { queries, rows: rows.to_vec(), ..Default::default() };
        for (pairs, samples) in parts {
            let base = ds.pair_target.len() as u32;
            for (t, n, e) in pairs {
                ds.pair_target.push(t);
                ds.pair_neighbour.push(n);
                ds.pair_extra.push(e);
            }
            for mut s in samples {
                s.before.0 += base;
                s.after.0 += base;
                ds.samples.push(s);
            }
        }
        Ok(ds)
    }

    /// Rebuild the interaction vector of pair row `p`.
    pub fn vector(&self, p: usize) -> [f32; INTERACTION_DIM] {
        let mut x = [0f32; INTERACTION_DIM];
        x[..QUERY_DIM].copy_from_slice(&self.queries[self.pair_target[p] as usize].f);
        x[QUERY_DIM..2 * QUERY_DIM].copy_from_slice(&self.queries[self.pair_neighbour[p] as usize].f);
        x[2 * QUERY_DIM..].copy_from_slice(&self.pair_extra[p]);
        x
    }

    /// ln predictions of every sample with a kernel (parallel over samples).
    pub fn predict(&self, k: &dyn Kernel) -> Result<Vec<f32>> {
        self.samples
            .par_iter()
            .map(|s| {
                let seq = |(o, l): (u32, u32)| (o as usize..(o + l) as usize).map(|p| self.vector(p)).collect::<Vec<_>>();
                let q = &self.queries[s.target as usize];
                predict_sequence(k, &seq(s.before), &seq(s.after), q.f[QUERY_DIM - 1])
            })
            .collect()
    }
}

/// Row indices grouped by (run, cluster), each group sorted by (arrival, id). The same query id
/// twice at the same arrival in one group is an error.
pub(crate) fn group_rows(rows: &[TraceQuery]) -> Result<Vec<Vec<u32>>> {
    let mut order: Vec<u32> = (0..rows.len() as u32).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&rows[a as usize], &rows[b as usize]);
        (x.run, x.cluster).cmp(&(y.run, y.cluster)).then(x.arrival.total_cmp(&y.arrival)).then(x.query_id.cmp(&y.query_id))
    });
    let key = |i: u32| (rows[i as usize].run, rows[i as usize].cluster);
    let groups: Vec<Vec<u32>> = order.chunk_by(|&a, &b| key(a) == key(b)).map(<[u32]>::to_vec).collect();
    for g in &groups {
        for w in g.windows(2) {
            if rows[w[0] as usize].query_id == rows[w[1] as usize].query_id && rows[w[0] as usize].arrival == rows[w[1] as usize].arrival {
                return Err(AutoSloError::DuplicateQueryId(rows[w[0] as usize].query_id));
            }
        }
    }
    Ok(groups)
}

#[allow(clippy::type_complexity)]
fn group_samples(g: &[u32], rows: &[TraceQuery], queries: &[QueryFeatures], opts: DatasetOptions, seed: u64) -> (Vec<(u32, u32, [f32; EXTRA_DIM])>, Vec<Sample>) {
    let mut rng = Rng::new(seed);
    let mut pairs = Vec::new();
    let mut samples = Vec::new();
    let max_lat = g.iter().map(|&i| rows[i as usize].end - rows[i as usize].arrival).fold(0.0, f64::max);
    let size = rows[g[0] as usize].cluster_size;
    let mut x = [0f32; INTERACTION_DIM];
    let mut push = |pairs: &mut Vec<(u32, u32, [f32; EXTRA_DIM])>, t: u32, n: u32| {
        interaction(&queries[t as usize], &queries[n as usize], size, opts.features, &mut x);
        let mut e = [0f32; EXTRA_DIM];
        e.copy_from_slice(&x[2 * QUERY_DIM..]);
        pairs.push((t, n, e));
    };
    for (pos, &qi) in g.iter().enumerate() {
        let q = &rows[qi as usize];
        if q.censored && !opts.keep_timeouts {
            continue;
        }
        let latency = q.end - q.arrival;
        if latency <= 0.0 {
            continue;
        }
        // Before: earlier arrivals still running at q's arrival (none can be earlier than arrival − max latency).
        let lo = g[..pos].partition_point(|&i| rows[i as usize].arrival < q.arrival - max_lat);
        let before: Vec<u32> = g[lo..pos].iter().copied().filter(|&i| rows[i as usize].end > q.arrival).collect();
        let hi = pos + 1 + g[pos + 1..].partition_point(|&i| rows[i as usize].arrival < q.end);
        let after: Vec<u32> = g[pos + 1..hi].to_vec();
        let b_off = pairs.len();
        for &n in &before {
            push(&mut pairs, qi, n);
        }
        push(&mut pairs, qi, qi);
        let b_len = pairs.len() - b_off;
        let mut emit = |pairs: &mut Vec<(u32, u32, [f32; EXTRA_DIM])>, prefix: &[u32], ln_label: f32, censored: bool, partial: bool| {
            let a_off = pairs.len();
            let ordered: Vec<u32> = if opts.after_chronological { prefix.to_vec() } else { prefix.iter().rev().copied().collect() };
            for n in ordered {
                push(pairs, qi, n);
            }
            let s = Sample { target: qi, before: (b_off as u32, b_len as u32), after: (a_off as u32, (pairs.len() - a_off) as u32), ln_label, censored, partial };
            samples.push(s);
        };
        emit(&mut pairs, &after, latency.ln() as f32, q.censored, false);
        if opts.censored_prob > 0.0 {
            for j in 0..after.len() {
                if rng.uniform() < opts.censored_prob {
                    let gap = rows[after[j] as usize].arrival - q.arrival;
                    if gap > 0.0 {
                        emit(&mut pairs, &after[..j], gap.ln() as f32, true, true);
                    }
                }
            }
        }
    }
    (pairs, samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::iconq::tests::random_params;
    use crate::predictor::iconq::NativeKernel;
    use crate::catalog::QueryText;
    use crate::predictor::incremental::ClusterState;
    use crate::predictor::stage::Stage;

    fn stage() -> Stage {
        let names: Vec<String> = (0..super::super::stage::STAGE_DIM).map(|i| format!("\"f{i}\"")).collect();
        let j = format!(
            r#"{{"format":"autoslo-stage","format_version":1,"feature_version":1,"features":[{}],"base_score":1.0,"trees":[],"cache":[]}}"#,
            names.join(",")
        );
        Stage::from_json(&j, "t").unwrap()
    }

    fn row(id: u64, a: f64, e: f64) -> TraceQuery {
        TraceQuery { run: 0, query_id: id, query: QueryRef::Tpcds(QueryText { template: 3, instance: 1 }), cluster: 0, cluster_size: 8, arrival: a, end: e, censored: false }
    }

    #[test]
    fn neighbour_sets_and_partial_samples() {
        // q0 [0,10), q1 [2,4), q2 [5,20), q3 [12,13)
        let rows = vec![row(0, 0.0, 10.0), row(1, 2.0, 4.0), row(2, 5.0, 20.0), row(3, 12.0, 13.0)];
        let opts = DatasetOptions { features: FeatureOptions { size_features: true }, after_chronological: true, censored_prob: 1.0, seed: 1, keep_timeouts: true };
        let ds = Dataset::build(&rows, &Featurizer { stage: &stage(), classes: None }, opts).unwrap();
        let full: Vec<_> = ds.samples.iter().filter(|s| !s.partial).collect();
        assert_eq!(full.len(), 4);
        let nbrs = |which: (u32, u32)| (which.0..which.0 + which.1).map(|p| ds.rows[ds.pair_neighbour[p as usize] as usize].query_id).collect::<Vec<_>>();
        // q2: before = {q0} (q1 ended at 4 < 5), then itself; after = {q3}.
        let s2 = full.iter().find(|s| ds.rows[s.target as usize].query_id == 2).unwrap();
        assert_eq!(nbrs(s2.before), vec![0, 2]);
        assert_eq!(nbrs(s2.after), vec![3]);
        // q0: after = {q1, q2}; with prob 1, two partial samples: {} labelled ln 2 and {q1} labelled ln 5.
        let partial: Vec<_> = ds.samples.iter().filter(|s| s.partial && ds.rows[s.target as usize].query_id == 0).collect();
        assert_eq!(partial.len(), 2);
        assert_eq!((partial[0].after.1, partial[0].ln_label), (0, 2f32.ln()));
        assert_eq!((nbrs(partial[1].after), partial[1].ln_label), (vec![1], 5f32.ln()));
        assert!(partial.iter().all(|s| s.censored));
    }

    #[test]
    fn dataset_predictions_match_the_incremental_state() {
        let rows: Vec<_> = (0..30).map(|i| row(i, i as f64, i as f64 + 100.0)).collect();
        let opts = DatasetOptions { features: FeatureOptions { size_features: true }, after_chronological: true, censored_prob: 0.0, seed: 1, keep_timeouts: true };
        let ds = Dataset::build(&rows, &Featurizer { stage: &stage(), classes: None }, opts).unwrap();
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 9), "t").unwrap();
        let preds = ds.predict(&k).unwrap();
        let mut c = ClusterState::new(8, opts.features).unwrap();
        for q in &ds.queries {
            c.add_arrival(&k, *q).unwrap();
        }
        for (s, p) in ds.samples.iter().zip(&preds) {
            let id = ds.rows[s.target as usize].query_id;
            let r = c.running().iter().find(|r| r.query.id == id).unwrap();
            assert!((r.ln_pred - p).abs() < 1e-6);
        }
    }

    #[test]
    fn rejects_bad_rows() {
        let opts = DatasetOptions { features: FeatureOptions { size_features: true }, after_chronological: true, censored_prob: 0.0, seed: 1, keep_timeouts: true };
        assert!(Dataset::build(&[row(0, 5.0, 1.0)], &Featurizer { stage: &stage(), classes: None }, opts).is_err());
        assert!(Dataset::build(&[row(0, 0.0, 1.0), row(0, 0.0, 2.0)], &Featurizer { stage: &stage(), classes: None }, opts).is_err());
        assert!(Dataset::build(&[row(0, 0.0, 1.0)], &Featurizer { stage: &stage(), classes: None }, DatasetOptions { censored_prob: 2.0, ..opts }).is_err());
    }
}
