//! Emulator throughput: a 24-hour, ~50k-query Redbench-like day over 4 clusters (target,
//! DESIGN.md: ≤ 2 s and ≤ 500 MB peak), and a 30-day month of ~1.5M queries with an autoscaler
//! on (target ≤ 2 s): the scaling policies that need no latency predictor (Snowflake standard
//! and economy, the RAIS-like scaler), round robin. Run with `make bench`.

/// The allocator the Python extension ships with (`rust/autoslo-py/src/lib.rs`).
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

use std::hint::black_box;

use autoslo_core::autoscaler::rais::{Level, RaisScaler};
use autoslo_core::autoscaler::snowflake::{Policy, SnowflakeScaler};
use autoslo_core::control::{RoundRobin, Scaler, StaticScaler};
use autoslo_core::emulator::{emulate, EmulatorConfig};
use autoslo_core::slo::SloTable;
use autoslo_core::workload::{redbench_workload, RedbenchConfig};
use criterion::{criterion_group, criterion_main, Criterion};

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn day_over_four_clusters(c: &mut Criterion) {
    let slo = SloTable::paper(4.0).unwrap();
    // A Tuesday at 52k queries/weekday-mean gives ≈ 50k queries.
    let cfg = RedbenchConfig { days: 1, queries_per_day: 52_000.0, tenants: 4, start_weekday: 1, seed: 1 };
    let w = redbench_workload(&cfg, &slo).unwrap();
    let ecfg = EmulatorConfig { seed: 1, ..Default::default() };
    let sizes = [32, 32, 32, 32];
    let t = emulate(&w, &sizes, &mut RoundRobin::default(), &mut StaticScaler, &ecfg).unwrap();
    let s = t.summary(&w);
    eprintln!(
        "workload: {} queries over {:.1} h; violation rate {:.3}, cost ${:.2}; peak RSS after one run {:.0} MB",
        w.len(),
        w.horizon() / 3600.0,
        s.violation_rate,
        s.cost,
        peak_rss_mb().unwrap_or(f64::NAN)
    );
    let mut group = c.benchmark_group("emulator");
    group.sample_size(10);
    group.bench_function("redbench_day_50k_queries_4x32rpu", |b| {
        b.iter(|| emulate(black_box(&w), &sizes, &mut RoundRobin::default(), &mut StaticScaler, &ecfg).unwrap())
    });
    group.bench_function("generate_redbench_day_50k", |b| b.iter(|| redbench_workload(black_box(&cfg), &slo).unwrap()));
    group.finish();
    eprintln!("peak RSS of the bench process: {:.0} MB", peak_rss_mb().unwrap_or(f64::NAN));
}

fn month_with_an_autoscaler(c: &mut Criterion) {
    let slo = SloTable::paper(4.0).unwrap();
    // 30 days from a Tuesday at 57.5k queries/weekday-mean: 1,498,968 queries.
    let cfg = RedbenchConfig { days: 30, queries_per_day: 57_500.0, tenants: 4, start_weekday: 1, seed: 1 };
    let w = redbench_workload(&cfg, &slo).unwrap();
    let ecfg = EmulatorConfig { seed: 1, ..Default::default() };
    let scalers: [(&str, fn() -> Box<dyn Scaler>); 3] = [
        ("snowflake_standard", || Box::new(SnowflakeScaler::new(Policy::Standard, None, 1, 4, 8).unwrap())),
        ("snowflake_economy", || Box::new(SnowflakeScaler::new(Policy::Economy, None, 1, 4, 8).unwrap())),
        ("rais_balanced", || Box::new(RaisScaler::new(Level::Balanced, vec![8, 16, 32], 1, 4).unwrap())),
    ];
    let mut group = c.benchmark_group("emulator_month");
    group.sample_size(10);
    for (name, scaler) in scalers {
        let t = emulate(&w, &[32], &mut RoundRobin::default(), scaler().as_mut(), &ecfg).unwrap();
        eprintln!("{name}: {} queries over {:.0} days, {} clusters, violation rate {:.3}", w.len(), w.horizon() / 86_400.0, t.clusters.len(), t.summary(&w).violation_rate);
        group.bench_function(format!("{name}_1_5m_queries_30_days"), |b| b.iter(|| emulate(black_box(&w), &[32], &mut RoundRobin::default(), scaler().as_mut(), &ecfg).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, day_over_four_clusters, month_with_an_autoscaler);
criterion_main!(benches);
