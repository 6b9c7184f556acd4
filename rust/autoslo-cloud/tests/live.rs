//! Live mode end to end on this machine: the local endpoint's PostgreSQL-backed workgroups, the
//! cluster manager over real HTTP, the control plane routing and scaling, SQL over the wire.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use autoslo_cloud::live::{run_live, LiveRun, LiveSettings};
use autoslo_cloud::local_endpoint::{EndpointOptions, LocalEndpoint};
use autoslo_cloud::manager::{ManagerOptions, RedshiftServerless};
use autoslo_cloud::CloudError;
use autoslo_core::autoscaler::snowflake::{Policy, SnowflakeScaler};
use autoslo_core::catalog::QueryText;
use autoslo_core::control::RoundRobin;
use autoslo_core::trace::Outcome;
use autoslo_core::tuner::BatchControl;
use autoslo_core::workload::{Query, Workload};

fn workload(n: usize, every_s: f64) -> Workload {
    burst_then_trickle(n, every_s, 0, 0.0)
}

/// `burst` queries `every_s` apart, then `trickle` more `trickle_every_s` apart.
fn burst_then_trickle(burst: usize, every_s: f64, trickle: usize, trickle_every_s: f64) -> Workload {
    let end = burst.saturating_sub(1) as f64 * every_s;
    let arrival = |i: usize| if i < burst { i as f64 * every_s } else { end + (i + 1 - burst) as f64 * trickle_every_s };
    let qs = (0..burst + trickle).map(|i| Query { id: i as u64, arrival: arrival(i), text: QueryText { template: 1 + (i % 2) as u16, instance: 1 }, tenant: 0, class: 0, slo: 60.0 }).collect();
    Workload::new(qs, vec!["t".into()], vec!["adhoc".into()]).unwrap()
}

fn sql(sleep_s: f64) -> HashMap<u16, String> {
    HashMap::from([(1, format!("SELECT pg_sleep({sleep_s})")), (2, format!("SELECT count(*) FROM generate_series(1, 1000), pg_sleep({sleep_s})"))])
}

fn manager(ep: &LocalEndpoint) -> RedshiftServerless {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(RedshiftServerless::connect(&ManagerOptions { endpoint: Some(ep.url()), initial_backoff: Duration::from_millis(5), ..Default::default() })).unwrap()
}

/// Workgroups come up in well under a second on an idle machine, but a server's `initdb` and
/// start can take several on a loaded one (the tests run in parallel): the waits are generous,
/// except where a test wants a stuck workgroup given up soon (`create_timeout_s` there).
fn settings(prefix: &str) -> LiveSettings {
    LiveSettings { name_prefix: prefix.into(), tick_s: 0.1, expected_spinup_s: 0.5, create_timeout_s: 30.0, initial_timeout_s: Some(120.0), delete_timeout_s: 30.0, timeout_s: Some(30.0), ..Default::default() }
}

/// On another thread: once `n` workgroups are AVAILABLE (the run's initial clusters), wait
/// `after_ms` more and kill the server behind `workgroup`.
fn kill_later(ep: &Arc<LocalEndpoint>, n: usize, after_ms: u64, workgroup: &'static str) -> std::thread::JoinHandle<()> {
    let ep = Arc::clone(ep);
    std::thread::spawn(move || {
        for _ in 0..4000 {
            if ep.workgroups().iter().filter(|w| w.1 == "AVAILABLE").count() == n {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(after_ms));
        ep.kill_server(workgroup).unwrap();
    })
}

fn one_row_each(run: &LiveRun, n: usize) {
    assert_eq!(run.trace.rows.len(), n);
    for (i, r) in run.trace.rows.iter().enumerate() {
        assert_eq!(r.query, i, "rows in workload order, one per query");
    }
}

#[test]
fn a_live_run_scales_up_and_every_query_runs_as_sql() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    // Snowflake standard: more than 2 running per cluster starts another (up to 3).
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 3, 2).unwrap());
    // A burst (2 s) that starts the third cluster, then 12 s more of arrivals: the new
    // workgroup's server (initdb and start, a few seconds on a loaded machine) is up while
    // queries still arrive, so the test waits for the scale-up instead of racing it.
    let w = burst_then_trickle(40, 0.05, 48, 0.25);
    let n = w.len();
    let run = run_live(manager(&ep), &w, &sql(0.3), Box::new(RoundRobin::default()), scaler, &[8, 8], settings("up"), Arc::new(BatchControl::new())).unwrap();
    one_row_each(&run, n);
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "{:?}", run.errors);
    assert!(run.trace.rows.iter().all(|r| r.latency >= 0.3 && r.start.unwrap() >= r.arrival));
    let c = &run.trace.clusters;
    assert!(c.len() >= 3, "a forced scale-up: {c:?}");
    assert_eq!((c[0].spinup_reason, c[2].spinup_reason), ("initial", "snowflake-start"));
    assert!(c[2].ready_at > c[2].requested_at);
    let last = w.queries().last().unwrap().arrival;
    assert!(c[2].ready_at < last - 2.0, "the new cluster came up at {:.2} s, too near the last arrival ({last:.2} s) to show it takes queries", c[2].ready_at);
    assert!(run.trace.rows.iter().any(|r| r.cluster == Some(2)), "the new cluster took queries");
    let billed: i64 = c.iter().map(|x| x.cost_micro_usd()).sum();
    assert!(billed > 0);
    assert_eq!(run.trace.rows.iter().map(|r| r.cost_micro_usd).sum::<i64>(), billed, "attributed cost sums to the bill");
    // Deleted at the end: wait for the endpoint to say so (a hang guard of 30 s, not a pause).
    let gone = |ep: &LocalEndpoint| ep.workgroups().iter().all(|w| w.1 == "DELETING");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !gone(&ep) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone(&ep), "{:?}", ep.workgroups());
}

