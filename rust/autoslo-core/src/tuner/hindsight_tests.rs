//! The best plan in hindsight: its cuts are exact, and its runs are the emulator's.

use std::path::PathBuf;

use super::*;
use crate::emulator::{emulate, CutReason};
use crate::predictor::Backend;
use crate::slo::SloTable;
use crate::workload::base_workload;

fn model() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
    Predictor::load(&dir, Backend::Native).unwrap()
}

fn env() -> PlanEnv {
    PlanEnv { emulator: EmulatorConfig { seed: 3, ..Default::default() }, router: RouterOptions { seed: 3, ..Default::default() }, spinup_s: 300.0 }
}

fn unbounded() -> RunBound<'static> {
    RunBound::default()
}

fn small_space() -> HindsightSpace {
    HindsightSpace { fleet_sizes: vec![8, 16, 32], max_fleet_clusters: 2, ..HindsightSpace::default() }
}

#[test]
fn a_plan_runs_as_the_emulator_runs_its_configuration() {
    let p = model();
    let w = base_workload(0.2, 1, &SloTable::paper(2.0).unwrap()).unwrap();
    let e = env();
    let plan = ExecutionConfig { slo_headroom: Some(1.25), ..ExecutionConfig::new(vec![8]) }.with_spinup(600.0, 16);
    let Bounded::Finished(got) = emulate_plan(&w, &plan, &p, &e, &unbounded()).unwrap() else { panic!("no bound, no cut") };
    let mut router = router_by_name("autoslo", Some(&p), RouterOptions { slo_headroom: 1.25, ..e.router }).unwrap();
    let mut scaler = plan.scaler(300.0).unwrap();
    let want = emulate(&w, &[8], router.as_mut(), scaler.as_mut(), &e.emulator).unwrap();
    assert_eq!(got.rows, want.rows);
    assert_eq!(got.clusters, want.clusters);
}

#[test]
fn a_cut_is_a_lower_bound_of_the_finished_run() {
    let p = model();
    let w = base_workload(0.3, 2, &SloTable::paper(2.0).unwrap()).unwrap();
    let e = env();
    let fixed = ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(vec![8]) };
    let Bounded::Finished(full) = emulate_plan(&w, &fixed, &p, &e, &unbounded()).unwrap() else { panic!() };
    let o = finished(0, &w, &full, 0.0);
    assert!(o.violations > 20, "one 8 RPU cluster at λ = 0.3 runs late: {o:?}");
    // Allowed one late query fewer than it has: cut, with no more than it had.
    let bound = RunBound { violations: Some(o.violations / 2), ..RunBound::default() };
    let Bounded::Cut(cut) = emulate_plan(&w, &fixed, &p, &e, &bound).unwrap() else { panic!("over the limit") };
    assert_eq!(cut.reason, CutReason::Violations);
    assert!(cut.violations > o.violations / 2 && cut.violations <= o.violations, "{cut:?}");
    assert!(cut.cost <= o.cost && cut.arrived < w.len());
    // Allowed what it has: it finishes.
    let bound = RunBound { violations: Some(o.violations), ..RunBound::default() };
    assert!(matches!(emulate_plan(&w, &fixed, &p, &e, &bound).unwrap(), Bounded::Finished(_)));
    // A cost below its bill cuts it, with the bill so far above the limit and below the total.
    let limit = AtomicU64::new((o.cost / 2.0).to_bits());
    let bound = RunBound { cost: Some(&limit), ..RunBound::default() };
    let Bounded::Cut(cut) = emulate_plan(&w, &fixed, &p, &e, &bound).unwrap() else { panic!("dearer than the limit") };
    assert_eq!(cut.reason, CutReason::Cost);
    assert!(cut.cost > o.cost / 2.0 && cut.cost <= o.cost, "{cut:?} {o:?}");
    // Per tenant: a limit of 0 late queries per tenant cuts at the first late one.
    let tenants = vec![0; w.tenants().len()];
    let bound = RunBound { tenant_violations: Some(tenants), ..RunBound::default() };
    let Bounded::Cut(cut) = emulate_plan(&w, &fixed, &p, &e, &bound).unwrap() else { panic!() };
    assert_eq!((cut.reason, cut.violations), (CutReason::TenantViolations, 1));
}

