use super::*;
use crate::control::{RoundRobin, ScheduledAction, ScheduledScaler, StaticScaler};
use crate::slo::SloTable;
use crate::workload::{base_workload, redbench_workload, Query, RedbenchConfig, Workload};
use proptest::prelude::*;

fn run(w: &Workload, clusters: &[u32], cfg: &EmulatorConfig) -> Trace {
    emulate(w, clusters, &mut RoundRobin::default(), &mut StaticScaler, cfg).unwrap()
}

#[test]
fn same_seed_same_trace_and_every_query_once() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.2, 1, &slo).unwrap();
    let cfg = EmulatorConfig { seed: 5, ..Default::default() };
    let a = run(&w, &[16, 16], &cfg);
    let b = run(&w, &[16, 16], &cfg);
    assert!(a == b, "same seed must give the same trace");
    assert_eq!(a.rows.len(), 297);
    for (i, r) in a.rows.iter().enumerate() {
        assert_eq!(r.query, i);
        assert!(r.end >= r.arrival && r.latency > 0.0);
        assert!(r.start.is_none_or(|s| s >= r.arrival && s <= r.end));
    }
    // Round robin alternates.
    assert_eq!(a.rows.iter().filter(|r| r.cluster == Some(0)).count(), 149);
    let c = run(&w, &[16, 16], &EmulatorConfig { seed: 6, ..Default::default() });
    assert!(a != c, "another seed gives another trace");
}

#[test]
fn isolated_query_takes_its_catalog_runtime_without_noise() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = Workload::from_columns(
        crate::workload::WorkloadColumns { arrival: vec![0.0, 10_000.0], template: vec![1, 1], instance: vec![1, 1], ..Default::default() },
        Some(&slo),
    )
    .unwrap();
    let cfg = EmulatorConfig { noise: false, ..Default::default() };
    let t = run(&w, &[16], &cfg);
    let want = catalog::tpcds().isolated_runtime(crate::catalog::QueryText { template: 1, instance: 1 }, 16).unwrap();
    for r in &t.rows {
        assert!((r.latency - want).abs() < 1e-6, "{} vs {want}", r.latency);
    }
    // Two separate windows, each billed the 60 s minimum (queries are shorter than a minute).
    assert!(want < 60.0);
    assert!((t.clusters[0].billed_seconds - 120.0).abs() < 1e-6);
}

#[test]
fn concurrency_slows_queries_down_and_bigger_clusters_help() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(1.0, 2, &slo).unwrap();
    let cfg = EmulatorConfig { noise: false, ..Default::default() };
    let slow: f64 = run(&w, &[8], &cfg).rows.iter().map(|r| r.latency).sum();
    let fast: f64 = run(&w, &[32], &cfg).rows.iter().map(|r| r.latency).sum();
    let iso: f64 = w.queries().iter().map(|q| catalog::tpcds().isolated_runtime(q.text, 8).unwrap()).sum();
    assert!(slow > 1.5 * iso, "interference must cost time: {slow} vs isolated {iso}");
    assert!(fast < slow);
}

#[test]
fn timeouts_are_censored() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(2.0, 3, &slo).unwrap();
    let cfg = EmulatorConfig { timeout_s: Some(60.0), ..Default::default() };
    let t = run(&w, &[4], &cfg);
    let censored: Vec<_> = t.rows.iter().filter(|r| r.censored()).collect();
    // 4 RPU runs 25 at once: these queries time out while running (the scan the emulator skips
    // until the earliest running query's deadline).
    assert!(!censored.is_empty() && censored.iter().all(|r| r.start.is_some()));
    for r in censored {
        assert_eq!(r.latency, 60.0);
        assert!((r.end - r.arrival - 60.0).abs() < 1e-6);
        assert!(!r.met(1e9));
    }
}

