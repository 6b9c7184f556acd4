//! Live mode: replay a workload against real clusters, in real time (optionally compressed),
//! routing every query with the Query Router and scaling with the Autoscaler through the
//! Redshift Serverless cluster manager; queries run as SQL over the PostgreSQL wire protocol
//! (tokio-postgres, a connection pool per cluster) and their latency is measured at the client.
//!
//! Clocks: the control plane's clock is real time × `time_scale`. Arrivals are replayed at
//! `arrival / time_scale` real seconds, and every time in the trace (arrival, start, end,
//! latency) is on the control plane's clock, the scale SLOs are written in; the measured
//! client-side seconds are kept beside them.
//!
//! Nothing is lost: every query ends with exactly one row. A query whose cluster dies under it
//! (connection closed, server shut down, connection refused), or whose cluster never becomes
//! available, is retried once on another cluster under the same query id (`attempts` = 2); a
//! second loss makes it `failed`. A query over its timeout is `timeout`; one the run was stopped
//! before finishing is `cancelled`. A lost cluster leaves the router at once, and its workgroup
//! is deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autoslo_core::autoscaler::Decision;
use autoslo_core::billing::{BillingPolicy, BillingTimer};
use autoslo_core::cluster::ClusterId;
use autoslo_core::control::{Router, Scaler};
use autoslo_core::control_plane::{ClusterManager, ControlPlane, LiveEvent};
use autoslo_core::trace::{attribute_cost_by_work, ClusterEvent, ClusterRecord, Outcome, Trace, TraceRow};
use autoslo_core::tuner::BatchControl;
use autoslo_core::workload::Workload;
use deadpool_postgres::{Pool, Runtime};
use tokio_postgres::NoTls;

use crate::error::{CloudError, Result};
use crate::manager::{Capacity, RedshiftServerless, WorkgroupInfo};

/// How a live run behaves.
#[derive(Debug, Clone)]
pub struct LiveSettings {
    /// Control-plane seconds per real second (1: real time; 60: an hour in a minute).
    pub time_scale: f64,
    /// Per-query timeout on the control plane's clock (`None`: none).
    pub timeout_s: Option<f64>,
    /// Connections per cluster.
    pub pool_size: usize,
    /// Real seconds to wait for a workgroup the autoscaler starts to become AVAILABLE before it
    /// counts as lost (its queries go elsewhere).
    pub create_timeout_s: f64,
    /// Real seconds to wait for the initial clusters, before the replay starts (`None`: as
    /// `create_timeout_s`). The run stops with the wait's error if one of them does not come up.
    pub initial_timeout_s: Option<f64>,
    /// Real seconds to wait for a deleted workgroup to go.
    pub delete_timeout_s: f64,
    /// Workgroup names are `<prefix>-<cluster id>`.
    pub name_prefix: String,
    /// The autoscaler runs every `tick_s` control-plane seconds.
    pub tick_s: f64,
    /// The spinup delay the router assumes for a new cluster (control-plane s).
    pub expected_spinup_s: f64,
    pub billing: BillingPolicy,
    /// Attempts per query (1: no retry; 2: retry once on another cluster).
    pub max_attempts: u32,
    /// Leave the workgroups in place at the end (default: delete them).
    pub keep_clusters: bool,
    /// Leave in place, at the start, the workgroups `<prefix>-<n>` beyond the initial clusters
    /// that an earlier run under the same prefix left (it died, or kept its clusters). By
    /// default they are deleted while the initial clusters are made: the prefix is the
    /// fleet's, and a later spinup of cluster `n` would take such a workgroup over anyway.
    pub keep_leftovers: bool,
    /// The database user, database and password queries connect with (the local endpoint's
    /// servers trust `autoslo` on `postgres`; on AWS, the namespace's admin user on `dev`).
    pub db_user: String,
    pub db_name: String,
    pub db_password: Option<String>,
}

impl Default for LiveSettings {
    fn default() -> Self {
        Self {
            time_scale: 1.0,
            timeout_s: Some(3600.0),
            pool_size: 8,
            create_timeout_s: 900.0,
            initial_timeout_s: None,
            delete_timeout_s: 900.0,
            name_prefix: "autoslo".into(),
            tick_s: 10.0,
            expected_spinup_s: 300.0,
            billing: BillingPolicy::default(),
            max_attempts: 2,
            keep_clusters: false,
            keep_leftovers: false,
            db_user: crate::pg::LOCAL_USER.into(),
            db_name: crate::pg::LOCAL_DB.into(),
            db_password: None,
        }
    }
}

