//! Policy Tuner efficiency (the paper's Figures 8c and 8d). Goals (DESIGN.md): SimulateBatch of 20
//! workloads × 15k queries ≤ 10 s on this machine (paper ≈ 128 s on 40 cores), and
//! FindGoodSpinupTime over 20 forecasts × 15k queries ≤ 50 ms (paper ≈ 2 s).
//! Sweeps: queries per workload × workloads per batch. SimulateBatch runs Redbench-like weekdays
//! truncated to N queries, on rayon, for a fixed 2 × 32 RPU configuration and for the tuner's
//! usual case (one 16 RPU cluster with the AutoSLO autoscaler; at 20 × 15k also with the
//! reference μ = 16 in place of the policy's own); FindGoodSpinupTime reads
//! synthetic logs of the same sizes. Run with `make bench`.

/// The allocator the Python extension ships with (`rust/autoslo-py/src/lib.rs`).
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

use std::path::PathBuf;

use autoslo_core::autoscaler::DEFAULT_MU;
use autoslo_core::predictor::{Backend, Predictor};
use autoslo_core::rng::Rng;
use autoslo_core::slo::SloTable;
use autoslo_core::tuner::{find_good_spinup_time, simulate_batch, BatchControl, BatchSettings, ExecutionConfig, LoggedQuery, RayonBackend, SpinupTimeParams};
use autoslo_core::workload::{redbench_workload, RedbenchConfig, Workload};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn workloads(n: usize, queries: usize) -> Vec<Workload> {
    let slo = SloTable::paper(2.0).unwrap();
    (0..n as u64)
        .map(|seed| {
            let w = redbench_workload(&RedbenchConfig { days: 1, queries_per_day: queries as f64 * 1.1, tenants: 4, start_weekday: 1, seed }, &slo).unwrap();
            let qs = w.queries()[..queries.min(w.len())].to_vec();
            Workload::new(qs, w.tenants().to_vec(), w.classes().to_vec()).unwrap()
        })
        .collect()
}

fn simulate_batch_sweep(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    let p = Predictor::load(&dir, Backend::Native).expect("bundled model loads (build it with `make models`)");
    let fixed = ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![32, 32]) };
    let scaled = ExecutionConfig::new(vec![16]);
    // The same with the reference μ = 16 instead of the `autoslo` policy's own (largest size only).
    let mut scaled_mu16 = scaled.clone();
    scaled_mu16.autoscaler.as_mut().expect("the default configuration scales").mu = Some(DEFAULT_MU);
    let mut g = c.benchmark_group("simulate_batch");
    g.sample_size(10);
    for (n, queries) in [(5, 5_000), (20, 5_000), (5, 15_000), (20, 15_000)] {
        let ws = workloads(n, queries);
        let mut cases = vec![("fixed_2x32", &fixed), ("autoscaled_from_16", &scaled)];
        if queries == 15_000 && n == 20 {
            cases.push(("autoscaled_from_16_mu16", &scaled_mu16));
        }
        for (name, cfg) in cases {
            let id = BenchmarkId::new(name, format!("{n}x{queries}"));
            g.bench_with_input(id, &n, |b, _| b.iter(|| black_box(simulate_batch(&p, std::slice::from_ref(cfg), &ws, &BatchSettings::default(), &RayonBackend, &BatchControl::new()).unwrap())));
        }
    }
    g.finish();
}

fn find_good_spinup_time_sweep(c: &mut Criterion) {
    let mut g = c.benchmark_group("find_good_spinup_time");
    for (n, queries) in [(5usize, 5_000usize), (20, 5_000), (5, 15_000), (20, 15_000)] {
        let mut rng = Rng::new(7);
        let logs: Vec<Vec<LoggedQuery>> = (0..n)
            .map(|_| {
                let mut t = 0.0;
                (0..queries)
                    .map(|_| {
                        t += rng.exponential(queries as f64 / 86_400.0);
                        LoggedQuery { arrival: t, end: t + rng.exponential(1.0 / 60.0), violated: rng.uniform() < 0.1 }
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[LoggedQuery]> = logs.iter().map(|l| l.as_slice()).collect();
        let params = SpinupTimeParams { k: n.div_ceil(2), spinup_s: 300.0, sigma_min_s: 1800.0 };
        g.bench_with_input(BenchmarkId::new("forecasts_x_queries", format!("{n}x{queries}")), &n, |b, _| b.iter(|| black_box(find_good_spinup_time(&refs, 0.1, &params))));
    }
    g.finish();
}

criterion_group!(benches, find_good_spinup_time_sweep, simulate_batch_sweep);
criterion_main!(benches);
