//! Clusters of a multi-cluster warehouse and their lifecycle.
//!
//! `Starting` (spinup requested, not yet ready) → `Ready` (accepts queries) → `Draining`
//! (teardown requested: no new queries, running ones finish) → `Stopping` (teardown in progress)
//! → `Gone`. Clusters present at the start of an emulation are `Ready` at t = 0.
//!
//! A cluster's size is a Redshift Serverless base capacity in RPU ([`is_base_capacity`]): the
//! emulator is calibrated on Redshift Serverless workgroups, and an execution configuration is
//! deployed as workgroups, so a size no workgroup can have is refused where a cluster is made.

use crate::error::{AutoSloError, Result};

/// The base capacities of [`is_base_capacity`], as error messages state them.
pub const BASE_CAPACITIES: &str = "a Redshift Serverless base capacity in RPU (4, 8 to 512 in steps of 8, or 544 to 1024 in steps of 32)";

/// Whether a Redshift Serverless workgroup can have a base capacity of `rpu`: 4, 8 to 512 in
/// steps of 8, or 512 to 1024 in steps of 32. AWS, "Compute capacity for Amazon Redshift
/// Serverless" (Amazon Redshift Management Guide): the base capacity is 4 RPU, or a multiple of 8
/// from 8 to 512; in the regions that offer up to 1024, it moves in steps of 32 between 512 and 1024.
pub fn is_base_capacity(rpu: u32) -> bool {
    rpu == 4 || (8..=512).contains(&rpu) && rpu.is_multiple_of(8) || (512..=1024).contains(&rpu) && rpu.is_multiple_of(32)
}

/// `rpu` if it is a base capacity ([`is_base_capacity`]), else an error naming `what`.
pub fn check_base_capacity(what: impl Into<String>, rpu: u32) -> Result<u32> {
    if is_base_capacity(rpu) {
        Ok(rpu)
    } else {
        Err(AutoSloError::out_of_range(what, BASE_CAPACITIES, rpu))
    }
}

/// A non-empty list of base capacities, else an error naming `what` (or its entry `what[i]`).
pub fn check_sizes(what: &str, sizes: &[u32]) -> Result<()> {
    if sizes.is_empty() {
        return Err(AutoSloError::InvalidConfig(format!("{what} must name at least one size")));
    }
    for (i, &s) in sizes.iter().enumerate() {
        check_base_capacity(format!("{what}[{i}]"), s)?;
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_capacities_are_the_ones_redshift_serverless_offers() {
        let valid: Vec<u32> = (0..=2048).filter(|&r| is_base_capacity(r)).collect();
        let mut expected = vec![4];
        expected.extend((8..=512).step_by(8));
        expected.extend((544..=1024).step_by(32));
        assert_eq!(valid, expected);
        for bad in [0, 1, 2, 3, 5, 7, 12, 520, 1000, 1056, u32::MAX] {
            let e = check_base_capacity("size", bad).unwrap_err().to_string();
            assert!(e.contains(&format!("got {bad}")) && e.contains("base capacity"), "{e}");
        }
        assert_eq!(check_base_capacity("size", 16).unwrap(), 16);
        assert!(check_sizes("sizes", &[16, 32]).is_ok());
        assert_eq!(check_sizes("sizes", &[]).unwrap_err().to_string(), "invalid configuration: sizes must name at least one size");
        assert!(check_sizes("sizes", &[16, 33]).unwrap_err().to_string().starts_with("sizes[1] must be a Redshift Serverless base capacity"));
    }
}
