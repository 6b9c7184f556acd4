//! A warehouse's own SQL: query identity and what the parse tree says.
//!
//! Both rest on [`sqlparser`] (the Apache DataFusion SQL parser), which knows the Redshift and
//! PostgreSQL dialects; nothing here tokenizes by hand.
//! - [`identity`]: a query's class, its text with literals and comments removed, whitespace and
//!   case folded, and a 64-bit id of that text (or of Redshift's `generic_query_hash`);
//! - [`shape`]: the operators and tables a query's parse tree names, as a [`crate::plan::PlanSummary`]
//!   for queries that come without a plan.

pub mod identity;
pub mod shape;

pub use identity::{class_of_hash, QueryClass};
pub use shape::{class_and_summary, sql_summary};

use sqlparser::dialect::{Dialect as ParserDialect, GenericDialect, PostgreSqlDialect, RedshiftSqlDialect};

use crate::error::{AutoSloError, Result};

/// The SQL dialect a history's texts are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// Amazon Redshift (the default: `SYS_QUERY_HISTORY` exports).
    #[default]
    Redshift,
    /// PostgreSQL.
    Postgres,
    /// Any other: the parser's generic dialect.
    Generic,
}

impl Dialect {
    /// Every dialect's name, as [`Dialect::parse`] reads it.
    pub const NAMES: [&'static str; 3] = ["redshift", "postgres", "generic"];

    /// The dialect named `name` (`redshift`, `postgres` or `postgresql`, `generic`).
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "redshift" => Ok(Self::Redshift),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "generic" => Ok(Self::Generic),
            _ => Err(AutoSloError::UnknownName { what: "SQL dialect".into(), name: name.into(), known: Self::NAMES.join(", ") }),
        }
    }

    /// This dialect's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redshift => "redshift",
            Self::Postgres => "postgres",
            Self::Generic => "generic",
        }
    }

    pub(crate) fn parser(self) -> &'static dyn ParserDialect {
        static REDSHIFT: RedshiftSqlDialect = RedshiftSqlDialect {};
        static POSTGRES: PostgreSqlDialect = PostgreSqlDialect {};
        static GENERIC: GenericDialect = GenericDialect;
        match self {
            Self::Redshift => &REDSHIFT,
            Self::Postgres => &POSTGRES,
            Self::Generic => &GENERIC,
        }
    }
}
