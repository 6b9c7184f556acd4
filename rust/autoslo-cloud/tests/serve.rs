//! Serving end to end on this machine: a long-running control plane over the local endpoint's
//! PostgreSQL-backed workgroups tells the client where each query goes; the client runs the SQL.

use std::time::{Duration, Instant};

use autoslo_cloud::live::LiveSettings;
use autoslo_cloud::local_endpoint::{EndpointOptions, LocalEndpoint};
use autoslo_cloud::manager::{ManagerOptions, RedshiftServerless};
use autoslo_cloud::serve::{Outcome, Route, Service};
use autoslo_cloud::CloudError;
use autoslo_core::autoscaler::snowflake::{Policy, SnowflakeScaler};
use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::control::RoundRobin;
use autoslo_core::tenancy::SloPolicy;

fn manager(ep: &LocalEndpoint) -> RedshiftServerless {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(RedshiftServerless::connect(&ManagerOptions { endpoint: Some(ep.url()), initial_backoff: Duration::from_millis(5), ..Default::default() })).unwrap()
}

/// The billing minimum of these tests (s): a query's cost is final, and it is logged, at most
/// this long after its cluster's busy period began.
const MINIMUM_S: f64 = 0.5;

fn settings(prefix: &str) -> LiveSettings {
    let billing = BillingPolicy { minimum_s: MINIMUM_S, ..Default::default() };
    LiveSettings { name_prefix: prefix.into(), tick_s: 0.1, expected_spinup_s: 0.5, create_timeout_s: 60.0, initial_timeout_s: Some(120.0), delete_timeout_s: 30.0, billing, ..Default::default() }
}

/// Wait until every ended query's cost is final (its cluster's billing minimum ran out).
fn until_priced() {
    std::thread::sleep(Duration::from_secs_f64(MINIMUM_S + 0.2));
}

/// Attributed costs sum to the bill (dollars, to rounding).
fn assert_costs_sum_to_the_bill(costs: impl IntoIterator<Item = f64>, bill: f64) {
    let attributed: f64 = costs.into_iter().sum();
    assert!(bill > 0.0 && (attributed - bill).abs() <= 1e-9 * bill, "attributed {attributed} billed {bill}");
}

/// Run `sql` on the routed workgroup, as a client would.
fn run_sql(r: &Route, sql: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let conn = format!("host={} port={} user=autoslo dbname=postgres", r.address, r.port);
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
    })
}

const TEXT: QueryText = QueryText { template: 3, instance: 1 };

