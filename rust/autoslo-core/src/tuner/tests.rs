//! Policy Tuner tests. The simulation tests use the bundled model (feature `torch`).

use super::*;
use crate::catalog::QueryText;
use crate::error::AutoSloError;
use proptest::prelude::*;

fn log(spans: &[(f64, f64, bool)]) -> Vec<LoggedQuery> {
    spans.iter().map(|&(arrival, end, violated)| LoggedQuery { arrival, end, violated }).collect()
}

#[test]
fn dates_and_weekdays() {
    assert_eq!(date_string(0), "1970-01-01");
    assert_eq!(weekday(0), 3, "1970-01-01 was a Thursday");
    assert_eq!(date_string(19_870), "2024-05-27");
    assert_eq!(weekday(19_870), 0, "2024-05-27 was a Monday");
    assert_eq!(date_string(-1), "1969-12-31");
}

#[test]
fn find_good_spinup_time_marks_congestion_delta_early_and_spaces_candidates() {
    let p = SpinupTimeParams { k: 2, spinup_s: 300.0, sigma_min_s: 1800.0 };
    // Workloads 0 and 1 violate from 1000 s to 2000 s; workload 2 never does.
    let congested = log(&[(0.0, 10.0, false), (1000.0, 2000.0, true), (1500.0, 1600.0, true), (5000.0, 5001.0, false)]);
    let calm = log(&[(0.0, 10.0, false), (1000.0, 1100.0, false), (5000.0, 5001.0, false)]);
    let logs: Vec<&[LoggedQuery]> = vec![&congested, &congested, &calm];
    assert_eq!(find_good_spinup_time(&logs, 0.5, &p), vec![700.0]);
    // k = 3: never three delinquent workloads at once.
    assert!(find_good_spinup_time(&logs, 0.5, &SpinupTimeParams { k: 3, ..p }).is_empty());
    // A second epoch within σ_min of the first is dropped; one later is kept.
    let two = log(&[(1000.0, 1100.0, true), (1500.0, 1600.0, true), (9000.0, 9100.0, true), (9500.0, 9600.0, false)]);
    let logs: Vec<&[LoggedQuery]> = vec![&two];
    assert_eq!(find_good_spinup_time(&logs, 0.5, &SpinupTimeParams { k: 1, ..p }), vec![700.0, 8700.0]);
    // An epoch still open at the end is closed after the sweep; candidates never go below 0.
    let open = log(&[(100.0, 400.0, true), (200.0, 500.0, true)]);
    let logs: Vec<&[LoggedQuery]> = vec![&open];
    assert_eq!(find_good_spinup_time(&logs, 0.5, &SpinupTimeParams { k: 1, ..p }), vec![0.0]);
    assert!(find_good_spinup_time(&[], 0.1, &p).is_empty());
}

fn outcome(queries: usize, violations: usize, cost: f64, tenants: &[(&str, usize, usize)]) -> SimOutcome {
    let tenants = tenants.iter().map(|&(t, q, v)| TenantOutcome { tenant: t.into(), queries: q, violations: v }).collect();
    SimOutcome { queries, violations, cost, clusters: 1, tenants, log: Vec::new() }
}

