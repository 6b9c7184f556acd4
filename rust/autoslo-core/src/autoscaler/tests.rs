//! Autoscaler tests with the bundled model (feature `torch`).

use std::path::PathBuf;

use super::*;
use crate::billing::BillingPolicy;
use crate::catalog::QueryText;
use crate::cluster::ClusterInfo;
use crate::control::RoundRobin;
use crate::emulator::{emulate, EmulatorConfig};
use crate::predictor::{Backend, Predictor};
use crate::router::AutoSloRouter;
use crate::simulator::{simulate, SimulatorConfig};
use crate::slo::SloTable;
use crate::workload::{base_workload, Query};

fn model() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    Predictor::load(&dir, Backend::Native).unwrap()
}

fn ready(id: u32, size: u32) -> ClusterInfo {
    ClusterInfo { id, size, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 }
}

fn q(id: u64, t: f64, slo: f64) -> Query {
    Query { id, arrival: t, text: QueryText { template: (id % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo }
}

#[test]
fn maybe_spinup_waits_for_theta_fires_once_and_rearms_when_the_cluster_set_changes() {
    let mut r = AutoSloRouter::new(model(), BillingPolicy::default());
    let mut a = Autoscaler::new(Scaling::AddBest, TriggerKind::Combined, AutoscalerParams { theta: 8, ..Default::default() }).unwrap();
    let one = [ready(0, 4)];
    // Queries with a 1 s SLO all violate by prediction.
    for i in 0..7 {
        r.route(i as f64, &q(i, i as f64, 1.0), &one).unwrap();
        assert!(!a.maybe_spinup(i as f64, &one, &r).fire, "fewer than θ observations");
    }
    r.route(7.0, &q(7, 7.0, 1.0), &one).unwrap();
    let c = a.maybe_spinup(7.0, &one, &r);
    assert!(c.fire && c.running == 8 && c.violation_rate == 1.0, "{c:?}");
    r.route(8.0, &q(8, 8.0, 1.0), &one).unwrap();
    assert!(!a.maybe_spinup(8.0, &one, &r).fire, "in flight");
    // A new ready cluster: t_change moves to now, so the old observations no longer count.
    let two = [ready(0, 4), ready(1, 16)];
    assert!(!a.maybe_spinup(9.0, &two, &r).fire);
    assert_eq!(a.spinup.t_change, 9.0);
    // Observed ignores the running queries' predictions.
    let mut o = Autoscaler::new(Scaling::AddBest, TriggerKind::Observed, AutoscalerParams { theta: 8, ..Default::default() }).unwrap();
    assert!(!o.maybe_spinup(9.0, &one, &r).fire);
    // queue@N counts outstanding queries.
    let mut qn = Autoscaler::new(Scaling::AddBest, TriggerKind::Queue(32), AutoscalerParams::default()).unwrap();
    assert!(!qn.maybe_spinup(1.0, &[ClusterInfo { running: 20, queued: 11, ..ready(0, 8) }], &r).fire);
    assert!(qn.maybe_spinup(2.0, &[ClusterInfo { running: 20, queued: 12, ..ready(0, 8) }], &r).fire);
}

#[test]
fn the_selector_adds_capacity_to_an_overloaded_cluster_and_does_nothing_for_an_idle_one() {
    let p = model();
    let params = SelectorParams { sizes: vec![8, 16, 32], mu: 16, window_s: 300.0, spinup_s: 300.0, tau_target: 0.1, ..Default::default() };
    // Overloaded: 60 queries in the last 300 s on one 4 RPU cluster, SLOs of 2 × a 16 RPU baseline.
    let slo = SloTable::paper(2.0).unwrap();
    let mut r = AutoSloRouter::new(p.clone(), BillingPolicy::default());
    let one = [ready(0, 4)];
    let mut window = Vec::new();
    for i in 0..60u64 {
        let mut x = q(i, 5.0 * i as f64, 1.0);
        x.slo = slo.slo(x.text.template, "adhoc").unwrap();
        r.route(x.arrival, &x, &one).unwrap();
        window.push(x);
    }
    let d = find_best_spinup_size(&r, &one, &window, 300.0, &params, Mode::Add).unwrap();
    assert_eq!(d.branches.len(), 4);
    let none = &d.branches[0];
    let best = d.branches.iter().find(|b| b.size == d.size).unwrap();
    assert!(d.size.is_some(), "{:?}", d.branches);
    assert!(best.violation_rate < none.violation_rate, "{:?}", d.branches);
    assert!(d.branches.iter().all(|b| b.observations >= params.mu));
    // The router itself is untouched.
    assert_eq!(r.running().count(), 60);
    // Idle: a few queries with loose SLOs. A larger cluster would only cost more, so the router
    // would leave it unused: doing nothing ties with every size, and do-nothing wins its ties.
    let params = SelectorParams { sizes: vec![16, 32], ..params };
    let mut r = AutoSloRouter::new(p, BillingPolicy::default());
    let big = [ready(0, 8)];
    let window: Vec<Query> = (0..5u64).map(|i| q(i, 60.0 * i as f64, 1e5)).collect();
    for x in &window {
        r.route(x.arrival, x, &big).unwrap();
    }
    let d = find_best_spinup_size(&r, &big, &window, 300.0, &params, Mode::Add).unwrap();
    assert_eq!(d.size, None, "{:?}", d.branches);
    assert!(d.branches.iter().all(|b| (b.violation_rate, b.cost) == (d.branches[0].violation_rate, d.branches[0].cost)), "every option ties: {:?}", d.branches);
    assert_eq!(find_best_spinup_size(&r, &big, &[], 300.0, &params, Mode::Add).unwrap().size, None);
    // With the tie change, the largest size tied with do-nothing is spun up instead.
    let on_tie = SelectorParams { spinup_on_tie: true, ..params };
    assert_eq!(find_best_spinup_size(&r, &big, &window, 300.0, &on_tie, Mode::Add).unwrap().size, Some(32));
}

/// Sharing do-nothing's routings with the size branches until each first chooses its new cluster
/// changes nothing: every branch's violation rate, cost, observations and arrivals equal those of
/// the branches run on their own from the snapshot, bit for bit, at decisions along busy and quiet
/// runs, under both counts of line 27, with the selector headroom, and where no cluster is ready.
#[test]
fn the_selector_s_shared_branches_equal_branches_run_on_their_own() {
    let p = model();
    let (mut forked, mut unforked) = (0, 0);
    // (rate, clusters, SLO scale, the first cluster still starting at the decision)
    for (rate, clusters, scale, starting) in [(1.0, vec![8u32], 1.0, false), (0.5, vec![16, 32], 1e3, false), (0.5, vec![8], 1.0, true)] {
        let w = base_workload(rate, 3, &SloTable::paper(2.0).unwrap()).unwrap();
        let infos: Vec<ClusterInfo> = clusters.iter().enumerate().map(|(i, &s)| ready(i as u32, s)).collect();
        let mut r = AutoSloRouter::new(p.clone(), BillingPolicy::default());
        let qs: Vec<Query> = w.queries()[..120].iter().map(|x| Query { slo: x.slo * scale, ..*x }).collect();
        for (k, x) in qs.iter().enumerate() {
            r.collect_finished_until(x.arrival).unwrap();
            r.route(x.arrival, x, &infos).unwrap();
            if k % 60 != 59 {
                continue;
            }
            let window: Vec<Query> = qs[..=k].iter().filter(|y| y.arrival > x.arrival - 300.0).copied().collect();
            // A cluster requested long ago that is still starting: the new one is the only ready cluster.
            let at = if starting { vec![ClusterInfo { state: ClusterState::Starting, ready_at: 1e9, ..infos[0] }] } else { infos.clone() };
            let (mu, slo_headroom, count_backlog) = if k < 60 { (16, 1.0, true) } else { (32, 2.0, false) };
            let params = SelectorParams { sizes: vec![4, 8, 16, 32], mu, slo_headroom, count_backlog, ..Default::default() };
            let shared = super::selector::decide(&r, &at, &window, x.arrival, &params, Mode::Add, true).unwrap();
            let alone = super::selector::decide(&r, &at, &window, x.arrival, &params, Mode::Add, false).unwrap();
            assert_eq!(shared, alone, "rate {rate} {clusters:?} at query {k}");
            let none = &alone.branches[0];
            for b in &alone.branches[1..] {
                if (b.violation_rate, b.cost, b.arrivals) == (none.violation_rate, none.cost, none.arrivals) {
                    unforked += 1;
                } else {
                    forked += 1;
                }
            }
        }
    }
    assert!(forked > 0 && unforked > 0, "both kinds of branch occur: {forked} forked, {unforked} not");
}

#[test]
fn the_selector_replays_copies_due_before_the_decision_at_the_decision_time() {
    // A decision taken well after the window's arrivals (a public function: a caller may decide at
    // any time; the engines decide at an arrival, where a copy can still round to an ulp before
    // it): the first copies fall before `now`, after the cluster went idle. Routing them in the
    // past turned time back on the cluster's billing timer.
    let mut r = AutoSloRouter::new(model(), BillingPolicy::default());
    let one = [ready(0, 16)];
    let window: Vec<Query> = (0..4u64).map(|i| q(i, 2.0 * i as f64, 1e5)).collect();
    for x in &window {
        r.route(x.arrival, x, &one).unwrap();
    }
    for x in &window {
        r.observe(150.0 + x.arrival, &crate::control::Event::Completion { query: x, cluster: 0, latency: 150.0, censored: false });
    }
    assert_eq!(r.running().count(), 0);
    let params = SelectorParams { sizes: vec![16, 32], mu: 4, window_s: 100.0, spinup_s: 300.0, ..Default::default() };
    let d = find_best_spinup_size(&r, &one, &window, 200.0, &params, Mode::Add).unwrap();
    assert_eq!(d.branches.len(), 3);
    assert!(d.prep_arrivals >= window.len(), "{d:?}");
}

fn routed_once(t: &crate::trace::Trace, n: usize) {
    let mut seen = vec![false; n];
    for row in &t.rows {
        assert!(!seen[row.query]);
        seen[row.query] = true;
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn autoslo_scales_an_overloaded_warehouse_in_the_emulator_and_the_simulator() {
    let p = model();
    let w = base_workload(0.2, 3, &SloTable::paper(2.0).unwrap()).unwrap();
    let cfg = EmulatorConfig { seed: 3, ..Default::default() };
    let params = AutoscalerParams { sizes: vec![8, 16, 32], ..Default::default() };
    let run = |name: &str| {
        let mut router = AutoSloRouter::new(p.clone(), BillingPolicy::default());
        let mut s = scaler_by_name(name, None, params.clone(), &ScalerOptions::default()).unwrap();
        emulate(&w, &[8], &mut router, s.as_mut(), &cfg).unwrap()
    };
    let (noop, auto) = (run("noop"), run("autoslo"));
    routed_once(&auto, w.len());
    assert_eq!(noop.clusters.len(), 1);
    let spun: Vec<_> = auto.cluster_events().into_iter().filter(|e| e.kind == "spinup").collect();
    assert!(!spun.is_empty() && spun.iter().all(|e| e.reason == "spinup-trigger" && params.sizes.contains(&e.size)), "{spun:?}");
    let vr = |t: &crate::trace::Trace| t.summary(&w).violation_rate;
    assert!(vr(&auto) < vr(&noop), "autoslo {} vs noop {}", vr(&auto), vr(&noop));
    // The same policy object runs in the Workload Simulator.
    let mut router = AutoSloRouter::new(p.clone(), BillingPolicy::default());
    let s = scaler_by_name("autoslo", None, params.clone(), &ScalerOptions::default()).unwrap();
    // Wrapped with a (empty) schedule, as an execution configuration runs it: its decisions still show.
    let mut s: Box<dyn Scaler> = Box::new(crate::control::PlannedScaler::new(crate::control::ScheduledScaler::new(Vec::new(), 1.0).unwrap(), s));
    let sim = simulate(&p, &w, &[8], &mut router, s.as_mut(), SimulatorConfig::default()).unwrap();
    routed_once(&sim, w.len());
    assert!(sim.clusters.len() > 1);
    // Every spinup is a decision's choice, and each selector decision lists do-nothing and every size.
    let chosen: Vec<u32> = s.decisions().iter().filter_map(|d| d.size).collect();
    assert_eq!(chosen.len(), sim.clusters.len() - 1, "{:?}", s.decisions());
    for d in s.decisions() {
        let sel = d.selection.as_ref().expect("the selector compared options");
        let mut options: Vec<Option<u32>> = sel.branches.iter().map(|b| b.size).collect();
        options.sort();
        assert_eq!(options, vec![None, Some(8), Some(16), Some(32)]);
        assert_eq!(d.cause, "trigger");
    }
    // The selector needs the autoslo router.
    let mut s = scaler_by_name("add-best", Some("observed"), params.clone(), &ScalerOptions::default()).unwrap();
    let e = emulate(&w, &[8], &mut RoundRobin::default(), s.as_mut(), &cfg).unwrap_err();
    assert!(e.to_string().contains("route with `autoslo`"), "{e}");
    assert!(scaler_by_name("autoslo", Some("observed"), params.clone(), &ScalerOptions::default()).err().is_some());
    assert!(scaler_by_name("grow", None, params, &ScalerOptions::default()).err().unwrap().to_string().contains("unknown policy"));
}

#[test]
fn a_trigger_the_policy_cannot_use_is_refused_with_its_reason() {
    let params = AutoscalerParams::default();
    let queue = scaler_by_name("add-best", Some("queue@0"), params.clone(), &ScalerOptions::default()).err().unwrap().to_string();
    assert!(queue.contains("N ≥ 1") && queue.contains("queue@0"), "{queue}");
    for name in ["snowflake-standard", "snowflake-economy", "rais"] {
        let e = scaler_by_name(name, Some("observed"), params.clone(), &ScalerOptions::default()).err().unwrap().to_string();
        assert!(e.contains("takes no trigger"), "{e}");
        assert!(scaler_by_name(name, None, params.clone(), &ScalerOptions::default()).is_ok());
    }
}

#[test]
fn vertical_scaling_drains_the_old_cluster_once_the_new_one_is_ready() {
    let p = model();
    let w = base_workload(0.2, 5, &SloTable::paper(2.0).unwrap()).unwrap();
    let params = AutoscalerParams { sizes: vec![16, 32], force_at: Some(w.queries()[60].arrival), ..Default::default() };
    let mut router = AutoSloRouter::new(p.clone(), BillingPolicy::default());
    let mut s = Autoscaler::new(Scaling::Vertical, TriggerKind::Never, params).unwrap();
    let t = emulate(&w, &[8], &mut router, &mut s, &EmulatorConfig { seed: 5, ..Default::default() }).unwrap();
    routed_once(&t, w.len());
    assert_eq!(s.decisions.len(), 1);
    assert_eq!(s.decisions[0].cause, "forced");
    let ev = t.cluster_events();
    let new = ev.iter().find(|e| e.kind == "spinup").expect("the forced decision spins a cluster up");
    assert_eq!(new.reason, "forced");
    let ready_at = ev.iter().find(|e| e.kind == "ready" && e.cluster == new.cluster).unwrap().time;
    let old = ev.iter().find(|e| e.kind == "teardown" && e.cluster == 0).expect("the old cluster is torn down");
    assert_eq!(old.reason, "replaced");
    assert!((old.time - ready_at).abs() < 1e-9);
    // Nothing is routed to the old cluster after the new one is ready.
    assert!(t.rows.iter().filter(|r| r.cluster == Some(0)).all(|r| r.arrival <= ready_at));
}


#[test]
fn the_autoslo_policy_fills_in_its_own_headroom_and_mu_and_keeps_a_users() {
    let unset = AutoscalerParams::default();
    assert_eq!(unset.selector().mu, DEFAULT_MU);
    assert_eq!(unset.selector().slo_headroom, 1.0);
    let ours = autoslo_params(unset.clone()).selector();
    assert_eq!((ours.mu, ours.slo_headroom), (DEFAULT_AUTOSLO_MU, DEFAULT_SELECTOR_HEADROOM));
    assert_ne!(DEFAULT_AUTOSLO_MU, DEFAULT_MU);
    let given = autoslo_params(AutoscalerParams { mu: Some(8), selector_headroom: Some(1.0), ..unset }).selector();
    assert_eq!((given.mu, given.slo_headroom), (8, 1.0));
    let zero = AutoscalerParams { mu: Some(0), ..Default::default() }.validated();
    assert!(zero.is_err());
}