#[test]
fn a_service_routes_to_workgroups_the_client_runs_sql_on_and_scales_them() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    // Snowflake standard: more than 2 running per cluster starts another (up to 2 clusters).
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 2, 2).unwrap());
    let policy: SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}"#).unwrap();
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), scaler, &[8], settings("srv"), Some(policy)).unwrap();
    let first = svc.route(1, TEXT, "acme", "dashboard", None).unwrap();
    assert_eq!((first.cluster, first.size, first.workgroup.as_str()), (0, 8, "srv-0"));
    assert_eq!(run_sql(&first, "SELECT count(*) FROM generate_series(1, 42)"), 42, "a real server behind the endpoint");
    // Refused: no SLO from the policy or the caller, a query routed twice, an unknown completion.
    assert!(svc.route(2, TEXT, "acme", "adhoc", None).unwrap_err().to_string().contains("no rule of the SLO policy covers"));
    assert!(svc.route(1, TEXT, "acme", "dashboard", None).unwrap_err().to_string().contains("already routed"));
    assert!(svc.complete(99, false).unwrap_err().to_string().contains("not routed"));
    // Four running on one cluster: the scaler adds a workgroup, and queries go to it once it is up.
    for q in 2..=4 {
        svc.route(q, TEXT, "acme", "adhoc", Some(60.0)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !svc.clusters().iter().any(|c| c.cluster == 1 && c.state == "available") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let clusters = svc.clusters();
    assert_eq!(clusters.len(), 2, "{clusters:?}");
    assert_eq!((clusters[0].running, clusters[1].workgroup.as_str()), (4, "srv-1"));
    assert!(svc.events().iter().any(|e| e.kind == "spinup" && e.reason == "snowflake-start"));
    let mut on_new = None;
    for q in 5..=12 {
        let r = svc.route(q, TEXT, "acme", "adhoc", Some(60.0)).unwrap();
        if r.cluster == 1 {
            on_new = Some(r);
        }
    }
    let on_new = on_new.expect("round robin reaches the new cluster");
    assert_eq!(run_sql(&on_new, "SELECT 7::bigint"), 7);
    for q in 1..=12 {
        svc.complete(q, false).unwrap();
    }
    assert!(svc.clusters().iter().all(|c| c.running == 0));
    // The client finds cluster 1 dead: it leaves the router, and its workgroup is deleted.
    svc.lost(1, "connection refused").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while svc.clusters()[1].state != "deleted" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(svc.clusters()[1].state, "deleted");
    for q in 20..24 {
        assert_eq!(svc.route(q, TEXT, "acme", "dashboard", None).unwrap().cluster, 0, "only the live cluster");
        svc.complete(q, false).unwrap();
    }
    assert!(svc.lost(9, "x").is_err());
    // What it served is kept: 16 queries, each once, in the log and the totals per tenant × class,
    // each with its cost once its cluster's billing minimum ran out.
    until_priced();
    let log = svc.take_served();
    let mut ids: Vec<u64> = log.iter().map(|q| q.query_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=12).chain(20..24).collect::<Vec<u64>>());
    assert!(log.iter().all(|q| q.outcome == Outcome::Completed && q.cluster.is_some() && q.latency() >= 0.0 && q.tenant == "acme"));
    assert!(log.iter().filter(|q| q.class == "dashboard").all(|q| q.slo == 5.0), "the policy's deadline");
    assert!(log.iter().filter(|q| q.class == "adhoc").all(|q| q.slo == 60.0), "the caller's SLO");
    assert!(svc.take_served().is_empty(), "taken once");
    let totals = svc.totals();
    assert_eq!(totals.iter().map(|t| (t.class.as_str(), t.routed, t.running(), t.met + t.late)).collect::<Vec<_>>(), vec![("adhoc", 11, 0, 11), ("dashboard", 5, 0, 5)]);
    // Billed while it ran queries, at least the minimum once, never more than the time since.
    let now = svc.now();
    for c in svc.clusters() {
        assert!(c.billed_s > 0.0 && c.billed_s <= now + 1e-9, "{c:?} at {now}");
        assert!((c.cost - c.billed_s / 3600.0 * f64::from(c.size) * 0.375).abs() < 1e-9, "{c:?}");
    }
    let before: f64 = svc.clusters().iter().map(|c| c.cost).sum();
    let total = svc.cost();
    assert!(total >= before && total < before + 0.01, "a bill only grows, here within its minimum: {before} then {total}");
    // A query still running at the stop is cancelled.
    svc.route(25, TEXT, "acme", "dashboard", None).unwrap();
    // Stopped: nothing more is routed, and every workgroup is deleted.
    svc.stop();
    let left = svc.take_served();
    assert_eq!(left.iter().map(|q| (q.query_id, q.outcome)).collect::<Vec<_>>(), vec![(25, Outcome::Cancelled)]);
    // Stopped, the bills are final: every busy period at least the minimum, and the queries'
    // costs sum to them. (A cluster the scaler added after the loss may have run nothing.)
    let ran: std::collections::BTreeSet<u32> = log.iter().chain(&left).filter_map(|q| q.cluster.map(|c| c.0)).collect();
    assert!(ran.len() >= 2 && svc.clusters().iter().all(|c| c.billed_s >= MINIMUM_S - 1e-9 || (c.billed_s == 0.0 && !ran.contains(&c.cluster))), "{:?}", svc.clusters());
    assert!(log.iter().chain(&left).all(|q| q.cost > 0.0), "each ran and paid");
    assert_costs_sum_to_the_bill(log.iter().chain(&left).map(|q| q.cost), svc.cost());
    assert_costs_sum_to_the_bill(svc.totals().iter().map(|t| t.cost), svc.cost());
    assert!(matches!(svc.route(30, TEXT, "acme", "dashboard", None), Err(CloudError::Stopped)));
    std::thread::sleep(Duration::from_millis(300));
    assert!(ep.workgroups().iter().all(|w| w.1 == "DELETING"), "{:?}", ep.workgroups());
}

