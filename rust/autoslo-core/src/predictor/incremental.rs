//! Incremental Iconq+ inference per cluster (§4.4).
//!
//! A [`ClusterState`] holds, for every running query on one cluster, the before-LSTM's final hidden
//! state, the after-LSTM's state and the current prediction. A new arrival `q`:
//! - runs the before-LSTM over the running queries (q's before-neighbours) and q itself: N steps;
//! - updates every running query with one after-LSTM step on its interaction with q: N steps.
//!
//! [`ClusterState::counterfactual`] does this without touching the state (the router asks every
//! cluster); [`ClusterState::commit`] applies the chosen one; [`ClusterState::add_arrival`] is both.
//! The whole state is `Clone`, so a simulation can branch it. Memory: 3 × hidden floats per query.

use rayon::prelude::*;

use super::features::{interaction, FeatureOptions, QueryFeatures, INTERACTION_DIM};
use super::iconq::{EmbedParts, HeadInput, Kernel, LstmState, Seq};
use crate::error::{AutoSloError, Result};

/// Above this many running queries the after-steps run in parallel.
const PARALLEL_FROM: usize = 48;
/// Running queries per parallel task.
const CHUNK: usize = 32;

/// A running query and its cached model state.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningQuery {
    pub query: QueryFeatures,
    /// Final hidden state of the before-LSTM (fixed once the query arrived).
    pub h_before: Vec<f32>,
    /// The kernel's head prefix of `h_before` ([`Kernel::head_prefix`]), cached.
    pub head_prefix: Vec<f32>,
    /// The query's embedding-layer parts, if the kernel splits the layer ([`Kernel::embed_parts`]).
    pub parts: Option<EmbedParts>,
    /// After-LSTM state after ingesting every later arrival so far.
    pub after: LstmState,
    /// ln of the current latency prediction (s).
    pub ln_pred: f32,
}

impl RunningQuery {
    /// Current latency prediction in seconds.
    pub fn prediction(&self) -> f64 {
        (self.ln_pred as f64).exp()
    }
}

/// The result of adding a query to a cluster, not yet committed.
#[derive(Debug, Clone)]
pub struct Counterfactual {
    generation: u64,
    kernel: &'static str,
    /// The new query with its state.
    pub query: RunningQuery,
    /// New (after state, ln prediction) of each running query, in the cluster's order.
    pub updated: Vec<(LstmState, f32)>,
}

impl Counterfactual {
    /// Predicted latency (s) of the added query.
    pub fn prediction(&self) -> f64 {
        self.query.prediction()
    }
    /// Updated predictions (s) of the running queries, in the cluster's order.
    pub fn updated_predictions(&self) -> impl Iterator<Item = f64> + '_ {
        self.updated.iter().map(|(_, l)| (*l as f64).exp())
    }
}

/// The before pass of an arrival on one cluster ([`ClusterState::before_pass`]), not yet turned
/// into a [`Counterfactual`] ([`ClusterState::after_pass`]).
#[derive(Debug, Clone)]
pub struct BeforePass {
    generation: u64,
    query: RunningQuery,
}

impl BeforePass {
    /// Predicted latency (s) of the arriving query: the same as its counterfactual's.
    pub fn prediction(&self) -> f64 {
        self.query.prediction()
    }
}

/// The arriving query's running state from its before pass.
fn finish_before(k: &dyn Kernel, q: QueryFeatures, st: LstmState, parts: Option<EmbedParts>) -> Result<RunningQuery> {
    let head_prefix = k.head_prefix(&st.h)?;
    let ln_pred = k.head_with_prefix(&head_prefix, &st.h, q.f[q.f.len() - 1])?;
    Ok(RunningQuery { query: q, h_before: st.h.clone(), head_prefix, parts, after: st, ln_pred })
}

/// Predictions after an arrival was committed.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrivalUpdate {
    /// Predicted latency (s) of the arriving query.
    pub prediction: f64,
    /// (query id, updated prediction s) of every other running query.
    pub updated: Vec<(u64, f64)>,
}

/// Incremental predictor state of one cluster.
#[derive(Debug, Clone)]
pub struct ClusterState {
    size: u32,
    opts: FeatureOptions,
    running: Vec<RunningQuery>,
    generation: u64,
    /// The kernel the running queries' cached states come from (they are kernel-specific).
    kernel: Option<&'static str>,
}

