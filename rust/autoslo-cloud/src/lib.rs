//! AutoSLO's cloud side.
//!
//! - [`manager`]: the Redshift Serverless cluster manager (aws-sdk-redshiftserverless, tokio).
//! - [`local_endpoint`]: a Redshift Serverless endpoint on 127.0.0.1 backed by PostgreSQL
//!   servers ([`pg`]), for tests and demos.
//! - [`live`]: live mode, a workload replayed as SQL on real clusters under the control plane.
//! - [`serve`]: a long-running control plane over real workgroups that tells a client where each
//!   query goes (production routing).

pub mod error;
pub mod live;
pub mod local_data;
pub mod local_endpoint;
pub mod manager;
pub mod pg;
pub mod serve;

pub use error::{CloudError, Result};