impl LiveSettings {
    fn validate(&self) -> Result<()> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(CloudError::out_of_range("time scale", "a finite factor > 0", self.time_scale));
        }
        if let Some(t) = self.timeout_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(CloudError::out_of_range("query timeout", "> 0 s", t));
            }
        }
        if self.pool_size == 0 {
            return Err(CloudError::out_of_range("pool size", "≥ 1 connection", 0));
        }
        if !(1..=5).contains(&self.max_attempts) {
            return Err(CloudError::out_of_range("attempts per query", "1 to 5", self.max_attempts));
        }
        for (what, v) in [("create timeout", self.create_timeout_s), ("initial create timeout", self.initial_timeout_s.unwrap_or(0.0)), ("delete timeout", self.delete_timeout_s), ("expected spinup", self.expected_spinup_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(CloudError::out_of_range(what, "≥ 0 s", v));
            }
        }
        self.billing.validated()?;
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if self.name_prefix.is_empty() || self.name_prefix.len() > 40 || !self.name_prefix.chars().all(ok) {
            return Err(CloudError::out_of_range("workgroup name prefix", "1-40 lowercase letters, digits or hyphens", &self.name_prefix));
        }
        Ok(())
    }
}

/// The control plane's clock: real time since the start × the time scale.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    scale: f64,
}

impl Clock {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * self.scale
    }
    fn real(&self, t: f64) -> Instant {
        self.start + Duration::from_secs_f64((t / self.scale).max(0.0))
    }
}

#[derive(Clone)]
pub(crate) enum SlotState {
    Pending,
    Ready(Pool),
    Failed(String),
    Gone,
}

pub(crate) struct Slot {
    pub(crate) name: String,
    pub(crate) size: u32,
    /// The workgroup's endpoint (address, port), once it is available.
    pub(crate) endpoint: Option<(String, u16)>,
    pub(crate) state: SlotState,
    pub(crate) inflight: usize,
    requested_at: f64,
    ready_at: Option<f64>,
    teardown_at: Option<f64>,
    gone_at: Option<f64>,
    failed_reported: bool,
    /// The control plane knows it is ready (the watchdog told it; initial clusters start ready).
    pub(crate) ready_reported: bool,
}

/// The clusters of a run, shared by the manager, the query tasks and the watchdog.
pub(crate) struct Fleet {
    slots: Mutex<HashMap<ClusterId, Slot>>,
    rs: RedshiftServerless,
    rt: tokio::runtime::Handle,
    pub(crate) settings: LiveSettings,
    clock: Clock,
}

impl Fleet {
    pub(crate) fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterId, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn name(&self, id: ClusterId) -> String {
        format!("{}-{id}", self.settings.name_prefix)
    }

    fn pool(&self, w: &WorkgroupInfo) -> Result<Pool> {
        let mut cfg = deadpool_postgres::Config::new();
        cfg.host = w.address.clone();
        cfg.port = w.port;
        cfg.user = Some(self.settings.db_user.clone());
        cfg.dbname = Some(self.settings.db_name.clone());
        cfg.password = self.settings.db_password.clone();
        cfg.connect_timeout = Some(Duration::from_secs(10));
        cfg.pool = Some(deadpool_postgres::PoolConfig::new(self.settings.pool_size));
        cfg.create_pool(Some(Runtime::Tokio1), NoTls).map_err(|e| CloudError::Postgres(format!("cannot make a connection pool for {}: {e}", w.name)))
    }

