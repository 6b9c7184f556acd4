//! Serving's per-query cost attribution (`cost_meter::CostMeter`): what a route and a completion
//! add to the serving path. A cluster with `running` queries; each iteration one query joins and
//! the oldest leaves, a second of clock apart (so the billing minimum's window has closed and each
//! departure is priced at once), as a busy workgroup sees them. Run with `make bench`.

use std::collections::VecDeque;

use autoslo_core::cost_meter::CostMeter;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn join_and_leave(c: &mut Criterion) {
    let mut g = c.benchmark_group("cost_meter");
    for running in [1usize, 32, 256] {
        let mut m = CostMeter::new(60.0).unwrap();
        let (mut t, mut next, mut ids) = (0.0, 0u64, VecDeque::new());
        for _ in 0..running {
            m.join(next, t).unwrap();
            ids.push_back(next);
            next += 1;
        }
        // Past the first minute: departures are priced as they come.
        t = 120.0;
        g.bench_with_input(BenchmarkId::new("join_and_leave", running), &running, |b, _| {
            b.iter(|| {
                t += 1.0;
                black_box(m.join(next, t).unwrap());
                ids.push_back(next);
                next += 1;
                let q = ids.pop_front().unwrap();
                black_box(m.leave(q, t).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, join_and_leave);
criterion_main!(benches);
