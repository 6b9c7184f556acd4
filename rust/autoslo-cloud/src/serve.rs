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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autoslo_core::autoscaler::Decision;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::ClusterId;
use autoslo_core::control::{Router, Scaler};
use autoslo_core::control_plane::{ControlPlane, LiveEvent};
use autoslo_core::tenancy::SloPolicy;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCluster {
    pub cluster: ClusterId,
    pub size: u32,
    pub workgroup: String,
    /// `creating`, `available` (taking queries), `lost` or `deleted`.
    pub state: &'static str,
    /// Queries routed to it and not yet completed.
    pub running: usize,
    pub endpoint: Option<(String, u16)>,
}

/// A control plane over workgroups, serving routing decisions (thread-safe).
pub struct Service {
    rt: Option<tokio::runtime::Runtime>,
    fleet: Arc<Fleet>,
    cp: Arc<ControlPlane>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    /// Query id → its cluster and when it was routed (control-plane s), until it completes.
    routed: Arc<Mutex<HashMap<u64, (ClusterId, f64)>>>,
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
        let routed: Arc<Mutex<HashMap<u64, (ClusterId, f64)>>> = Arc::default();
        let watchdog = {
            let (cp, fleet, routed) = (Arc::clone(&cp), Arc::clone(&fleet), Arc::clone(&routed));
            rt.spawn(async move {
                loop {
                    watch_once(&cp, &fleet);
                    expire(&cp, &fleet, &routed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        Ok(Self { rt: Some(rt), fleet, cp, watchdog: Some(watchdog), routed, stopped: false })
    }

    fn routed(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (ClusterId, f64)>> {
        lock(&self.routed)
    }

    /// Route a query arriving now: its SLO is the policy's deadline for (`tenant`, `class`,
    /// template), else `slo`. Returns the workgroup to run it on, once that is available.
    pub fn route(&self, query_id: u64, text: QueryText, tenant: &str, class: &str, slo: Option<f64>) -> Result<Route> {
        if self.stopped {
            return Err(CloudError::Stopped);
        }
        let c = {
            // Held while routing (the router serialises decisions anyway): one id, one route.
            let mut routed = self.routed();
            if routed.contains_key(&query_id) {
                return Err(autoslo_core::error::AutoSloError::InvalidAction(format!("query {query_id} is already routed and not completed")).into());
            }
            let c = self.cp.route_by_policy(query_id, text, tenant, class, slo)?;
            routed.insert(query_id, (c, self.cp.now()));
            c
        };
        let give_up = Instant::now() + Duration::from_secs_f64(self.fleet.settings.create_timeout_s);
        loop {
            let seen = self.fleet.slots().get_mut(&c).map(|s| match (&s.state, &s.endpoint) {
                (SlotState::Ready(_), Some((address, port))) => {
                    s.inflight += 1;
                    Ok(Route { cluster: c, size: s.size, workgroup: s.name.clone(), address: address.clone(), port: *port })
                }
                (SlotState::Ready(_), None) => Err(Some(format!("workgroup {} is available without an endpoint", s.name))),
                (SlotState::Pending, _) => Err(None),
                (SlotState::Failed(why), _) => Err(Some(format!("cluster {c} is lost: {why}"))),
                (SlotState::Gone, _) => Err(Some(format!("cluster {c} is deleted"))),
            });
            let why = match seen {
                Some(Ok(route)) => return Ok(route),
                Some(Err(None)) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Some(Err(None)) => format!("cluster {c} was not available within {} s", self.fleet.settings.create_timeout_s),
                Some(Err(Some(why))) => why,
                None => format!("cluster {c} is not one of the service's"),
            };
            // Not run: it leaves the router's books as a query that ended now, unmet.
            self.routed().remove(&query_id);
            let _ = self.cp.complete(query_id, true);
            return Err(CloudError::Unroutable(why));
        }
    }

    /// A routed query finished now (`timed_out`: it was stopped, or failed, without an answer).
    pub fn complete(&self, query_id: u64, timed_out: bool) -> Result<()> {
        let Some((c, _)) = self.routed().remove(&query_id) else {
            return Err(autoslo_core::error::AutoSloError::InvalidAction(format!("query {query_id} is not routed (never, or already completed)")).into());
        };
        if let Some(s) = self.fleet.slots().get_mut(&c) {
            s.inflight = s.inflight.saturating_sub(1);
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
        let mut out: Vec<ServedCluster> = self
            .fleet
            .slots()
            .iter()
            .map(|(&id, s)| ServedCluster {
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
            })
            .collect();
        out.sort_by_key(|c| c.cluster);
        out
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
            rt.block_on(async move {
                let until = tokio::time::Instant::now() + wait;
                while fleet.slots().values().any(|s| s.inflight > 0) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                delete_left(&fleet).await;
            });
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Routed queries never completed within the settings' `timeout_s` (control-plane s) end as
/// timed out, so a client that forgets a query (or dies) does not hold its cluster busy forever.
fn expire(cp: &ControlPlane, fleet: &Fleet, routed: &Mutex<HashMap<u64, (ClusterId, f64)>>) {
    let Some(timeout) = fleet.settings.timeout_s else { return };
    let now = cp.now();
    let stale: Vec<(u64, ClusterId)> = {
        let mut r = lock(routed);
        let ids: Vec<u64> = r.iter().filter(|(_, (_, at))| now - at > timeout).map(|(q, _)| *q).collect();
        ids.into_iter().filter_map(|q| r.remove(&q).map(|(c, _)| (q, c))).collect()
    };
    for (q, c) in stale {
        if let Some(s) = fleet.slots().get_mut(&c) {
            s.inflight = s.inflight.saturating_sub(1);
        }
        let _ = cp.complete(q, true);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}
