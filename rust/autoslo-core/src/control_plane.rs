//! The live control plane: the Query Router on the request path and the Autoscaler off it, over
//! a cluster-manager interface.
//!
//! `route` and `complete` take the router's lock only for the routing decision itself, and record
//! the events the autoscaler needs in a buffer. A background thread wakes every `tick_s` of
//! control-plane time, copies the router's state under the lock (a snapshot: the running queries
//! with their predictions and the Iconq+ states), releases it, and runs the scaler on the
//! snapshot: routing never waits for a scaling decision, only, at most, for that copy. A decision
//! made on a stale snapshot is safe: a spinup only adds a cluster, and a teardown of a cluster
//! that is already gone (or is the last one) is skipped and logged.
//!
//! Time is the control plane's own clock: seconds since it started, times `time_scale` (1 in
//! production; larger to run a day in minutes against an in-process manager).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::autoscaler::Decision;
use crate::billing::BillingPolicy;
use crate::catalog::QueryText;
use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::{Action, Event, RoundRobin, Router, Scaler};
use crate::emulator::{measured_cycles, Lifecycle};
use crate::error::{AutoSloError, Result};
use crate::live::LiveRouter;
use crate::rng::Rng;
use crate::served::{OpenQuery, ServedBooks, ServedQuery, ServedTotals, DEFAULT_CLASS};
use crate::trace::Outcome;
use crate::tenancy::{AdmissionDecision, BudgetStatus, NamedAdmission, SloPolicy};
use crate::tuner::ExecutionConfig;
use crate::trace::RejectReason;
use crate::workload::{Query, DEFAULT_TENANT};

/// Creates and deletes clusters. In-process here ([`InProcessManager`]); the cloud side adds
/// Redshift Serverless workgroups behind the same interface.
pub trait ClusterManager: Send {
    /// Request cluster `cluster` (the id the router will give it) of `size` RPU at `now`;
    /// returns when it is expected to take queries. A manager whose clusters become ready
    /// later than expected (or never) says so through [`ControlPlane::fail_cluster`] or by
    /// holding the queries routed there until it is ready.
    fn spin_up(&mut self, cluster: ClusterId, size: u32, now: f64) -> Result<f64>;
    /// Release `cluster` at `now` (nothing more is routed to it; its queries finish).
    fn tear_down(&mut self, cluster: ClusterId, size: u32, now: f64) -> Result<()>;
    fn name(&self) -> &str;
    /// Whether this manager tells the control plane when each cluster it spun up is actually
    /// ready ([`ControlPlane::cluster_ready`]). Then the router keeps a new cluster starting until
    /// that word, however early or late it comes against [`Self::spin_up`]'s estimate; otherwise
    /// the estimate is the ready time.
    fn confirms_readiness(&self) -> bool {
        false
    }
}

/// Clusters that exist in this process, with the real lifecycle timings: a fixed spinup delay, or
/// one drawn from the measured Redshift Serverless workgroup cycles.
#[derive(Debug, Clone)]
pub struct InProcessManager {
    lifecycle: Lifecycle,
    cycles: Vec<(u32, f64, f64)>,
    rng: Rng,
}

impl InProcessManager {
    pub fn new(lifecycle: Lifecycle, seed: u64) -> Result<Self> {
        if let Lifecycle::Fixed { spinup_s, teardown_s } = lifecycle {
            if !(spinup_s.is_finite() && spinup_s >= 0.0 && teardown_s.is_finite() && teardown_s >= 0.0) {
                return Err(AutoSloError::out_of_range("spinup/teardown time", "≥ 0 s", format!("{spinup_s}/{teardown_s}")));
            }
        }
        Ok(Self { lifecycle, cycles: measured_cycles(), rng: Rng::new(seed) })
    }
}

impl ClusterManager for InProcessManager {
    fn spin_up(&mut self, _cluster: ClusterId, size: u32, now: f64) -> Result<f64> {
        if size == 0 {
            return Err(AutoSloError::out_of_range("cluster size", "> 0 RPU", 0));
        }
        Ok(now + self.lifecycle.draw(size, &mut self.rng, &self.cycles).0)
    }
    fn tear_down(&mut self, _cluster: ClusterId, _size: u32, _now: f64) -> Result<()> {
        Ok(())
    }
    fn name(&self) -> &str {
        "in-process"
    }
}

/// One change of the cluster set, as the control plane logs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveEvent {
    pub time: f64,
    pub cluster: Option<ClusterId>,
    pub size: u32,
    /// `spinup`, `teardown`, `failed`, `skipped`, or `plan` (a new plan took over).
    pub kind: &'static str,
    /// The scaler's reason (`initial`, `maybe-spinup`, `idle`, …), or `failed` / `skipped`.
    pub cause: &'static str,
    /// The reason in words (for `skipped` and `failed`, what went wrong).
    pub reason: String,
}

#[derive(Debug, Clone, Copy)]
enum Pending {
    Arrival(Query),
    Routed(Query, ClusterId),
    Completion(Query, ClusterId, f64, bool),
}

struct Shared {
    router: Mutex<LiveRouter>,
    pending: Mutex<Vec<Pending>>,
    log: Mutex<Vec<LiveEvent>>,
    /// The scaler's decisions so far, copied out of the autoscaler thread after each pass.
    decisions: Mutex<Vec<Decision>>,
    /// A scaler to take over at the autoscaler thread's next pass ([`ControlPlane::replace_scaler`]).
    next_scaler: Mutex<Option<Box<dyn Scaler>>>,
    stop: AtomicBool,
    start: Instant,
    time_scale: f64,
}

impl Shared {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * self.time_scale
    }
    fn router(&self) -> Result<MutexGuard<'_, LiveRouter>> {
        self.router.lock().map_err(|_| AutoSloError::InvalidAction("router lock poisoned by an earlier panic".into()))
    }
}