impl ClusterState {
    /// An idle cluster of `size` RPU.
    pub fn new(size: u32, opts: FeatureOptions) -> Result<Self> {
        if size == 0 {
            return Err(AutoSloError::out_of_range("cluster size", "≥ 1 RPU", size));
        }
        Ok(Self { size, opts, running: Vec::new(), generation: 0, kernel: None })
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Running queries in arrival order.
    pub fn running(&self) -> &[RunningQuery] {
        &self.running
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Predict `q` on this cluster and update the running queries, without committing.
    pub fn counterfactual(&self, k: &dyn Kernel, q: QueryFeatures) -> Result<Counterfactual> {
        if self.running.len() >= PARALLEL_FROM {
            // Both passes at once: the before pass beside the after-steps' chunks.
            self.check_arrival(k, &q)?;
            let q_parts = self.query_parts(k, &q);
            let (a, b) = rayon::join(|| self.before_of(k, q, q_parts.clone()), || self.all_updates(k, &q, q_parts.as_ref()));
            return Ok(Counterfactual { generation: self.generation, kernel: k.name(), query: a?, updated: b? });
        }
        let before = self.before_pass(k, q)?;
        self.after_pass(k, before)
    }

    /// The first half of [`ClusterState::counterfactual`]: the before pass, which gives the arriving
    /// query's own prediction ([`BeforePass::prediction`]). The running queries are not touched.
    pub fn before_pass(&self, k: &dyn Kernel, q: QueryFeatures) -> Result<BeforePass> {
        self.check_arrival(k, &q)?;
        let q_parts = self.query_parts(k, &q);
        Ok(BeforePass { generation: self.generation, query: self.before_of(k, q, q_parts)? })
    }

    /// The second half: every running query's after-step with the arrival as its newest neighbour.
    /// `before` must come from this exact state. The steps run on the calling thread, batched
    /// (a thread outside the pool would otherwise wait for a pool thread to wake, which after
    /// idle takes longer than the steps themselves; on the pool, the other threads are busy).
    pub fn after_pass(&self, k: &dyn Kernel, before: BeforePass) -> Result<Counterfactual> {
        if before.generation != self.generation {
            return Err(AutoSloError::InvalidConfig("stale before pass: the cluster changed since it was computed".into()));
        }
        let updated = self.updates(k, &before.query.query, before.query.parts.as_ref(), &self.running)?;
        Ok(Counterfactual { generation: self.generation, kernel: k.name(), query: before.query, updated })
    }

    fn before_of(&self, k: &dyn Kernel, q: QueryFeatures, q_parts: Option<EmbedParts>) -> Result<RunningQuery> {
        let xs = self.before_inputs(&q);
        let st = match &q_parts {
            Some(qp) => k.before_with_parts(&xs, &self.before_pairs(qp))?,
            None => k.before(&xs)?,
        };
        finish_before(k, q, st, q_parts)
    }

    /// After-steps of every running query (in parallel chunks on a large cluster).
    fn all_updates(&self, k: &dyn Kernel, q: &QueryFeatures, q_parts: Option<&EmbedParts>) -> Result<Vec<(LstmState, f32)>> {
        if self.running.len() >= PARALLEL_FROM {
            Ok(self.running.par_chunks(CHUNK).map(|rs| self.updates(k, q, q_parts, rs)).collect::<Result<Vec<_>>>()?.into_iter().flatten().collect())
        } else {
            self.updates(k, q, q_parts, &self.running)
        }
    }

    /// [`ClusterState::counterfactual`] on several clusters at once (`qs[i]` is the query's
    /// features on `states[i]`): the before passes run through [`Kernel::before_many`], so the
    /// kernel can batch them. Equal to one `counterfactual` per cluster.
    pub fn counterfactuals(states: &[&ClusterState], k: &dyn Kernel, qs: &[QueryFeatures]) -> Result<Vec<Counterfactual>> {
        let befores = Self::before_passes(states, k, qs)?;
        states.iter().zip(befores).map(|(c, b)| c.after_pass(k, b)).collect()
    }

    /// [`ClusterState::before_pass`] on several clusters at once, batched as in
    /// [`ClusterState::counterfactuals`].
    pub fn before_passes(states: &[&ClusterState], k: &dyn Kernel, qs: &[QueryFeatures]) -> Result<Vec<BeforePass>> {
        if states.len() != qs.len() {
            return Err(AutoSloError::InvalidConfig(format!("{} clusters but {} query feature sets", states.len(), qs.len())));
        }
        for (c, q) in states.iter().zip(qs) {
            c.check_arrival(k, q)?;
        }
        let parts: Vec<Option<EmbedParts>> = states.iter().zip(qs).map(|(c, q)| c.query_parts(k, q)).collect();
        let inputs: Vec<Vec<[f32; INTERACTION_DIM]>> = states.iter().zip(qs).map(|(c, q)| c.before_inputs(q)).collect();
        let pairs: Vec<Option<Vec<(&EmbedParts, &EmbedParts)>>> = states.iter().zip(&parts).map(|(c, qp)| qp.as_ref().map(|qp| c.before_pairs(qp))).collect();
        let seqs: Vec<Seq<'_>> = inputs.iter().zip(&pairs).map(|(xs, p)| (xs.as_slice(), p.as_deref())).collect();
        let befores = k.before_many(&seqs)?;
        states
            .iter()
            .zip(qs)
            .zip(parts)
            .zip(befores)
            .map(|(((c, q), qp), st)| Ok(BeforePass { generation: c.generation, query: finish_before(k, *q, st, qp)? }))
            .collect()
    }

    fn check_arrival(&self, k: &dyn Kernel, q: &QueryFeatures) -> Result<()> {
        if let Some(last) = self.running.last() {
            if q.arrival < last.query.arrival {
                return Err(AutoSloError::InvalidConfig(format!(
                    "query {} (arrival {} s) arrives before running query {} (arrival {} s); add arrivals in time order",
                    q.id, q.arrival, last.query.id, last.query.arrival
                )));
            }
        }
        if let Some(name) = self.kernel.filter(|&n| n != k.name() && !self.running.is_empty()) {
            return Err(AutoSloError::InvalidConfig(format!("this cluster's running queries were predicted by the `{name}` kernel, not `{}`", k.name())));
        }
        if self.running.iter().any(|r| r.query.id == q.id) {
            return Err(AutoSloError::InvalidConfig(format!("query {} is already running on this cluster", q.id)));
        }
        Ok(())
    }

    /// The kernel's embedding parts of `q`, used only if every running query has its own too.
    fn query_parts(&self, k: &dyn Kernel, q: &QueryFeatures) -> Option<EmbedParts> {
        k.embed_parts(&q.f).filter(|_| self.running.iter().all(|r| r.parts.is_some()))
    }

    /// `q`'s before sequence: the running queries in arrival order, then `q` itself.
    fn before_inputs(&self, q: &QueryFeatures) -> Vec<[f32; INTERACTION_DIM]> {
        let mut xs = vec![[0f32; INTERACTION_DIM]; self.running.len() + 1];
        for (x, r) in xs.iter_mut().zip(&self.running) {
            interaction(q, &r.query, self.size, self.opts, x);
        }
        interaction(q, q, self.size, self.opts, xs.last_mut().expect("non-empty"));
        xs
    }

    fn before_pairs<'a>(&'a self, qp: &'a EmbedParts) -> Vec<(&'a EmbedParts, &'a EmbedParts)> {
        self.running.iter().map(|r| (qp, r.parts.as_ref().expect("query_parts checked every running query has parts"))).chain([(qp, qp)]).collect()
    }

    /// After-steps of running queries `rs` with `q` as their newest neighbour, and their new predictions.
    fn updates(&self, k: &dyn Kernel, q: &QueryFeatures, q_parts: Option<&EmbedParts>, rs: &[RunningQuery]) -> Result<Vec<(LstmState, f32)>> {
        let mut xs = vec![[0f32; INTERACTION_DIM]; rs.len()];
        for (x, r) in xs.iter_mut().zip(rs) {
            interaction(&r.query, q, self.size, self.opts, x);
        }
        let mut sts: Vec<LstmState> = rs.iter().map(|r| r.after.clone()).collect();
        match q_parts {
            Some(qp) => {
                let pairs: Vec<(&EmbedParts, &EmbedParts)> = rs.iter().map(|r| (r.parts.as_ref().expect("query_parts checked every running query has parts"), qp)).collect();
                k.after_steps_with_parts(&xs, &pairs, &mut sts)?
            }
            None => k.after_steps(&xs, &mut sts)?,
        }
        let heads: Vec<HeadInput<'_>> = rs.iter().zip(&sts).map(|(r, st)| (r.head_prefix.as_slice(), st.h.as_slice(), r.query.f[r.query.f.len() - 1])).collect();
        let ls = k.heads_with_prefix(&heads)?;
        Ok(sts.into_iter().zip(ls).collect())
    }

    /// Apply a counterfactual computed from this exact state.
    pub fn commit(&mut self, cf: Counterfactual) -> Result<()> {
        if cf.generation != self.generation || cf.updated.len() != self.running.len() {
            return Err(AutoSloError::InvalidConfig("stale counterfactual: the cluster changed since it was computed".into()));
        }
        for (r, (st, l)) in self.running.iter_mut().zip(cf.updated) {
            r.after = st;
            r.ln_pred = l;
        }
        self.running.push(cf.query);
        self.kernel = Some(cf.kernel);
        self.generation += 1;
        Ok(())
    }

    /// Add an arrival: predict it, update the running queries, commit.
    pub fn add_arrival(&mut self, k: &dyn Kernel, q: QueryFeatures) -> Result<ArrivalUpdate> {
        let cf = self.counterfactual(k, q)?;
        let prediction = cf.prediction();
        let updated = self.running.iter().zip(cf.updated_predictions()).map(|(r, p)| (r.query.id, p)).collect();
        self.commit(cf)?;
        Ok(ArrivalUpdate { prediction, updated })
    }

    /// Take the arrival of `q` that `other` already committed, instead of computing it again: `other`
    /// must be this state plus that one arrival (the same size and feature options, the same running
    /// queries in the same order, then the new query), computed by the same model. The router
    /// and the Workload Simulator both keep a cluster's state; the simulator copies the router's
    /// committed counterfactual this way (N state copies instead of 2N + 1 LSTM steps).
    /// Returns `None`, leaving this state untouched, when `other` is not this state plus one
    /// arrival; the caller then computes the arrival itself ([`ClusterState::add_arrival`]).
    pub fn copy_arrival(&mut self, other: &ClusterState, q: &QueryFeatures) -> Option<ArrivalUpdate> {
        let (new, prior) = other.running.split_last()?;
        let same_queries = new.query == *q && prior.len() == self.running.len() && prior.iter().zip(&self.running).all(|(a, b)| a.query.id == b.query.id);
        let same_kernel = self.running.is_empty() || self.kernel == other.kernel;
        if !(same_queries && same_kernel && self.size == other.size && self.opts == other.opts) {
            return None;
        }
        let mut updated = Vec::with_capacity(prior.len());
        for (r, o) in self.running.iter_mut().zip(prior) {
            r.after.h.clone_from(&o.after.h);
            r.after.c.clone_from(&o.after.c);
            r.ln_pred = o.ln_pred;
            updated.push((r.query.id, r.prediction()));
        }
        self.running.push(new.clone());
        self.kernel = other.kernel;
        self.generation += 1;
        Some(ArrivalUpdate { prediction: new.prediction(), updated })
    }

    /// A running query finished: drop it (its effect on the others' predictions stays, as it overlapped them).
    pub fn complete(&mut self, id: u64) -> Result<RunningQuery> {
        let pos = self.running.iter().position(|r| r.query.id == id).ok_or_else(|| AutoSloError::InvalidAction(format!("query {id} is not running on this cluster")))?;
        self.generation += 1;
        Ok(self.running.remove(pos))
    }

    /// (id, prediction s) of every running query.
    pub fn predictions(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        self.running.iter().map(|r| (r.query.id, r.prediction()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::iconq::tests::random_params;
    use crate::predictor::iconq::{predict_sequence, NativeKernel};

    fn q(id: u64, t: f64) -> QueryFeatures {
        QueryFeatures::new(id, (id % 99 + 1) as u16, t, 2.0 + id as f64).unwrap()
    }

    #[test]
    fn counterfactuals_on_many_clusters_equal_one_at_a_time() {
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 3), "t").unwrap();
        let opts = FeatureOptions { size_features: true };
        // Seven clusters with 0..13 running: a lockstep group of four with ragged lengths, then three.
        let mut cs: Vec<ClusterState> = Vec::new();
        let mut id = 0;
        for (i, size) in [16u32, 32, 8, 16, 4, 32, 16].into_iter().enumerate() {
            let mut c = ClusterState::new(size, opts).unwrap();
            for _ in 0..(i * 2) {
                c.add_arrival(&k, q(id, id as f64 * 0.3)).unwrap();
                id += 1;
            }
            cs.push(c);
        }
        let qs: Vec<QueryFeatures> = cs.iter().map(|_| q(1000, 100.0)).collect();
        let refs: Vec<&ClusterState> = cs.iter().collect();
        let many = ClusterState::counterfactuals(&refs, &k, &qs).unwrap();
        for ((c, qf), m) in cs.iter().zip(&qs).zip(&many) {
            let one = c.counterfactual(&k, *qf).unwrap();
            assert_eq!(m.query.ln_pred, one.query.ln_pred);
            assert_eq!(m.query.after, one.query.after);
            assert_eq!(m.updated, one.updated);
        }
        let mut c0 = cs[3].clone();
        c0.commit(many[3].clone()).unwrap();
        assert!(ClusterState::counterfactuals(&refs[..2], &k, &qs[..1]).is_err());
    }

    #[test]
    fn incremental_equals_recomputation_from_scratch() {
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 3), "t").unwrap();
        let opts = FeatureOptions { size_features: true };
        let mut c = ClusterState::new(16, opts).unwrap();
        let qs: Vec<_> = (0..60).map(|i| q(i, i as f64 * 0.7)).collect();
        for x in &qs {
            c.add_arrival(&k, *x).unwrap();
        }
        c.complete(3).unwrap();
        // Query 10's prediction from scratch: before = 0..10 (all still running when it arrived), after = 11..60.
        let mut xs = Vec::new();
        let mut buf = [0f32; INTERACTION_DIM];
        for n in qs[..10].iter().chain([&qs[10]]) {
            interaction(&qs[10], n, 16, opts, &mut buf);
            xs.push(buf);
        }
        let after: Vec<_> = qs[11..]
            .iter()
            .map(|n| {
                interaction(&qs[10], n, 16, opts, &mut buf);
                buf
            })
            .collect();
        let want = predict_sequence(&k, &xs, &after, qs[10].f[qs[10].f.len() - 1]).unwrap();
        let got = c.running().iter().find(|r| r.query.id == 10).unwrap().ln_pred;
        assert!((want - got).abs() < 1e-6, "{want} vs {got}");
        assert_eq!(c.len(), 59);
    }

