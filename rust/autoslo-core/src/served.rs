//! What a live control plane served: every routed query from its routing to its end, counted per
//! tenant × class ([`ServedTotals`]) and logged with its share of its cluster's bill
//! ([`ServedQuery`]), the bill split as it runs ([`crate::cost_meter`]). The serving control plane
//! over workgroups (`autoslo_cloud::serve::Service`) and the in-process one
//! ([`crate::control_plane::ControlPlane::route_logged`]) keep the same books.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::billing::BillingPolicy;
use crate::catalog::QueryText;
use crate::cluster::ClusterId;
use crate::cost_meter::{CostMeter, Settled};
use crate::trace::Outcome;

/// One query a control plane routed, from its routing to its end: an entry of its log.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedQuery {
    pub query_id: u64,
    pub text: QueryText,
    pub tenant: String,
    pub class: String,
    /// Its SLO (s): the policy's deadline, else the caller's.
    pub slo: f64,
    /// When it was routed (the control plane's clock, s, whose zero is its `started_unix`).
    pub arrival: f64,
    /// The cluster and its size (RPU) it was sent to; `None` when it could not be placed.
    pub cluster: Option<(ClusterId, u32)>,
    /// When it ended (the control plane's clock): reported complete, timed out, found unplaceable,
    /// or left running at the stop.
    pub end: f64,
    /// `Completed`, `TimedOut` (the client said so, or `timeout_s` passed), `Failed` (never
    /// placed), `Cancelled` (still running when the service stopped) or `Rejected` (refused at
    /// admission, never routed).
    pub outcome: Outcome,
    /// Dollars of its cluster's bill attributed to it (0 when never placed).
    pub cost: f64,
    /// Estimated dollars admission charged to its tenant's budget (0 without a budget, or when
    /// refused): what a restarted service restores (`charge_budget`).
    pub charged: f64,
}

impl ServedQuery {
    /// end − arrival (s): what the client saw, connection and SQL included.
    pub fn latency(&self) -> f64 {
        self.end - self.arrival
    }

    /// Completed within its SLO.
    pub fn met(&self) -> bool {
        self.outcome == Outcome::Completed && self.latency() <= self.slo
    }
}

/// The queries of one tenant × class so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServedTotals {
    pub tenant: String,
    pub class: String,
    pub routed: u64,
    /// Completed within the SLO.
    pub met: u64,
    /// Completed after it.
    pub late: u64,
    pub timed_out: u64,
    /// Never placed (the cluster lost or never available).
    pub failed: u64,
    /// Still running at the stop.
    pub cancelled: u64,
    /// Refused at admission, before any work (not routed; counted as violations).
    pub rejected: u64,
    /// Sum of the completed queries' latencies (s).
    pub completed_latency_s: f64,
    /// Dollars attributed to its ended queries whose cost is final (all of them once the
    /// service stopped).
    pub cost: f64,
}

impl ServedTotals {
    /// Routed and not yet ended.
    pub fn running(&self) -> u64 {
        self.routed - self.ended()
    }

    /// Queries that ended.
    pub fn ended(&self) -> u64 {
        self.met + self.late + self.timed_out + self.failed + self.cancelled
    }

    /// The share of the queries that ended or were rejected that missed their SLO (`None`
    /// before any did): a rejection is a violation, as in the emulator.
    pub fn violation_rate(&self) -> Option<f64> {
        let n = self.ended() + self.rejected;
        (n > 0).then(|| (n - self.met) as f64 / n as f64)
    }
}

/// The tenant a query routed without one is logged and counted under (as in a query log without
/// tenants).
pub const DEFAULT_TENANT: &str = "default";
/// The class a query routed without one is logged and counted under (as in a query log without
/// classes). The SLO policy still saw no class.
pub const DEFAULT_CLASS: &str = "adhoc";

/// The log keeps at most this many ended queries not yet taken; past it, the oldest
/// are dropped and counted (`log_dropped`).
pub const LOG_CAPACITY: usize = 1 << 18;

/// A routed query until it ends.
pub struct OpenQuery {
    pub cluster: ClusterId,
    /// Its cluster's size once the query was placed there (the service: its workgroup
    /// available; the in-process control plane: at routing).
    pub placed: Option<u32>,
    pub at: f64,
    pub text: QueryText,
    pub tenant: String,
    pub class: String,
    pub slo: f64,
    /// Dollars admission charged to its tenant's budget.
    pub charged: f64,
}

/// What a control plane keeps of its queries (the service holds them under one lock, taken
/// before its fleet's).
pub struct ServedBooks {
    pub open: HashMap<u64, OpenQuery>,
    /// Ended queries whose cost is not final yet (their cluster's billing minimum runs).
    pub unpriced: HashMap<u64, ServedQuery>,
    pub log: VecDeque<ServedQuery>,
    pub keep_log: bool,
    pub dropped: u64,
    pub totals: BTreeMap<(String, String), ServedTotals>,
    pub billing: BillingPolicy,
    pub bills: HashMap<ClusterId, CostMeter>,
    /// When the service stopped (its clock): the bills are final from then.
    pub stopped_at: Option<f64>,
}