    /// Create cluster `id`'s workgroup and wait for it; then it is Ready, or Failed.
    async fn bring_up(self: Arc<Self>, id: ClusterId, size: u32) {
        let name = self.name(id);
        let timeout = Duration::from_secs_f64(self.settings.create_timeout_s);
        let outcome = match self.rs.create_cluster(&name, Capacity::Base(size), timeout).await {
            Ok(w) => self.pool(&w).map(|p| (p, endpoint_of(&w))),
            Err(e) => Err(e),
        };
        let now = self.clock.now();
        let lost = {
            let mut slots = self.slots();
            let Some(s) = slots.get_mut(&id) else { return };
            match outcome {
                Ok((pool, endpoint)) if matches!(s.state, SlotState::Pending) => {
                    s.state = SlotState::Ready(pool);
                    s.endpoint = endpoint;
                    s.ready_at = Some(now);
                    false
                }
                Ok(_) => false,
                Err(e) => {
                    s.state = SlotState::Failed(e.to_string());
                    true
                }
            }
        };
        if lost {
            // A workgroup that never became available is deleted (best effort).
            let _ = self.rs.delete_cluster(&name, Duration::from_secs_f64(self.settings.delete_timeout_s)).await;
        }
    }

    /// Delete cluster `id` once its queries are done.
    async fn drain_and_delete(self: Arc<Self>, id: ClusterId) {
        loop {
            let busy = self.slots().get(&id).map_or(0, |s| s.inflight);
            if busy == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let name = self.name(id);
        let _ = self.rs.delete_cluster(&name, Duration::from_secs_f64(self.settings.delete_timeout_s)).await;
        let now = self.clock.now();
        if let Some(s) = self.slots().get_mut(&id) {
            s.state = SlotState::Gone;
            s.gone_at = Some(now);
        }
    }

    /// Mark a cluster lost (its server died under a query); the watchdog tells the router.
    pub(crate) fn lose(&self, id: ClusterId, why: String) {
        if let Some(s) = self.slots().get_mut(&id) {
            if !matches!(s.state, SlotState::Failed(_) | SlotState::Gone) {
                s.state = SlotState::Failed(why);
            }
        }
    }
}

/// The control plane's cluster manager: workgroups through [`RedshiftServerless`].
struct CloudManager {
    fleet: Arc<Fleet>,
}

impl ClusterManager for CloudManager {
    fn spin_up(&mut self, cluster: ClusterId, size: u32, now: f64) -> autoslo_core::error::Result<f64> {
        let name = self.fleet.name(cluster);
        self.fleet.slots().insert(cluster, Slot { name, size, endpoint: None, state: SlotState::Pending, inflight: 0, requested_at: now, ready_at: None, teardown_at: None, gone_at: None, failed_reported: false, ready_reported: false });
        self.fleet.rt.spawn(Arc::clone(&self.fleet).bring_up(cluster, size));
        Ok(now + self.fleet.settings.expected_spinup_s)
    }
    fn tear_down(&mut self, cluster: ClusterId, _size: u32, now: f64) -> autoslo_core::error::Result<()> {
        if let Some(s) = self.fleet.slots().get_mut(&cluster) {
            s.teardown_at = Some(now);
        }
        self.fleet.rt.spawn(Arc::clone(&self.fleet).drain_and_delete(cluster));
        Ok(())
    }
    fn name(&self) -> &str {
        "redshift-serverless"
    }
    /// The watchdog tells the control plane when each workgroup is AVAILABLE: the router sends it
    /// queries from then, not from `expected_spinup_s` after the request (AWS takes about a
    /// minute, `workgroup_lifecycle_timings.yml`; the estimate is a guess either way).
    fn confirms_readiness(&self) -> bool {
        true
    }
}

/// What a live run produced.
#[derive(Debug, Clone)]
pub struct LiveRun {
    /// The trace in the emulator's format (one row per query, clusters with their bills).
    pub trace: Trace,
    /// Attempts per query (row order).
    pub attempts: Vec<u32>,
    /// Measured client-side seconds of the last attempt's SQL (`None` if it never ran).
    pub client_s: Vec<Option<f64>>,
    /// Why a query failed, if it did.
    pub errors: Vec<Option<String>>,
    /// The control plane's log (spinups, teardowns, failures, skipped decisions).
    pub events: Vec<LiveEvent>,
    /// The scaler's decisions, with the options it compared.
    pub decisions: Vec<Decision>,
    /// The workgroup behind each cluster.
    pub workgroups: Vec<(ClusterId, String)>,
}

struct Done {
    row: TraceRow,
    attempts: u32,
    client_s: Option<f64>,
    error: Option<String>,
}

/// Whether an error means the cluster is gone (rather than the query being wrong).
fn cluster_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(c) => {
            let c = c.code();
            c.starts_with("08") || c.starts_with("57P")
        }
        // No SQLSTATE: an I/O error on the connection.
        None => e.as_db_error().is_none(),
    }
}