#[test]
fn scheduled_spinup_is_cold_and_teardown_drains() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.2, 4, &slo).unwrap();
    let schedule = vec![
        ScheduledAction { at: 100.0, action: Action::spin_up(32, "scheduled") },
        ScheduledAction { at: 900.0, action: Action::tear_down(0, "scheduled") },
    ];
    let mut scaler = ScheduledScaler::new(schedule, 10.0).unwrap();
    let cfg = EmulatorConfig { lifecycle: Lifecycle::Fixed { spinup_s: 300.0, teardown_s: 200.0 }, ..Default::default() };
    let t = emulate(&w, &[16], &mut RoundRobin::default(), &mut scaler, &cfg).unwrap();
    let c1 = t.clusters[1];
    assert_eq!(c1.size, 32);
    assert!((c1.requested_at - 100.0).abs() < 1e-9 && (c1.ready_at - 400.0).abs() < 1e-9);
    // Nothing reaches cluster 1 before it is ready; after the teardown only cluster 1 is used.
    for r in &t.rows {
        if r.cluster == Some(1) {
            assert!(r.start.is_none_or(|s| s >= 400.0));
        }
        if r.arrival > 900.0 {
            assert_eq!(r.cluster, Some(1));
        }
    }
    assert!(t.clusters[0].teardown_requested_at.unwrap() >= 900.0 && t.clusters[0].gone_at.unwrap() > 900.0);
}

#[test]
fn bad_actions_are_clear_errors() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.2, 4, &slo).unwrap();
    let sched = |a| ScheduledScaler::new(vec![ScheduledAction { at: 10.0, action: a }], 5.0).unwrap();
    let cfg = EmulatorConfig::default();
    let e = emulate(&w, &[16], &mut RoundRobin::default(), &mut sched(Action::tear_down(7, "scheduled")), &cfg).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    let e = emulate(&w, &[16], &mut RoundRobin::default(), &mut sched(Action::tear_down(0, "scheduled")), &cfg).unwrap_err();
    assert!(e.to_string().contains("no cluster can take"), "{e}");
    assert!(emulate(&w, &[], &mut RoundRobin::default(), &mut StaticScaler, &cfg).is_err());
    assert!(emulate(&w, &[0], &mut RoundRobin::default(), &mut StaticScaler, &cfg).is_err());
    // Sizes are Redshift Serverless base capacities, initial or spun up.
    let e = emulate(&w, &[16, 7], &mut RoundRobin::default(), &mut StaticScaler, &cfg).unwrap_err();
    assert!(e.to_string().contains("cluster size must be a Redshift Serverless base capacity") && e.to_string().ends_with("got 7"), "{e}");
    let e = emulate(&w, &[16], &mut RoundRobin::default(), &mut sched(Action::spin_up(2000, "scheduled")), &cfg).unwrap_err();
    assert!(e.to_string().ends_with("got 2000"), "{e}");
    let bad = EmulatorConfig { timeout_s: Some(-1.0), ..Default::default() };
    assert!(emulate(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, &bad).is_err());
    let mut stop = |done: usize, _| done < 1;
    let big = redbench_workload(&RedbenchConfig { queries_per_day: 10_000.0, ..Default::default() }, &slo).unwrap();
    let e = emulate_with_progress(&big, &[16], &mut RoundRobin::default(), &mut StaticScaler, &cfg, &mut stop).unwrap_err();
    assert_eq!(e, AutoSloError::Interrupted);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn attributed_cost_sums_to_billed_and_billing_is_sane(seed in 0u64..1000, rate in 0.02f64..1.5, sizes in prop::collection::vec(prop::sample::select(vec![4u32, 8, 16, 32]), 1..4)) {
        let slo = SloTable::paper(2.0).unwrap();
        let w = base_workload(rate, seed, &slo).unwrap();
        let t = run(&w, &sizes, &EmulatorConfig { seed, ..Default::default() });
        prop_assert_eq!(t.rows.len(), w.len());
        let attributed: f64 = t.rows.iter().map(|r| r.cost).sum();
        let billed = t.total_cost();
        prop_assert!(billed > 0.0);
        prop_assert!((attributed - billed).abs() <= 1e-9 * billed, "{} vs {}", attributed, billed);
        prop_assert_eq!(t.rows.iter().map(|r| r.cost_micro_usd).sum::<i64>(), t.clusters.iter().map(ClusterRecord::cost_micro_usd).sum::<i64>());
        prop_assert_eq!(t.chargeback(&w).iter().map(|c| c.cost_micro_usd).sum::<i64>(), t.clusters.iter().map(ClusterRecord::cost_micro_usd).sum::<i64>());
        for c in &t.clusters {
            prop_assert!(c.billed_seconds >= 0.0 && c.cost >= 0.0);
            // A cluster is billed at least the time it ran a query, at most from first arrival to last end + minimum.
            let mine: Vec<_> = t.rows.iter().filter(|r| r.cluster == Some(c.id)).collect();
            if let (Some(first), Some(last)) = (mine.iter().map(|r| r.arrival).reduce(f64::min), mine.iter().map(|r| r.end).reduce(f64::max)) {
                prop_assert!(c.billed_seconds <= last - first + 60.0 + 1e-6);
                prop_assert!(c.billed_seconds >= 60.0 - 1e-6);
            }
        }
    }
}

