//! SQLSTATE codes for every failure that reaches a client. The mapping is a
//! pure function of the error chain, so it is unit-tested without a socket.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;
use pgwire::error::{ErrorInfo, PgWireError};

use crate::catalog::{CatalogError, SequenceError};
use crate::engine::{EngineError, NoticeKind};
use crate::keys::KeyError;
use crate::load::copy::CopyError;
use crate::load::{LineFault, LoadError};
use crate::storage::{InvalidInput, StorageError, TransactionScope};
use crate::{ExecError, ParameterError, TokenError};

pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const DUPLICATE_TABLE: &str = "42P07";
pub const INVALID_TABLE_DEFINITION: &str = "42P16";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const DATA_EXCEPTION: &str = "22000";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const NUMERIC_OUT_OF_RANGE: &str = "22003";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const UNIQUE_VIOLATION: &str = "23505";
pub const NOT_NULL_VIOLATION: &str = "23502";
pub const GENERATED_ALWAYS: &str = "428C9";
pub const SERIALIZATION_FAILURE: &str = "40001";
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const QUERY_CANCELED: &str = "57014";
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const CANNOT_CONNECT_NOW: &str = "57P03";
pub const INVALID_AUTHORIZATION: &str = "28000";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const DUPLICATE_CURSOR: &str = "42P03";
pub const IN_FAILED_TRANSACTION: &str = "25P02";
pub const ACTIVE_TRANSACTION: &str = "25001";
pub const DATA_CORRUPTED: &str = "XX001";
pub const CONNECTION_FAILURE: &str = "08006";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const INTERNAL_ERROR: &str = "XX000";
pub const UNDEFINED_FUNCTION: &str = "42883";
pub const SYSTEM_ERROR: &str = "58000";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const NO_ACTIVE_TRANSACTION: &str = "25P01";
pub const INVALID_SAVEPOINT: &str = "3B001";
pub const CARDINALITY_VIOLATION: &str = "21000";
pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
pub const SUCCESSFUL_COMPLETION: &str = "00000";
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
pub const DUPLICATE_COLUMN: &str = "42701";
pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
pub const TOO_MANY_CONNECTIONS: &str = "53300";

/// An `ERROR`-severity wire error.
pub fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// A `FATAL` error: the connection ends after it.
pub fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// The wire error for an engine failure.
pub fn engine_error(e: &EngineError) -> PgWireError {
    match e {
        EngineError::DataFusion(d) => datafusion_error(d),
        other => error(engine_code(other), other.to_string()),
    }
}

/// The wire error for a COPY that cannot run or stopped.
pub fn copy_error(e: &CopyError) -> PgWireError {
    match e {
        CopyError::Engine(e) => engine_error(e),
        CopyError::Load {
            source: LoadError::Plan(d),
            ..
        } => datafusion_error(d),
        // DataFusion's message as the wire says it, where COPY was.
        CopyError::Load {
            table,
            written,
            source:
                LoadError::Write {
                    first,
                    last,
                    source,
                },
        } => error(
            datafusion_code(source),
            format!(
                "{} (COPY {table}, in lines {first} to {last}; {written} rows were written before them)",
                datafusion_message(source)
            ),
        ),
        other => error(copy_code(other), other.to_string()),
    }
}

/// The SQLSTATE of a COPY that cannot run or stopped.
pub fn copy_code(e: &CopyError) -> &'static str {
    match e {
        CopyError::NotSupported(_) => FEATURE_NOT_SUPPORTED,
        CopyError::UnknownTable(_) => UNDEFINED_TABLE,
        CopyError::UnknownColumn { .. } => UNDEFINED_COLUMN,
        CopyError::DuplicateColumn(_) => DUPLICATE_COLUMN,
        CopyError::InTransactionBlock => ACTIVE_TRANSACTION,
        CopyError::Engine(e) => engine_code(e),
        CopyError::Load { source, .. } => match source {
            LoadError::Line { fault, .. } => line_fault_code(*fault),
            LoadError::Write { source, .. } => datafusion_code(source),
            LoadError::Plan(d) => datafusion_code(d),
        },
    }
}

/// The wire error for a DataFusion failure.
pub fn datafusion_error(e: &DataFusionError) -> PgWireError {
    error(datafusion_code(e), datafusion_message(e))
}

/// The wire error for a statement the parser refused.
pub fn parser_error(e: &ParserError) -> PgWireError {
    error(SYNTAX_ERROR, e.to_string())
}