fn is_statement_timeout(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code() == "57014")
}

struct Ctx {
    cp: ControlPlane,
    fleet: Arc<Fleet>,
    clock: Clock,
    sql: HashMap<u16, Arc<str>>,
    control: Arc<BatchControl>,
}

async fn run_query(ctx: Arc<Ctx>, qi: usize, q: autoslo_core::workload::Query) -> Done {
    let s = &ctx.fleet.settings;
    let cancelled = |arrival: f64, attempts| Done {
        row: TraceRow { query: qi, cluster: None, cluster_size: None, arrival, start: None, end: arrival, latency: 0.0, outcome: Outcome::Cancelled, work: 0.0, cost: 0.0, cost_micro_usd: 0 },
        attempts,
        client_s: None,
        error: None,
    };
    let arrive = tokio::time::Instant::from_std(ctx.clock.real(q.arrival));
    tokio::select! {
        _ = tokio::time::sleep_until(arrive) => {}
        _ = wait_cancel(&ctx.control) => return cancelled(q.arrival, 0),
    }
    let arrival = ctx.clock.now().max(q.arrival);
    let deadline = s.timeout_s.map(|t| arrival + t);
    let sql = match ctx.sql.get(&q.text.template) {
        Some(s) => Arc::clone(s),
        None => unreachable!("templates are checked before the run"),
    };
    let mut attempts = 0;
    let mut last_error: Option<String> = None;
    let failed = |cluster: Option<(ClusterId, u32)>, attempts, error: Option<String>, now: f64| Done {
        row: TraceRow { query: qi, cluster: cluster.map(|c| c.0), cluster_size: cluster.map(|c| c.1), arrival, start: None, end: now, latency: now - arrival, outcome: Outcome::Failed, work: 0.0, cost: 0.0, cost_micro_usd: 0 },
        attempts,
        client_s: None,
        error,
    };
    while attempts < s.max_attempts {
        attempts += 1;
        let routed = tokio::task::block_in_place(|| ctx.cp.route(q.id, q.text, q.slo));
        let c = match routed {
            Ok(c) => c,
            Err(e) => return failed(None, attempts, Some(format!("routing: {e}")), ctx.clock.now()),
        };
        // Wait for the cluster to be ready (the router may pick one still starting).
        let (pool, size) = loop {
            let st = ctx.fleet.slots().get(&c).map(|sl| (sl.state.clone(), sl.size));
            match st {
                Some((SlotState::Ready(p), size)) => break (Some(p), size),
                Some((SlotState::Pending, _)) if deadline.is_none_or(|d| ctx.clock.now() < d) && !ctx.control.cancelled() => tokio::time::sleep(Duration::from_millis(10)).await,
                Some((SlotState::Failed(why), size)) => {
                    // Out of the router now (the watchdog may not have seen it yet), so the
                    // retry goes elsewhere.
                    let _ = ctx.cp.fail_cluster(c, &why);
                    last_error = Some(format!("cluster {c} lost: {why}"));
                    break (None, size);
                }
                Some((_, size)) => break (None, size),
                None => break (None, 0),
            }
        };
        let Some(pool) = pool else {
            let _ = ctx.cp.complete(q.id, true);
            if ctx.control.cancelled() {
                return cancelled(arrival, attempts);
            }
            if deadline.is_some_and(|d| ctx.clock.now() >= d) {
                let end = deadline.unwrap_or(arrival);
                return Done { row: TraceRow { query: qi, cluster: Some(c), cluster_size: Some(size), arrival, start: None, end, latency: end - arrival, outcome: Outcome::TimedOut, work: 0.0, cost: 0.0, cost_micro_usd: 0 }, attempts, client_s: None, error: Some("timed out waiting for its cluster".into()) };
            }
            continue;
        };
        if let Some(sl) = ctx.fleet.slots().get_mut(&c) {
            sl.inflight += 1;
        }
        let start = ctx.clock.now();
        let t0 = Instant::now();
        // The server cancels a statement over the remaining time; the client gives it 5 s more.
        let remaining_real = deadline.map(|d| ((d - start) / ctx.clock.scale).max(0.001));
        let exec = async {
            let client = pool.get().await.map_err(|e| match e {
                deadpool_postgres::PoolError::Backend(e) => ExecError::Pg(e),
                other => ExecError::Unreachable(other.to_string()),
            })?;
            if let Some(r) = remaining_real {
                client.batch_execute(&format!("SET statement_timeout = {}", (r * 1000.0).ceil() as u64)).await.map_err(ExecError::Pg)?;
            }
            client.simple_query(&sql).await.map(|_| ()).map_err(ExecError::Pg)
        };
        let result = tokio::select! {
            r = exec => Some(r),
            _ = tokio::time::sleep(Duration::from_secs_f64(remaining_real.map_or(f64::MAX / 4.0, |r| r + 5.0).min(1e9))) => None,
            _ = wait_cancel(&ctx.control) => { if let Some(sl) = ctx.fleet.slots().get_mut(&c) { sl.inflight -= 1; } let _ = ctx.cp.complete(q.id, true); return cancelled(arrival, attempts); }
        };
        let client_s = t0.elapsed().as_secs_f64();
        let end = ctx.clock.now();
        if let Some(sl) = ctx.fleet.slots().get_mut(&c) {
            sl.inflight -= 1;
        }
        let row = |outcome, end: f64, latency: f64| TraceRow { query: qi, cluster: Some(c), cluster_size: Some(size), arrival, start: Some(start), end, latency, outcome, work: end - start, cost: 0.0, cost_micro_usd: 0 };
        match result {
            Some(Ok(())) => {
                let _ = ctx.cp.complete(q.id, false);
                return Done { row: row(Outcome::Completed, end, end - arrival), attempts, client_s: Some(client_s), error: None };
            }
            Some(Err(ExecError::Pg(e))) if is_statement_timeout(&e) => {
                let _ = ctx.cp.complete(q.id, true);
                let end = deadline.unwrap_or(end);
                return Done { row: row(Outcome::TimedOut, end, end - arrival), attempts, client_s: Some(client_s), error: None };
            }
            None => {
                let _ = ctx.cp.complete(q.id, true);
                let end = deadline.unwrap_or(end);
                return Done { row: row(Outcome::TimedOut, end, end - arrival), attempts, client_s: Some(client_s), error: Some("no answer from the server within the timeout".into()) };
            }
            Some(Err(e)) if e.cluster_lost() => {
                let _ = ctx.cp.complete(q.id, true);
                let why = format!("{e}");
                ctx.fleet.lose(c, why.clone());
                // Out of the router now, so the retry goes to another cluster.
                let _ = ctx.cp.fail_cluster(c, &why);
                last_error = Some(format!("cluster {c} lost: {why}"));
            }
            Some(Err(e)) => {
                let _ = ctx.cp.complete(q.id, true);
                let mut d = failed(Some((c, size)), attempts, Some(format!("SQL error: {e}")), end);
                d.row.start = Some(start);
                return d;
            }
        }
    }
    failed(None, attempts, last_error, ctx.clock.now())
}

