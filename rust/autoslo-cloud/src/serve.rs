//! Serving: a long-running control plane over real workgroups, for production routing. Your
//! gateway or scheduler asks it where each query goes ([`Service::route`] returns the
//! workgroup's endpoint), runs the SQL itself with its own driver, and reports the end
//! ([`Service::complete`]). The Query Router picks the cluster; the Autoscaler creates and
//! deletes workgroups in the background through the Redshift Serverless cluster manager, as in
//! live mode ([`crate::live`]), whose fleet, watchdog and clean-up this shares.
//!
//! A query is routed only to a cluster whose workgroup is available: when the router picks one
//! still being created (only when no cluster is ready), `route` waits for it, up to the
//! settings' `create_timeout_s`. A cluster the client finds dead ([`Service::lost`]) leaves the
//! router and its workgroup is deleted. A routed query not completed within the settings'
//! `timeout_s` ends as timed out, and a later `complete` of it is refused. [`Service::stop`] (also on drop) stops the autoscaler and
//! deletes every workgroup unless `keep_clusters`.
//!
//! What it served is kept, so a day served is a day of history: every routed query ends in the
//! service's log with its SLO, cluster, latency and outcome ([`Service::take_served`], drained by
//! the caller, e.g. into the Workload Reservoir), and in running totals per tenant × class
//! ([`Service::totals`]). Each workgroup's bill so far follows Redshift Serverless's rule (billed
//! while it runs queries, with the billing minimum; [`ServedCluster::cost`]), and is split over
//! the queries it ran as they run ([`autoslo_core::cost_meter`]): each second among the queries
//! running then, a busy period's idle part of the billing minimum among the queries of that
//! minute. A query's cost is final when it has ended and its cluster's first minute of that busy
//! period is over, so a query ending within that minute is logged once it is over (at most the
//! billing minimum after it was routed); the totals count it as it ends, its cost as it is final.
//! Once stopped, the logged queries' costs sum to the bill.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autoslo_core::autoscaler::Decision;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::ClusterId;
use autoslo_core::control::{Router, Scaler};
use autoslo_core::control_plane::{ControlPlane, LiveEvent};
use autoslo_core::cost_meter::CostMeter;
pub use autoslo_core::served::{ServedQuery, ServedTotals, DEFAULT_CLASS, DEFAULT_TENANT, LOG_CAPACITY};
use autoslo_core::served::{OpenQuery as Open, ServedBooks as Books};
use autoslo_core::tenancy::SloPolicy;
use autoslo_core::tuner::ExecutionConfig;
pub use autoslo_core::trace::Outcome;

use crate::error::{CloudError, Result};
use crate::live::{check_fleet, delete_left, start_fleet, watch_once, Fleet, LiveSettings, SlotState};
use crate::manager::RedshiftServerless;

/// Where a routed query goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub cluster: ClusterId,
    /// The cluster's size (RPU).
    pub size: u32,
    pub workgroup: String,
    /// The workgroup's endpoint: connect there (PostgreSQL wire protocol) to run the query.
    pub address: String,
    pub port: u16,
}

/// A cluster of the service.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedCluster {
    pub cluster: ClusterId,
    pub size: u32,
    pub workgroup: String,
    /// `creating`, `available` (taking queries), `lost` or `deleted`.
    pub state: &'static str,
    /// Queries routed to it and not yet completed.
    pub running: usize,
    pub endpoint: Option<(String, u16)>,
    /// Seconds billed so far: while it ran queries, each busy period at least the billing
    /// minimum (Redshift Serverless's rule, as the emulator bills). While serving, what has
    /// accrued until now; once stopped, the final bill, each busy period's minimum included.
    pub billed_s: f64,
    /// Those seconds' cost (dollars) at the settings' price.
    pub cost: f64,
}

/// A control plane over workgroups, serving routing decisions (thread-safe).
pub struct Service {
    rt: Option<tokio::runtime::Runtime>,
    fleet: Arc<Fleet>,
    cp: Arc<ControlPlane>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    books: Arc<Mutex<Books>>,
    stopped: bool,
}