/// Rejects every third query, and reports capacity when no cluster takes queries.
struct EveryThird;
impl crate::tenancy::Admission for EveryThird {
    fn decide(&mut self, _now: f64, query: &crate::workload::Query, clusters: &[crate::cluster::ClusterInfo]) -> Option<RejectReason> {
        if !clusters.iter().any(|c| c.accepts_queries()) {
            Some(RejectReason::Capacity)
        } else {
            query.id.is_multiple_of(3).then_some(RejectReason::InfeasibleDeadline)
        }
    }
    fn name(&self) -> &str {
        "every-third"
    }
}

#[test]
fn rejected_queries_get_one_outcome_row_no_cluster_and_no_cost() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.3, 3, &slo).unwrap();
    let mut adm = EveryThird;
    let t = emulate_admitted(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, Some(&mut adm), None, &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert_eq!(t.rows.len(), w.len());
    for (i, r) in t.rows.iter().enumerate() {
        assert_eq!(r.query, i, "row i is query i, exactly once");
        let q = &w.queries()[i];
        if q.id.is_multiple_of(3) {
            assert_eq!(r.outcome, Outcome::Rejected(RejectReason::InfeasibleDeadline));
            assert!(r.cluster.is_none() && r.cost_micro_usd == 0 && !r.met(q.slo));
        } else {
            assert!(r.cluster == Some(0) && !r.rejected());
        }
    }
    let s = t.summary(&w);
    assert_eq!(s.rejected, w.queries().iter().filter(|q| q.id % 3 == 0).count());
    assert_eq!(t.rows.iter().map(|r| r.cost_micro_usd).sum::<i64>(), t.clusters.iter().map(ClusterRecord::cost_micro_usd).sum::<i64>());
}

#[test]
fn a_degraded_cluster_runs_slower_only_inside_its_window() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.05, 9, &slo).unwrap();
    let healthy = run(&w, &[16, 16], &EmulatorConfig::default());
    let slow = |from_s, until_s| EmulatorConfig { degradations: vec![Degradation { cluster: 1, factor: 3.0, from_s, until_s }], ..Default::default() };
    // A window after the run changes nothing.
    assert_eq!(run(&w, &[16, 16], &slow(1e8, 2e8)).rows, healthy.rows);
    let t = run(&w, &[16, 16], &slow(0.0, 1e8));
    let mean = |tr: &Trace, c: u32| {
        let l: Vec<f64> = tr.rows.iter().filter(|r| r.cluster == Some(c)).map(|r| r.latency).collect();
        l.iter().sum::<f64>() / l.len() as f64
    };
    assert!(mean(&t, 1) > 2.0 * mean(&healthy, 1), "{} vs {}", mean(&t, 1), mean(&healthy, 1));
    assert!((mean(&t, 0) - mean(&healthy, 0)).abs() < 1e-9, "the healthy cluster is untouched");
    let bad = EmulatorConfig { degradations: vec![Degradation { cluster: 0, factor: 0.5, from_s: 0.0, until_s: 1.0 }], ..Default::default() };
    assert!(emulate(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, &bad).unwrap_err().to_string().contains("degradations[0].factor"));
}

fn bundled_predictor() -> crate::predictor::Predictor {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    crate::predictor::Predictor::load(&dir, crate::predictor::Backend::Native).unwrap()
}