/// Why running a statement failed.
#[derive(Debug)]
enum ExecError {
    Pg(tokio_postgres::Error),
    /// The pool could not hand out a connection (the server is unreachable).
    Unreachable(String),
}

impl ExecError {
    fn cluster_lost(&self) -> bool {
        match self {
            ExecError::Pg(e) => cluster_lost(e),
            ExecError::Unreachable(_) => true,
        }
    }
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // tokio-postgres's Display omits the server's message; the Debug of a DbError has it.
            ExecError::Pg(e) => match e.as_db_error() {
                Some(db) => write!(f, "{} ({})", db.message(), db.code().code()),
                None => write!(f, "{e}"),
            },
            ExecError::Unreachable(m) => write!(f, "{m}"),
        }
    }
}

async fn wait_cancel(control: &BatchControl) {
    while !control.cancelled() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Replay `workload` live: create the initial clusters (`sizes`), start the control plane
/// (`router` on the request path, `scaler` off it, through the cluster manager `rs`), run every
/// query's SQL (`sql`: text per template) at its arrival, then delete the clusters. `control`
/// counts queries done and stops the run when cancelled (the queries left are `cancelled`).
#[allow(clippy::too_many_arguments)]
pub fn run_live(
    rs: RedshiftServerless,
    workload: &Workload,
    sql: &HashMap<u16, String>,
    router: Box<dyn Router>,
    scaler: Box<dyn Scaler>,
    sizes: &[u32],
    settings: LiveSettings,
    control: Arc<BatchControl>,
) -> Result<LiveRun> {
    check_fleet(sizes, &settings)?;
    let mut missing: Vec<u16> = workload.queries().iter().map(|q| q.text.template).filter(|t| !sql.contains_key(t)).collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        return Err(CloudError::MissingSql(missing));
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("autoslo-live").enable_all().build().map_err(CloudError::io("cannot start the live runtime"))?;
    let handle = rt.handle().clone();
    rt.block_on(async move {
        let (fleet, cp) = start_fleet(&rs, handle, router, scaler, sizes, &settings).await?;
        let clock = fleet.clock;
        let ctx = Arc::new(Ctx { cp, fleet: Arc::clone(&fleet), clock, sql: sql.iter().map(|(k, v)| (*k, Arc::from(v.as_str()))).collect(), control: Arc::clone(&control) });

        let wd = {
            let ctx = Arc::clone(&ctx);
            tokio::spawn(async move {
                loop {
                    watch_once(&ctx.cp, &ctx.fleet);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };

        let n = workload.len();
        control.add_total(n);
        let tasks: Vec<_> = workload
            .queries()
            .iter()
            .enumerate()
            .map(|(qi, q)| {
                let ctx = Arc::clone(&ctx);
                let q = *q;
                tokio::spawn(async move {
                    let d = run_query(Arc::clone(&ctx), qi, q).await;
                    ctx.control.add_done(1);
                    d
                })
            })
            .collect();
        let mut done: Vec<Done> = Vec::with_capacity(n);
        for t in tasks {
            done.push(t.await.map_err(|e| CloudError::Postgres(format!("a query task panicked: {e}")))?);
        }
        wd.abort();
        let _ = wd.await;
        let end = clock.now();
        let Ok(ctx) = Arc::try_unwrap(ctx) else { return Err(CloudError::Postgres("query tasks outlived the run".into())) };
        let mut cp = ctx.cp;
        cp.stop();
        let events = cp.events();
        let decisions = cp.decisions();
        drop(cp);

        delete_left(&fleet).await;
        let finished = clock.now();
        Ok(assemble(workload, done, &fleet, &events, decisions, sizes.len(), end, finished, &settings))
    })
}

/// The settings, and initial clusters of at least one of sizes ≥ 1 RPU.
pub(crate) fn check_fleet(sizes: &[u32], settings: &LiveSettings) -> Result<()> {
    settings.validate()?;
    if sizes.is_empty() || sizes.contains(&0) {
        return Err(CloudError::out_of_range("initial clusters", "at least one, each ≥ 1 RPU", format!("{sizes:?}")));
    }
    Ok(())
}

/// Create the initial clusters of `sizes` together and wait for them (a failure deletes every
/// one of them and is the error), then start the control plane over them with `router` and
/// `scaler`, scaling through workgroups. The clock starts once they are up.
pub(crate) async fn start_fleet(rs: &RedshiftServerless, handle: tokio::runtime::Handle, router: Box<dyn Router>, scaler: Box<dyn Scaler>, sizes: &[u32], settings: &LiveSettings) -> Result<(Arc<Fleet>, ControlPlane)> {
    let create_timeout = Duration::from_secs_f64(settings.initial_timeout_s.unwrap_or(settings.create_timeout_s));
    let names: Vec<String> = (0..sizes.len()).map(|i| format!("{}-{i}", settings.name_prefix)).collect();
    // An earlier run's workgroups beyond the initial ones go while those are made.
    let cleanup = {
        let (rs, settings, initial) = (rs.clone(), settings.clone(), sizes.len());
        tokio::spawn(async move { clean_leftovers(&rs, &settings, initial).await })
    };
    let made = futures_join(names.iter().zip(sizes).map(|(n, &size)| {
        let rs = rs.clone();
        let n = n.clone();
        async move { rs.create_cluster(&n, Capacity::Base(size), create_timeout).await }
    }))
    .await;
    let leftovers = cleanup.await.unwrap_or_else(|e| vec![format!("the clean-up of an earlier run's workgroups stopped: {e}")]);
    let mut infos = Vec::new();
    let mut first_err = None;
    for m in made {
        match m {
            Ok(w) => infos.push(w),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let clock = Clock { start: Instant::now(), scale: settings.time_scale };
    let fleet = Arc::new(Fleet { slots: Mutex::new(HashMap::new()), rs: rs.clone(), rt: handle, settings: settings.clone(), clock });
    if let Some(e) = first_err {
        for n in &names {
            let _ = rs.delete_cluster(n, Duration::from_secs_f64(settings.delete_timeout_s)).await;
        }
        return Err(e);
    }
    for (i, w) in infos.iter().enumerate() {
        let pool = fleet.pool(w)?;
        fleet.slots().insert(i as ClusterId, Slot { name: w.name.clone(), size: sizes[i], endpoint: endpoint_of(w), state: SlotState::Ready(pool), inflight: 0, requested_at: 0.0, ready_at: Some(0.0), teardown_at: None, gone_at: None, failed_reported: false, ready_reported: true });
    }
    let cp = ControlPlane::start(router, sizes, scaler, Box::new(CloudManager { fleet: Arc::clone(&fleet) }), settings.tick_s, settings.time_scale)?;
    for what in leftovers {
        cp.record("leftover", what);
    }
    Ok((fleet, cp))
}

/// The workgroups `<prefix>-<n>` (n ≥ `initial`) an earlier run left, deleted (with their
/// namespaces) unless `keep_leftovers`. Returns what was found and done, in words, for the
/// control plane's log; a failure to list or delete is reported there and does not stop the
/// start.
async fn clean_leftovers(rs: &RedshiftServerless, settings: &LiveSettings, initial: usize) -> Vec<String> {
    let prefix = format!("{}-", settings.name_prefix);
    let ours = |name: &str| name.strip_prefix(&prefix).and_then(|n| if n.chars().all(|c| c.is_ascii_digit()) { n.parse::<usize>().ok() } else { None }).is_some_and(|n| n >= initial);
    let left: Vec<WorkgroupInfo> = match rs.list_workgroups().await {
        Ok(all) => all.into_iter().filter(|w| ours(&w.name)).collect(),
        Err(e) => return vec![format!("could not list the workgroups to find an earlier run's: {e}")],
    };
    let timeout = Duration::from_secs_f64(settings.delete_timeout_s);
    futures_join(left.into_iter().map(|w| {
        let (rs, keep) = (rs.clone(), settings.keep_leftovers);
        async move {
            let what = format!("workgroup {} ({} RPU, {}) left by an earlier run", w.name, w.base_capacity.map_or("?".into(), |c| c.to_string()), w.status);
            if keep {
                return format!("kept {what}");
            }
            match rs.delete_cluster(&w.name, timeout).await {
                Ok(()) => format!("deleted {what}"),
                Err(e) => format!("could not delete {what}: {e}"),
            }
        }
    }))
    .await
}

/// One pass of the watchdog: a workgroup that became available takes queries from now; a lost
/// cluster leaves the router and its workgroup is deleted.
pub(crate) fn watch_once(cp: &ControlPlane, fleet: &Arc<Fleet>) {
    let up: Vec<ClusterId> = fleet.slots().iter().filter(|(_, s)| matches!(s.state, SlotState::Ready(_)) && !s.ready_reported).map(|(id, _)| *id).collect();
    for id in up {
        // An error: the control plane has not added the cluster yet; told again next time.
        if cp.cluster_ready(id).is_ok() {
            if let Some(s) = fleet.slots().get_mut(&id) {
                s.ready_reported = true;
            }
        }
    }
    let lost: Vec<(ClusterId, String)> = fleet
        .slots()
        .iter_mut()
        .filter_map(|(id, s)| match &s.state {
            SlotState::Failed(why) if !s.failed_reported => {
                s.failed_reported = true;
                Some((*id, why.clone()))
            }
            _ => None,
        })
        .collect();
    for (id, why) in lost {
        // Already out if a query found it lost; the last cluster stays (nothing else to route
        // to) and its queries fail.
        let _ = cp.fail_cluster(id, &why);
        fleet.rt.spawn(Arc::clone(fleet).drain_and_delete(id));
    }
}

/// At the end: delete every workgroup not yet gone (unless `keep_clusters`), after anything
/// still draining or being created.
pub(crate) async fn delete_left(fleet: &Fleet) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    let left: Vec<ClusterId> = fleet.slots().iter().filter(|(_, s)| !matches!(s.state, SlotState::Gone)).map(|(id, _)| *id).collect();
    if !fleet.settings.keep_clusters {
        let dt = Duration::from_secs_f64(fleet.settings.delete_timeout_s);
        futures_join(left.iter().map(|id| {
            let (rs, name) = (fleet.rs.clone(), fleet.name(*id));
            async move { rs.delete_cluster(&name, dt).await }
        }))
        .await;
    }
}

fn endpoint_of(w: &WorkgroupInfo) -> Option<(String, u16)> {
    Some((w.address.clone()?, w.port?))
}

/// Wait for every future (spawned, so they run in parallel); results in order.
async fn futures_join<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

/// The trace: rows in workload order, each cluster's record and bill (billing timer over the
/// statements it ran), cost attributed by work.
#[allow(clippy::too_many_arguments)]
fn assemble(workload: &Workload, done: Vec<Done>, fleet: &Fleet, events: &[LiveEvent], decisions: Vec<Decision>, initial: usize, end: f64, finished: f64, settings: &LiveSettings) -> LiveRun {
    let mut rows: Vec<TraceRow> = Vec::with_capacity(done.len());
    let (mut attempts, mut client_s, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for d in done {
        rows.push(d.row);
        attempts.push(d.attempts);
        client_s.push(d.client_s);
        errors.push(d.error);
    }
    let slots = fleet.slots();
    let mut ids: Vec<ClusterId> = slots.keys().copied().collect();
    ids.sort_unstable();
    let cause_of = |id: ClusterId, kinds: &[&str]| events.iter().find(|e| e.cluster == Some(id) && kinds.contains(&e.kind)).map(|e| (e.cause, e.time));
    let mut clusters = Vec::new();
    let mut extra = Vec::new();
    let mut workgroups = Vec::new();
    for id in ids {
        let s = &slots[&id];
        workgroups.push((id, s.name.clone()));
        // Billed while statements run, with the billing minimum (Redshift Serverless's rule).
        let mut spans: Vec<(f64, i32)> = rows.iter().filter(|r| r.cluster == Some(id)).filter_map(|r| r.start.map(|st| [(st, 1), (r.end.max(st), -1)])).flatten().collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut timer = BillingTimer::new(settings.billing.minimum_s);
        let (mut running, mut last) = (0, 0.0_f64);
        for (t, d) in &spans {
            if *d > 0 {
                if running == 0 {
                    let _ = timer.on_arrival(*t);
                }
            } else if running == 1 {
                let _ = timer.on_idle(*t);
            }
            running += d;
            last = last.max(*t);
        }
        let billed = timer.billed_seconds_until_drained(last);
        let failed = cause_of(id, &["failed"]);
        let teardown = cause_of(id, &["teardown"]);
        let gone_at = s.gone_at.unwrap_or(finished);
        let (td_at, td_reason) = match (teardown, failed) {
            (Some((c, t)), _) => (Some(t), c),
            (None, Some((_, t))) => (Some(t), "failed"),
            (None, None) => (Some(end), "end-of-run"),
        };
        if let Some((_, t)) = failed {
            extra.push(ClusterEvent { time: t, cluster: id, size: s.size, kind: "failed", reason: "failed" });
        }
        let spinup = if (id as usize) < initial { "initial" } else { cause_of(id, &["spinup"]).map_or("requested", |c| c.0) };
        clusters.push(ClusterRecord {
            id,
            size: s.size,
            requested_at: s.requested_at,
            ready_at: s.ready_at.unwrap_or(td_at.unwrap_or(gone_at)),
            teardown_requested_at: td_at,
            gone_at: Some(gone_at),
            billed_seconds: billed,
            cost: settings.billing.cost(s.size, billed),
            queries: rows.iter().filter(|r| r.cluster == Some(id) && r.start.is_some()).count(),
            spinup_reason: spinup,
            teardown_reason: Some(td_reason),
        });
    }
    drop(slots);
    attribute_cost_by_work(&mut rows, &clusters);
    debug_assert_eq!(rows.len(), workload.len());
    LiveRun { trace: Trace { rows, clusters, extra_events: extra }, attempts, client_s, errors, events: events.to_vec(), decisions, workgroups }
}