impl Service {
    /// Create the initial clusters of `sizes` (waited for; a failure deletes them and is the
    /// error) and start serving: `router` on the request path, `scaler` every `tick_s` of the
    /// control plane's clock, `slo_policy` (if any) setting routed queries' SLOs.
    pub fn start(rs: RedshiftServerless, router: Box<dyn Router>, scaler: Box<dyn Scaler>, sizes: &[u32], settings: LiveSettings, slo_policy: Option<SloPolicy>) -> Result<Self> {
        check_fleet(sizes, &settings)?;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("autoslo-serve").enable_all().build().map_err(CloudError::io("cannot start the service's runtime"))?;
        let handle = rt.handle().clone();
        let (fleet, cp) = rt.block_on(start_fleet(&rs, handle, router, scaler, sizes, &settings))?;
        let cp = match cp.with_slo_policy(slo_policy) {
            Ok(cp) => Arc::new(cp),
            Err(e) => {
                rt.block_on(delete_left(&fleet));
                return Err(e.into());
            }
        };
        let books = Arc::new(Mutex::new(Books::new(settings.billing)));
        let watchdog = {
            let (cp, fleet, books) = (Arc::clone(&cp), Arc::clone(&fleet), Arc::clone(&books));
            rt.spawn(async move {
                loop {
                    watch_once(&cp, &fleet);
                    expire(&cp, &fleet, &books);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        Ok(Self { rt: Some(rt), fleet, cp, watchdog: Some(watchdog), books, stopped: false })
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        lock(&self.books)
    }

    /// Route a query arriving now: its SLO is the policy's deadline for (`tenant`, `class`,
    /// template), else `slo`. Returns the workgroup to run it on, once that is available.
    pub fn route(&self, query_id: u64, text: QueryText, tenant: &str, class: &str, slo: Option<f64>) -> Result<Route> {
        if self.stopped {
            return Err(CloudError::Stopped);
        }
        let c = {
            // Held while routing: one id, one route.
            let mut b = self.books();
            match self.cp.route_booked(&mut b, query_id, text, tenant, class, slo)? {
                Ok(c) => c,
                Err(rejection) => return Err(CloudError::rejected(query_id, rejection)),
            }
        };
        let give_up = Instant::now() + Duration::from_secs_f64(self.fleet.settings.create_timeout_s);
        loop {
            let why = {
                let mut b = self.books();
                let now = self.cp.now();
                let mut slots = self.fleet.slots();
                // `None`: its workgroup is still being created.
                let refused: Option<String> = match (b.open.get_mut(&query_id), slots.get_mut(&c)) {
                    // Completed or timed out while it waited for its cluster.
                    (None, _) => return Err(CloudError::Unroutable(format!("query {query_id} ended before cluster {c} was available"))),
                    (Some(open), Some(s)) => match (&s.state, &s.endpoint) {
                        (SlotState::Ready(_), Some((address, port))) => {
                            s.inflight += 1;
                            open.placed = Some(s.size);
                            let route = Route { cluster: c, size: s.size, workgroup: s.name.clone(), address: address.clone(), port: *port };
                            drop(slots);
                            b.join(c, query_id, now);
                            return Ok(route);
                        }
                        (SlotState::Ready(_), None) => Some(format!("workgroup {} is available without an endpoint", s.name)),
                        (SlotState::Pending, _) => None,
                        (SlotState::Failed(why), _) => Some(format!("cluster {c} is lost: {why}")),
                        (SlotState::Gone, _) => Some(format!("cluster {c} is deleted")),
                    },
                    (Some(_), None) => Some(format!("cluster {c} is not one of the service's")),
                };
                match refused {
                    None if Instant::now() < give_up => None,
                    None => Some(format!("cluster {c} was not available within {} s", self.fleet.settings.create_timeout_s)),
                    why => why,
                }
            };
            let Some(why) = why else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            // Not run: it leaves the router's books as a query that ended now, unmet.
            {
                let mut b = self.books();
                if let Some(open) = b.open.remove(&query_id) {
                    b.finish(query_id, open, self.cp.now(), Outcome::Failed, None);
                }
            }
            let _ = self.cp.complete(query_id, true);
            return Err(CloudError::Unroutable(why));
        }
    }

    /// A routed query finished now (`timed_out`: it was stopped, or failed, without an answer).
    pub fn complete(&self, query_id: u64, timed_out: bool) -> Result<()> {
        {
            let mut b = self.books();
            let Some(open) = b.open.remove(&query_id) else {
                return Err(autoslo_core::error::AutoSloError::InvalidAction(format!("query {query_id} is not routed (never, or already completed)")).into());
            };
            let now = self.cp.now();
            end_on_cluster(&mut b, &self.fleet, query_id, open, now, if timed_out { Outcome::TimedOut } else { Outcome::Completed });
        }
        Ok(self.cp.complete(query_id, timed_out)?)
    }

    /// The client found cluster `cluster` dead (its connections refused or closed): it leaves
    /// the router and its workgroup is deleted. Its running queries still need `complete`.
    pub fn lost(&self, cluster: ClusterId, why: &str) -> Result<()> {
        if !self.fleet.slots().contains_key(&cluster) {
            return Err(autoslo_core::error::AutoSloError::InvalidAction(format!("cluster {cluster} is not one of the service's")).into());
        }
        self.fleet.lose(cluster, why.to_string());
        Ok(())
    }

    /// Every cluster the service has had, by id.
    pub fn clusters(&self) -> Vec<ServedCluster> {
        let b = self.books();
        let now = self.cp.now();
        let billing = self.fleet.settings.billing;
        let mut out: Vec<ServedCluster> = self
            .fleet
            .slots()
            .iter()
            .map(|(&id, s)| {
                let billed_s = b.bills.get(&id).map(CostMeter::timer).map_or(0.0, |t| match b.stopped_at {
                    // Stopped: nothing more runs, so each busy period is billed to its end, the
                    // minimum included.
                    Some(at) => t.billed_seconds_until_drained(at),
                    None => t.billed_seconds_at(now),
                });
                ServedCluster {
                cluster: id,
                size: s.size,
                workgroup: s.name.clone(),
                state: match s.state {
                    SlotState::Pending => "creating",
                    // Available and known to the router, which sends it queries from then.
                    SlotState::Ready(_) if s.ready_reported => "available",
                    SlotState::Ready(_) => "creating",
                    SlotState::Failed(_) => "lost",
                    SlotState::Gone => "deleted",
                },
                running: s.inflight,
                endpoint: s.endpoint.clone(),
                billed_s,
                cost: billing.cost(s.size, billed_s),
            }})
            .collect();
        out.sort_by_key(|c| c.cluster);
        out
    }

    /// Hand the service over to `plan`, a new day's execution configuration whose second 0 is
    /// `day_start` on the service's clock (the next midnight, say), keeping every workgroup
    /// ([`ControlPlane::load_plan`]): its autoscaler takes over from the next tick, its deadlines
    /// hold the queries routed from now on, and the clusters it wants up (initial, and scheduled
    /// before now when `day_start` is past) that no workgroup stands for are created; its later
    /// spinups come at their times. The plan is validated first; on error the plan in force
    /// stays, as it does when the plan routes by another policy than the service. Returns the
    /// sizes spun up for it.
    pub fn load_plan(&self, plan: ExecutionConfig, day_start: f64) -> Result<Vec<u32>> {
        if self.stopped {
            return Err(CloudError::Stopped);
        }
        Ok(self.cp.load_plan(plan, day_start, self.fleet.settings.expected_spinup_s)?)
    }

    /// Dollars billed so far over every cluster.
    pub fn cost(&self) -> f64 {
        self.clusters().iter().map(|c| c.cost).sum()
    }

    /// The queries so far per tenant × class, in (tenant, class) order.
    pub fn totals(&self) -> Vec<ServedTotals> {
        self.books().totals.values().cloned().collect()
    }

    /// Take the ended queries logged since the last take, in the order their costs became
    /// final: as they ended, or once their cluster's billing minimum ran out.
    pub fn take_served(&self) -> Vec<ServedQuery> {
        let mut b = self.books();
        if b.stopped_at.is_none() {
            let now = self.cp.now();
            b.advance(now);
        }
        b.log.drain(..).collect()
    }

    /// The ended queries whose cost is not final yet (their cluster's billing minimum still
    /// runs), in the order they ended, with `cost` 0: what [`Service::take_served`] will return
    /// once it is. Nothing is taken; a durable log journals them, so that a crash before their
    /// cost is final loses no query (`autoslo.serving.ServedLog`).
    pub fn pending_served(&self) -> Vec<ServedQuery> {
        let b = self.books();
        if !b.keep_log {
            return Vec::new();
        }
        let mut v: Vec<ServedQuery> = b.unpriced.values().cloned().collect();
        v.sort_by(|a, b| a.end.total_cmp(&b.end).then(a.query_id.cmp(&b.query_id)));
        v
    }

    /// Keep a log of ended queries (on from the start), or not: off, nothing more is logged,
    /// and the totals still count.
    pub fn keep_log(&self, on: bool) {
        self.books().keep_log = on;
    }

    /// Ended queries dropped from a full log (more than [`LOG_CAPACITY`] not taken).
    pub fn log_dropped(&self) -> u64 {
        self.books().dropped
    }

    /// The service clock's zero, in seconds since 1970-01-01 UTC: a logged query arrived at
    /// `started_unix() + arrival` (with `time_scale` 1, the wall-clock time).
    pub fn started_unix(&self) -> f64 {
        self.cp.started_unix()
    }

    /// Put the queries routed from now on to `admission` before they are routed (`None`: admit
    /// every query): a rejected query is not routed, ends in the log and the totals as
    /// `rejected` with its reason, and `route` returns [`CloudError::Rejected`].
    pub fn set_admission(&self, admission: Option<autoslo_core::tenancy::NamedAdmission>) -> Result<()> {
        Ok(self.cp.set_admission(admission)?)
    }

    /// Each budgeted tenant's budget and estimated spend in the current window (its start in
    /// Unix time); empty without budgets.
    pub fn budgets(&self) -> Result<Vec<autoslo_core::tenancy::BudgetStatus>> {
        Ok(self.cp.budgets(self.cp.unix_clock())?)
    }

    /// Charge `dollars` to `tenant`'s current budget window, as if its queries had been
    /// admitted: a restarted service restores what its log's `charged` column says each tenant
    /// spent in this window before the restart. Without budgets in force, nothing to charge.
    pub fn charge_budget(&self, tenant: &str, dollars: f64) -> Result<()> {
        // Under the books' lock, as routes are, on the clock their budget windows count on.
        let _b = self.books();
        Ok(self.cp.charge_budget(tenant, self.cp.unix_clock(), dollars)?)
    }

    /// The control plane's log: spinups, teardowns, failures, skipped decisions.
    pub fn events(&self) -> Vec<LiveEvent> {
        self.cp.events()
    }

    /// The scaler's decisions so far.
    pub fn decisions(&self) -> Vec<Decision> {
        self.cp.decisions()
    }

    /// The control plane's clock (s since the start × the time scale).
    pub fn now(&self) -> f64 {
        self.cp.now()
    }

    /// Stop serving: the autoscaler stops, and every workgroup is deleted (unless
    /// `keep_clusters`) once the queries on it are completed or `delete_timeout_s` has passed.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Some(rt) = self.rt.take() {
            if let Some(w) = self.watchdog.take() {
                w.abort();
                // The watchdog's share of the control plane goes with it.
                let _ = rt.block_on(w);
            }
            if let Some(cp) = Arc::get_mut(&mut self.cp) {
                cp.stop();
            }
            let fleet = Arc::clone(&self.fleet);
            let wait = Duration::from_secs_f64(self.fleet.settings.delete_timeout_s);
            rt.block_on(async {
                let until = tokio::time::Instant::now() + wait;
                while fleet.slots().values().any(|s| s.inflight > 0) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
            // What is still running is cancelled, in the log as in the totals.
            {
                let mut b = self.books();
                let now = self.cp.now();
                let mut left: Vec<u64> = b.open.keys().copied().collect();
                left.sort_unstable();
                for q in left {
                    if let Some(open) = b.open.remove(&q) {
                        end_on_cluster(&mut b, &self.fleet, q, open, now, Outcome::Cancelled);
                    }
                }
                b.close(now);
                b.stopped_at = Some(now);
            }
            rt.block_on(delete_left(&fleet));
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Query `query_id` (`open`) ended at `now` with `outcome`: it leaves its cluster (whose bill
/// pauses when nothing runs there) and is counted and logged.
fn end_on_cluster(b: &mut Books, fleet: &Fleet, query_id: u64, open: Open, now: f64, outcome: Outcome) {
    let mut seconds = None;
    if open.placed.is_some() {
        if let Some(s) = fleet.slots().get_mut(&open.cluster) {
            s.inflight = s.inflight.saturating_sub(1);
        }
        seconds = b.leave(open.cluster, query_id, now);
    }
    b.finish(query_id, open, now, outcome, seconds);
}

/// Routed queries never completed within the settings' `timeout_s` (control-plane s) end as
/// timed out, so a client that forgets a query (or dies) does not hold its cluster busy forever.
/// Costs whose cluster's billing minimum ran out are final (logged) as well.
fn expire(cp: &ControlPlane, fleet: &Fleet, books: &Mutex<Books>) {
    let stale: Vec<u64> = {
        let mut b = lock(books);
        let now = cp.now();
        b.advance(now);
        let Some(timeout) = fleet.settings.timeout_s else { return };
        let mut ids: Vec<u64> = b.open.iter().filter(|(_, o)| now - o.at > timeout).map(|(q, _)| *q).collect();
        ids.sort_unstable();
        for &q in &ids {
            if let Some(open) = b.open.remove(&q) {
                end_on_cluster(&mut b, fleet, q, open, now, Outcome::TimedOut);
            }
        }
        ids
    };
    for q in stale {
        let _ = cp.complete(q, true);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}