/// The SQLSTATE of a notice, as PostgreSQL's NOTICE carries it: `IF NOT
/// EXISTS` of an existing relation is `42P07` (duplicate_table), the rest
/// `00000`.
pub fn notice_code(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::AlreadyExists => DUPLICATE_TABLE,
        NoticeKind::DoesNotExist
        | NoticeKind::Done
        | NoticeKind::NotEnforced
        | NoticeKind::WideScan
        | NoticeKind::CatalogChanged
        | NoticeKind::Page => SUCCESSFUL_COMPLETION,
    }
}

/// The SQLSTATE of a load's (COPY's) fault in one line, as PostgreSQL's COPY
/// reports it.
pub fn line_fault_code(fault: LineFault) -> &'static str {
    match fault {
        LineFault::UnknownColumn => UNDEFINED_COLUMN,
        LineFault::MissingValue => NOT_NULL_VIOLATION,
        LineFault::BadValue => INVALID_TEXT_REPRESENTATION,
        LineFault::BadRecord => BAD_COPY_FILE_FORMAT,
        LineFault::NotUtf8 => CHARACTER_NOT_IN_REPERTOIRE,
    }
}

/// The SQLSTATE the wire server reports for an engine error.
pub fn engine_code(e: &EngineError) -> &'static str {
    match e {
        EngineError::Catalog(c) => catalog_code(c),
        EngineError::Storage(s) => storage_code(s),
        EngineError::DataFusion(d) => datafusion_code(d),
        EngineError::NotSupported(_) => FEATURE_NOT_SUPPORTED,
        EngineError::InFailedTransaction => IN_FAILED_TRANSACTION,
        EngineError::NoTransactionBlock(_) => NO_ACTIVE_TRANSACTION,
        EngineError::NoSavepoint(_) => INVALID_SAVEPOINT,
        EngineError::InTransactionBlock { .. } => ACTIVE_TRANSACTION,
        EngineError::UnknownSetting(_) => UNDEFINED_OBJECT,
        EngineError::Parameter(p) => match p {
            ParameterError::Unknown(_) => UNDEFINED_OBJECT,
            ParameterError::ReadOnly(_) => CANT_CHANGE_RUNTIME_PARAM,
            ParameterError::InvalidValue(_) => INVALID_PARAMETER_VALUE,
            ParameterError::NotSupported(_) => FEATURE_NOT_SUPPORTED,
        },
    }
}

fn catalog_code(e: &CatalogError) -> &'static str {
    match e {
        CatalogError::Definition(_)
        | CatalogError::Template(_)
        | CatalogError::UnsupportedType { .. }
        | CatalogError::Inconsistent { .. } => INVALID_TABLE_DEFINITION,
        CatalogError::UnknownTable(_) => UNDEFINED_TABLE,
        CatalogError::NotDroppable(_) => FEATURE_NOT_SUPPORTED,
        CatalogError::TableExists(_) => DUPLICATE_TABLE,
        CatalogError::Secret(_) => DATA_CORRUPTED,
        CatalogError::Sequence(s) => sequence_code(s),
        CatalogError::Storage(s) => storage_code(s),
    }
}

fn sequence_code(e: &SequenceError) -> &'static str {
    match e {
        SequenceError::Unknown(_) => UNDEFINED_TABLE,
        SequenceError::Exists(_) => DUPLICATE_TABLE,
        SequenceError::Option { .. } => INVALID_PARAMETER_VALUE,
        SequenceError::Exhausted { .. } => "2200H",
        SequenceError::OutOfBounds { .. } => NUMERIC_OUT_OF_RANGE,
        SequenceError::NotYetDefined(_) => "55000",
        SequenceError::Contention { .. } => SERIALIZATION_FAILURE,
        SequenceError::Corrupt { .. } => DATA_CORRUPTED,
    }
}

