//! Query Router decision time (the paper's Figure 8a anchor: up to 36 ms; goal ≤ 0.5 ms at 8 × 32):
//! Algorithm 1 over 1, 2, 4, 8 clusters with 2, 8, 32 running queries each, bundled Iconq+ model.
//! Run with `make bench`.

/// The allocator the Python extension ships with (`rust/autoslo-py/src/lib.rs`).
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::{ClusterInfo, ClusterState};
use autoslo_core::control::Router;
use autoslo_core::predictor::{Backend, Predictor};
use autoslo_core::router::{AutoSloRouter, Search};
use autoslo_core::workload::Query;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn query(id: u64, t: f64) -> Query {
    Query { id, arrival: t, text: QueryText { template: (id * 37 % 99 + 1) as u16, instance: (id % 3 + 1) as u16 }, tenant: 0, class: 0, slo: 60.0 }
}

fn route(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    let p = Predictor::load(&dir, Backend::Native).expect("bundled model loads (build it with `make models`)");
    let mut g = c.benchmark_group("route");
    for clusters in [1usize, 2, 4, 8] {
        for per in [2usize, 8, 32] {
            let infos: Vec<ClusterInfo> = (0..clusters)
                .map(|i| ClusterInfo { id: i as u32, size: [32, 16][i % 2], state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: per, queued: 0 })
                .collect();
            let mut r = AutoSloRouter::new(p.clone(), BillingPolicy::default());
            let mut id = 0u64;
            for k in 0..per {
                for info in &infos {
                    r.route(k as f64, &query(id, k as f64), std::slice::from_ref(info)).unwrap();
                    id += 1;
                }
            }
            let q = query(id, per as f64);
            g.bench_with_input(BenchmarkId::new(format!("{clusters}_clusters"), per), &per, |b, _| b.iter(|| black_box(r.evaluate(per as f64, &q, &infos).unwrap())));
            if per == 32 && clusters == 8 {
                // The default search (`Auto`) back to back uses the pool; after idle, branch and
                // bound on the calling thread. Each search is also measured on its own.
                for (name, search) in [("", Search::Auto), ("_exhaustive", Search::Exhaustive), ("_branch_and_bound", Search::BranchAndBound)] {
                    let mut r = r.clone().with_search(search);
                    if !name.is_empty() {
                        g.bench_with_input(BenchmarkId::new(format!("{clusters}_clusters{name}"), per), &per, |b, _| b.iter(|| black_box(r.evaluate(per as f64, &q, &infos).unwrap())));
                    }
                    g.bench_with_input(BenchmarkId::new(format!("{clusters}_clusters_after_idle_2ms{name}"), per), &per, |b, _| {
                        b.iter_custom(|iters| {
                            let mut total = Duration::ZERO;
                            for _ in 0..iters {
                                std::thread::sleep(Duration::from_millis(2));
                                let t = Instant::now();
                                black_box(r.evaluate(per as f64, &q, &infos).unwrap());
                                total += t.elapsed();
                            }
                            total
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

criterion_group!(benches, route);
criterion_main!(benches);
