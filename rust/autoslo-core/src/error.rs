//! The one error type of the core. Every variant names what is wrong so the user can fix it.

use thiserror::Error;

/// Errors raised by the core. Nothing in the core panics on user input; it returns one of these.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum AutoSloError {
    /// A required column is missing from an input table.
    #[error("missing column `{0}`")]
    MissingColumn(String),
    /// A column exists but holds the wrong type or length.
    #[error("column `{column}`: {problem}")]
    BadColumn { column: String, problem: String },
    /// A value is out of its allowed range (negative time, non-positive size, …).
    #[error("{what} must be {expected}, got {got}")]
    OutOfRange { what: String, expected: String, got: String },
    /// A query names a TPC-DS template the catalog does not know.
    #[error("unknown query template {template} (the TPC-DS catalog has templates 1-99)")]
    UnknownTemplate { template: i64 },
    /// A workload's row names a TPC-DS template the catalog does not know.
    #[error("unknown query template {template} in row {row} (the TPC-DS catalog has templates 1-99)")]
    UnknownTemplateAt { row: usize, template: i64 },
    /// Arrivals must be sorted where order matters.
    #[error("arrivals are not sorted: row {row} arrives at {arrival} s, before row {prev_row} at {prev_arrival} s")]
    UnsortedArrivals { row: usize, arrival: f64, prev_row: usize, prev_arrival: f64 },
    /// Two queries share an id.
    #[error("duplicate query id {0}")]
    DuplicateQueryId(u64),
    /// No SLO is known for a query.
    #[error("no SLO for template {template} (class `{class}`): give a per-template or per-class SLO")]
    MissingSlo { template: u16, class: String },
    /// An event arrived with a time earlier than one already processed.
    #[error("time went backwards: {now} s after {last} s")]
    TimeWentBackwards { now: f64, last: f64 },
    /// A control-plane action that cannot be carried out.
    #[error("invalid action: {0}")]
    InvalidAction(String),
    /// A routing or scaling policy was named that does not exist.
    #[error("unknown policy `{name}` (known: {known})")]
    UnknownPolicy { name: String, known: String },
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The caller asked a long computation to stop (e.g. Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// A SimulateBatch backend failed (e.g. a distributed task raised, or the cluster is gone).
    #[error("SimulateBatch backend `{backend}`: {problem}")]
    Backend { backend: String, problem: String },
    /// A predictor model (Stage or Iconq+) is missing, corrupt, or of another version.
    #[error("model {path}: {problem}")]
    Model { path: String, problem: String },
    /// Bundled or user data could not be parsed.
    #[error("cannot parse {source_name} line {line}: {problem}")]
    Parse { source_name: String, line: usize, problem: String },
    /// A name (a dialect, a plan format) that is not one of those known.
    #[error("unknown {what} `{name}` (known: {known})")]
    UnknownName { what: String, name: String, known: String },
    /// SQL the parser cannot read.
    #[error("SQL: {0}")]
    Sql(String),
    /// A query plan (EXPLAIN text or JSON, plan rows) that cannot be read.
    #[error("plan: {0}")]
    Plan(String),
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, AutoSloError>;

impl AutoSloError {
    pub(crate) fn model(path: impl std::fmt::Display, problem: impl Into<String>) -> Self {
        Self::Model { path: path.to_string(), problem: problem.into() }
    }
    pub(crate) fn out_of_range(what: impl Into<String>, expected: impl Into<String>, got: impl ToString) -> Self {
        Self::OutOfRange { what: what.into(), expected: expected.into(), got: got.to_string() }
    }
}