pub fn storage_code(e: &StorageError) -> &'static str {
    match e {
        StorageError::Invalid(i) => match i {
            InvalidInput::KeyTooLong { .. }
            | InvalidInput::TooManyProperties { .. }
            | InvalidInput::ValueTooLarge { .. }
            | InvalidInput::EntityTooLarge { .. }
            | InvalidInput::TooManyOperations { .. }
            | InvalidInput::BatchTooLarge { .. }
            | InvalidInput::TooManyPropertyNames { .. } => PROGRAM_LIMIT_EXCEEDED,
            InvalidInput::DuplicateRow { .. } => UNIQUE_VIOLATION,
            InvalidInput::DateTimeOutOfRange { .. } => "22008",
            _ => INVALID_PARAMETER_VALUE,
        },
        StorageError::TableNotFound(_) | StorageError::TableBeingDeleted(_) => UNDEFINED_TABLE,
        StorageError::TableAlreadyExists(_) => DUPLICATE_TABLE,
        StorageError::EntityAlreadyExists { .. } => UNIQUE_VIOLATION,
        // A conditional write that met another version, or no entity: the
        // row changed (or went) since it was read.
        StorageError::PreconditionFailed { .. } | StorageError::EntityNotFound { .. } => {
            SERIALIZATION_FAILURE
        }
        StorageError::Batch { source, .. } => storage_code(source),
        StorageError::Transaction(scope) => match scope {
            TransactionScope::Aborted => IN_FAILED_TRANSACTION,
            TransactionScope::Undone { .. } => SERIALIZATION_FAILURE,
            TransactionScope::TooLarge { .. } => PROGRAM_LIMIT_EXCEEDED,
            // statement_completion_unknown: some of it may be written.
            TransactionScope::PartlyCommitted { .. } | TransactionScope::Unknown { .. } => "40003",
        },
        // The store's failures are the server's, not the client's login or
        // connection (class 28 or 08 would make pools drop the connection).
        StorageError::Unauthorized { .. }
        | StorageError::Unavailable { .. }
        | StorageError::AmbiguousRetry { .. } => SYSTEM_ERROR,
        StorageError::Corrupt(_) | StorageError::FormatVersion { .. } => DATA_CORRUPTED,
        _ => INTERNAL_ERROR,
    }
}

fn exec_code(e: &ExecError) -> &'static str {
    match e {
        ExecError::Storage(s) => storage_code(s),
        ExecError::KeyMismatch { .. } | ExecError::TypeMismatch { .. } => DATA_CORRUPTED,
        ExecError::Arrow(a) => arrow_code(a),
        ExecError::Key(k) => match k {
            KeyError::OutOfRange { .. } => NUMERIC_OUT_OF_RANGE,
            KeyError::NotAnInteger { .. } => INVALID_TEXT_REPRESENTATION,
            KeyError::MissingValue { .. } => NOT_NULL_VIOLATION,
            _ => INVALID_PARAMETER_VALUE,
        },
        ExecError::NullValue { .. } => NOT_NULL_VIOLATION,
        ExecError::DuplicateKey { .. } | ExecError::UniqueViolation { .. } => UNIQUE_VIOLATION,
        ExecError::BadValue { .. } => INVALID_TEXT_REPRESENTATION,
        ExecError::SystemColumn { .. } => GENERATED_ALWAYS,
        ExecError::RawTable { .. } | ExecError::PartitionMove { .. } => FEATURE_NOT_SUPPORTED,
        ExecError::PartlyWritten { source, .. } => datafusion_code(source),
        ExecError::SubqueryRows | ExecError::UpsertTwice { .. } => CARDINALITY_VIOLATION,
        ExecError::SubqueryBound { .. }
        | ExecError::ScanDenied(_)
        | ExecError::UniquePutsTooSlow { .. } => PROGRAM_LIMIT_EXCEEDED,
        ExecError::Token(TokenError::Malformed(_)) => INVALID_TEXT_REPRESENTATION,
        ExecError::Token(_) => INVALID_PARAMETER_VALUE,
        ExecError::NotPageable(_) => FEATURE_NOT_SUPPORTED,
    }
}

fn arrow_code(e: &ArrowError) -> &'static str {
    match e {
        ArrowError::CastError(_) | ArrowError::ParseError(_) => INVALID_TEXT_REPRESENTATION,
        ArrowError::DivideByZero => DIVISION_BY_ZERO,
        ArrowError::ArithmeticOverflow(_) => NUMERIC_OUT_OF_RANGE,
        ArrowError::ExternalError(inner) => external_code(inner.as_ref()),
        _ => DATA_EXCEPTION,
    }
}