#[test]
fn the_admission_queue_bounds_each_cluster_and_turns_a_spent_deadline_into_an_outcome() {
    use crate::tenancy::{AdmissionQueue, QueueSettings};
    // An overload: BaseWorkload at 0.5 queries/s on one 8 RPU cluster, κ = 2.
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.5, 4, &slo).unwrap();
    let settings = QueueSettings { slots_per_cluster: 4, max_queued: 40, max_queued_work_s: 1e9, reserve: 1.0 };
    let mut queue = AdmissionQueue::new(bundled_predictor(), settings).unwrap();
    let t = emulate_admitted(&w, &[8], &mut RoundRobin::default(), &mut StaticScaler, None, Some(&mut queue), &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert_eq!(t.rows.len(), w.len());
    for (i, r) in t.rows.iter().enumerate() {
        assert_eq!(r.query, i, "row i is query i, exactly once");
    }
    let count = |reason| t.rows.iter().filter(|r| r.outcome == Outcome::Rejected(reason)).count();
    assert!(queue.dispatched > 0, "queries waited at the boundary and ran");
    assert!(count(RejectReason::Expired) > 0, "some waited until their deadline was spent");
    // The cluster never held more than its slots: at most 4 queries overlap in execution.
    let mut ev: Vec<(f64, i32)> = t.rows.iter().filter_map(|r| r.start.map(|s| [(s, 1), (r.end, -1)])).flatten().collect();
    ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0, 0);
    for (_, d) in ev {
        now += d;
        peak = peak.max(now);
    }
    assert!(peak <= 4, "peak concurrency {peak}");
    // A bound on the count refuses with `capacity`.
    let tight = QueueSettings { max_queued: 1, ..settings };
    let mut queue = AdmissionQueue::new(bundled_predictor(), tight).unwrap();
    let t2 = emulate_admitted(&w, &[8], &mut RoundRobin::default(), &mut StaticScaler, None, Some(&mut queue), &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert!(t2.rows.iter().filter(|r| r.outcome == Outcome::Rejected(RejectReason::Capacity)).count() > count(RejectReason::Capacity));
    assert!(AdmissionQueue::new(bundled_predictor(), QueueSettings { reserve: 0.5, ..settings }).is_err());
    assert!(AdmissionQueue::new(bundled_predictor(), QueueSettings { slots_per_cluster: 0, ..settings }).is_err());
}

#[test]
fn a_reservation_in_the_shared_queue_serves_its_tenant_first_and_nothing_is_lost() {
    use crate::tenancy::{AdmissionQueue, QueueSettings, Share, SharingPolicy};
    // The overload above, its queries alternating between two tenants.
    let slo = SloTable::paper(2.0).unwrap();
    let base = base_workload(0.5, 4, &slo).unwrap();
    let queries = base.queries().iter().enumerate().map(|(i, q)| Query { tenant: (i % 2) as u32, ..*q }).collect();
    let w = Workload::new(queries, vec!["batch".into(), "premium".into()], base.classes().to_vec()).unwrap();
    let settings = QueueSettings { slots_per_cluster: 4, max_queued: 40, max_queued_work_s: 1e9, reserve: 1.0 };
    let run = |sharing: Option<SharingPolicy>| {
        let mut queue = AdmissionQueue::new(bundled_predictor(), settings).unwrap();
        if let Some(p) = sharing {
            queue = queue.with_sharing(p).unwrap();
        }
        let t = emulate_admitted(&w, &[8], &mut RoundRobin::default(), &mut StaticScaler, None, Some(&mut queue), &EmulatorConfig::default(), &mut |_, _| true).unwrap();
        assert!(t.rows.iter().enumerate().all(|(i, r)| r.query == i), "every query exactly once");
        let expired = |tenant: u32| t.rows.iter().zip(w.queries()).filter(|(r, q)| q.tenant == tenant && r.outcome == Outcome::Rejected(RejectReason::Expired)).count();
        (expired(0), expired(1))
    };
    let fifo = run(None);
    // Premium reserves far more than the cluster delivers: whenever it waits, it goes first.
    let premium = SharingPolicy { shares: std::collections::HashMap::from([(1, Share { reservation: 100.0, weight: 1.0 })]), ..Default::default() };
    let shared = run(Some(premium));
    assert!(fifo.1 > 0 && shared.1 < fifo.1, "premium expirations: FIFO {fifo:?}, shared {shared:?}");
    assert!(shared.0 > fifo.0, "the batch tenant waits instead: FIFO {fifo:?}, shared {shared:?}");
}