#[test]
fn a_server_killed_mid_query_is_retried_once_on_another_cluster() {
    let ep = Arc::new(LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap());
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 3, 3, 100).unwrap());
    let w = workload(60, 0.05);
    // The run creates its three workgroups first (a second or so), then replays 3 s.
    let killer = kill_later(&ep, 3, 1200, "kill-0");
    let run = run_live(manager(&ep), &w, &sql(0.4), Box::new(RoundRobin::default()), scaler, &[8, 8, 8], settings("kill"), Arc::new(BatchControl::new())).unwrap();
    killer.join().unwrap();
    one_row_each(&run, 60);
    let retried: Vec<usize> = (0..60).filter(|&i| run.attempts[i] == 2).collect();
    assert!(!retried.is_empty(), "queries on the killed server were retried");
    for &i in &retried {
        let r = &run.trace.rows[i];
        assert_eq!(r.outcome, Outcome::Completed, "query {i}: {:?}", run.errors[i]);
        assert_ne!(r.cluster, Some(0), "retried elsewhere");
    }
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "nothing lost: {:?}", run.errors);
    assert_eq!(run.trace.clusters[0].teardown_reason, Some("failed"));
    assert!(run.events.iter().any(|e| e.kind == "failed" && e.cluster == Some(0)));
    assert!(run.trace.cluster_events().iter().any(|e| e.kind == "failed" && e.cluster == 0));
    assert!(run.trace.rows.iter().skip(40).all(|r| r.cluster != Some(0)), "no query goes to the lost cluster after it is found lost");
}

#[test]
fn a_workgroup_that_never_becomes_available_is_given_up_and_its_queries_go_elsewhere() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    ep.never_available("stuck-1");
    // A spinup right away (one running query is enough), to a workgroup that stays CREATING.
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 2, 1).unwrap());
    let w = workload(30, 0.1);
    let run = run_live(manager(&ep), &w, &sql(0.2), Box::new(RoundRobin::default()), scaler, &[8], LiveSettings { expected_spinup_s: 0.0, create_timeout_s: 1.5, ..settings("stuck") }, Arc::new(BatchControl::new())).unwrap();
    one_row_each(&run, 30);
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "{:?}", run.errors);
    assert!(run.trace.rows.iter().all(|r| r.cluster == Some(0)), "only the available cluster ran queries");
    // The router waits for the manager's word that a workgroup is up (told to expect it at once),
    // so no query was ever sent to the stuck one: each ran at its first attempt.
    assert!(run.attempts.iter().all(|&a| a == 1), "{:?}", run.attempts);
    assert_eq!(run.trace.clusters[1].teardown_reason, Some("failed"));

    // The initial clusters must come up: otherwise the run stops with the wait's error.
    ep.never_available("dead-0");
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 1, 8).unwrap());
    let err = run_live(manager(&ep), &w, &sql(0.0), Box::new(RoundRobin::default()), scaler, &[8], LiveSettings { initial_timeout_s: Some(2.0), ..settings("dead") }, Arc::new(BatchControl::new())).unwrap_err();
    assert!(matches!(err, CloudError::WaitTimeout { .. }), "{err}");
}

#[test]
fn bad_input_is_refused_before_any_cluster_is_made() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let w = workload(4, 0.1);
    let scaler = || Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 1, 8).unwrap());
    let only_one = HashMap::from([(1u16, "SELECT 1".to_string())]);
    let e = run_live(manager(&ep), &w, &only_one, Box::new(RoundRobin::default()), scaler(), &[8], settings("bad"), Arc::new(BatchControl::new())).unwrap_err();
    assert!(matches!(&e, CloudError::MissingSql(t) if t == &[2]), "{e}");
    let e = run_live(manager(&ep), &w, &sql(0.0), Box::new(RoundRobin::default()), scaler(), &[8], LiveSettings { time_scale: 0.0, ..settings("bad") }, Arc::new(BatchControl::new())).unwrap_err();
    assert!(e.to_string().contains("time scale"), "{e}");
    assert!(ep.workgroups().is_empty());
}