fn external_code(e: &(dyn std::error::Error + 'static)) -> &'static str {
    if let Some(x) = e.downcast_ref::<ExecError>() {
        exec_code(x)
    } else if let Some(x) = e.downcast_ref::<StorageError>() {
        storage_code(x)
    } else if let Some(x) = e.downcast_ref::<EngineError>() {
        engine_code(x)
    } else if let Some(x) = e.downcast_ref::<CatalogError>() {
        catalog_code(x)
    } else if let Some(x) = e.downcast_ref::<SequenceError>() {
        sequence_code(x)
    } else if let Some(x) = e.downcast_ref::<DataFusionError>() {
        datafusion_code(x)
    } else if let Some(x) = e.downcast_ref::<ArrowError>() {
        arrow_code(x)
    } else {
        INTERNAL_ERROR
    }
}

pub fn datafusion_code(e: &DataFusionError) -> &'static str {
    match e {
        DataFusionError::SQL(_, _) => SYNTAX_ERROR,
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => UNDEFINED_COLUMN,
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::Plan(m) => plan_code(m),
        DataFusionError::NotImplemented(_) => FEATURE_NOT_SUPPORTED,
        DataFusionError::ArrowError(a, _) => arrow_code(a),
        DataFusionError::Execution(m) => execution_code(m),
        DataFusionError::External(x) => external_code(x.as_ref()),
        DataFusionError::Context(_, inner) => datafusion_code(inner),
        DataFusionError::Shared(inner) => datafusion_code(inner),
        DataFusionError::Diagnostic(_, inner) => datafusion_code(inner),
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::Collection(errors) => errors
            .first()
            .map(datafusion_code)
            .unwrap_or(INTERNAL_ERROR),
        _ => INTERNAL_ERROR,
    }
}

/// DataFusion reports several distinct conditions as `Plan` text.
fn plan_code(message: &str) -> &'static str {
    if message.starts_with("Invalid function") {
        UNDEFINED_FUNCTION
    } else if message.contains("not found") && message.contains("table") {
        UNDEFINED_TABLE
    } else if message.contains("Cannot cast") || message.contains("cannot be cast") {
        INVALID_TEXT_REPRESENTATION
    } else if message.contains("Unsupported")
        || message.contains("not supported")
        // DataFusion's refusal of a subquery where its planner cannot place
        // it ("Correlated scalar subquery can only be used in ...").
        || message.contains("subquery can only be used")
    {
        FEATURE_NOT_SUPPORTED
    } else {
        SYNTAX_ERROR
    }
}

fn execution_code(message: &str) -> &'static str {
    if message.contains("Cannot cast") || message.contains("cannot be cast") {
        INVALID_TEXT_REPRESENTATION
    } else if message.contains("Divide by zero") {
        DIVISION_BY_ZERO
    } else if message.contains("Overflow") || message.contains("overflow") {
        NUMERIC_OUT_OF_RANGE
    } else {
        DATA_EXCEPTION
    }
}

/// DataFusion prefixes messages with its own category ("Error during
/// planning: ..."); the client sees the cause alone.
fn datafusion_message(e: &DataFusionError) -> String {
    match e {
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            datafusion_message(inner)
        }
        DataFusionError::Shared(inner) => datafusion_message(inner),
        DataFusionError::External(x) => x.to_string(),
        DataFusionError::Plan(m) | DataFusionError::Execution(m) => m.clone(),
        _ => e.strip_backtrace(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KeyKind;

    #[test]
    fn storage_limits_and_conflicts() {
        let limit = StorageError::Invalid(InvalidInput::ValueTooLarge {
            name: "note".into(),
            bytes: 70_000,
        });
        assert_eq!(storage_code(&limit), PROGRAM_LIMIT_EXCEEDED);
        let key = StorageError::Invalid(InvalidInput::KeyTooLong {
            kind: KeyKind::RowKey,
            bytes: 2000,
        });
        assert_eq!(storage_code(&key), PROGRAM_LIMIT_EXCEEDED);
        let dup = StorageError::EntityAlreadyExists {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        assert_eq!(storage_code(&dup), UNIQUE_VIOLATION);
        let etag = StorageError::PreconditionFailed {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        assert_eq!(storage_code(&etag), SERIALIZATION_FAILURE);
    }

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
        assert_eq!(datafusion_code(&wrapped), UNIQUE_VIOLATION);
        assert_eq!(
            datafusion_code(&DataFusionError::NotImplemented("x".into())),
            FEATURE_NOT_SUPPORTED
        );
    }

    #[test]
    fn subqueries_tablesql_cannot_run_are_not_supported() {
        let placed = DataFusionError::Plan(
            "Correlated scalar subquery can only be used in Projection, Filter, Aggregate plan nodes".into(),
        );
        assert_eq!(datafusion_code(&placed), FEATURE_NOT_SUPPORTED);
        assert_eq!(exec_code(&ExecError::SubqueryRows), CARDINALITY_VIOLATION);
        assert_eq!(
            exec_code(&ExecError::SubqueryBound { limit: 1 }),
            PROGRAM_LIMIT_EXCEEDED
        );
    }
}