#[test]
fn deferred_batch_work_starts_in_its_window_and_the_rest_is_untouched() {
    use crate::tenancy::{AdmissionQueue, Deferral, QueueSettings};
    let slo = SloTable::paper(2.0).unwrap();
    let base = base_workload(0.2, 4, &slo).unwrap();
    let h = base.horizon();
    assert!(h < 40_000.0, "the window below must fall inside one day: horizon {h}");
    // Every third query is batch work with a day's deadline.
    let queries = base.queries().iter().enumerate().map(|(i, q)| if i % 3 == 0 { Query { class: 1, slo: 86_400.0, ..*q } } else { Query { class: 0, ..*q } }).collect();
    let w = Workload::new(queries, base.tenants().to_vec(), vec!["adhoc".into(), "backfill".into()]).unwrap();
    let window = Deferral { classes: vec![1], from_s: h / 2.0, until_s: h / 2.0 + 3600.0, slots_per_cluster: 2 };
    let settings = QueueSettings { slots_per_cluster: 1000, max_queued: 100_000, max_queued_work_s: 1e12, reserve: 1.0 };
    let mut queue = AdmissionQueue::new(bundled_predictor(), settings).unwrap().with_deferral(window.clone()).unwrap();
    let t = emulate_admitted(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, None, Some(&mut queue), &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert!(t.rows.iter().enumerate().all(|(i, r)| r.query == i && !r.rejected()), "every query once, none refused");
    let mut deferred = 0;
    for (r, q) in t.rows.iter().zip(w.queries()) {
        let start = r.start.expect("every query ran");
        if q.class == 1 && !window.in_window(q.arrival) {
            // Deferred: it started no earlier than the window's next opening.
            assert!(start >= window.next_opening(q.arrival) - 1e-9, "query {} arrived {} started {start}", r.query, q.arrival);
            deferred += 1;
        } else {
            assert!(start - q.arrival < 3600.0, "query {} waited {} s", r.query, start - q.arrival);
        }
    }
    assert!(deferred > 0 && deferred == queue.deferrals, "{deferred} vs {}", queue.deferrals);
    // The timeout counts from submission to the cluster, not from the arrival hours before.
    assert!(t.rows.iter().all(|r| r.outcome == Outcome::Completed), "no deferred query timed out");
    assert!(queue.is_empty());
    // Window arithmetic, and bad windows.
    let night = Deferral { classes: vec![1], from_s: 72_000.0, until_s: 21_600.0, slots_per_cluster: 2 };
    assert!(night.in_window(3_600.0) && night.in_window(80_000.0) && !night.in_window(43_200.0));
    assert_eq!(night.next_opening(43_200.0), 72_000.0);
    assert_eq!(night.next_opening(80_000.0), 72_000.0 + 86_400.0);
    assert!(AdmissionQueue::new(bundled_predictor(), settings).unwrap().with_deferral(Deferral { from_s: 3600.0, until_s: 3600.0, ..night.clone() }).is_err());
    assert!(AdmissionQueue::new(bundled_predictor(), settings).unwrap().with_deferral(Deferral { classes: vec![], ..night.clone() }).is_err());
    assert!(AdmissionQueue::new(bundled_predictor(), settings).unwrap().with_deferral(Deferral { slots_per_cluster: 0, ..night.clone() }).is_err());
    assert!(AdmissionQueue::new(bundled_predictor(), settings).unwrap().with_deferral(Deferral { from_s: -1.0, ..night }).is_err());
}

#[test]
fn a_zero_budget_refuses_every_query_of_its_tenant_and_no_other() {
    use crate::tenancy::BudgetAdmission;
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.3, 5, &slo).unwrap();
    // BaseWorkload has one tenant (index 0): a zero budget for it, and a generous one for a
    // tenant that sends nothing.
    let budgets = std::collections::HashMap::from([(0u32, 0.0), (7u32, 1e9)]);
    let mut adm = BudgetAdmission::new(bundled_predictor(), crate::billing::BillingPolicy::default(), budgets, 86_400.0, None).unwrap();
    let t = emulate_admitted(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, Some(&mut adm), None, &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert!(t.rows.iter().all(|r| r.outcome == Outcome::Rejected(RejectReason::Budget)));
    assert_eq!(adm.spent(0, 0.0), 0.0);
    let generous = std::collections::HashMap::from([(0u32, 1e9)]);
    let mut adm = BudgetAdmission::new(bundled_predictor(), crate::billing::BillingPolicy::default(), generous, 86_400.0, None).unwrap();
    let t = emulate_admitted(&w, &[16], &mut RoundRobin::default(), &mut StaticScaler, Some(&mut adm), None, &EmulatorConfig::default(), &mut |_, _| true).unwrap();
    assert!(t.rows.iter().all(|r| !r.rejected()));
    assert!(adm.spent(0, 0.0) > 0.0, "admitted queries are charged their estimates");
    assert!(BudgetAdmission::new(bundled_predictor(), crate::billing::BillingPolicy::default(), std::collections::HashMap::from([(0u32, -1.0)]), 86_400.0, None).is_err());
}

/// Records the ids of the clusters it is shown at every event, beside a fixed schedule.
struct Watcher {
    inner: ScheduledScaler,
    seen: Vec<(f64, Vec<crate::cluster::ClusterId>)>,
}

impl Scaler for Watcher {
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[crate::cluster::ClusterInfo], router: &dyn Router) -> Vec<Action> {
        self.seen.push((now, clusters.iter().map(|c| c.id).collect()));
        self.inner.on_event(now, event, clusters, router)
    }
    fn tick_interval(&self) -> Option<f64> {
        self.inner.tick_interval()
    }
    fn name(&self) -> &str {
        "watcher"
    }
}

