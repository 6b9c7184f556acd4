//! Latency Predictor benches: one incremental arrival with N running queries (the paper's Figure 7b
//! anchor: ≤ 40 ms there, ≤ 1 ms our goal at 300), one arrival's before passes on 1–8 clusters in
//! one batch (the router's line 5), and the per-call cost of one LSTM step through
//! libtorch (tch) against the native kernel, and one evaluation of the gradient-boosted trees
//! behind Stage and the at-arrival correction (complete layout against the exported one).
//!
//! Uses the bundled Iconq+ model (`python/autoslo/models/iconq_plus`). Run with `make bench`.

/// The allocator the Python extension ships with (`rust/autoslo-py/src/lib.rs`).
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

use std::path::PathBuf;

use autoslo_core::catalog::QueryText;
use autoslo_core::predictor::arrival::ARRIVAL_DIM;
use autoslo_core::predictor::stage::STAGE_DIM;
use autoslo_core::predictor::{Backend, Kernel, Predictor, INTERACTION_DIM};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn model() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    Predictor::load(&dir, Backend::Native).expect("bundled model loads (build it with `make models`)")
}

fn text(i: u64) -> QueryText {
    QueryText { template: (i * 37 % 99 + 1) as u16, instance: (i % 3 + 1) as u16 }
}

fn arrival(c: &mut Criterion) {
    let p = model();
    let mut g = c.benchmark_group("iconq_plus_arrival");
    for n in [10usize, 100, 300] {
        let mut cl = p.cluster(16).unwrap();
        for i in 0..n as u64 {
            cl.add_arrival(p.kernel(), p.query(i, text(i), i as f64, 16).unwrap()).unwrap();
        }
        let q = p.query(n as u64, text(n as u64), n as f64, 16).unwrap();
        g.bench_with_input(BenchmarkId::new("native_counterfactual", n), &n, |b, _| b.iter(|| black_box(cl.counterfactual(p.kernel(), q).unwrap())));
    }
    g.finish();
}

/// The before passes of one arrival on `m` clusters of 16 running queries each, in one batch (the
/// Query Router's line 5): groups of five to eight in one eight-lane lockstep with AVX-512, four
/// in a four-lane one (256-bit), two or three one sequence at a time (`docs/predictor.md`).
fn before_passes(c: &mut Criterion) {
    let p = model();
    let mut g = c.benchmark_group("before_passes");
    for m in [1usize, 2, 3, 4, 6, 8] {
        let clusters: Vec<_> = (0..m as u64)
            .map(|k| {
                let mut cl = p.cluster(16).unwrap();
                for i in 0..16u64 {
                    let id = k * 100 + i;
                    cl.add_arrival(p.kernel(), p.query(id, text(id), i as f64, 16).unwrap()).unwrap();
                }
                cl
            })
            .collect();
        let states: Vec<_> = clusters.iter().collect();
        let qs: Vec<_> = (0..m).map(|_| p.query(10_000, text(7), 20.0, 16).unwrap()).collect();
        g.bench_with_input(BenchmarkId::new("clusters_x16", m), &m, |b, _| b.iter(|| black_box(autoslo_core::predictor::ClusterState::before_passes(&states, p.kernel(), &qs).unwrap())));
    }
    g.finish();
}

fn per_call(c: &mut Criterion) {
    let p = model();
    let q = p.query(0, text(0), 0.0, 16).unwrap();
    let n = p.query(1, text(1), 3.0, 16).unwrap();
    let mut x = [0f32; INTERACTION_DIM];
    autoslo_core::predictor::features::interaction(&q, &n, 16, p.features(), &mut x);
    let st = p.native().before(&[x]).unwrap();
    let mut g = c.benchmark_group("lstm_step");
    for (name, k) in [("native", p.native() as &dyn Kernel), ("tch", p.tch() as &dyn Kernel)] {
        g.bench_function(BenchmarkId::new("after_step", name), |b| {
            b.iter(|| {
                let mut s = st.clone();
                k.after_step(black_box(&x), &mut s).unwrap();
                s
            })
        });
        g.bench_function(BenchmarkId::new("head", name), |b| b.iter(|| k.head(black_box(&st.h), &st.h, 1.0).unwrap()));
    }
    g.finish();
}

fn tree_eval(c: &mut Criterion) {
    let p = model();
    let arrival = p.arrival.as_deref().expect("the bundled model has an at-arrival correction");
    let mut g = c.benchmark_group("trees");
    for (name, t, dim) in [("arrival", arrival.trees(), ARRIVAL_DIM), ("stage", p.stage.trees(), STAGE_DIM)] {
        // Inputs that vary from call to call, as the router's do.
        let mut rng = autoslo_core::rng::Rng::new(1);
        let xs: Vec<Vec<f32>> = (0..64).map(|_| (0..dim).map(|_| (rng.uniform() * 6.0) as f32).collect()).collect();
        let mut i = 0;
        g.bench_function(BenchmarkId::new("complete", name), |b| {
            b.iter(|| {
                i = (i + 1) % xs.len();
                t.eval(black_box(&xs[i]))
            })
        });
        g.bench_function(BenchmarkId::new("walk", name), |b| {
            b.iter(|| {
                i = (i + 1) % xs.len();
                t.walk(black_box(&xs[i]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, before_passes, arrival, per_call, tree_eval);
criterion_main!(benches);
