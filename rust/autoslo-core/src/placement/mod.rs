//! Placement (the load-balancing chapter, 003_… in `shared/seeds`): where work goes when request
//! cost varies and destinations differ.
//!
//! - [`work_aware`]: estimated remaining work per destination normalised by capacity,
//!   power-of-two choices among eligible destinations (hard constraints outside the score),
//!   per-class cost estimates corrected online and bounded, a locality credit, and a
//!   weighted-random fallback when predictions or telemetry are missing;
//! - [`ejection`]: outlier ejection of a destination whose observed service persistently exceeds
//!   prediction, with a minimum sample count, a bounded ejected fraction and staged re-entry;
//! - [`consistent`]: consistent placement with bounded load, for affinity (tenant → preferred
//!   cluster) with little remapping when membership changes;
//! - [`cover`]: a scaler that replaces an ejected cluster's capacity until it is cleared;
//! - [`mercury`]: the chapter's Mercury fixture, and a worker that turns 3× slower.

pub mod consistent;
pub mod cover;
pub mod ejection;
pub mod mercury;
pub mod work_aware;

pub use consistent::{modulo_remap_fraction, ConsistentRing};
pub use cover::EjectionCover;
pub use ejection::{EjectingRouter, EjectionPolicy, OutlierEjector};
pub use mercury::{mercury, MercuryReport};
pub use work_aware::{Destination, Placement, WorkAwarePlacer};
