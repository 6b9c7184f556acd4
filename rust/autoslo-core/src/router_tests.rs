//! Router and Workload Simulator tests with the bundled model (feature `torch`).

use std::path::PathBuf;

use crate::billing::BillingPolicy;
use crate::cluster::{ClusterId, ClusterInfo, ClusterState as Lifecycle};
use crate::control::{Router, StaticScaler};
use crate::emulator::{emulate, EmulatorConfig};
use crate::predictor::{Backend, Predictor};
use crate::router::{router_by_name, AutoSloRouter, RouterOptions, Search, SecondKey, ROUTING_POLICIES};
use crate::simulator::{simulate, SimulatorConfig, WorkloadSimulator};
use crate::slo::SloTable;
use crate::workload::{base_workload, Query};

fn model() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    Predictor::load(&dir, Backend::Native).unwrap()
}

fn info(id: u32, size: u32) -> ClusterInfo {
    ClusterInfo { id, size, state: Lifecycle::Ready, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 }
}

#[test]
fn every_policy_routes_every_query_exactly_once() {
    let p = model();
    let w = base_workload(0.2, 1, &SloTable::paper(2.0).unwrap()).unwrap();
    for name in ROUTING_POLICIES {
        let mut r = router_by_name(name, Some(&p), RouterOptions { seed: 1, ..Default::default() }).unwrap();
        let t = emulate(&w, &[32, 16], r.as_mut(), &mut StaticScaler, &EmulatorConfig { seed: 1, ..Default::default() }).unwrap();
        assert_eq!(t.rows.len(), w.len(), "{name}");
        let mut seen = vec![false; w.len()];
        for row in &t.rows {
            assert!(!seen[row.query], "{name}: query {} routed twice", row.query);
            seen[row.query] = true;
            assert!(row.cluster.is_some_and(|c| c < 2));
        }
    }
    assert!(router_by_name("fastest", Some(&p), RouterOptions::default()).map(|_| ()).unwrap_err().to_string().contains("unknown policy"));
    assert!(router_by_name("autoslo", None, RouterOptions::default()).is_err());
}

#[test]
fn algorithm1_avoids_the_loaded_cluster_and_guards_predictions() {
    let p = model();
    let mut r = AutoSloRouter::new(p, BillingPolicy::default());
    let q = |id: u64, t: f64, slo: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: (id % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo };
    // Load cluster 0 with 20 queries while cluster 1 stays idle (same size).
    for i in 0..20u64 {
        assert_eq!(r.route(i as f64 * 0.1, &q(i, i as f64 * 0.1, 1e6), &[info(0, 16)]).unwrap(), 0);
    }
    let before: Vec<f64> = r.placed()[&0].iter().map(|x| x.prediction).collect();
    // A query with a tight SLO: only the idle cluster can meet it.
    let tight = q(100, 3.0, 30.0);
    let c = r.route(3.0, &tight, &[info(0, 16), info(1, 16)]).unwrap();
    assert_eq!(c, 1, "{:?}", r.last.iter().map(|c| (c.cluster, c.delta_violations, c.delta_cost)).collect::<Vec<_>>());
    // Monotonicity guard (lines 6–8): each running query's prediction becomes exactly
    // max(its counterfactual prediction, its prediction before, its elapsed time), and that is
    // what routing commits.
    let placed = r.placed()[&0].clone();
    let late = q(101, 50.0, 1e6);
    let cands = r.evaluate(50.0, &late, &[info(0, 16)]).unwrap();
    let raw: Vec<f64> = cands[0].cf.as_ref().unwrap().updated_predictions().collect();
    assert_eq!(raw.len(), placed.len());
    let want: Vec<f64> = placed.iter().zip(&raw).map(|(p, &cf)| cf.max(p.prediction).max(50.0 - p.arrival)).collect();
    assert_eq!(cands[0].guarded, want);
    let held = placed.iter().zip(&raw).filter(|(p, &cf)| 50.0 - p.arrival > cf.max(p.prediction)).count();
    assert!(held > 0, "some running query is held to its elapsed time: {raw:?}");
    r.route(50.0, &late, &[info(0, 16)]).unwrap();
    let after: Vec<f64> = r.placed()[&0].iter().take(placed.len()).map(|x| x.prediction).collect();
    assert_eq!(after, want);
    assert!(after.iter().zip(&before).all(|(a, b)| a >= b));
    assert!(r.route(60.0, &q(102, 60.0, 1.0), &[]).is_err(), "no clusters");
}