#[test]
fn bad_settings_are_refused_before_any_workgroup_is_made() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let scaler = || Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 2, 2).unwrap());
    assert!(Service::start(manager(&ep), Box::new(RoundRobin::default()), scaler(), &[], settings("bad"), None).is_err());
    let bad = LiveSettings { name_prefix: "Bad_Name".into(), ..settings("bad") };
    assert!(Service::start(manager(&ep), Box::new(RoundRobin::default()), scaler(), &[8], bad, None).is_err());
    assert!(ep.workgroups().is_empty());
}

#[test]
fn a_query_the_client_never_completes_times_out_and_frees_its_cluster() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 1, 2).unwrap());
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), scaler, &[8], LiveSettings { timeout_s: Some(0.5), delete_timeout_s: 1.0, ..settings("stale") }, None).unwrap();
    svc.route(1, TEXT, "acme", "adhoc", Some(60.0)).unwrap();
    svc.route(2, TEXT, "acme", "adhoc", Some(60.0)).unwrap();
    svc.complete(2, false).unwrap();
    assert_eq!(svc.clusters()[0].running, 1);
    let deadline = Instant::now() + Duration::from_secs(60); // a hang guard: the loop ends on the state
    while svc.clusters()[0].running > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(svc.clusters()[0].running, 0, "timed out after 0.5 s");
    assert!(svc.complete(1, false).unwrap_err().to_string().contains("not routed"));
    until_priced();
    let log = svc.take_served();
    assert_eq!(log.iter().map(|q| (q.query_id, q.outcome)).collect::<Vec<_>>(), vec![(2, Outcome::Completed), (1, Outcome::TimedOut)]);
    assert!(log[1].latency() > 0.5, "timed out after timeout_s");
    let t = &svc.totals()[0];
    assert_eq!((t.routed, t.running(), t.met, t.timed_out, t.violation_rate()), (2, 0, 1, 1, Some(0.5)));
    // Off, nothing more is logged; the totals still count.
    svc.keep_log(false);
    svc.route(3, TEXT, "acme", "adhoc", Some(60.0)).unwrap();
    svc.complete(3, false).unwrap();
    assert!(svc.take_served().is_empty());
    assert_eq!(svc.totals()[0].met, 2);
    svc.stop();
}

