//! AutoSLO core: everything that decides or simulates, in pure Rust (no Python).
//!
//! Modules are named after the concepts of the AutoSLO paper (000_… in `shared/seeds`):
//! - [`catalog`]: the TPC-DS isolated-runtime catalog measured on Redshift Serverless, with a
//!   per-template size-scaling law for sizes that were not measured;
//! - [`workload`]: queries, the paper's `BaseWorkload(λ)` and a Redbench-like multi-day generator;
//! - [`slo`]: per-query latency SLOs (κ × per-template baseline, or user supplied);
//! - [`billing`]: the usage-based billing timer of §2 and `ClusterCostUntilDrained`;
//! - [`cost_meter`]: a cluster's bill split over its queries as they run (serving's chargeback);
//! - [`cluster`] and [`control`]: clusters, and the control-plane interface (events in, actions out)
//!   shared by the emulator, the Workload Simulator and the live router;
//! - [`emulator`]: the seeded discrete-event warehouse model, the ground truth of every experiment;
//! - [`trace`]: execution traces and their summaries (fleet-wide and per tenant × class);
//! - [`calibration`]: the emulator held against the real concurrency measurements;
//! - [`predictor`]: the Latency Predictor (Stage and Iconq+, incremental per cluster), on TPC-DS
//!   texts or on the query classes of a warehouse's own history;
//! - [`sql`], [`plan`] and [`history`]: a warehouse's own queries: their classes (sqlparser, in
//!   the Redshift and PostgreSQL dialects), their plans (Redshift and PostgreSQL EXPLAIN), the
//!   plan-feature schema fitted on a history, and a history's statements classified and featurised;
//! - [`router`]: the Query Router (Algorithm 1) and the routing baselines;
//! - [`simulator`]: the Workload Simulator, whose completions come from the predictor;
//! - [`autoscaler`]: the Autoscaler (triggers, Spinup Size Selector) and the scaling baselines;
//! - [`live`]: the Query Router used live, over a changing cluster set and a real clock;
//! - [`tuner`]: the Policy Tuner (reservoir tables, forecaster, SimulateBatch, Spinup Scheduler,
//!   Configuration Tuner) and execution configurations;
//! - [`placement`]: work-aware placement, outlier ejection and consistent placement (the
//!   load-balancing chapter), with its Mercury fixture;
//! - [`tenancy`]: fairness across tenant × class populations, the chargeback rate card, and the
//!   multi-tenant case's fixture;
//! - [`control_plane`]: the live control plane, the router on the request path and the
//!   autoscaler on a background thread, over a cluster-manager interface.

// The core's tests load the bundled predictor, whose weights are TorchScript that only libtorch
// reads: without `torch` they would be compiled out unseen (Algorithm 1's, the autoscaler's, the
// tuner's), so a test build without it stops here and says how to run them.
#[cfg(all(test, not(feature = "torch")))]
compile_error!("autoslo-core's tests need the `torch` feature (they load the bundled model with libtorch): run `make test-rust`, or `LIBTORCH_USE_PYTORCH=1 cargo test -p autoslo-core --features torch` in the venv");

pub mod allocator;
pub mod autoscaler;
pub mod billing;
pub mod calibration;
pub mod catalog;
pub mod cluster;
pub mod control;
pub mod control_plane;
pub mod cost_meter;
pub mod emulator;
pub mod history;
pub mod live;
pub mod placement;
pub mod plan;
pub mod predictor;
pub mod progress;
pub mod router;
pub mod served;
pub mod error;
pub mod rng;
pub mod simulator;
pub mod slo;
pub mod sql;
pub mod stats;
pub mod tenancy;
pub mod trace;
pub mod tuner;
pub mod workload;

pub use error::{AutoSloError, Result};
