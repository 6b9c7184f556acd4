//! Emulator throughput: a 24-hour, ~50k-query Redbench-like day over 4 clusters.
//! Target (DESIGN.md): ≤ 2 s and ≤ 500 MB peak. Run with `make bench`.

use std::hint::black_box;

use autoslo_core::control::{RoundRobin, StaticScaler};
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

criterion_group!(benches, day_over_four_clusters);
criterion_main!(benches);