#[test]
fn every_routed_query_ends_exactly_once_in_the_log_under_concurrent_clients_and_timeouts() {
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(8), 1, 1, 2).unwrap());
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), scaler, &[8, 8], LiveSettings { timeout_s: Some(0.3), delete_timeout_s: 1.0, ..settings("many") }, None).unwrap();
    // Four clients; each forgets every fifth query (it times out), the others complete at once or
    // after up to 0.4 s (some after their timeout: that completion is refused).
    let completed: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let svc = &svc;
                s.spawn(move || {
                    let mut ok = Vec::new();
                    for i in 0..50u64 {
                        let q = t * 1000 + i;
                        svc.route(q, TEXT, &format!("tenant-{t}"), "adhoc", Some(60.0)).unwrap();
                        if i % 5 == 4 {
                            continue;
                        }
                        std::thread::sleep(Duration::from_millis(if i % 3 == 0 { (q * 7919) % 450 } else { 0 }));
                        if svc.complete(q, false).is_ok() {
                            ok.push(q);
                        }
                    }
                    ok
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let deadline = Instant::now() + Duration::from_secs(60); // a hang guard: the loop ends on the state
    while svc.clusters().iter().any(|c| c.running > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    svc.stop();
    let log = svc.take_served();
    let mut ids: Vec<u64> = log.iter().map(|q| q.query_id).collect();
    ids.sort_unstable();
    let routed: Vec<u64> = (0..4u64).flat_map(|t| (0..50).map(move |i| t * 1000 + i)).collect();
    assert_eq!(ids, routed, "each routed query once");
    let mut done: Vec<u64> = completed.concat();
    done.sort_unstable();
    assert!(done.len() > 100 && done.len() < 160, "some completions came after the timeout: {} of 160 accepted", done.len());
    let mut logged_done: Vec<u64> = log.iter().filter(|q| q.outcome == Outcome::Completed).map(|q| q.query_id).collect();
    logged_done.sort_unstable();
    assert_eq!(logged_done, done, "completed exactly when the completion was accepted");
    assert!(log.iter().all(|q| matches!(q.outcome, Outcome::Completed | Outcome::TimedOut)));
    assert!(log.iter().filter(|q| q.outcome == Outcome::TimedOut).all(|q| q.latency() > 0.3));
    assert!(log.iter().filter(|q| q.query_id % 5 == 4).all(|q| q.outcome == Outcome::TimedOut), "forgotten ones time out");
    let totals = svc.totals();
    assert_eq!(totals.len(), 4);
    for t in &totals {
        assert_eq!((t.routed, t.running(), t.ended(), t.cancelled, t.failed), (50, 0, 50, 0, 0), "{t:?}");
    }
    assert_eq!(totals.iter().map(|t| t.met + t.late).sum::<u64>() as usize, done.len());
    assert!(svc.clusters().iter().all(|c| c.running == 0 && c.billed_s > 0.0));
    // Each cluster's bill is split over the queries it ran: per query and per tenant, the
    // costs sum to the bill.
    assert!(log.iter().all(|q| q.cost >= 0.0 && q.cluster.is_some()));
    assert_costs_sum_to_the_bill(log.iter().map(|q| q.cost), svc.cost());
    assert_costs_sum_to_the_bill(totals.iter().map(|t| t.cost), svc.cost());
}

#[test]
fn a_new_days_plan_takes_over_without_dropping_a_workgroup() {
    use autoslo_core::tuner::ExecutionConfig;
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    let today: SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}"#).unwrap();
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), Box::new(autoslo_core::control::StaticScaler), &[8], settings("plan"), Some(today)).unwrap();
    let tomorrow = |initial: &str| {
        ExecutionConfig::from_json(&format!(
            r#"{{"version": 1, "initial_clusters": {initial}, "scheduled_spinups": [{{"at_s": 1.5, "size": 8}}], "autoscaler": null, "routing": "round-robin",
               "slo_policy": {{"deadlines": [{{"tier": "*", "class": "dashboard", "deadline_s": 7}}]}}}}"#
        ))
        .unwrap()
    };
    // A bad plan is refused and changes nothing.
    let mut bad = tomorrow("[8]");
    bad.initial_clusters.push(7);
    assert!(svc.load_plan(bad, svc.now()).unwrap_err().to_string().contains("base capacity"));
    let mut other = tomorrow("[8]");
    other.routing = "least-work".into();
    assert!(svc.load_plan(other, svc.now()).unwrap_err().to_string().contains("routes by `least-work` and the control plane by `round-robin`"));
    svc.route(1, TEXT, "acme", "dashboard", None).unwrap();
    svc.complete(1, false).unwrap();
    // The 8 RPU workgroup stands for the plan's first initial cluster; a 16 is spun up for the
    // second, and the scheduled 8 comes 1.5 s into the plan's day.
    let start = svc.now();
    assert_eq!(svc.load_plan(tomorrow("[8, 16]"), start).unwrap(), vec![16]);
    svc.route(2, TEXT, "acme", "dashboard", None).unwrap();
    svc.complete(2, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while svc.clusters().iter().filter(|c| c.state == "available").count() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let clusters = svc.clusters();
    assert_eq!(clusters.iter().map(|c| (c.cluster, c.size, c.state)).collect::<Vec<_>>(), vec![(0, 8, "available"), (1, 16, "available"), (2, 8, "available")]);
    let events = svc.events();
    let plan_at = events.iter().find(|e| e.kind == "plan").expect("the hand-over is logged").time;
    let scheduled_at = events.iter().find(|e| e.kind == "spinup" && e.cluster == Some(2)).unwrap().time;
    assert!(scheduled_at >= start + 1.5, "the scheduled spinup comes at its time in the plan's day: {scheduled_at} after {start}");
    assert!(plan_at >= start);
    until_priced();
    let log = svc.take_served();
    assert_eq!(log.iter().map(|q| (q.query_id, q.slo)).collect::<Vec<_>>(), vec![(1, 5.0), (2, 7.0)], "the plan's deadlines from the hand-over");
    // The same plan again, its day begun 10 s ago: every cluster it wants now stands already
    // (the scheduled 8 is due and cluster 2 stands for it), so nothing is spun up.
    assert_eq!(svc.load_plan(tomorrow("[8, 16]"), svc.now() - 10.0).unwrap(), Vec::<u32>::new());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(svc.clusters().len(), 3);
    svc.stop();
}