#[test]
fn a_gone_cluster_leaves_the_policies_view_and_stays_in_the_trace() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.2, 4, &slo).unwrap();
    let schedule = vec![
        ScheduledAction { at: 100.0, action: Action::spin_up(32, "scheduled") },
        ScheduledAction { at: 900.0, action: Action::tear_down(0, "scheduled") },
        ScheduledAction { at: 1200.0, action: Action::spin_up(8, "scheduled") },
    ];
    let mut scaler = Watcher { inner: ScheduledScaler::new(schedule, 10.0).unwrap(), seen: Vec::new() };
    let cfg = EmulatorConfig { lifecycle: Lifecycle::Fixed { spinup_s: 300.0, teardown_s: 200.0 }, ..Default::default() };
    let t = emulate(&w, &[16], &mut RoundRobin::default(), &mut scaler, &cfg).unwrap();
    let gone = t.clusters[0].gone_at.expect("cluster 0 was torn down");
    assert!(gone > 900.0 && gone < w.horizon());
    for (now, ids) in &scaler.seen {
        // Ids stay the clusters' own (dense, in creation order) whoever has left.
        assert!(ids.windows(2).all(|p| p[0] < p[1]), "{ids:?}");
        assert_eq!(ids.contains(&0), *now < gone, "at {now} s: {ids:?}");
    }
    assert!(scaler.seen.iter().any(|(now, ids)| *now > 1200.0 && ids == &[1, 2]));
    assert_eq!(t.clusters.len(), 3);
    assert!(t.rows.iter().all(|r| r.cluster != Some(0) || r.arrival < 900.0));
}

/// A scaler whose decision fails on the 10th routed query (as the Spinup Size Selector's would on
/// input it refuses), and which then does nothing.
struct Undecided {
    routed: usize,
    failures: Vec<(f64, String)>,
}

impl Scaler for Undecided {
    fn on_event(&mut self, now: f64, event: &Event<'_>, _clusters: &[crate::cluster::ClusterInfo], _router: &dyn Router) -> Vec<Action> {
        if matches!(event, Event::Routed { .. }) {
            self.routed += 1;
            if self.routed == 10 {
                self.failures.push((now, "the selector refused its input".into()));
            }
        }
        Vec::new()
    }
    fn take_failures(&mut self) -> Vec<(f64, String)> {
        std::mem::take(&mut self.failures)
    }
    fn name(&self) -> &str {
        "undecided"
    }
}

#[test]
fn a_decision_the_scaler_could_not_take_stops_the_engines_with_its_reason() {
    let slo = SloTable::paper(2.0).unwrap();
    let w = base_workload(0.2, 4, &slo).unwrap();
    let err = emulate(&w, &[16], &mut RoundRobin::default(), &mut Undecided { routed: 0, failures: Vec::new() }, &EmulatorConfig::default()).unwrap_err().to_string();
    assert!(err.contains("`undecided` scaler could not decide") && err.contains("refused its input"), "{err}");
    let p = bundled_predictor();
    let mut scaler = Undecided { routed: 0, failures: Vec::new() };
    let err = crate::simulator::simulate(&p, &w, &[16], &mut RoundRobin::default(), &mut scaler, crate::simulator::SimulatorConfig::default()).unwrap_err().to_string();
    assert!(err.contains("`undecided` scaler could not decide"), "{err}");
}