#[test]
fn the_search_returns_the_cheapest_plan_that_meets_tau_as_running_every_plan_would() {
    let p = model();
    let w = base_workload(0.2, 4, &SloTable::paper(4.0).unwrap()).unwrap();
    let e = env();
    let given = ExecutionConfig::new(vec![16]);
    let params = HindsightParams { target: Target { tau: 0.1, scope: TargetScope::Fleet }, plans: 40, refine: 0.25, seed: 9, space: small_space() };
    let control = BatchControl::new();
    let r = hindsight(&w, std::slice::from_ref(&given), &p, &e, &params, &RayonPlans, &control).unwrap();
    assert_eq!(r.plans.len(), 40);
    assert_eq!(r.origin[0], "given");
    assert_eq!(r.origin.iter().filter(|o| *o == "fleet").count(), 9, "1 or 2 of 3 sizes: 3 + 6 fleets");
    assert!(r.origin.iter().any(|o| o == "refine"));
    let best = r.best_outcome().expect("some plan meets τ = 10 %");
    // Every plan run to the end: the same best.
    let all: Vec<PlanOutcome> = r
        .plans
        .iter()
        .enumerate()
        .map(|(i, plan)| {
            let Bounded::Finished(t) = emulate_plan(&w, plan, &p, &e, &unbounded()).unwrap() else { unreachable!() };
            finished(i, &w, &t, 0.0)
        })
        .collect();
    let want = all.iter().filter(|o| o.meets(0.1, TargetScope::Fleet)).min_by(|a, b| a.cost.total_cmp(&b.cost).then(a.index.cmp(&b.index))).unwrap();
    assert_eq!(best.index, want.index);
    assert_eq!((best.violations, best.cost), (want.violations, want.cost));
    // No cheaper plan that meets τ was cut; each cut bound is below the finished figures.
    for (o, full) in r.outcomes.iter().zip(&all) {
        assert_eq!(o.index, full.index);
        if o.finished() {
            assert_eq!((o.violations, o.cost), (full.violations, full.cost));
        } else {
            assert!(o.violations <= full.violations && o.cost <= full.cost + 1e-9, "{o:?} {full:?}");
            assert!(!full.meets(0.1, TargetScope::Fleet) || full.cost > best.cost - 1e-9, "a plan that could have won was cut: {full:?}");
        }
    }
    assert!(r.outcomes.iter().any(|o| !o.finished()), "the bound cut something");
    // The given plan's regret is never negative.
    assert!(best.cost <= r.outcomes[0].cost || !r.outcomes[0].meets(0.1, TargetScope::Fleet));
    // Seeded: the same search, the same plans and the same best.
    let again = hindsight(&w, std::slice::from_ref(&given), &p, &e, &params, &RayonPlans, &control).unwrap();
    assert_eq!(again.plans, r.plans);
    assert_eq!(again.best, r.best);
}

#[test]
fn per_tenant_the_best_plan_keeps_every_tenant_within_tau() {
    let p = model();
    let w = base_workload(0.2, 5, &SloTable::paper(2.0).unwrap()).unwrap();
    let params = HindsightParams { target: Target { tau: 0.1, scope: TargetScope::EveryTenant }, plans: 20, refine: 0.0, seed: 1, space: small_space() };
    let r = hindsight(&w, &[], &p, &env(), &params, &RayonPlans, &BatchControl::new()).unwrap();
    if let Some(b) = r.best_outcome() {
        assert!(b.tenants.iter().all(|(_, q, v)| *v as f64 <= 0.1 * *q as f64), "{b:?}");
    }
}

#[test]
fn bad_settings_are_refused_with_their_name() {
    let p = model();
    let w = base_workload(0.1, 1, &SloTable::paper(2.0).unwrap()).unwrap();
    let c = BatchControl::new();
    let bad_tau = HindsightParams { target: Target { tau: 1.5, scope: TargetScope::Fleet }, ..HindsightParams::default() };
    assert!(hindsight(&w, &[], &p, &env(), &bad_tau, &RayonPlans, &c).unwrap_err().to_string().contains("tau"));
    let mut no_idle = HindsightSpace::default();
    no_idle.autoscaled.t_idle_s.clear();
    let empty = HindsightParams { space: no_idle, ..HindsightParams::default() };
    assert!(hindsight(&w, &[], &p, &env(), &empty, &RayonPlans, &c).unwrap_err().to_string().contains("autoscaled.t_idle_s"));
    let bad_size = HindsightParams { space: HindsightSpace { fleet_sizes: vec![12], ..HindsightSpace::default() }, ..HindsightParams::default() };
    assert!(hindsight(&w, &[], &p, &env(), &bad_size, &RayonPlans, &c).is_err());
}

#[test]
fn fixed_fleets_are_every_multiset_once() {
    let s = HindsightSpace::default();
    let f = s.fixed_fleets();
    assert_eq!(f.len(), 4 + 10 + 20 + 35);
    let keys: BTreeSet<Vec<u32>> = f.iter().map(|c| c.initial_clusters.clone()).collect();
    assert_eq!(keys.len(), f.len());
    assert!(f.iter().all(|c| c.autoscaler.is_none() && c.initial_clusters.windows(2).all(|p| p[0] >= p[1])));
    assert_eq!(f[0].initial_clusters, vec![8], "smallest first");
}