#[test]
fn workgroups_an_earlier_run_left_under_the_prefix_are_deleted_at_the_start_unless_kept() {
    use autoslo_cloud::manager::Capacity;
    let ep = LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).unwrap();
    // A service that died left its clusters 0, 2 and 5; other fleets' workgroups stand beside them.
    let rs = manager(&ep);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for name in ["left-0", "left-2", "left-5", "left-x-1", "other-3"] {
        rt.block_on(rs.create_cluster(name, Capacity::Base(8), Duration::from_secs(60))).unwrap();
    }
    let names = |ep: &LocalEndpoint| {
        let mut v: Vec<(String, String)> = ep.workgroups().into_iter().map(|w| (w.0, w.1)).filter(|w| w.1 != "DELETING").collect();
        v.sort();
        v
    };
    // Kept when asked: reported, untouched.
    let kept = LiveSettings { keep_leftovers: true, keep_clusters: true, ..settings("left") };
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), Box::new(autoslo_core::control::StaticScaler), &[8], kept, None).unwrap();
    let mut said: Vec<String> = svc.events().into_iter().filter(|e| e.kind == "leftover").map(|e| e.reason).collect();
    said.sort();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("kept workgroup left-2 (8 RPU, AVAILABLE)") && said[1].starts_with("kept workgroup left-5"), "{said:?}");
    svc.stop();
    assert_eq!(names(&ep).len(), 5);
    // By default they go while the initial cluster (left-0, taken over) is made.
    let mut svc = Service::start(manager(&ep), Box::new(RoundRobin::default()), Box::new(autoslo_core::control::StaticScaler), &[8], settings("left"), None).unwrap();
    let said: Vec<String> = svc.events().into_iter().filter(|e| e.kind == "leftover").map(|e| e.reason).collect();
    assert_eq!(said.iter().filter(|r| r.starts_with("deleted workgroup left-")).count(), 2, "{said:?}");
    let left = names(&ep);
    assert_eq!(left.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(), vec!["left-0", "left-x-1", "other-3"], "{left:?}");
    assert_eq!(svc.route(1, TEXT, "acme", "adhoc", Some(60.0)).unwrap().workgroup, "left-0");
    svc.complete(1, false).unwrap();
    svc.stop();
}
