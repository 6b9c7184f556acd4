//! Autoscaler decision time (the paper's Figure 8b anchor: FindBestSpinupSize up to 7.7 s; goals
//! ≤ 100 ms for 4 eligible sizes with a busy window over 3 clusters, and ≤ 50 µs per MaybeSpinup).
//! Sweep: 1–4 eligible sizes × arrival rates of 0.1–1 queries/s in the 300 s window, bundled
//! Iconq+ model, 3 ready clusters (8, 16, 32 RPU) holding the window's queries. Run with `make bench`.

/// The allocator the Python extension ships with (`rust/autoslo-py/src/lib.rs`).
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

use std::path::PathBuf;

use autoslo_core::autoscaler::{find_best_spinup_size, Autoscaler, AutoscalerParams, Mode, Scaling, SelectorParams, TriggerKind, DEFAULT_AUTOSLO_MU, DEFAULT_SELECTOR_HEADROOM};
use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::{ClusterInfo, ClusterState};
use autoslo_core::control::{Event, Router, Scaler};
use autoslo_core::predictor::{Backend, Predictor};
use autoslo_core::router::AutoSloRouter;
use autoslo_core::slo::SloTable;
use autoslo_core::workload::Query;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

const WINDOW_S: f64 = 300.0;

/// A window of `rate`·w queries over the last w seconds, routed onto three ready clusters.
fn busy(p: &Predictor, rate: f64) -> (AutoSloRouter, Vec<ClusterInfo>, Vec<Query>) {
    let slo = SloTable::paper(2.0).unwrap();
    let infos: Vec<ClusterInfo> = [8u32, 16, 32].iter().enumerate().map(|(i, &size)| ClusterInfo { id: i as u32, size, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 }).collect();
    let mut r = AutoSloRouter::new(p.clone(), BillingPolicy::default());
    let n = (rate * WINDOW_S).round() as u64;
    let window: Vec<Query> = (0..n)
        .map(|i| {
            let text = QueryText { template: (i * 37 % 99 + 1) as u16, instance: (i % 3 + 1) as u16 };
            Query { id: i, arrival: i as f64 / rate, text, tenant: 0, class: 0, slo: slo.slo(text.template, "adhoc").unwrap() }
        })
        .collect();
    for q in &window {
        r.collect_finished_until(q.arrival).unwrap();
        r.route(q.arrival, q, &infos).unwrap();
    }
    (r, infos, window)
}

fn find_best_spinup_size_sweep(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    let p = Predictor::load(&dir, Backend::Native).expect("bundled model loads (build it with `make models`)");
    let mut g = c.benchmark_group("find_best_spinup_size");
    g.sample_size(20);
    for rate in [0.1, 0.34, 0.67, 1.0] {
        let (r, infos, window) = busy(&p, rate);
        for k in 1..=4usize {
            let params = SelectorParams { sizes: [4, 8, 16, 32][..k].to_vec(), window_s: WINDOW_S, ..Default::default() };
            let id = BenchmarkId::new(format!("{k}_sizes"), format!("{}_in_window", window.len()));
            g.bench_with_input(id, &k, |b, _| b.iter(|| black_box(find_best_spinup_size(&r, &infos, &window, WINDOW_S, &params, Mode::Add).unwrap())));
        }
        // The `autoslo` policy's selector: 4 sizes, its μ and headroom.
        let params = SelectorParams { window_s: WINDOW_S, mu: DEFAULT_AUTOSLO_MU, slo_headroom: DEFAULT_SELECTOR_HEADROOM, ..Default::default() };
        let id = BenchmarkId::new("autoslo_4_sizes", format!("{}_in_window", window.len()));
        g.bench_function(id, |b| b.iter(|| black_box(find_best_spinup_size(&r, &infos, &window, WINDOW_S, &params, Mode::Add).unwrap())));
    }
    g.finish();

    // MaybeSpinup on the busiest state: every running query and a full completion window scanned
    // (θ high enough that the trigger never fires, so every call does the whole scan).
    let (r, infos, window) = busy(&p, 1.0);
    let mut a = Autoscaler::new(Scaling::AddBest, TriggerKind::Combined, AutoscalerParams { theta: usize::MAX, ..Default::default() }).unwrap();
    for q in &window {
        a.on_event(q.arrival, &Event::Completion { query: q, cluster: 0, latency: 30.0, censored: false }, &infos, &r as &dyn Router);
    }
    let running = r.running().count();
    let mut g = c.benchmark_group("maybe_spinup");
    g.bench_function(BenchmarkId::new("running", running), |b| b.iter(|| black_box(a.maybe_spinup(WINDOW_S, &infos, &r))));
    g.finish();
}

criterion_group!(benches, find_best_spinup_size_sweep);
criterion_main!(benches);
