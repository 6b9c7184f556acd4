//! Clusters of a multi-cluster warehouse and their lifecycle.
//!
//! `Starting` (spinup requested, not yet ready) → `Ready` (accepts queries) → `Draining`
//! (teardown requested: no new queries, running ones finish) → `Stopping` (teardown in progress)
//! → `Gone`. Clusters present at the start of an emulation are `Ready` at t = 0.

/// Identifier of a cluster within one emulation or simulation (dense, from 0).
pub type ClusterId = u32;

/// Lifecycle state of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    Starting,
    Ready,
    Draining,
    Stopping,
    Gone,
}

impl ClusterState {
    /// The state's lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ClusterState::Starting => "starting",
            ClusterState::Ready => "ready",
            ClusterState::Draining => "draining",
            ClusterState::Stopping => "stopping",
            ClusterState::Gone => "gone",
        }
    }
}

/// What the control plane sees of a cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterInfo {
    pub id: ClusterId,
    /// Size in RPU.
    pub size: u32,
    pub state: ClusterState,
    /// When the spinup was requested (0 for initial clusters).
    pub requested_at: f64,
    /// When it became (or will become) ready.
    pub ready_at: f64,
    /// Queries executing now.
    pub running: usize,
    /// Queries admitted to the cluster but waiting for a concurrency slot.
    pub queued: usize,
}

impl ClusterInfo {
    /// Whether new queries may be routed to the cluster (ready, or still starting).
    pub fn accepts_queries(&self) -> bool {
        matches!(self.state, ClusterState::Ready | ClusterState::Starting)
    }
}