#[test]
fn the_tenant_scope_holds_the_worst_tenant_to_the_target() {
    // Two workloads, 5 % late fleet-wide each; tenant b is 30 % late in one, 10 % in the other.
    let os = [outcome(100, 5, 10.0, &[("a", 80, 2), ("b", 20, 3)]), outcome(200, 10, 20.0, &[("a", 190, 9), ("b", 10, 1)])];
    assert_eq!(agg_perf(&os, Aggregate::Mean, TargetScope::Fleet), (0.05, 15.0));
    // b: 4 of its 30 queries over both (pooled), or its worst workload's 15 %.
    let rates = tenant_violation_rates(&os, Aggregate::Mean);
    assert_eq!(rates.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!((rates[0].1 - 11.0 / 270.0).abs() < 1e-12 && (rates[1].1 - 4.0 / 30.0).abs() < 1e-12, "{rates:?}");
    assert_eq!(tenant_violation_rates(&os, Aggregate::Worst)[1].1, 0.15);
    let (v, c) = agg_perf(&os, Aggregate::Mean, TargetScope::EveryTenant);
    assert!((v - 4.0 / 30.0).abs() < 1e-12 && c == 15.0, "{v} {c}");
    assert_eq!(agg_perf(&os, Aggregate::Worst, TargetScope::EveryTenant).0, 0.15);
    // A fleet worse than each tenant's mean still counts (the larger of the two).
    let fleet_worst = [outcome(10, 5, 1.0, &[("a", 10, 5)]), outcome(10, 0, 1.0, &[("a", 10, 0)])];
    assert_eq!(agg_perf(&fleet_worst, Aggregate::Worst, TargetScope::EveryTenant).0, 0.5);
    // So BestWithTarget at τ = 0.1 takes the fleet's 5 % under one scope and refuses it under the other.
    assert!(agg_perf(&os, Aggregate::Mean, TargetScope::Fleet).0 <= 0.1 && agg_perf(&os, Aggregate::Mean, TargetScope::EveryTenant).0 > 0.1);
    assert_eq!(TargetScope::parse("tenant").unwrap(), TargetScope::EveryTenant);
    assert!(TargetScope::parse("tenants").unwrap_err().to_string().contains("fleet, tenant"));
    let bad = TunerSpec { tau_scope: "per-tenant".into(), ..TunerSpec::default() };
    assert!(bad.params(300.0).unwrap_err().to_string().contains("tau_scope"));
    assert_eq!(TunerSpec { tau_scope: "tenant".into(), ..TunerSpec::default() }.params(300.0).unwrap().config_tuner.scope, TargetScope::EveryTenant);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn spinup_times_are_sorted_spaced_and_non_negative(
        qs in prop::collection::vec((0.0f64..10_000.0, 1.0f64..2_000.0, any::<bool>(), 0usize..4), 1..200),
        k in 1usize..4, sigma in 0.0f64..3_000.0,
    ) {
        let mut logs = vec![Vec::new(); 4];
        for (a, d, v, w) in qs {
            logs[w].push(LoggedQuery { arrival: a, end: a + d, violated: v });
        }
        let refs: Vec<&[LoggedQuery]> = logs.iter().map(|l| l.as_slice()).collect();
        let g = find_good_spinup_time(&refs, 0.3, &SpinupTimeParams { k, spinup_s: 300.0, sigma_min_s: sigma });
        for w in g.windows(2) {
            prop_assert!(w[1] - w[0] >= sigma, "{g:?}");
        }
        prop_assert!(g.iter().all(|&t| t >= 0.0));
    }
}

/// `days` days from date `first`: each hour h has `per_hour(day, h)` queries, texts by day.
fn history(first: Date, days: i32, per_hour: impl Fn(i32, u8) -> u32) -> History {
    let mut h = History { days: (first..first + days).collect(), tenants: vec!["a".into(), "b".into()], classes: vec!["adhoc".into(), "dashboard".into()], ..Default::default() };
    for d in first..first + days {
        for hour in 0..24u8 {
            let n = per_hour(d, hour);
            if n == 0 {
                continue;
            }
            let text = QueryText { template: (1 + (d - first) % 99) as u16, instance: 1 };
            h.counts.push(CountRow { date: d, hour, text, tenant: (d % 2) as u32, class: 0, count: n });
            for i in 0..n {
                h.arrivals.push(ArrivalRow { date: d, hour, offset_s: 3600.0 * i as f64 / n as f64 });
            }
        }
    }
    h
}

#[test]
fn forecaster_follows_its_policy_and_is_seeded() {
    let slo = SloTable::paper(2.0).unwrap();
    let first = 19_870; // a Monday
    // Busy at 10:00 on Mondays only, 5 queries otherwise.
    let h = history(first, 14, |d, hour| if weekday(d) == 0 && hour == 10 { 100 } else { 5 });
    let target = first + 14; // a Monday; the Mondays 1 and 2 weeks back are in the history
    let s = ForecastSettings { forecasts: 5, training_share: 0.6, seed: 3, ..Default::default() };
    let f = forecast(&h, target, &slo, &s).unwrap();
    assert_eq!((f.training.len(), f.validation.len(), f.policy_used), (3, 2, "decay"));
    assert_eq!(f.days_used, vec![first, first + 7]);
    for w in f.training.iter().chain(&f.validation) {
        let at10 = w.queries().iter().filter(|q| (q.arrival / 3600.0) as u32 == 10).count();
        assert_eq!(at10, 100, "the Monday peak is forecast");
        assert_eq!(w.len(), 100 + 23 * 5);
        // Only texts of the chosen days (templates 1 and 8).
        assert!(w.queries().iter().all(|q| [1, 8].contains(&q.text.template)));
        assert!(w.queries().windows(2).all(|p| p[0].arrival <= p[1].arrival));
    }
    let again = forecast(&h, target, &slo, &s).unwrap();
    assert_eq!(again.training, f.training, "seeded");
    assert_ne!(forecast(&h, target, &slo, &ForecastSettings { seed: 4, ..s }).unwrap().training, f.training);
    // Previous day: Sunday volume, no peak.
    let p = forecast(&h, target, &slo, &ForecastSettings { policy: ForecastPolicy::PreviousDay, ..s }).unwrap();
    assert_eq!((p.days_used.clone(), p.training[0].len()), (vec![first + 13], 24 * 5));
    // Equal 7 days: one Monday among seven, so the 10:00 volume is a Monday's or a normal day's.
    let e = forecast(&h, target, &slo, &ForecastSettings { policy: ForecastPolicy::Equal7Day, ..s }).unwrap();
    assert_eq!(e.days_used.len(), 7);
    // Less than a week of history: decay falls back to the previous day, and says so.
    let short = history(first, 1, |_, _| 3);
    let f1 = forecast(&short, first + 1, &slo, &s).unwrap();
    assert_eq!((f1.policy_used, f1.training[0].len()), ("previous-day", 72));
    // Errors.
    assert!(forecast(&short, first, &slo, &s).unwrap_err().to_string().contains("no history"));
    assert!(forecast(&h, target, &slo, &ForecastSettings { forecasts: 1, ..s }).is_err());
    assert!(forecast(&h, target, &slo, &ForecastSettings { policy: ForecastPolicy::Decay { lambda: 0.0 }, ..s }).is_err());
}

#[test]
fn forecast_arrivals_follow_the_interarrival_deciles() {
    let slo = SloTable::paper(2.0).unwrap();
    // All arrivals of hour 0 in its first 6 minutes: gaps are tiny except none; offsets scaled
    // to the hour keep the count. Sparse hours (< 20 gaps) are uniform.
    let mut h = history(0, 7, |_, hour| if hour == 0 { 50 } else { 2 });
    for a in h.arrivals.iter_mut().filter(|a| a.hour == 0) {
        a.offset_s /= 10.0;
    }
    let f = forecast(&h, 7, &slo, &ForecastSettings { forecasts: 2, ..Default::default() }).unwrap();
    let w = &f.training[0];
    let h0: Vec<f64> = w.queries().iter().filter(|q| q.arrival < 3600.0).map(|q| q.arrival).collect();
    assert_eq!(h0.len(), 50);
    assert!(h0.iter().all(|&t| (0.0..3600.0).contains(&t)));
    let bad = History { arrivals: vec![ArrivalRow { date: 0, hour: 0, offset_s: 4000.0 }], ..h.clone() };
    assert!(forecast(&bad, 7, &slo, &ForecastSettings { forecasts: 2, ..Default::default() }).unwrap_err().to_string().contains("offset"));
}

#[test]
fn execution_configs_validate_on_load() {
    let c = ExecutionConfig::new(vec![16]).with_spinup(900.0, 32).with_spinup(300.0, 16);
    assert_eq!(c.scheduled_spinups.iter().map(|s| s.at_s).collect::<Vec<_>>(), vec![300.0, 900.0]);
    let back = ExecutionConfig::from_json(&c.to_json()).unwrap();
    assert_eq!(back, c);
    let minimal = ExecutionConfig::from_json(r#"{"initial_clusters": [32]}"#).unwrap();
    assert_eq!(minimal.autoscaler.as_ref().unwrap().policy, "autoslo");
    let err = |s: &str| ExecutionConfig::from_json(s).unwrap_err().to_string();
    assert!(err(r#"{"initial_clusters": [16], "autoscalr": {}}"#).contains("unknown field `autoscalr`"));
    assert!(err(r#"{"initial_clusters": [16], "autoscaler": {"t_idel_s": 5}}"#).contains("unknown field `t_idel_s`"));
    assert!(err(r#"{"initial_clusters": []}"#).contains("initial_clusters"));
    // Sizes are Redshift Serverless base capacities: a workgroup of 7 or 20 RPU cannot be made.
    assert!(err(r#"{"initial_clusters": [16, 7]}"#).contains("initial_clusters[1] must be a Redshift Serverless base capacity"));
    assert!(err(r#"{"initial_clusters": [16], "scheduled_spinups": [{"at_s": 5, "size": 20}]}"#).contains("scheduled_spinups[0].size"));
    assert!(err(r#"{"initial_clusters": [16], "autoscaler": {"sizes": [16, 24, 33]}}"#).contains("eligible sizes[2]"));
    assert!(err(r#"{"initial_clusters": [16], "version": 9}"#).contains("version 9"));
    assert!(err(r#"{"initial_clusters": [16], "scheduled_spinups": [{"at_s": -5, "size": 16}]}"#).contains("scheduled_spinups[0].at_s"));
    assert!(err(r#"{"initial_clusters": [16], "autoscaler": {"policy": "magic"}}"#).contains("unknown policy `magic`"));
    assert!(err(r#"{"initial_clusters": [16], "autoscaler": {"tau": 2}}"#).contains("τ_target"));
    assert!(err(r#"{"initial_clusters": [16], "routing": "random"}"#).contains("unknown policy `random`"));
    assert!(matches!(ExecutionConfig::from_json("{"), Err(AutoSloError::InvalidConfig(_))));
    assert_eq!(ExecutionConfig::from_json(r#"{"initial_clusters": [16], "autoscaler": null}"#).unwrap().autoscaler, None);
}

#[cfg(feature = "torch")]
mod simulated {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;
    use crate::predictor::Backend;
    use crate::workload::base_workload;

    fn model() -> Predictor {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
        Predictor::load(&dir, Backend::Native).unwrap()
    }

    #[test]
    fn simulate_batch_is_the_matrix_of_single_simulations_and_schedules_spinups_on_time() {
        let p = model();
        let slo = SloTable::paper(2.0).unwrap();
        let ws: Vec<_> = (0..3).map(|s| base_workload(0.3, s, &slo).unwrap()).collect();
        let fixed = ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![8]) };
        let planned = fixed.with_spinup(100.0, 32);
        let settings = BatchSettings { keep_logs: true, ..Default::default() };
        let control = BatchControl::new();
        let m = simulate_batch(&p, &[fixed.clone(), planned.clone()], &ws, &settings, &RayonBackend, &control).unwrap();
        assert_eq!((m.len(), m[0].len()), (2, 3));
        assert_eq!(control.progress(), (6, 6));
        for (j, w) in ws.iter().enumerate() {
            assert_eq!(m[1][j], simulate_config(&p, &planned, w, &settings).unwrap(), "batch = single run");
            // Every query is counted under exactly one tenant.
            for o in [&m[0][j], &m[1][j]] {
                assert!(!o.tenants.is_empty());
                assert_eq!(o.tenants.iter().map(|t| (t.queries, t.violations)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)), (o.queries, o.violations));
            }
            assert_eq!(m[0][j].log.len(), w.len());
            assert_eq!(m[1][j].clusters, 2);
        }
        // The scheduled cluster helps: fewer violations on every workload.
        let (v0, _) = agg_perf(&m[0], Aggregate::Mean, TargetScope::Fleet);
        let (v1, _) = agg_perf(&m[1], Aggregate::Mean, TargetScope::Fleet);
        assert!(v1 < v0, "{v1} !< {v0}");
        // A cancelled control stops the batch.
        control.cancel();
        assert_eq!(simulate_batch(&p, &[fixed], &ws, &settings, &RayonBackend, &control), Err(AutoSloError::Interrupted));
    }

    #[test]
    fn a_configurations_slo_policy_holds_every_simulation_and_the_tuner_carries_it() {
        let p = model();
        let slo = SloTable::paper(2.0).unwrap();
        let w = base_workload(0.3, 1, &slo).unwrap();
        let settings = BatchSettings { keep_logs: true, ..Default::default() };
        let plain = ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![16]) };
        let policy: crate::tenancy::SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "adhoc", "deadline_s": 0.5}]}"#).unwrap();
        let held = ExecutionConfig { slo_policy: Some(policy.clone()), ..plain.clone() };
        let a = simulate_config(&p, &plain, &w, &settings).unwrap();
        let b = simulate_config(&p, &held, &w, &settings).unwrap();
        // One cluster: the same run, judged against the policy's 0.5 s for every adhoc query.
        assert_eq!(b, simulate_config(&p, &plain, &policy.apply(&w).unwrap(), &settings).unwrap(), "= the workload with the policy applied");
        assert!(b.violations > a.violations, "{} !> {}", b.violations, a.violations);
        // The Policy Tuner's candidates, and so what it writes, carry the policy.
        let spec = TunerSpec { slo_policy: Some(policy.clone()), ..TunerSpec::default() };
        assert!(spec.params(300.0).unwrap().initial.iter().all(|c| c.slo_policy.as_ref() == Some(&policy)));
        let bad = TunerSpec { slo_policy: Some(crate::tenancy::SloPolicy { deadlines: vec![crate::tenancy::DeadlineRule { tier: "*".into(), class: "adhoc".into(), deadline_s: -1.0 }], ..policy }), ..TunerSpec::default() };
        assert!(bad.params(300.0).unwrap_err().to_string().contains("slo_policy.deadlines[0].deadline_s"));
    }

    /// A backend that runs each job's share through `simulate_pairs` in reverse chunks, as a
    /// remote worker would, or loses a job.
    struct Chunked {
        lose_one: bool,
    }
    impl BatchBackend for Chunked {
        fn run(&self, batch: &Batch<'_>) -> crate::error::Result<Vec<SimOutcome>> {
            let pairs: Vec<(usize, usize)> = (0..batch.len()).map(|k| batch.job(k)).collect();
            let mut out = Vec::new();
            for chunk in pairs.chunks(2) {
                out.extend(simulate_pairs(batch.predictor, batch.configs, batch.workloads, chunk, batch.settings, Some(1))?);
                batch.mark_done(chunk.len());
            }
            if self.lose_one {
                out.pop();
            }
            Ok(out)
        }
        fn name(&self) -> &str {
            "chunked"
        }
    }

    #[test]
    fn another_backend_gives_the_rayon_matrix_and_a_short_answer_is_an_error() {
        let p = model();
        let slo = SloTable::paper(2.0).unwrap();
        let ws: Vec<_> = (0..3).map(|s| base_workload(0.2, 10 + s, &slo).unwrap()).collect();
        let cfgs = [ExecutionConfig::new(vec![8]), ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![16]) }];
        let settings = BatchSettings { keep_logs: true, ..Default::default() };
        let local = simulate_batch(&p, &cfgs, &ws, &settings, &RayonBackend, &BatchControl::new()).unwrap();
        let control = BatchControl::new();
        assert_eq!(simulate_batch(&p, &cfgs, &ws, &settings, &Chunked { lose_one: false }, &control).unwrap(), local);
        assert_eq!(control.progress(), (6, 6));
        let err = simulate_batch(&p, &cfgs, &ws, &settings, &Chunked { lose_one: true }, &BatchControl::new()).unwrap_err();
        assert!(matches!(&err, AutoSloError::Backend { backend, .. } if backend == "chunked"), "{err}");
        assert!(err.to_string().contains("returned 5 outcomes for 6 jobs"), "{err}");
        // Pairs out of range and a pool of no threads are errors, not panics.
        assert!(simulate_pairs(&p, &cfgs, &ws, &[(2, 0)], &settings, None).unwrap_err().to_string().contains("out of range"));
        assert!(simulate_pairs(&p, &cfgs, &ws, &[(0, 0)], &settings, Some(0)).is_err());
    }

    #[test]
    fn schedule_spinups_adds_capacity_where_the_forecasts_congest_and_the_config_tuner_keeps_the_base() {
        let p = model();
        let slo = SloTable::paper(2.0).unwrap();
        let ws: Vec<_> = (0..4).map(|s| base_workload(0.4, 10 + s, &slo).unwrap()).collect();
        let (train, val) = ws.split_at(3);
        let init = ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![8]) };
        let params = SchedulerParams { eta: 2, sizes: vec![16, 32], phi: 2, spinup_time: SpinupTimeParams { k: 2, spinup_s: 300.0, sigma_min_s: 600.0 }, ..Default::default() };
        let control = BatchControl::new();
        let r = schedule_spinups(&p, std::slice::from_ref(&init), train, val, &params, &BatchSettings::default(), &RayonBackend, &control).unwrap();
        assert!(!r.best.scheduled_spinups.is_empty() && r.best.scheduled_spinups.len() <= 2, "{:?}", r.best);
        let base = agg_perf(&simulate_batch(&p, std::slice::from_ref(&init), train, &BatchSettings::default(), &RayonBackend, &control).unwrap()[0], Aggregate::Mean, TargetScope::Fleet);
        let c = &r.candidates[0];
        assert!(c.training.0 < base.0, "the accepted spinups improve training: {:?} vs {base:?}", c.training);
        assert_eq!(control.progress().0, control.progress().1);
        // The outcomes handed back are E★'s on validation: what a fresh simulation of it gives.
        let again = |cfg: &ExecutionConfig| simulate_batch(&p, std::slice::from_ref(cfg), val, &BatchSettings { keep_logs: false, ..Default::default() }, &RayonBackend, &control).unwrap().remove(0);
        assert_eq!(r.validation_outcomes, again(&r.best));
        assert_eq!(agg_perf(&r.validation_outcomes, Aggregate::Mean, TargetScope::Fleet), r.candidates[r.chosen].validation);

        let space = SearchSpace { initial_clusters: vec![vec![8], vec![16]], ..Default::default() };
        let t = tune_config(&p, &init, &space, train, val, &ConfigTunerParams { strategy: config_tuner::Strategy::Grid, top_k: 2, ..Default::default() }, &BatchSettings::default(), &RayonBackend, &control).unwrap();
        assert_eq!(t.evaluated[0].config, init, "the base is always a candidate");
        assert_eq!(t.evaluated.len(), 2, "{:?}", t.evaluated.iter().map(|e| &e.config.initial_clusters).collect::<Vec<_>>());
        assert!(t.evaluated.iter().all(|e| e.validation.is_some()));
        assert_eq!(t.validation_outcomes, again(&t.best));
        // The eligible sizes, the selector's and the router's headroom are knobs too.
        let knobs = SearchSpace { sizes: vec![vec![16, 32], vec![8, 16, 32]], selector_headroom: vec![1.0, 2.0], slo_headroom: vec![1.25], ..Default::default() };
        assert_eq!(knobs.grid_size(), 4);
        let t = tune_config(&p, &init, &knobs, train, val, &ConfigTunerParams { strategy: config_tuner::Strategy::Grid, top_k: 1, ..Default::default() }, &BatchSettings::default(), &RayonBackend, &control).unwrap();
        let seen: BTreeSet<(Vec<u32>, Option<u64>, Option<u64>)> = t.evaluated[1..].iter().map(|e| (e.config.autoscaler.as_ref().unwrap().sizes.clone(), e.config.autoscaler.as_ref().unwrap().selector_headroom.map(f64::to_bits), e.config.slo_headroom.map(f64::to_bits))).collect();
        assert_eq!(seen.len(), 4, "every point of the grid: {seen:?}");
        assert!(seen.iter().all(|(_, _, h)| *h == Some(1.25f64.to_bits())));
        let big = SearchSpace { theta: (1..100).collect(), mu: (1..100).collect(), ..Default::default() };
        assert!(tune_config(&p, &init, &big, train, val, &ConfigTunerParams { strategy: config_tuner::Strategy::Grid, ..Default::default() }, &BatchSettings::default(), &RayonBackend, &control).unwrap_err().to_string().contains("max_candidates"));
    }

    #[test]
    fn adaptive_batch_searches_part_of_the_grid_and_with_patience_all_of_it() {
        let p = model();
        let slo = SloTable::paper(2.0).unwrap();
        let ws: Vec<_> = (0..3).map(|s| base_workload(0.3, 20 + s, &slo).unwrap()).collect();
        let (train, val) = ws.split_at(2);
        let base = ExecutionConfig::new(vec![8]);
        let space = SearchSpace { t_idle_s: vec![60.0, 300.0, 600.0, 1200.0, 2400.0], tau_trigger: vec![0.02, 0.05, 0.1, 0.2, 0.4], initial_clusters: vec![vec![8], vec![16], vec![32]], ..Default::default() };
        let run = |strategy| tune_config(&p, &base, &space, train, val, &ConfigTunerParams { strategy, ..Default::default() }, &BatchSettings::default(), &RayonBackend, &BatchControl::new()).unwrap();
        let grid = run(config_tuner::Strategy::Grid);
        let set = |r: &ConfigTuneResult| r.evaluated.iter().map(|e| e.config.to_json()).collect::<BTreeSet<_>>();
        let all = set(&grid);
        assert_eq!(all.len(), 1 + space.grid_size());
        let adaptive = run(config_tuner::Strategy::AdaptiveBatch { patience: 0 });
        assert_eq!(adaptive.evaluated[0].config, base, "the base is always a candidate");
        assert!(set(&adaptive).is_subset(&all), "only grid points");
        assert!(adaptive.evaluated.len() < all.len(), "stopped early: {} of {}", adaptive.evaluated.len(), all.len());
        assert_eq!(adaptive.simulations, adaptive.evaluated.len() * train.len() + 3.min(adaptive.evaluated.len()) * val.len());
        // Its training figures are the grid's for the same configurations.
        for e in &adaptive.evaluated {
            assert_eq!(grid.evaluated.iter().find(|g| g.config == e.config).unwrap().training, e.training);
        }
        // Patience enough to widen over the whole grid: every point, as the grid.
        assert_eq!(set(&run(config_tuner::Strategy::AdaptiveBatch { patience: 10 })), all);
        // A cap on the points is kept.
        let capped = tune_config(&p, &base, &space, train, val, &ConfigTunerParams { strategy: config_tuner::Strategy::AdaptiveBatch { patience: 10 }, max_candidates: 7, ..Default::default() }, &BatchSettings::default(), &RayonBackend, &BatchControl::new()).unwrap();
        assert_eq!(capped.evaluated.len(), 1 + 7);
    }
}

#[test]
fn a_learned_gap_lowers_the_simulated_target_within_bounds() {
    assert!((learned_tau_simulated(0.1, 0.03).unwrap() - 0.07).abs() < 1e-12);
    assert_eq!(learned_tau_simulated(0.1, 0.5).unwrap(), 0.1 * MIN_SIMULATED_TARGET_SHARE, "never below a tenth of τ");
    assert_eq!(learned_tau_simulated(0.1, -0.5).unwrap(), 0.2, "a pessimistic estimate raises it to 2τ at most");
    assert_eq!(learned_tau_simulated(0.8, -0.5).unwrap(), 1.0);
    assert!(learned_tau_simulated(0.1, f64::NAN).unwrap_err().to_string().contains("estimate_gap"));
    // In the settings: the gap sets the simulated target unless one is given.
    let spec = TunerSpec { estimate_gap: Some(0.04), ..TunerSpec::default() };
    assert!((spec.params(300.0).unwrap().config_tuner.tau - 0.06).abs() < 1e-12);
    let given = TunerSpec { tau_simulated: Some(0.05), ..spec.clone() };
    assert_eq!(given.params(300.0).unwrap().config_tuner.tau, 0.05);
    assert_eq!(TunerSpec::default().params(300.0).unwrap().config_tuner.tau, 0.1, "the listing: τ itself");
}
