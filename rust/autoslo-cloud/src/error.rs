//! Typed errors of the cloud side: the cluster manager, the local endpoint and live mode.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CloudError {
    /// The named namespace or workgroup does not exist (`ResourceNotFoundException`).
    #[error("{kind} `{name}` not found")]
    NotFound { kind: &'static str, name: String },
    /// A resource exists with other settings, or is busy (`ConflictException`).
    #[error("conflict on {kind} `{name}`: {message}")]
    Conflict { kind: &'static str, name: String, message: String },
    /// Throttled on every attempt (`ThrottlingException`), after the SDK's backoff.
    #[error("throttled by Redshift Serverless on {operation} after {attempts} attempts: {message}")]
    Throttled { operation: &'static str, attempts: u32, message: String },
    /// The request was rejected as invalid (`ValidationException`).
    #[error("invalid request to {operation}: {message}")]
    Validation { operation: &'static str, message: String },
    /// Any other service error, with its code.
    #[error("Redshift Serverless {operation} failed with {code}: {message}")]
    Service { operation: &'static str, code: String, message: String },
    /// The request never got an answer (connection refused, DNS, TLS, timeout in transit).
    #[error("cannot reach Redshift Serverless for {operation}: {message}")]
    Transport { operation: &'static str, message: String },
    /// A workgroup did not reach the wanted status in time.
    #[error("workgroup `{name}` not {wanted} after {waited_s:.1} s (last status {last})")]
    WaitTimeout { name: String, wanted: &'static str, waited_s: f64, last: String },
    /// A value given by the caller is out of range.
    #[error("{what} must be {expected}, got {got}")]
    OutOfRange { what: String, expected: String, got: String },
    /// Starting, stopping or querying a local PostgreSQL server failed.
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// The core refused an action (routing, scaling).
    #[error(transparent)]
    Core(#[from] autoslo_core::error::AutoSloError),
    /// Queries of these templates have no SQL text to run.
    #[error("no SQL for the workload's templates {0:?}: give their text, or drop those queries (`autoslo live --only-runnable`, `autoslo.live.runnable`)")]
    MissingSql(Vec<u16>),
    /// The caller asked the run to stop.
    #[error("interrupted")]
    Interrupted,
    /// The service was stopped: it routes nothing more.
    #[error("the service is stopped")]
    Stopped,
    /// The routed query has no available cluster to run on (it ended unmet in the router's books).
    #[error("cannot route the query: {0}")]
    Unroutable(String),
    /// Refused at admission, before any work: `reason` is the stable name (`infeasible-deadline`,
    /// `capacity`, `budget`).
    #[error("query {query_id} rejected at admission ({reason}): {why}")]
    Rejected { query_id: u64, reason: &'static str, why: &'static str, retry_after_s: Option<f64> },
}

impl CloudError {
    /// Query `query_id` refused at admission ([`autoslo_core::control_plane::Rejection`]).
    pub fn rejected(query_id: u64, r: autoslo_core::control_plane::Rejection) -> Self {
        Self::Rejected { query_id, reason: r.reason.name(), why: r.reason.describe(), retry_after_s: r.retry_after_s }
    }
    pub(crate) fn out_of_range(what: impl Into<String>, expected: impl Into<String>, got: impl ToString) -> Self {
        Self::OutOfRange { what: what.into(), expected: expected.into(), got: got.to_string() }
    }
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, CloudError>;
