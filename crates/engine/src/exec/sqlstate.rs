//! The SQLSTATE of a failure that comes out of DataFusion: ours, carried
//! through it as `DataFusionError::External` and asked for its own code
//! ([`ExecError::sqlstate`] and the others'), or DataFusion's own, by its
//! variant and never by its message. The planner's errors, which exec
//! cannot name, are asked first by the engine (`engine::datafusion_sqlstate`);
//! among them an unknown table or function, which DataFusion reports only
//! as text, found by asking the catalog (`planner::undefined`), and a
//! subquery DataFusion cannot run, refused as not implemented before its
//! analyzer says so in text
//! (`planner::subquery_rules::RefuseUnrunnableSubqueries`). The arithmetic
//! operators' division by zero and overflow, and casts, arrive as Arrow's
//! own variants; what DataFusion reports only as `Plan` or `Execution` text
//! (an overflow inside one of its functions, a clause its SQL planner does
//! not support) gets that class's code, 42601 or 22000, which may be less
//! precise than PostgreSQL's.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;

use super::ExecError;
use super::read::token::TokenError;
use crate::catalog::{CatalogError, SequenceError};
use crate::keys::KeyError;
use crate::sqlstate as code;
use crate::storage::StorageError;

impl ExecError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ExecError::Storage(s) => s.sqlstate(),
            ExecError::KeyMismatch { .. } | ExecError::TypeMismatch { .. } => code::DATA_CORRUPTED,
            ExecError::Arrow(a) => of_arrow(a),
            ExecError::Key(k) => match k {
                KeyError::OutOfRange { .. } => code::NUMERIC_OUT_OF_RANGE,
                KeyError::NotAnInteger { .. } => code::INVALID_TEXT_REPRESENTATION,
                KeyError::MissingValue { .. } => code::NOT_NULL_VIOLATION,
                _ => code::INVALID_PARAMETER_VALUE,
            },
            ExecError::NullValue { .. } => code::NOT_NULL_VIOLATION,
            ExecError::DuplicateKey { .. } | ExecError::UniqueViolation { .. } => {
                code::UNIQUE_VIOLATION
            }
            ExecError::BadValue { .. } => code::INVALID_TEXT_REPRESENTATION,
            ExecError::SystemColumn { .. } => code::GENERATED_ALWAYS,
            ExecError::RawTable { .. } | ExecError::PartitionMove { .. } => {
                code::FEATURE_NOT_SUPPORTED
            }
            ExecError::PartlyWritten { source, .. } => of_datafusion(source),
            ExecError::AnswersLost { source, .. } => source.sqlstate(),
            ExecError::SubqueryRows | ExecError::UpsertTwice { .. } => code::CARDINALITY_VIOLATION,
            ExecError::SubqueryBound { .. }
            | ExecError::ScanDenied(_)
            | ExecError::UniquePutsTooSlow { .. } => code::PROGRAM_LIMIT_EXCEEDED,
            ExecError::Token(TokenError::Malformed(_)) => code::INVALID_TEXT_REPRESENTATION,
            ExecError::Token(_) => code::INVALID_PARAMETER_VALUE,
            ExecError::NotPageable(_) => code::FEATURE_NOT_SUPPORTED,
        }
    }
}

/// The SQLSTATE of a failure DataFusion reports, through the wrappers it
/// adds (context, diagnostics, shared errors) down to the cause.
pub fn of_datafusion(e: &DataFusionError) -> &'static str {
    match e {
        DataFusionError::SQL(_, _) => code::SYNTAX_ERROR,
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => code::UNDEFINED_COLUMN,
            SchemaError::AmbiguousReference { .. } => code::AMBIGUOUS_COLUMN,
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => code::DUPLICATE_COLUMN,
        },
        DataFusionError::Plan(_) => code::SYNTAX_ERROR,
        DataFusionError::NotImplemented(_) => code::FEATURE_NOT_SUPPORTED,
        DataFusionError::ArrowError(a, _) => of_arrow(a),
        DataFusionError::Execution(_) => code::DATA_EXCEPTION,
        DataFusionError::External(x) => of_external(x.as_ref()),
        DataFusionError::Context(_, inner) => of_datafusion(inner),
        DataFusionError::Shared(inner) => of_datafusion(inner),
        DataFusionError::Diagnostic(_, inner) => of_datafusion(inner),
        DataFusionError::ResourcesExhausted(_) => code::OUT_OF_MEMORY,
        DataFusionError::Collection(errors) => errors
            .first()
            .map(of_datafusion)
            .unwrap_or(code::INTERNAL_ERROR),
        _ => code::INTERNAL_ERROR,
    }
}

/// The SQLSTATE of an Arrow failure (a cast, an overflow, a division).
pub fn of_arrow(e: &ArrowError) -> &'static str {
    match e {
        ArrowError::CastError(_) | ArrowError::ParseError(_) => code::INVALID_TEXT_REPRESENTATION,
        ArrowError::DivideByZero => code::DIVISION_BY_ZERO,
        ArrowError::ArithmeticOverflow(_) => code::NUMERIC_OUT_OF_RANGE,
        ArrowError::ExternalError(inner) => of_external(inner.as_ref()),
        _ => code::DATA_EXCEPTION,
    }
}

/// Our errors as DataFusion and Arrow carry them, each asked for its own
/// code. A layer above this one that sends its errors through DataFusion
/// wraps them as one of these.
fn of_external(e: &(dyn std::error::Error + 'static)) -> &'static str {
    if let Some(x) = e.downcast_ref::<ExecError>() {
        x.sqlstate()
    } else if let Some(x) = e.downcast_ref::<StorageError>() {
        x.sqlstate()
    } else if let Some(x) = e.downcast_ref::<CatalogError>() {
        x.sqlstate()
    } else if let Some(x) = e.downcast_ref::<SequenceError>() {
        x.sqlstate()
    } else if let Some(x) = e.downcast_ref::<DataFusionError>() {
        of_datafusion(x)
    } else if let Some(x) = e.downcast_ref::<ArrowError>() {
        of_arrow(x)
    } else {
        code::INTERNAL_ERROR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_wrapped_by_datafusion_keep_their_code() {
        let dup = StorageError::EntityAlreadyExists {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        let wrapped = DataFusionError::Context(
            "scan".into(),
            Box::new(DataFusionError::External(Box::new(ExecError::Storage(dup)))),
        );
        assert_eq!(of_datafusion(&wrapped), code::UNIQUE_VIOLATION);
        assert_eq!(
            of_datafusion(&DataFusionError::NotImplemented("x".into())),
            code::FEATURE_NOT_SUPPORTED
        );
    }

    #[test]
    fn subqueries_tablesql_cannot_run_are_not_supported() {
        assert_eq!(
            ExecError::SubqueryRows.sqlstate(),
            code::CARDINALITY_VIOLATION
        );
        assert_eq!(
            ExecError::SubqueryBound { limit: 1 }.sqlstate(),
            code::PROGRAM_LIMIT_EXCEEDED
        );
    }
}