#[test]
fn a_slow_cluster_slows_its_own_queries_and_loses_none() {
    let ep = Arc::new(LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap());
    let slower = {
        let ep = Arc::clone(&ep);
        std::thread::spawn(move || {
            for _ in 0..2000 {
                if ep.slow_down("slow-1", 0.25).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            false
        })
    };
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 2, 2, 100).unwrap());
    let w = workload(30, 0.1);
    let run = run_live(manager(&ep), &w, &sql(0.05), Box::new(RoundRobin::default()), scaler, &[8, 8], settings("slow"), Arc::new(BatchControl::new())).unwrap();
    assert!(slower.join().unwrap());
    one_row_each(&run, 30);
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "{:?}", run.errors);
    let mean = |c| {
        let l: Vec<f64> = run.trace.rows.iter().filter(|r| r.cluster == Some(c)).map(|r| r.latency).collect();
        l.iter().sum::<f64>() / l.len() as f64
    };
    assert!(mean(1) > mean(0) + 0.2, "slow cluster {:.3} s vs {:.3} s", mean(1), mean(0));
    assert!(ep.slow_down("nope", 0.1).is_err() && ep.slow_down("slow-0", -1.0).is_err());
}

#[test]
fn after_a_cluster_is_lost_the_autoscaler_replaces_it() {
    let ep = Arc::new(LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap());
    let killer = kill_later(&ep, 2, 1000, "rec-0");
    // Snowflake standard, at most two clusters: nothing starts while both are up; once one is
    // lost, the load on the other (more than 2 running) starts a replacement.
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 2, 2).unwrap());
    // A 3 s burst (the loss and the replacement's start fall in it), then 12 s more of arrivals,
    // so that the replacement's server, which takes seconds on a loaded machine, is up while
    // queries still arrive.
    let w = burst_then_trickle(60, 0.05, 48, 0.25);
    let n = w.len();
    let run = run_live(manager(&ep), &w, &sql(0.3), Box::new(RoundRobin::default()), scaler, &[8, 8], settings("rec"), Arc::new(BatchControl::new())).unwrap();
    killer.join().unwrap();
    one_row_each(&run, n);
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "{:?}", run.errors);
    let failed_at = run.events.iter().find(|e| e.kind == "failed").map(|e| e.time).expect("cluster 0 lost");
    let spinup = run.events.iter().find(|e| e.kind == "spinup").expect("a replacement");
    assert!(spinup.time >= failed_at && spinup.cluster == Some(2), "{:?}", run.events);
    let (ready, last) = (run.trace.clusters[2].ready_at, w.queries().last().unwrap().arrival);
    assert!(ready < last - 2.0, "the replacement came up at {ready:.2} s, too near the last arrival ({last:.2} s) to show it takes queries");
    assert!(run.trace.rows.iter().any(|r| r.cluster == Some(2)), "the replacement took queries");
}

/// A run where Snowflake standard starts a third cluster once more than 2 queries run per
/// cluster, with the router told to expect new workgroups `expected_spinup_s` after the request.
fn scale_up_run(prefix: &str, expected_spinup_s: f64) -> LiveRun {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 3, 2).unwrap());
    let w = workload(80, 0.05);
    let run = run_live(manager(&ep), &w, &sql(0.3), Box::new(RoundRobin::default()), scaler, &[8, 8], LiveSettings { expected_spinup_s, ..settings(prefix) }, Arc::new(BatchControl::new())).unwrap();
    one_row_each(&run, 80);
    assert!(run.trace.rows.iter().all(|r| r.outcome == Outcome::Completed), "{:?}", run.errors);
    assert!(run.trace.clusters.len() >= 3, "a forced scale-up: {:?}", run.trace.clusters);
    run
}

#[test]
fn a_new_workgroup_takes_queries_once_available_however_early_or_late_against_the_estimate() {
    // Earlier than the estimate: the workgroup is up in about a second, the router was told 30 s.
    // It takes queries from when it is up (without the manager's word, not before 30 s, after
    // the last arrival at 4 s).
    let run = scale_up_run("early", 30.0);
    let c = &run.trace.clusters[2];
    assert!(c.ready_at < c.requested_at + 30.0, "{c:?}");
    let on_new: Vec<_> = run.trace.rows.iter().filter(|r| r.cluster == Some(2)).collect();
    assert!(!on_new.is_empty(), "the new cluster took queries before its estimated ready time");
    // Later than the estimate (told 0 s): nothing is routed to it before it is up, so no query
    // waits for a workgroup while the others have room.
    let run = scale_up_run("late", 0.0);
    let c = &run.trace.clusters[2];
    assert!(c.ready_at > c.requested_at, "{c:?}");
    for r in run.trace.rows.iter().filter(|r| r.cluster == Some(2)) {
        assert!(r.arrival >= c.ready_at, "query {} arrived at {:.3} s, before cluster 2 was up at {:.3} s", r.query, r.arrival, c.ready_at);
    }
}