#[test]
fn an_overdue_query_guarded_to_the_elapsed_time_never_makes_its_cluster_idle_before_the_last_event() {
    // Found by the Spinup Size Selector under the simulator's latency noise: query 1 runs past its
    // prediction, so query 2's arrival at `now` guards it to `now − arrival`, and `arrival + (now −
    // arrival)` can round to one ulp below `now`. Query 2 then completes early (the warehouse, not
    // the prediction, says when), and collecting query 1 idled the billing timer before the event
    // it had seen at `now`: "time went backwards".
    let q = |id: u64, t: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: 1, instance: 1 }, tenant: 0, class: 0, slo: 1e6 };
    let a = 19.972341684637513; // enough mantissa bits for some `now` to round down
    let mut tried = 0;
    for k in 0..10_000 {
        let now = 2594.0 + 0.013 * k as f64;
        if a + (now - a) >= now {
            continue;
        }
        tried += 1;
        let mut r = AutoSloRouter::new(model(), BillingPolicy::default());
        r.route(a, &q(1, a), &[info(0, 16)]).unwrap();
        assert!(r.placed()[&0][0].predicted_end() < now, "query 1 must be overdue at {now}");
        r.route(now, &q(2, now), &[info(0, 16)]).unwrap();
        let guarded = r.placed()[&0][0].predicted_end();
        r.observe(now + 0.5, &crate::control::Event::Completion { query: &q(2, now), cluster: 0, latency: 0.5, censored: false });
        let done = r.collect_finished_until(now + 1.0).unwrap_or_else(|e| panic!("now {now}, query 1 guarded to end at {guarded}: {e}"));
        assert_eq!(done.iter().map(|p| p.id).collect::<Vec<_>>(), vec![1]);
        assert!(r.cost_until_drained(now + 1.0).unwrap() > 0.0);
        if tried == 20 {
            break;
        }
    }
    assert_eq!(tried, 20, "too few times that round down");
}

/// The AutoSLO router behind a wrapper that hides it, so the simulator computes every arrival itself.
struct Hidden(AutoSloRouter);