impl ServedBooks {
    /// Empty books billing at `billing`, keeping a log.
    pub fn new(billing: BillingPolicy) -> Self {
        Self { open: HashMap::new(), unpriced: HashMap::new(), log: VecDeque::new(), keep_log: true, dropped: 0, totals: BTreeMap::new(), billing, bills: HashMap::new(), stopped_at: None }
    }

    /// The totals of `tenant` × `class`, started empty.
    pub fn totals_of(&mut self, tenant: &str, class: &str) -> &mut ServedTotals {
        self.totals.entry((tenant.to_string(), class.to_string())).or_insert_with(|| ServedTotals { tenant: tenant.to_string(), class: class.to_string(), ..Default::default() })
    }

    /// The query ended at `end` with `outcome`: counted, and logged with its cost (`seconds`
    /// of its cluster's bill), or kept until that is final (`None`).
    pub fn finish(&mut self, query_id: u64, o: OpenQuery, end: f64, outcome: Outcome, seconds: Option<f64>) {
        let q = ServedQuery { query_id, text: o.text, tenant: o.tenant, class: o.class, slo: o.slo, arrival: o.at, cluster: o.placed.map(|size| (o.cluster, size)), end: end.max(o.at), outcome, cost: 0.0, charged: o.charged };
        let t = self.totals_of(&q.tenant, &q.class);
        match q.outcome {
            Outcome::Completed if q.met() => t.met += 1,
            Outcome::Completed => t.late += 1,
            Outcome::TimedOut => t.timed_out += 1,
            Outcome::Cancelled => t.cancelled += 1,
            Outcome::Rejected(_) => t.rejected += 1,
            Outcome::Failed => t.failed += 1,
        }
        if q.outcome == Outcome::Completed {
            t.completed_latency_s += q.latency();
        }
        match (q.cluster, seconds) {
            (Some(_), None) => {
                self.unpriced.insert(query_id, q);
            }
            (_, seconds) => self.priced(q, seconds.unwrap_or(0.0)),
        }
    }

    /// Ended query `q`'s cost is final (`seconds` of its cluster's bill): counted and logged.
    pub fn priced(&mut self, mut q: ServedQuery, seconds: f64) {
        q.cost = q.cluster.map_or(0.0, |(_, size)| self.billing.cost(size, seconds));
        self.totals_of(&q.tenant, &q.class).cost += q.cost;
        if self.keep_log {
            if self.log.len() >= LOG_CAPACITY {
                self.log.pop_front();
                self.dropped += 1;
            }
            self.log.push_back(q);
        }
    }

    /// Ended queries whose cost became final.
    pub fn settle(&mut self, settled: Vec<Settled>) {
        for s in settled {
            if let Some(q) = self.unpriced.remove(&s.query) {
                self.priced(q, s.seconds);
            }
        }
    }

    /// Query `q` started running on cluster `c` at `now`: the cluster's bill runs (resuming
    /// with the first query).
    pub fn join(&mut self, c: ClusterId, q: u64, now: f64) {
        let minimum_s = self.billing.minimum_s;
        // The minimum was validated with the settings; times are read under this lock, so they
        // never go back (the meter clamps them anyway).
        let Some(meter) = self.meter(c, minimum_s) else { return };
        if let Ok(settled) = meter.join(q, now) {
            self.settle(settled);
        }
    }

    /// Query `q` left cluster `c` at `now`: its attributed seconds if final (the bill pauses,
    /// after the minimum, when nothing runs).
    pub fn leave(&mut self, c: ClusterId, q: u64, now: f64) -> Option<f64> {
        let minimum_s = self.billing.minimum_s;
        let (mine, settled) = self.meter(c, minimum_s)?.leave(q, now).ok()?;
        self.settle(settled);
        mine
    }

    pub fn meter(&mut self, c: ClusterId, minimum_s: f64) -> Option<&mut CostMeter> {
        match self.bills.entry(c) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => Some(e.insert(CostMeter::new(minimum_s).ok()?)),
        }
    }

    /// Every cluster's clock moves to `now`: costs that became final are logged.
    pub fn advance(&mut self, now: f64) {
        let mut settled = Vec::new();
        for m in self.bills.values_mut() {
            settled.extend(m.advance(now).unwrap_or_default());
        }
        self.settle(settled);
    }

    /// Nothing more runs (the service stopped at `now`): every busy period is billed to its
    /// end, and every cost is final.
    pub fn close(&mut self, now: f64) {
        let mut settled = Vec::new();
        for m in self.bills.values_mut() {
            settled.extend(m.close(now).unwrap_or_default());
        }
        self.settle(settled);
        // A query whose meter refused it (never: ids are unique) still reaches the log.
        let left: Vec<ServedQuery> = self.unpriced.drain().map(|(_, q)| q).collect();
        for q in left {
            self.priced(q, 0.0);
        }
    }
}

