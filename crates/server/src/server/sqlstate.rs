//! The wire's errors: an ErrorResponse built from an error of the engine,
//! which knows its own SQLSTATE (`crate::sqlstate`), and the codes that
//! belong to the wire alone (a cancel, a login, a shutdown, a refusal, a
//! cursor, a protocol violation).

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;
use pgwire::error::{ErrorInfo, PgWireError};

pub use crate::sqlstate::*;

use crate::engine::{EngineError, NoticeKind, datafusion_sqlstate as of_datafusion};
use crate::load::LoadError;
use crate::load::copy::CopyError;

pub const QUERY_CANCELED: &str = "57014";
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const CANNOT_CONNECT_NOW: &str = "57P03";
pub const INVALID_AUTHORIZATION: &str = "28000";
pub const INVALID_CATALOG_NAME: &str = "3D000";
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const DUPLICATE_CURSOR: &str = "42P03";
pub const CONNECTION_FAILURE: &str = "08006";
pub const PROTOCOL_VIOLATION: &str = "08P01";
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
        other => error(other.sqlstate(), other.to_string()),
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
            of_datafusion(source),
            format!(
                "{} (COPY {table}, in lines {first} to {last}; {written} rows were written before them)",
                datafusion_message(source)
            ),
        ),
        other => error(other.sqlstate(), other.to_string()),
    }
}

/// The wire error for a DataFusion failure.
pub fn datafusion_error(e: &DataFusionError) -> PgWireError {
    error(of_datafusion(e), datafusion_message(e))
}

/// The wire error for a statement the parser refused.
pub fn parser_error(e: &ParserError) -> PgWireError {
    error(SYNTAX_ERROR, e.to_string())
}

/// The SQLSTATE of a notice, as PostgreSQL's NOTICE carries it
/// (`NoticeKind::sqlstate`).
pub fn notice_code(kind: NoticeKind) -> &'static str {
    kind.sqlstate()
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
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m) => m.clone(),
        _ => e.strip_backtrace(),
    }
}