impl Router for Hidden {
    fn route(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> crate::error::Result<ClusterId> {
        self.0.route(now, query, clusters)
    }
    fn observe(&mut self, now: f64, event: &crate::control::Event<'_>) {
        self.0.observe(now, event)
    }
    fn name(&self) -> &str {
        "hidden"
    }
}

#[test]
fn simulator_copying_the_routers_arrivals_equals_computing_them() {
    let p = model();
    // Busy enough that clusters run past 48 queries (the parallel counterfactual path).
    let w = base_workload(1.0, 3, &SloTable::paper(2.0).unwrap()).unwrap();
    let cfg = SimulatorConfig::default();
    for search in [Search::BranchAndBound, Search::Exhaustive] {
        let copied = simulate(&p, &w, &[8, 16], &mut AutoSloRouter::new(p.clone(), cfg.billing).with_search(search), &mut StaticScaler, cfg.clone()).unwrap();
        let computed = simulate(&p, &w, &[8, 16], &mut Hidden(AutoSloRouter::new(p.clone(), cfg.billing).with_search(search)), &mut StaticScaler, cfg.clone()).unwrap();
        assert_eq!(copied, computed, "{search:?}");
    }
    // Every arrival is copied from the AutoSLO router on the same model, none otherwise: from the
    // hidden router, or from another load of the same model (which gives the same trace).
    let other = model();
    assert!(p.same_model(&p.clone()) && !p.same_model(&other));
    let copies = |r: &mut dyn Router| {
        let mut sim = WorkloadSimulator::new(&p, &w, &[8, 16], cfg.clone()).unwrap();
        sim.run_until(f64::INFINITY, r, &mut StaticScaler).unwrap();
        (sim.arrivals_copied(), sim.finish(r, &mut StaticScaler).unwrap())
    };
    let (n_same, same) = copies(&mut AutoSloRouter::new(p.clone(), cfg.billing));
    let (n_hidden, _) = copies(&mut Hidden(AutoSloRouter::new(p.clone(), cfg.billing)));
    let (n_other, with_other) = copies(&mut AutoSloRouter::new(other, cfg.billing));
    assert_eq!((n_same, n_hidden, n_other), (w.len(), 0, 0));
    assert_eq!(same, with_other);
}

#[test]
fn simulator_completes_everything_and_forks_identically() {
    let p = model();
    let w = base_workload(0.2, 2, &SloTable::paper(2.0).unwrap()).unwrap();
    let cfg = SimulatorConfig::default();
    let mut r = AutoSloRouter::new(p.clone(), cfg.billing);
    let t = simulate(&p, &w, &[16, 16], &mut r, &mut StaticScaler, cfg.clone()).unwrap();
    assert_eq!(t.rows.len(), w.len());
    let billed: f64 = t.clusters.iter().map(|c| c.cost).sum();
    let attributed: f64 = t.rows.iter().map(|r| r.cost).sum();
    assert!((billed - attributed).abs() < 1e-9 * billed.max(1.0));
    assert!(t.rows.iter().all(|r| r.latency > 0.0));

    // Branch halfway: both branches, continued with equal routers, end identically.
    let mut r1 = AutoSloRouter::new(p.clone(), cfg.billing);
    let mut sim = WorkloadSimulator::new(&p, &w, &[16, 16], cfg.clone()).unwrap();
    sim.run_until(w.queries()[150].arrival, &mut r1, &mut StaticScaler).unwrap();
    let branch = sim.fork();
    let mut r2 = r1.clone();
    let a = sim.finish(&mut r1, &mut StaticScaler).unwrap();
    let b = branch.finish(&mut r2, &mut StaticScaler).unwrap();
    assert_eq!(a, b);
    assert!(WorkloadSimulator::new(&p, &w, &[0], cfg).is_err());
}

#[test]
fn routed_query_is_predicted_through_the_arrival_correction_and_headroom_counts_violations() {
    let p = model();
    assert!(p.arrival.is_some(), "the bundled model carries an at-arrival correction");
    let q = |id: u64, t: f64, slo: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: (id % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo };
    let literal = |p: Predictor| AutoSloRouter::new(p, BillingPolicy::default()).with_slo_headroom(1.0).unwrap();
    let mut corrected = literal(p.clone());
    let mut raw = literal(p.without_arrival_correction());
    for i in 0..12u64 {
        corrected.route(i as f64, &q(i, i as f64, 1e6), &[info(0, 16)]).unwrap();
        raw.route(i as f64, &q(i, i as f64, 1e6), &[info(0, 16)]).unwrap();
    }
    let probe = q(50, 12.0, 1e6);
    let (c, r) = (corrected.evaluate(12.0, &probe, &[info(0, 16)]).unwrap(), raw.evaluate(12.0, &probe, &[info(0, 16)]).unwrap());
    let stage = p.stage.estimate(probe.text, 16).unwrap();
    let running = corrected.placed()[&0].len();
    assert!((c[0].prediction - p.at_arrival(r[0].prediction, stage, 16, running)).abs() < 1e-9);
    assert!(c[0].prediction > r[0].prediction, "12 running on 16 RPU: the correction raises the estimate");

    // Headroom: an SLO 10 % above the prediction is met literally but violated with headroom 1.25.
    let slo = c[0].prediction * 1.1;
    let tight = q(50, 12.0, slo);
    assert_eq!(corrected.evaluate(12.0, &tight, &[info(0, 16)]).unwrap()[0].delta_violations, 0);
    let mut careful = AutoSloRouter::new(p.clone(), BillingPolicy::default()).with_slo_headroom(1.25).unwrap();
    for i in 0..12u64 {
        careful.route(i as f64, &q(i, i as f64, 1e6), &[info(0, 16)]).unwrap();
    }
    assert_eq!(careful.evaluate(12.0, &tight, &[info(0, 16)]).unwrap()[0].delta_violations, 1);
    assert!(AutoSloRouter::new(p.clone(), BillingPolicy::default()).with_slo_headroom(0.9).is_err());
    assert!(router_by_name("autoslo", Some(&p), RouterOptions { slo_headroom: f64::NAN, ..Default::default() }).is_err());
}

#[test]
fn parallel_evaluation_equals_one_thread() {
    let p = model();
    let q = |id: u64, t: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: (id * 37 % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo: 60.0 };
    let infos: Vec<ClusterInfo> = (0..5).map(|i| info(i, [32, 16][i as usize % 2])).collect();
    // The exhaustive search's parallel path (branch and bound runs on the calling thread).
    let mut r = AutoSloRouter::new(p, BillingPolicy::default()).with_search(Search::Exhaustive);
    // 5 clusters × 20 running: enough for the evaluation to split across threads.
    for i in 0..100u64 {
        let c = &infos[i as usize % 5];
        r.route(i as f64 * 0.1, &q(i, i as f64 * 0.1), std::slice::from_ref(c)).unwrap();
    }
    let key = |cs: Vec<crate::router::Candidate>| cs.into_iter().map(|c| (c.cluster, c.delta_violations, c.delta_cost, c.prediction)).collect::<Vec<_>>();
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let want = key(one.install(|| r.clone().evaluate(10.0, &q(1000, 10.0), &infos)).unwrap());
    // Called from inside a pool, and from outside one (the calling thread claims chunks and spins).
    let inside = key(two.install(|| r.clone().evaluate(10.0, &q(1000, 10.0), &infos)).unwrap());
    let outside = key(r.clone().evaluate(10.0, &q(1000, 10.0), &infos).unwrap());
    assert_eq!(want.len(), 5);
    assert_eq!(want, inside);
    assert_eq!(want, outside);
}

/// A decision from outside any pool (the live router) never queues behind the global pool, which a
/// scaling decision may keep busy: with every global worker blocked, both searches that use other
/// threads still decide, and as they do on one thread.
#[test]
fn decisions_outside_the_pool_do_not_wait_for_the_global_pool() {
    use std::sync::mpsc;
    use std::time::Duration;
    let p = model();
    let q = |id: u64, t: f64, slo: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: (id * 37 % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo };
    let infos: Vec<ClusterInfo> = (0..8).map(|i| info(i, [32, 16][i as usize % 2])).collect();
    let mut r = AutoSloRouter::new(p, BillingPolicy::default());
    for i in 0..256u64 {
        r.route(i as f64 * 0.01, &q(i, i as f64 * 0.01, 1e6), std::slice::from_ref(&infos[i as usize % 8])).unwrap();
    }
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let arrival = q(1000, 3.0, 10.0);
    let want: Vec<_> = one.install(|| r.clone().with_search(Search::Exhaustive).evaluate(3.0, &arrival, &infos)).unwrap().into_iter().map(|c| (c.cluster, c.delta_violations, c.delta_cost)).collect();
    // Block every global worker until the decisions are done.
    let (release, blocked) = mpsc::channel::<()>();
    let blocked = std::sync::Arc::new(std::sync::Mutex::new(blocked));
    let (started, all_started) = mpsc::channel::<()>();
    for _ in 0..rayon::current_num_threads() {
        let (blocked, started) = (blocked.clone(), started.clone());
        rayon::spawn(move || {
            started.send(()).unwrap();
            let _ = blocked.lock().unwrap().recv();
        });
    }
    // Every worker has its job (the first holds the lock, the others wait on it): all are busy.
    for _ in 0..rayon::current_num_threads() {
        all_started.recv_timeout(Duration::from_secs(60)).expect("every global worker started");
    }
    let (done, finished) = mpsc::channel();
    let (r2, infos2) = (r.clone(), infos.clone());
    std::thread::spawn(move || {
        for search in [Search::Auto, Search::Exhaustive, Search::Auto] {
            let got: Vec<_> = r2.clone().with_search(search).evaluate(3.0, &arrival, &infos2).unwrap().into_iter().map(|c| (c.cluster, c.delta_violations, c.delta_cost)).collect();
            done.send((search, got)).unwrap();
        }
    });
    let results: Vec<_> = (0..3).map(|_| finished.recv_timeout(Duration::from_secs(120)).expect("a decision waited for the blocked global pool")).collect();
    for _ in 0..rayon::current_num_threads() {
        let _ = release.send(());
    }
    for (search, got) in results {
        let best = |v: &Vec<(u32, i64, f64)>| v.iter().min_by(|a, b| (a.1, a.2).partial_cmp(&(b.1, b.2)).unwrap()).map(|c| c.0);
        assert_eq!(best(&got), best(&want), "{search:?}");
    }
}

#[test]
fn second_key_decides_between_placements_with_equal_violations() {
    let p = model();
    let q = |id: u64, t: f64| Query { id, arrival: t, text: crate::catalog::QueryText { template: (id % 99 + 1) as u16, instance: 1 }, tenant: 0, class: 0, slo: 1e6 };
    let clusters = [info(0, 16), info(1, 16)];
    for (name, key) in [("autoslo", SecondKey::Cost), ("autoslo-latency", SecondKey::Latency)] {
        let mut r = AutoSloRouter::new(p.clone(), BillingPolicy::default()).with_second_key(key);
        assert_eq!(Router::name(&r), name);
        // Cluster 0 busy, cluster 1 idle; no SLO can be missed, so Δ violations tie at 0.
        for i in 0..10u64 {
            r.route(i as f64 * 0.5, &q(i, i as f64 * 0.5), &clusters[..1]).unwrap();
        }
        let chosen = r.route(5.0, &q(100, 5.0), &clusters).unwrap();
        let c = &r.last;
        assert!(c.iter().all(|x| x.delta_violations == 0));
        let want = match key {
            SecondKey::Cost => c.iter().min_by(|a, b| a.delta_cost.total_cmp(&b.delta_cost)).unwrap().cluster,
            SecondKey::Latency => c.iter().min_by(|a, b| a.prediction.total_cmp(&b.prediction)).unwrap().cluster,
        };
        assert_eq!(chosen, want, "{name}");
        if key == SecondKey::Latency {
            assert_eq!(chosen, 1, "the idle cluster is the faster placement");
        }
    }
}

#[test]
fn emulator_and_simulator_bill_by_the_same_rule_on_the_same_schedule() {
    use crate::billing::billed_seconds;
    use crate::control::{Action, RoundRobin, ScheduledAction, ScheduledScaler};
    use crate::trace::{Outcome, Trace};
    // No cluster at first: one spun up at t = 1 s (ready at 301 s), a second at t = 30 s (ready at
    // 330 s). The queries arriving before 301 s wait for the starting clusters, which must not
    // bill before they are ready.
    let p = model();
    let base = base_workload(0.2, 4, &SloTable::paper(2.0).unwrap()).unwrap();
    let shifted: Vec<Query> = base.queries().iter().map(|q| Query { arrival: q.arrival + 5.0, ..*q }).collect();
    let w = crate::workload::Workload::new(shifted, base.tenants().to_vec(), base.classes().to_vec()).unwrap();
    let schedule = || {
        let up = |at| ScheduledAction { at, action: Action::spin_up(16, "scheduled") };
        ScheduledScaler::new(vec![up(1.0), up(30.0)], 1.0).unwrap()
    };
    let emu_cfg = EmulatorConfig { seed: 4, timeout_s: Some(600.0), ..Default::default() };
    let emu = emulate(&w, &[], &mut RoundRobin::default(), &mut schedule(), &emu_cfg).unwrap();
    let sim_cfg = SimulatorConfig { timeout_s: Some(600.0), ..Default::default() };
    let sim = simulate(&p, &w, &[], &mut RoundRobin::default(), &mut schedule(), sim_cfg).unwrap();
    let check = |name: &str, t: &Trace| {
        assert_eq!(t.clusters.len(), 2, "{name}");
        assert!((t.clusters[0].ready_at - 301.0).abs() < 1e-6 && (t.clusters[1].ready_at - 330.0).abs() < 1e-6, "{name}");
        for c in &t.clusters {
            // The same §2 rule over each query's presence once the cluster is ready.
            let iv: Vec<(f64, f64)> = t.rows.iter().filter(|r| r.cluster == Some(c.id)).map(|r| (r.arrival.max(c.ready_at), r.end.max(c.ready_at))).collect();
            let want = billed_seconds(&iv, BillingPolicy::default().minimum_s).unwrap();
            assert!((c.billed_seconds - want).abs() < 1e-6, "{name} cluster {}: billed {} vs rule {want}", c.id, c.billed_seconds);
        }
        // A timed-out query leaves at the timeout.
        for r in t.rows.iter().filter(|r| r.outcome == Outcome::TimedOut) {
            assert!((r.end - r.arrival - 600.0).abs() < 1e-6, "{name}: timed out at {}", r.end - r.arrival);
        }
        assert!(t.rows.iter().any(|r| r.arrival < 301.0), "{name}: some query waited for a starting cluster");
        // Billing never starts before readiness: a cluster's bill is at most its ready-to-end span.
        for c in &t.clusters {
            let last_end = t.rows.iter().filter(|r| r.cluster == Some(c.id)).map(|r| r.end).fold(c.ready_at, f64::max);
            assert!(c.billed_seconds <= (last_end - c.ready_at).max(60.0) + 1e-6, "{name} cluster {}", c.id);
        }
    };
    check("emulator", &emu);
    check("simulator", &sim);
}

/// Branch and bound leaves clusters out but decides exactly as the exhaustive search: the same
/// cluster for every query, so the same trace, under both second keys.
#[test]
fn branch_and_bound_decides_as_the_exhaustive_search() {
    /// Counts the candidates each decision evaluated in full.
    struct Counted(AutoSloRouter, usize);
    impl Router for Counted {
        fn route(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> crate::error::Result<ClusterId> {
            let c = self.0.route(now, query, clusters)?;
            self.1 += self.0.last.len();
            Ok(c)
        }
        fn observe(&mut self, now: f64, e: &crate::control::Event<'_>) {
            self.0.observe(now, e)
        }
        fn name(&self) -> &str {
            self.0.name()
        }
    }
    let p = model();
    let eight = [32, 16, 32, 16, 32, 16, 32, 16];
    for (rate, kappa, clusters, key) in [(0.5, 2.0, &eight[..], SecondKey::Cost), (1.0, 2.0, &[16, 8, 32, 16][..], SecondKey::Latency), (0.2, 4.0, &[16, 16][..], SecondKey::Cost)] {
        let w = base_workload(rate, 2, &SloTable::paper(kappa).unwrap()).unwrap();
        let run = |search: Search| {
            let mut r = Counted(AutoSloRouter::new(p.clone(), BillingPolicy::default()).with_second_key(key).with_search(search), 0);
            let t = emulate(&w, clusters, &mut r, &mut StaticScaler, &EmulatorConfig { seed: 2, ..Default::default() }).unwrap();
            (t.rows.iter().map(|row| (row.query, row.cluster, row.end.to_bits())).collect::<Vec<_>>(), r.1)
        };
        let (full, n_full) = run(Search::Exhaustive);
        let (bnb, n_bnb) = run(Search::BranchAndBound);
        assert_eq!(full, bnb, "rate {rate} {clusters:?} {key:?}");
        assert_eq!(n_full, w.len() * clusters.len());
        assert!(n_bnb < n_full, "branch and bound evaluated every cluster ({n_bnb}) at rate {rate} {clusters:?}");
        eprintln!("rate {rate} {clusters:?} {key:?}: {n_bnb} of {n_full} candidates evaluated in full");
        assert_eq!(run(Search::Auto).0, full);
    }
}

#[test]
fn simulator_cold_start_slows_queries_on_clusters_spun_up_during_the_run() {
    use crate::control::{Action, RoundRobin, ScheduledAction, ScheduledScaler};
    use crate::emulator::ColdStart;
    let p = model();
    let w = base_workload(0.1, 4, &SloTable::paper(2.0).unwrap()).unwrap();
    // The initial cluster drains at once; every query runs on the one spun up at t = 0.
    let schedule = || {
        let acts = vec![ScheduledAction { at: 0.0, action: Action::SpinUp { size: 16, reason: "test" } }, ScheduledAction { at: 0.0, action: Action::TearDown { cluster: 0, reason: "test" } }];
        ScheduledScaler::new(acts, 1.0).unwrap()
    };
    let run = |cold: Option<ColdStart>| {
        let cfg = SimulatorConfig { cold_start: cold, ..Default::default() };
        simulate(&p, &w, &[16], &mut RoundRobin::default(), &mut schedule(), cfg).unwrap()
    };
    let warm = run(None);
    assert_eq!(run(Some(ColdStart { factor: 1.0, duration_s: 300.0 })), warm, "a factor of 1 is no cold start");
    let cold = run(Some(ColdStart { factor: 2.0, duration_s: 1e9 }));
    let exec = |t: &crate::trace::Trace| t.rows.iter().filter(|r| r.cluster == Some(1)).map(|r| r.latency - (r.start.unwrap() - r.arrival)).sum::<f64>();
    assert!(warm.rows.iter().filter(|r| r.cluster == Some(1)).count() > w.len() / 2);
    assert!(exec(&cold) > 1.5 * exec(&warm), "cold {} warm {}", exec(&cold), exec(&warm));
    // Fading: a short cold period changes only queries that start within it.
    let brief = run(Some(ColdStart { factor: 2.0, duration_s: 60.0 }));
    let changed = brief.rows.iter().zip(&warm.rows).filter(|(a, b)| a.latency != b.latency).map(|(a, _)| a.start.unwrap()).fold(f64::INFINITY, f64::min);
    assert!(changed < 300.0 + 60.0, "the first changed query starts at {changed}");
    let bad = SimulatorConfig { cold_start: Some(ColdStart { factor: 0.5, duration_s: 300.0 }), ..Default::default() };
    assert!(WorkloadSimulator::new(&p, &w, &[16], bad).is_err());
}

#[test]
fn simulator_latency_noise_scatters_each_query_around_its_prediction_with_the_same_draw_everywhere() {
    use crate::control::RoundRobin;
    use crate::simulator::LatencyNoise;
    let p = model();
    let w = base_workload(0.02, 2, &SloTable::paper(2.0).unwrap()).unwrap();
    let run = |noise: Option<LatencyNoise>, clusters: &[u32]| {
        let cfg = SimulatorConfig { noise, ..Default::default() };
        simulate(&p, &w, clusters, &mut RoundRobin::default(), &mut StaticScaler, cfg).unwrap()
    };
    let plain = run(None, &[16]);
    assert_eq!(run(Some(LatencyNoise { sigma: 0.0, seed: 1 }), &[16]), plain, "σ = 0 is no noise");
    let noise = LatencyNoise { sigma: 0.5, seed: 1 };
    let noisy = run(Some(noise), &[16]);
    assert_eq!(run(Some(noise), &[16]), noisy, "the same seed gives the same run");
    assert_ne!(run(Some(LatencyNoise { sigma: 0.5, seed: 2 }), &[16]), noisy);
    // Each query's draw depends on its position only: the same in any configuration.
    assert_eq!(noise.factor(7), noise.factor(7));
    assert_ne!(noise.factor(7), noise.factor(8));
    // Around the prediction: ln(noisy / plain) is centred near 0 with a spread near σ (queries that
    // overlap change each other's predictions too, so only roughly).
    let mut ln: Vec<f64> = noisy.rows.iter().zip(&plain.rows).map(|(a, b)| (a.latency / b.latency).ln()).collect();
    ln.sort_by(f64::total_cmp);
    let (median, iqr) = (ln[ln.len() / 2], ln[ln.len() * 3 / 4] - ln[ln.len() / 4]);
    assert!(median.abs() < 0.15, "median ln ratio {median}");
    assert!((0.45..0.9).contains(&iqr), "interquartile range of ln ratios {iqr} (σ = 0.5 gives 0.67)");
    for sigma in [-0.1, f64::NAN, 3.5] {
        let bad = SimulatorConfig { noise: Some(LatencyNoise { sigma, seed: 0 }), ..Default::default() };
        assert!(WorkloadSimulator::new(&p, &w, &[16], bad).is_err(), "σ = {sigma} accepted");
    }
}

#[test]
fn simulator_class_latency_scale_slows_the_listed_classes_only() {
    use crate::control::RoundRobin;
    use crate::simulator::ClassLatencyScale;
    use crate::workload::Workload;
    let p = model();
    let base = base_workload(0.02, 2, &SloTable::paper(2.0).unwrap()).unwrap();
    // Every other query a backfill.
    let qs = base.queries().iter().enumerate().map(|(k, q)| crate::workload::Query { class: (k % 2) as u32, ..*q }).collect();
    let w = Workload::new(qs, base.tenants().to_vec(), vec!["adhoc".into(), "backfill".into()]).unwrap();
    let run = |scale: Option<Vec<(&str, f64)>>| {
        let class_scale = scale.map(|v| ClassLatencyScale::new(v.into_iter().map(|(c, s)| (c.to_string(), s))).unwrap());
        simulate(&p, &w, &[16], &mut RoundRobin::default(), &mut StaticScaler, SimulatorConfig { class_scale, ..Default::default() }).unwrap()
    };
    let plain = run(None);
    assert_eq!(run(Some(vec![("adhoc", 1.0), ("backfill", 1.0)])), plain, "scale 1 is none");
    assert_eq!(run(Some(vec![("report", 3.0)])), plain, "a class the workload does not have changes nothing");
    let scaled = run(Some(vec![("backfill", 2.0)]));
    let median_ratio = |class: u32| {
        let mut r: Vec<f64> = scaled.rows.iter().zip(&plain.rows).filter(|(a, _)| w.queries()[a.query].class == class).map(|(a, b)| a.latency / b.latency).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    // Backfills take twice their predictions; the rest only feel the longer backfills beside them.
    assert!((1.9..2.1).contains(&median_ratio(1)), "backfills ×{}", median_ratio(1));
    assert!((0.99..1.1).contains(&median_ratio(0)), "ad hoc ×{}", median_ratio(0));
    for bad in [vec![("backfill", 0.0)], vec![("backfill", f64::NAN)], vec![("backfill", 25.0)], vec![("backfill", 2.0), ("backfill", 3.0)]] {
        assert!(ClassLatencyScale::new(bad.iter().map(|(c, s)| (c.to_string(), *s))).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn a_simulation_reports_progress_and_stops_when_told() {
    use crate::control::RoundRobin;
    use crate::error::AutoSloError;
    use crate::simulator::simulate_with_progress;
    let p = model();
    let w = base_workload(0.2, 4, &SloTable::paper(2.0).unwrap()).unwrap();
    let mut calls = Vec::new();
    let whole = simulate_with_progress(&p, &w, &[16], &mut RoundRobin::default(), &mut StaticScaler, SimulatorConfig::default(), &mut |done, total| {
        calls.push((done, total));
        true
    })
    .unwrap();
    assert_eq!(whole, simulate(&p, &w, &[16], &mut RoundRobin::default(), &mut StaticScaler, SimulatorConfig::default()).unwrap(), "progress changes nothing");
    assert_eq!(calls.last(), Some(&(w.len(), w.len())));
    assert!(calls.windows(2).all(|c| c[0].0 <= c[1].0));
    let stopped = simulate_with_progress(&p, &w, &[16], &mut RoundRobin::default(), &mut StaticScaler, SimulatorConfig::default(), &mut |_, _| false);
    assert!(matches!(stopped, Err(AutoSloError::Interrupted)));
}