/// A query refused at admission ([`ControlPlane::route_admitted`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rejection {
    pub reason: RejectReason,
    /// Refused for its tenant's budget: the wall-clock seconds until the budget window ends,
    /// after which the same query may be admitted (an HTTP `Retry-After`). `None` otherwise.
    pub retry_after_s: Option<f64>,
}

/// Router + Autoscaler over a cluster manager, thread-safe.
pub struct ControlPlane {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    /// The deadlines of the configuration served (`ExecutionConfig::slo_policy`), if any;
    /// replaced with the plan ([`ControlPlane::set_slo_policy`]).
    slo_policy: std::sync::RwLock<Option<SloPolicy>>,
    /// Admission at the router boundary ([`ControlPlane::admit`]), if any.
    admission: Mutex<Option<NamedAdmission>>,
    /// Unix time (s) at the start, where [`ControlPlane::unix_clock`] counts from.
    started_unix: f64,
    /// What [`ControlPlane::route_logged`] and [`ControlPlane::complete_logged`] served, with
    /// each cluster's size (for its bill). A caller that keeps its own books (the serving
    /// control plane over workgroups, which bills from placement) leaves them empty.
    books: Mutex<(ServedBooks, std::collections::HashMap<ClusterId, u32>)>,
}

impl ControlPlane {
    /// Start a control plane over ready clusters of `sizes`, routing with `router`, scaling with
    /// `scaler` through `manager`; the scaler runs every `tick_s` of control-plane time.
    pub fn start(router: Box<dyn Router>, sizes: &[u32], mut scaler: Box<dyn Scaler>, mut manager: Box<dyn ClusterManager>, tick_s: f64, time_scale: f64) -> Result<Self> {
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return Err(AutoSloError::out_of_range("time scale", "a finite factor > 0", time_scale));
        }
        if !(tick_s.is_finite() && tick_s > 0.0) {
            return Err(AutoSloError::out_of_range("scaler tick", "> 0 s", tick_s));
        }
        scaler.check(router.as_ref())?;
        let shared = Arc::new(Shared {
            router: Mutex::new(LiveRouter::new(router, sizes)?),
            pending: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            decisions: Mutex::new(Vec::new()),
            next_scaler: Mutex::new(None),
            stop: AtomicBool::new(false),
            start: Instant::now(),
            time_scale,
        });
        let s = Arc::clone(&shared);
        let period = Duration::from_secs_f64((tick_s / time_scale).max(1e-3));
        let worker = std::thread::Builder::new()
            .name("autoslo-autoscaler".into())
            .spawn(move || {
                let mut ready: Vec<ClusterId> = Vec::new();
                // Decisions of the scalers replaced so far (each scaler numbers its own from 0).
                let mut before = 0;
                while !s.stop.load(Ordering::Acquire) {
                    // Wait out the period, but wake at once when stopped ([`ControlPlane::stop`]
                    // unparks this thread), so dropping a control plane never blocks a tick.
                    let due = Instant::now() + period;
                    loop {
                        if s.stop.load(Ordering::Acquire) {
                            return;
                        }
                        let now = Instant::now();
                        if now >= due {
                            break;
                        }
                        std::thread::park_timeout(due - now);
                    }
                    if let Some(next) = s.next_scaler.lock().ok().and_then(|mut n| n.take()) {
                        before += scaler.decisions().len();
                        scaler = next;
                        // The clusters already up are the new scaler's from the start: it is not
                        // told they became ready.
                    }
                    if let Err(e) = scale_once(&s, scaler.as_mut(), manager.as_mut(), &mut ready) {
                        if let Ok(mut log) = s.log.lock() {
                            log.push(LiveEvent { time: s.now(), cluster: None, size: 0, kind: "skipped", cause: "skipped", reason: e.to_string() });
                        }
                    }
                    // The scaler only appends to its decisions: copy the new ones out.
                    if let Ok(mut out) = s.decisions.lock() {
                        let seen = out.len() - before;
                        out.extend_from_slice(scaler.decisions().get(seen..).unwrap_or_default());
                    }
                }
            })
            .map_err(|e| AutoSloError::InvalidConfig(format!("cannot start the autoscaler thread: {e}")))?;
        let started_unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let books = Mutex::new((ServedBooks::new(BillingPolicy::default()), std::collections::HashMap::new()));
        Ok(Self { shared, worker: Some(worker), slo_policy: std::sync::RwLock::new(None), admission: Mutex::new(None), started_unix, books })
    }

    /// The control plane's clock (s).
    pub fn now(&self) -> f64 {
        self.shared.now()
    }

    /// Unix time (s) when the control plane started: its clock's zero.
    pub fn started_unix(&self) -> f64 {
        self.started_unix
    }

    /// Unix time at the start plus the control plane's clock (s): the clock budget windows count
    /// on live, so a day's window is a UTC day (with a time scale above 1 it runs ahead of the
    /// wall clock, as the control plane's own does).
    pub fn unix_clock(&self) -> f64 {
        self.started_unix + self.now()
    }

    /// Hold the queries routed with [`ControlPlane::route_by_policy`] to `policy` (validated).
    pub fn with_slo_policy(self, policy: Option<SloPolicy>) -> Result<Self> {
        self.set_slo_policy(policy)?;
        Ok(self)
    }

    /// Put the queries arriving from now on to `admission` before they are routed
    /// ([`ControlPlane::admit`]); `None`: admit every query.
    pub fn set_admission(&self, admission: Option<NamedAdmission>) -> Result<()> {
        *self.admission_lock()? = admission;
        Ok(())
    }

    fn admission_lock(&self) -> Result<std::sync::MutexGuard<'_, Option<NamedAdmission>>> {
        self.admission.lock().map_err(|_| AutoSloError::InvalidAction("admission lock poisoned by an earlier panic".into()))
    }

    /// Each budgeted tenant's budget and estimated spend in the window that holds
    /// `budget_clock`; empty without budgets in force.
    pub fn budgets(&self, budget_clock: f64) -> Result<Vec<BudgetStatus>> {
        Ok(self.admission_lock()?.as_ref().map(|a| a.budgets(budget_clock)).unwrap_or_default())
    }

    /// Charge `dollars` to `tenant`'s budget window that holds `budget_clock`, as if its
    /// queries had been admitted (a restarted service restores what its log says was spent).
    /// Without budgets in force, nothing to charge.
    pub fn charge_budget(&self, tenant: &str, budget_clock: f64, dollars: f64) -> Result<()> {
        match self.admission_lock()?.as_mut() {
            Some(a) => a.charge(tenant, budget_clock, dollars),
            None => Ok(()),
        }
    }

    /// Admit or reject, before any work, query `query_id` of `tenant` with `text` and `slo`
    /// arriving now, given the clusters as they are: by the admission in force (none: every
    /// query is admitted, charged nothing). `budget_clock` is the time its budget windows count
    /// on (the service passes Unix time, so a day's window is a UTC day). Admitted, the dollars
    /// charged to its tenant's budget (0 without one); a rejected query is not routed.
    pub fn admit(&self, query_id: u64, text: QueryText, tenant: &str, slo: f64, budget_clock: f64) -> Result<AdmissionDecision> {
        let mut admission = self.admission_lock()?;
        let Some(a) = admission.as_mut() else { return Ok(Ok(0.0)) };
        let infos: Vec<ClusterInfo> = {
            let now = self.shared.now();
            let mut r = self.shared.router()?;
            r.advance_to(now)?;
            r.infos().to_vec()
        };
        Ok(a.decide(budget_clock, query_id, text, tenant, slo, &infos))
    }

    /// Admit, then route, query `query_id` of `tenant` arriving now with `text` and `slo` (already
    /// resolved, [`ControlPlane::slo_of`]): by the admission in force, its budget windows counting
    /// on `budget_clock` ([`ControlPlane::admit`]). Admitted, its cluster and the dollars charged
    /// to its tenant's budget; rejected, why, and it is not routed. A query without a tenant
    /// (`""`) is held to the budget of [`DEFAULT_TENANT`], the name a query log without tenants
    /// gives it.
    pub fn route_admitted(&self, query_id: u64, text: QueryText, tenant: &str, slo: f64, budget_clock: f64) -> Result<std::result::Result<(ClusterId, f64), Rejection>> {
        let tenant = if tenant.is_empty() { DEFAULT_TENANT } else { tenant };
        match self.admit(query_id, text, tenant, slo, budget_clock)? {
            Ok(charged) => Ok(Ok((self.route(query_id, text, slo)?, charged))),
            Err(reason) => {
                let retry_after_s = match reason {
                    RejectReason::Budget => self.admission_lock()?.as_ref().and_then(|a| a.budget_window_end(budget_clock)).map(|end| (end - budget_clock).max(0.0) / self.shared.time_scale),
                    _ => None,
                };
                Ok(Err(Rejection { reason, retry_after_s }))
            }
        }
    }

    /// Hold the queries routed from now on to `policy` (validated; on error the policy in force
    /// stays). Queries already routed keep their SLOs.
    pub fn set_slo_policy(&self, policy: Option<SloPolicy>) -> Result<()> {
        let policy = policy.map(SloPolicy::validated).transpose()?;
        *self.slo_policy.write().map_err(|_| AutoSloError::InvalidAction("SLO policy lock poisoned by an earlier panic".into()))? = policy;
        Ok(())
    }

    /// Hand the control plane over to `plan`, a new day's execution configuration whose second 0
    /// is `day_start` on the control plane's clock (the next midnight, say), keeping every
    /// cluster: its autoscaler takes over from the next tick ([`ControlPlane::replace_scaler`];
    /// `spinup_s` is its selector's δ), its deadlines hold the queries routed from now on, and
    /// the clusters it wants up that none standing stands for are spun up
    /// ([`ExecutionConfig::taken_over`]). The plan is validated first; on error the plan in force
    /// stays. So it does when the plan routes by another policy than the control plane's router:
    /// a router keeps state a hand-over cannot move. Returns the sizes spun up for it; the
    /// hand-over is logged as a `plan` event.
    pub fn load_plan(&self, plan: ExecutionConfig, day_start: f64, spinup_s: f64) -> Result<Vec<u32>> {
        if !day_start.is_finite() {
            return Err(AutoSloError::out_of_range("a plan's day start", "a finite time on the control plane's clock", day_start));
        }
        let plan = plan.validated()?;
        let routing = self.shared.router()?.router().name().to_string();
        if plan.routing != routing {
            return Err(AutoSloError::InvalidConfig(format!("the plan routes by `{}` and the control plane by `{routing}`: a router's state cannot be handed over, so start one for that plan", plan.routing)));
        }
        let standing: Vec<u32> = self.clusters()?.iter().map(|c| c.1).collect();
        let (placed, missing) = plan.taken_over(day_start, self.now(), &standing);
        self.replace_scaler(placed.scaler(spinup_s)?)?;
        self.set_slo_policy(plan.slo_policy.clone())?;
        let later = placed.scheduled_spinups.len() - missing.len();
        self.record(
            "plan",
            format!(
                "a new plan from {day_start:.0} s: initial {:?}, {} spun up for the clusters it wants now, {} spinups scheduled, autoscaler {}",
                plan.initial_clusters,
                missing.len(),
                later,
                plan.autoscaler.as_ref().map_or("none", |k| k.policy.as_str())
            ),
        );
        Ok(missing)
    }

    /// Log `kind` (`plan`, say) at the control plane's clock, with `reason` in words.
    pub fn record(&self, kind: &'static str, reason: String) {
        if let Ok(mut log) = self.shared.log.lock() {
            log.push(LiveEvent { time: self.now(), cluster: None, size: 0, kind, cause: kind, reason });
        }
    }

    /// Hand the cluster set over to `scaler` from the autoscaler thread's next pass (within one
    /// tick): a new day's plan, say. It is checked against the router first; on error the scaler
    /// in force stays. The new scaler starts with empty observation windows and takes the
    /// clusters as they are; a replacement given before the last one took over supersedes it.
    pub fn replace_scaler(&self, scaler: Box<dyn Scaler>) -> Result<()> {
        scaler.check(self.shared.router()?.router())?;
        *self.shared.next_scaler.lock().map_err(|_| AutoSloError::InvalidAction("scaler hand-over lock poisoned by an earlier panic".into()))? = Some(scaler);
        Ok(())
    }

    /// The SLO the control plane's policy sets for a query (see [`SloPolicy::deadline`]), else
    /// `slo`; an error when neither gives one.
    pub fn slo_of(&self, tenant: &str, class: &str, text: QueryText, slo: Option<f64>) -> Result<f64> {
        let policy = self.slo_policy.read().map_err(|_| AutoSloError::InvalidAction("SLO policy lock poisoned by an earlier panic".into()))?;
        match (policy.as_ref().and_then(|p| p.deadline(tenant, class, text.template)), slo) {
            (Some(deadline), _) => Ok(deadline),
            (None, Some(slo)) if slo.is_finite() && slo > 0.0 => Ok(slo),
            (None, Some(slo)) => Err(AutoSloError::out_of_range("a query's SLO", "a positive number of seconds", slo)),
            (None, None) => Err(AutoSloError::InvalidConfig(match &*policy {
                Some(_) => format!("no rule of the SLO policy covers template {} of tenant `{tenant}`, class `{class}`: give the query's SLO", text.template),
                None => "the control plane has no SLO policy (an execution configuration's `slo_policy`): give the query's SLO".into(),
            })),
        }
    }

    /// Route a query arriving now, its SLO from the policy (or `slo` where no rule covers it).
    pub fn route_by_policy(&self, query_id: u64, text: QueryText, tenant: &str, class: &str, slo: Option<f64>) -> Result<ClusterId> {
        self.route(query_id, text, self.slo_of(tenant, class, text, slo)?)
    }

    /// Route a query arriving now; returns its cluster.
    pub fn route(&self, query_id: u64, text: QueryText, slo: f64) -> Result<ClusterId> {
        let now = self.shared.now();
        let mut r = self.shared.router()?;
        let (c, q) = r.route_query(query_id, text, now, slo)?;
        // Buffered before the routing lock is released, so the buffer is in the router's time
        // order (the autoscaler's arrival window must be), whatever thread gets there first.
        if let Ok(mut p) = self.shared.pending.lock() {
            p.push(Pending::Arrival(q));
            p.push(Pending::Routed(q, c));
        }
        Ok(c)
    }

    /// A routed query finished (or timed out) now.
    pub fn complete(&self, query_id: u64, timed_out: bool) -> Result<()> {
        let now = self.shared.now();
        let mut r = self.shared.router()?;
        let (c, q) = r.complete(query_id, now, timed_out)?;
        let t = r.now();
        // In the router's time order, as in `route`.
        if let Ok(mut p) = self.shared.pending.lock() {
            p.push(Pending::Completion(q, c, t - q.arrival, timed_out));
        }
        Ok(())
    }

    /// Bill the queries [`ControlPlane::route_logged`] serves at `billing` (validated; default
    /// [`BillingPolicy::default`]), from the next one on.
    pub fn with_billing(self, billing: BillingPolicy) -> Result<Self> {
        let billing = billing.validated()?;
        self.books_lock().0.billing = billing;
        Ok(self)
    }

    fn books_lock(&self) -> MutexGuard<'_, (ServedBooks, std::collections::HashMap<ClusterId, u32>)> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`ControlPlane::route_admitted`] with its SLO from the policy (else `slo`,
    /// [`ControlPlane::slo_of`]), entered in `books`: counted per `tenant` × `class` (`""`:
    /// [`crate::workload::DEFAULT_TENANT`], [`DEFAULT_CLASS`], the names a query log without them
    /// gives) and open, not yet placed on its cluster; a rejected query ends there, counted and
    /// logged as rejected. The caller holds `books` while routing (the router serialises
    /// decisions anyway): one id, one entry. Both live control planes route through it: the
    /// in-process one ([`ControlPlane::route_logged`]) and the service over workgroups, which
    /// places the query once its workgroup is available.
    pub fn route_booked(&self, b: &mut ServedBooks, query_id: u64, text: QueryText, tenant: &str, class: &str, slo: Option<f64>) -> Result<std::result::Result<ClusterId, Rejection>> {
        if b.open.contains_key(&query_id) {
            return Err(AutoSloError::InvalidAction(format!("query {query_id} is already routed and not completed")));
        }
        let slo = self.slo_of(tenant, class, text, slo)?;
        let (tenant, class) = (if tenant.is_empty() { DEFAULT_TENANT } else { tenant }, if class.is_empty() { DEFAULT_CLASS } else { class });
        let at = self.now();
        let open = |cluster, charged| OpenQuery { cluster, placed: None, at, text, tenant: tenant.to_string(), class: class.to_string(), slo, charged };
        // Budget windows count on Unix time: a day's window is a UTC day.
        match self.route_admitted(query_id, text, tenant, slo, self.started_unix + at)? {
            Err(rejection) => {
                b.finish(query_id, open(0, 0.0), at, Outcome::Rejected(rejection.reason), None);
                Ok(Err(rejection))
            }
            Ok((c, charged)) => {
                b.open.insert(query_id, open(c, charged));
                b.totals_of(tenant, class).routed += 1;
                Ok(Ok(c))
            }
        }
    }

    /// [`ControlPlane::route_booked`] into the control plane's own books, the query placed on its
    /// cluster at once: logged, once it ends ([`ControlPlane::complete_logged`]), with its share
    /// of its cluster's bill, billed from its routing.
    pub fn route_logged(&self, query_id: u64, text: QueryText, tenant: &str, class: &str, slo: Option<f64>) -> Result<std::result::Result<ClusterId, Rejection>> {
        let mut books = self.books_lock();
        let (b, sizes) = &mut *books;
        let routed = self.route_booked(b, query_id, text, tenant, class, slo)?;
        if let Ok(c) = routed {
            let size = self.shared.router()?.infos().iter().find(|x| x.id == c).map(|x| x.size);
            if let Some(open) = b.open.get_mut(&query_id) {
                open.placed = size;
                let at = open.at;
                if let Some(size) = size {
                    sizes.insert(c, size);
                    b.join(c, query_id, at);
                }
            }
        }
        Ok(routed)
    }

    /// [`ControlPlane::complete`] of a query [`ControlPlane::route_logged`] routed: it ends in
    /// the books, completed or timed out, and leaves its cluster's bill.
    pub fn complete_logged(&self, query_id: u64, timed_out: bool) -> Result<()> {
        {
            let mut books = self.books_lock();
            let b = &mut books.0;
            let Some(open) = b.open.remove(&query_id) else {
                return Err(AutoSloError::InvalidAction(format!("query {query_id} is not running (never routed, or already completed)")));
            };
            let now = self.now();
            let seconds = if open.placed.is_some() { b.leave(open.cluster, query_id, now) } else { None };
            b.finish(query_id, open, now, if timed_out { Outcome::TimedOut } else { Outcome::Completed }, seconds);
        }
        self.complete(query_id, timed_out)
    }

    /// The queries [`ControlPlane::route_logged`] served so far, per tenant × class, in (tenant,
    /// class) order.
    pub fn served_totals(&self) -> Vec<ServedTotals> {
        let now = self.now();
        let mut books = self.books_lock();
        // The costs that became final by now count (the log keeps them until taken).
        books.0.advance(now);
        books.0.totals.values().cloned().collect()
    }

    /// Take the ended queries logged since the last take, in the order their costs became final:
    /// as they ended, or once their cluster's billing minimum ran out.
    pub fn take_served(&self) -> Vec<ServedQuery> {
        let now = self.now();
        let mut books = self.books_lock();
        books.0.advance(now);
        books.0.log.drain(..).collect()
    }

    /// Ended queries dropped from a full log (more than [`crate::served::LOG_CAPACITY`] not taken).
    pub fn log_dropped(&self) -> u64 {
        self.books_lock().0.dropped
    }

    /// Dollars billed so far for the queries [`ControlPlane::route_logged`] served: each
    /// cluster billed while it ran them, each busy period at least the billing minimum.
    pub fn served_cost(&self) -> f64 {
        let now = self.now();
        let books = self.books_lock();
        let (b, sizes) = &*books;
        b.bills.iter().map(|(c, m)| sizes.get(c).map_or(0.0, |&size| b.billing.cost(size, m.timer().billed_seconds_at(now)))).sum()
    }

    /// (id, size, running, ready) of the clusters the router may use.
    pub fn clusters(&self) -> Result<Vec<(ClusterId, u32, usize, bool)>> {
        let now = self.shared.now();
        let mut r = self.shared.router()?;
        r.advance_to(now)?;
        Ok(r.infos().iter().map(|c| (c.id, c.size, c.running, c.state == ClusterState::Ready)).collect())
    }

    /// A cluster was lost (its server died, or it never became available): stop routing to it
    /// now, and log why. The last cluster cannot be removed (routing needs one); that is an
    /// error the caller reports.
    pub fn fail_cluster(&self, cluster: ClusterId, why: &str) -> Result<()> {
        let now = self.shared.now();
        let size = {
            let mut r = self.shared.router()?;
            let size = r.infos().iter().find(|c| c.id == cluster).map(|c| c.size).ok_or_else(|| AutoSloError::InvalidAction(format!("no cluster {cluster}")))?;
            r.remove_cluster(cluster)?;
            size
        };
        self.shared.log.lock().map_err(|_| AutoSloError::InvalidAction("event log poisoned".into()))?.push(LiveEvent { time: now, cluster: Some(cluster), size, kind: "failed", cause: "failed", reason: why.to_string() });
        Ok(())
    }

    /// The manager's word that `cluster` is ready now (see [`ClusterManager::confirms_readiness`]):
    /// it takes queries from now on, and its idleness counts from now. `Ok(false)` when that
    /// changes nothing (already ready, or removed since); an error for a cluster the router has
    /// not been given yet (the manager may tell again later).
    pub fn cluster_ready(&self, cluster: ClusterId) -> Result<bool> {
        let now = self.shared.now();
        self.shared.router()?.confirm_ready(cluster, now)
    }

    /// Every spinup and teardown so far (and decisions skipped because the snapshot was stale).
    pub fn events(&self) -> Vec<LiveEvent> {
        self.shared.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every decision the scaler took so far, with the options it compared (as the engines'
    /// [`Scaler::decisions`]); up to date as of the autoscaler thread's last pass.
    pub fn decisions(&self) -> Vec<Decision> {
        self.shared.decisions.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Stop the autoscaler thread (routing keeps working on the current clusters). It returns
    /// at once when the thread is waiting for its next pass, and after the pass when one runs.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            // The flag is set before the unpark, so the thread sees it whether it is parked now
            // or parks next (an unpark before a park makes that park return at once).
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One pass of the autoscaler thread: feed the buffered events and a tick to the scaler, on a
/// snapshot of the router, then carry out its actions.
fn scale_once(s: &Shared, scaler: &mut dyn Scaler, manager: &mut dyn ClusterManager, ready: &mut Vec<ClusterId>) -> Result<()> {
    let events = std::mem::take(&mut *s.pending.lock().map_err(|_| AutoSloError::InvalidAction("event buffer poisoned".into()))?);
    // The snapshot: the clusters and, when there are query events to judge, a copy of the
    // router's predictions (the autoslo router; others keep none). Ticks alone need no copy, so
    // an idle control plane does not hold the routing lock for one every tick.
    let (snapshot, infos, now): (Box<dyn Router>, Vec<ClusterInfo>, f64) = {
        let mut r = s.router()?;
        r.advance_to(s.now())?;
        let snap: Box<dyn Router> = match r.router().as_autoslo() {
            Some(a) if !events.is_empty() => Box::new(a.clone()),
            _ => Box::new(RoundRobin::default()),
        };
        (snap, r.infos().to_vec(), r.now().max(s.now()))
    };
    let mut actions = Vec::new();
    // Arrivals and completions enter the windows first, at their own times. Then the routed
    // queries, where the scaler may decide: it decides on the snapshot, which holds every query
    // routed until `now`, so they are judged at `now`, with the windows as they are at `now`.
    // (Judged each at its own time, a decision early in a batch longer than the window w replays
    // arrivals before queries the snapshot already runs, which the selector refuses; and it sees
    // a window without the batch's later arrivals.)
    for p in &events {
        let (t, ev) = match p {
            Pending::Arrival(q) => (q.arrival, Event::Arrival { query: q }),
            Pending::Completion(q, c, l, to) => (q.arrival + l, Event::Completion { query: q, cluster: *c, latency: *l, censored: *to }),
            Pending::Routed(..) => continue,
        };
        actions.extend(scaler.on_event(t, &ev, &infos, snapshot.as_ref()));
    }
    for p in &events {
        if let Pending::Routed(q, c) = p {
            actions.extend(scaler.on_event(now, &Event::Routed { query: q, cluster: *c }, &infos, snapshot.as_ref()));
        }
    }
    for c in infos.iter().filter(|c| c.state == ClusterState::Ready && c.ready_at > 0.0) {
        if !ready.contains(&c.id) {
            ready.push(c.id);
            actions.extend(scaler.on_event(now, &Event::ClusterReady { cluster: c.id }, &infos, snapshot.as_ref()));
        }
    }
    actions.extend(scaler.on_event(now, &Event::Tick, &infos, snapshot.as_ref()));
    if let Ok(mut log) = s.log.lock() {
        log.extend(scaler.take_failures().into_iter().map(|(t, why)| LiveEvent { time: t, cluster: None, size: 0, kind: "skipped", cause: "skipped", reason: why }));
    }
    for a in actions {
        let entry = match a {
            Action::SpinUp { size, reason } => {
                // Only this thread adds clusters, so the id read here is the one added below; the
                // routing lock is not held while the manager works.
                let id = s.router()?.next_cluster_id();
                let ready_at = manager.spin_up(id, size, now)?;
                let got = if manager.confirms_readiness() { s.router()?.add_cluster_unconfirmed(size, Some(ready_at))? } else { s.router()?.add_cluster(size, Some(ready_at))? };
                debug_assert_eq!(got, id);
                LiveEvent { time: now, cluster: Some(got), size, kind: "spinup", cause: reason, reason: reason.to_string() }
            }
            Action::TearDown { cluster, reason } => {
                let size = infos.iter().find(|c| c.id == cluster).map_or(0, |c| c.size);
                match s.router()?.remove_cluster(cluster) {
                    Ok(()) => {
                        manager.tear_down(cluster, size, now)?;
                        LiveEvent { time: now, cluster: Some(cluster), size, kind: "teardown", cause: reason, reason: reason.to_string() }
                    }
                    Err(e) => LiveEvent { time: now, cluster: Some(cluster), size, kind: "skipped", cause: "skipped", reason: format!("{reason}: {e}") },
                }
            }
        };
        s.log.lock().map_err(|_| AutoSloError::InvalidAction("event log poisoned".into()))?.push(entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::snowflake::{Policy, SnowflakeScaler};

    #[test]
    fn routes_while_the_scaler_adds_clusters_in_the_background() {
        // A Snowflake standard scaler (no predictor needed): more than 2 × 8 outstanding queries
        // on two clusters starts a third; time runs 1000× so the 0.3 s spinup is 0.3 ms.
        let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(16), 1, 3, 8).unwrap());
        let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 0.3, teardown_s: 0.1 }, 1).unwrap());
        let cp = Arc::new(ControlPlane::start(Box::new(RoundRobin::default()), &[16, 16], scaler, manager, 5.0, 1000.0).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let cp = Arc::clone(&cp);
                std::thread::spawn(move || (0..10u64).map(|i| cp.route(t * 100 + i, QueryText { template: 3, instance: 1 }, 60.0).unwrap()).collect::<Vec<_>>())
            })
            .collect();
        let routed: Vec<ClusterId> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
        assert_eq!(routed.len(), 40);
        // Wait for the observable state; the deadline only guards against a hang (a loaded
        // machine can hold the background thread for seconds).
        let deadline = Instant::now() + Duration::from_secs(120);
        while cp.events().iter().all(|e| e.kind != "spinup") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let ev = cp.events();
        assert!(ev.iter().any(|e| e.kind == "spinup" && e.reason == "snowflake-start"), "{ev:?}");
        while cp.clusters().unwrap().iter().filter(|c| c.3).count() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(cp.clusters().unwrap().len(), 3);
        for t in 0..4u64 {
            for i in 0..10u64 {
                cp.complete(t * 100 + i, false).unwrap();
            }
        }
        assert!(cp.complete(0, false).is_err(), "completed twice");
    }

    #[test]
    fn stopping_does_not_wait_for_the_next_pass() {
        // A day between passes: a stop that slept the period out would hang here for that day.
        let scaler = Box::new(SnowflakeScaler::new(Policy::Standard, Some(16), 1, 3, 8).unwrap());
        let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 0.3, teardown_s: 0.1 }, 1).unwrap());
        let mut cp = ControlPlane::start(Box::new(RoundRobin::default()), &[16], scaler, manager, 86_400.0, 1.0).unwrap();
        assert_eq!(cp.route(1, QueryText { template: 3, instance: 1 }, 60.0).unwrap(), 0);
        let asked = Instant::now();
        cp.stop();
        assert!(asked.elapsed() < Duration::from_secs(60), "stop waited {:?} for a pass a day away", asked.elapsed());
        assert!(cp.worker.is_none());
        // Routing keeps working on the current clusters; a second stop, and the drop, are no-ops.
        assert_eq!(cp.route(2, QueryText { template: 3, instance: 1 }, 60.0).unwrap(), 0);
        cp.stop();
        assert!(cp.events().is_empty(), "no pass ran");
    }

    #[test]
    fn the_books_count_what_was_served_per_tenant_and_class_and_attribute_the_whole_bill() {
        // Time runs 1000×: 1 ms of wall clock is 1 s of the control plane's; the billing minimum is 60 s.
        let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 1.0, teardown_s: 1.0 }, 1).unwrap());
        let cp = ControlPlane::start(Box::new(RoundRobin::default()), &[16, 32], Box::new(crate::control::StaticScaler), manager, 5.0, 1000.0).unwrap();
        let cp = cp.with_billing(BillingPolicy { price_per_rpu_hour: 0.375, minimum_s: 60.0 }).unwrap();
        let text = QueryText { template: 3, instance: 1 };
        for (q, tenant, class) in [(1, "acme", "dashboard"), (2, "acme", "dashboard"), (3, "", ""), (4, "zeta", "report")] {
            assert!(cp.route_logged(q, text, tenant, class, Some(1e6)).unwrap().is_ok());
        }
        assert!(cp.route_logged(1, text, "acme", "dashboard", Some(1e6)).unwrap_err().to_string().contains("already routed"));
        assert!(cp.route_logged(5, text, "acme", "dashboard", None).is_err(), "no SLO: refused, not counted");
        std::thread::sleep(Duration::from_millis(20));
        cp.complete_logged(1, false).unwrap();
        cp.complete_logged(3, true).unwrap();
        assert!(cp.complete_logged(3, false).is_err(), "completed twice");
        let totals = cp.served_totals();
        let names: Vec<(&str, &str, u64, u64, u64)> = totals.iter().map(|t| (t.tenant.as_str(), t.class.as_str(), t.routed, t.met, t.timed_out)).collect();
        assert_eq!(names, [("acme", "dashboard", 2, 1, 0), ("default", "adhoc", 1, 0, 1), ("zeta", "report", 1, 0, 0)]);
        assert_eq!(totals.iter().map(ServedTotals::running).sum::<u64>(), 2);
        std::thread::sleep(Duration::from_millis(20));
        cp.complete_logged(2, false).unwrap();
        cp.complete_logged(4, false).unwrap();
        // Past every cluster's billing minimum, every cost is final: the log attributes the whole bill.
        std::thread::sleep(Duration::from_millis(150));
        let log = cp.take_served();
        assert_eq!(log.len(), 4);
        assert!(log.iter().all(|q| q.cost > 0.0 && q.cluster.is_some()), "{log:?}");
        let bill = cp.served_cost();
        assert!(bill > 0.0 && (log.iter().map(|q| q.cost).sum::<f64>() - bill).abs() < 1e-9 * bill, "{bill} vs {log:?}");
        assert!(cp.take_served().is_empty(), "taken once");
        assert_eq!(cp.log_dropped(), 0);
    }

    #[test]
    fn the_served_slo_policy_sets_a_routed_querys_slo() {
        let start = || {
            let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 1.0, teardown_s: 1.0 }, 1).unwrap());
            ControlPlane::start(Box::new(RoundRobin::default()), &[16], Box::new(crate::control::StaticScaler), manager, 0.05, 1.0).unwrap()
        };
        let text = QueryText { template: 3, instance: 1 };
        let plain = start();
        assert_eq!(plain.slo_of("t", "adhoc", text, Some(7.0)), Ok(7.0));
        assert!(plain.slo_of("t", "adhoc", text, None).unwrap_err().to_string().contains("has no SLO policy"));
        assert!(plain.slo_of("t", "adhoc", text, Some(-1.0)).is_err());
        let policy: SloPolicy = serde_json::from_str(r#"{"tiers": {"aster": "premium"}, "deadlines": [{"tier": "premium", "class": "dashboard", "deadline_s": 2}, {"tier": "*", "class": "dashboard", "deadline_s": 5}]}"#).unwrap();
        let cp = start().with_slo_policy(Some(policy)).unwrap();
        assert_eq!(cp.slo_of("aster", "dashboard", text, Some(60.0)), Ok(2.0), "the policy's deadline wins where it has one");
        assert_eq!(cp.slo_of("cedar", "dashboard", text, None), Ok(5.0));
        assert_eq!(cp.slo_of("cedar", "adhoc", text, Some(60.0)), Ok(60.0), "uncovered: the query's own");
        assert!(cp.slo_of("cedar", "adhoc", text, None).unwrap_err().to_string().contains("no rule of the SLO policy covers template 3 of tenant `cedar`, class `adhoc`"));
        assert!(cp.route_by_policy(1, text, "aster", "dashboard", None).is_ok());
        assert!(cp.route_by_policy(2, text, "cedar", "adhoc", None).is_err());
        let bad: SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "x", "deadline_s": 0}]}"#).unwrap();
        assert!(start().with_slo_policy(Some(bad)).is_err());
    }

    #[cfg(feature = "torch")]
    #[test]
    fn admission_refuses_infeasible_deadlines_and_tenants_past_their_budgets_by_name() {
        use crate::billing::BillingPolicy;
        use crate::predictor::{Backend, Predictor};
        use crate::trace::RejectReason;
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models/iconq_plus");
        let model = Predictor::load(&dir, Backend::Native).unwrap();
        let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 1.0, teardown_s: 1.0 }, 1).unwrap());
        let cp = ControlPlane::start(Box::new(RoundRobin::default()), &[8], Box::new(crate::control::StaticScaler), manager, 0.05, 1.0).unwrap();
        let text = QueryText { template: 3, instance: 1 };
        assert_eq!(cp.admit(1, text, "acme", 1e-6, 0.0), Ok(Ok(0.0)), "no admission: every query");
        // acme may spend two and a half queries' worth of estimated dollars per day.
        let est = model.stage.estimate(text, 8).unwrap();
        let budgets = [("acme".to_string(), 2.5 * BillingPolicy::default().cost(8, est))].into_iter().collect();
        let admission = NamedAdmission::new(&model, BillingPolicy::default(), Some((1.0, None)), Some((budgets, 86_400.0))).unwrap();
        cp.set_admission(admission).unwrap();
        let per_query = BillingPolicy::default().cost(8, est);
        assert_eq!(cp.admit(1, text, "beta", est / 10.0, 0.0), Ok(Err(RejectReason::InfeasibleDeadline)));
        assert_eq!(cp.admit(2, text, "acme", 60.0, 10.0), Ok(Ok(per_query)), "charged its estimate");
        assert_eq!(cp.admit(3, text, "acme", 60.0, 20.0), Ok(Ok(per_query)));
        assert_eq!(cp.admit(4, text, "acme", 60.0, 30.0), Ok(Err(RejectReason::Budget)));
        // Admitted and routed, or refused and not: a budget clears when its window ends.
        assert_eq!(cp.route_admitted(40, text, "acme", 60.0, 30.0), Ok(Err(Rejection { reason: RejectReason::Budget, retry_after_s: Some(86_370.0) })));
        assert_eq!(cp.route_admitted(41, text, "beta", est / 10.0, 30.0), Ok(Err(Rejection { reason: RejectReason::InfeasibleDeadline, retry_after_s: None })));
        assert_eq!(cp.route_admitted(42, text, "beta", 60.0, 30.0), Ok(Ok((0, 0.0))));
        assert_eq!(cp.route_admitted(43, text, "", 60.0, 30.0), Ok(Ok((0, 0.0))), "no tenant: `default`, unbudgeted here");
        assert_eq!(cp.clusters().unwrap()[0].2, 2, "the refused queries took no cluster");
        cp.complete(42, false).unwrap();
        cp.complete(43, false).unwrap();
        assert_eq!(cp.admit(5, text, "beta", 60.0, 40.0), Ok(Ok(0.0)), "beta has no budget");
        // The next day's window: acme is admitted again.
        assert_eq!(cp.admit(6, text, "acme", 60.0, 86_400.0 + 5.0), Ok(Ok(per_query)));
        // A restart restores what was spent: a query and a half's worth already spent today
        // leaves room for one more query, not two.
        let restarted = NamedAdmission::new(&model, BillingPolicy::default(), None, Some(([("acme".to_string(), 2.75 * per_query)].into_iter().collect(), 86_400.0))).unwrap();
        cp.set_admission(restarted).unwrap();
        cp.charge_budget("acme", 86_400.0 + 10.0, 1.5 * per_query).unwrap();
        cp.charge_budget("acme", 10.0, 100.0 * per_query).unwrap(); // another day's window
        assert!(cp.charge_budget("acme", 86_400.0, -1.0).is_err(), "a negative charge");
        assert_eq!(cp.admit(8, text, "acme", 60.0, 86_400.0 + 20.0), Ok(Ok(per_query)));
        assert_eq!(cp.admit(9, text, "acme", 60.0, 86_400.0 + 30.0), Ok(Err(RejectReason::Budget)));
        let standing = cp.budgets(86_400.0 + 40.0).unwrap();
        assert_eq!(standing.len(), 1, "only budgeted tenants: {standing:?}");
        assert_eq!((standing[0].tenant.as_str(), standing[0].window_start), ("acme", 86_400.0));
        assert!((standing[0].spent - 2.5 * per_query).abs() < 1e-12 && (standing[0].budget - 2.75 * per_query).abs() < 1e-12, "{standing:?}");
        // Neither given: no admission.
        assert!(NamedAdmission::new(&model, BillingPolicy::default(), None, None).unwrap().is_none());
        assert!(NamedAdmission::new(&model, BillingPolicy::default(), Some((0.5, None)), None).is_err(), "a margin below 1");
        cp.set_admission(None).unwrap();
        assert_eq!(cp.admit(7, text, "acme", 1e-6, 0.0), Ok(Ok(0.0)));
        assert_eq!(cp.charge_budget("acme", 0.0, 1.0), Ok(()), "no budgets: nothing to charge");
        assert_eq!(cp.budgets(0.0), Ok(vec![]));
    }

    #[test]
    fn a_replaced_scaler_takes_over_and_a_refused_policy_leaves_the_one_in_force() {
        use crate::control::{ScheduledAction, ScheduledScaler};
        // A static scaler, replaced by a schedule that spins up a 32 at once.
        let manager = Box::new(InProcessManager::new(Lifecycle::Fixed { spinup_s: 0.3, teardown_s: 0.1 }, 1).unwrap());
        let cp = ControlPlane::start(Box::new(RoundRobin::default()), &[16], Box::new(crate::control::StaticScaler), manager, 5.0, 1000.0).unwrap();
        let policy: SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}"#).unwrap();
        cp.set_slo_policy(Some(policy)).unwrap();
        let text = QueryText { template: 3, instance: 1 };
        assert_eq!(cp.slo_of("t", "dashboard", text, None), Ok(5.0));
        let bad: SloPolicy = serde_json::from_str(r#"{"deadlines": [{"tier": "*", "class": "x", "deadline_s": 0}]}"#).unwrap();
        assert!(cp.set_slo_policy(Some(bad)).is_err());
        assert_eq!(cp.slo_of("t", "dashboard", text, None), Ok(5.0), "a refused policy leaves the one in force");
        let schedule = ScheduledScaler::new(vec![ScheduledAction { at: 0.0, action: Action::spin_up(32, "scheduled") }], 1.0).unwrap();
        cp.replace_scaler(Box::new(schedule)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cp.clusters().unwrap().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(cp.clusters().unwrap().iter().map(|c| c.1).collect::<Vec<_>>(), vec![16, 32]);
        assert!(cp.events().iter().any(|e| e.kind == "spinup" && e.size == 32 && e.reason == "scheduled"));
        cp.record("plan", "handed over".into());
        assert_eq!(cp.events().last().map(|e| (e.kind, e.cluster)), Some(("plan", None)));
    }
}