    #[test]
    fn counterfactual_does_not_commit_and_stale_ones_are_refused() {
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 3), "t").unwrap();
        let mut c = ClusterState::new(8, FeatureOptions { size_features: true }).unwrap();
        c.add_arrival(&k, q(1, 0.0)).unwrap();
        let before: Vec<_> = c.predictions().collect();
        let cf = c.counterfactual(&k, q(2, 1.0)).unwrap();
        assert_eq!(c.predictions().collect::<Vec<_>>(), before);
        let snapshot = c.clone();
        c.complete(1).unwrap();
        assert!(c.commit(cf.clone()).is_err());
        let mut s = snapshot;
        s.commit(cf).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.counterfactual(&k, q(0, 0.5)).is_err(), "out-of-order arrival");
        assert!(s.counterfactual(&k, q(2, 3.0)).is_err(), "duplicate id");
        assert!(s.complete(42).is_err());
        assert!(ClusterState::new(0, FeatureOptions { size_features: true }).is_err());
    }

    #[test]
    fn copying_a_committed_arrival_equals_computing_it() {
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 3), "t").unwrap();
        let opts = FeatureOptions { size_features: true };
        // 60 running: the counterfactual takes the parallel path past PARALLEL_FROM.
        let mut mine = ClusterState::new(16, opts).unwrap();
        for i in 0..60 {
            mine.add_arrival(&k, q(i, i as f64 * 0.5)).unwrap();
        }
        mine.complete(7).unwrap();
        let mut theirs = mine.clone();
        let arrival = q(100, 40.0);
        let want = theirs.add_arrival(&k, arrival).unwrap();
        let mut computed = mine.clone();
        assert_eq!(computed.add_arrival(&k, arrival).unwrap(), want);
        // Not this state plus the arrival: refused, nothing touched.
        let untouched = mine.clone();
        assert!(mine.copy_arrival(&theirs, &q(101, 40.0)).is_none(), "another query");
        assert!(mine.copy_arrival(&untouched, &arrival).is_none(), "no arrival committed");
        let mut other_size = ClusterState::new(32, opts).unwrap();
        assert!(other_size.copy_arrival(&theirs, &arrival).is_none(), "another cluster");
        let mut fewer = mine.clone();
        fewer.complete(8).unwrap();
        assert!(fewer.copy_arrival(&theirs, &arrival).is_none(), "another set of running queries");
        assert_eq!(mine.running(), untouched.running());
        // The copy: the same update and the same state as computing it.
        assert_eq!(mine.copy_arrival(&theirs, &arrival).unwrap(), want);
        assert_eq!(mine.running(), computed.running());
        // It stays usable: the next arrival computes on the copied state as on the computed one.
        assert_eq!(mine.add_arrival(&k, q(101, 41.0)).unwrap(), computed.add_arrival(&k, q(101, 41.0)).unwrap());
    }
}
