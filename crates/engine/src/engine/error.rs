//! `EngineError`: what the engine's statements fail with, and the
//! SQLSTATE each failure is told as.

use super::*;

/// A failure of the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The catalog refused a definition or could not be read.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// DataFusion failed: planning (unknown table or column, a type mismatch)
    /// or execution (which carries the scan's own errors).
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// A statement tablesql does not run, with why (for one, what it would
    /// create would live only in this process's memory: `engine::refuse`).
    #[error("{0}")]
    NotSupported(String),
    /// A statement other than its end in a transaction block that failed.
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,
    /// A savepoint statement (named) outside a transaction block.
    #[error("{0} can only be used in transaction blocks")]
    NoTransactionBlock(&'static str),
    /// A savepoint name that no savepoint of the block has.
    #[error("savepoint \"{0}\" does not exist")]
    NoSavepoint(String),
    /// `SHOW` of a `tablesql.*` name that is no setting.
    #[error("unrecognized configuration parameter \"{0}\"")]
    UnknownSetting(String),
    /// A session parameter (`SET application_name`, `SHOW DateStyle`)
    /// that cannot be set or read.
    #[error(transparent)]
    Parameter(#[from] ParameterError),
    /// `SET TRANSACTION ISOLATION LEVEL` after the block's first statement
    /// over the store.
    #[error("SET TRANSACTION ISOLATION LEVEL must be called before any query")]
    IsolationAfterQuery,
    /// A statement that cannot run in a transaction block: its command
    /// tag, and why (after a colon, or empty).
    #[error("{tag} cannot run inside a transaction block{why}")]
    InTransactionBlock {
        /// The statement's command tag.
        tag: &'static str,
        /// Why, as `: ...`.
        why: &'static str,
    },
}

impl EngineError {
    /// The SQLSTATE a client is told (`crate::sqlstate`): what the wire
    /// server answers, what the shell prints under `VERBOSITY verbose`,
    /// and what an embedder that answers PostgreSQL clients of its own
    /// reports.
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            EngineError::Catalog(c) => c.sqlstate(),
            EngineError::Storage(s) => s.sqlstate(),
            EngineError::DataFusion(d) => datafusion_sqlstate(d),
            EngineError::NotSupported(_) => code::FEATURE_NOT_SUPPORTED,
            EngineError::InFailedTransaction => code::IN_FAILED_TRANSACTION,
            EngineError::NoTransactionBlock(_) => code::NO_ACTIVE_TRANSACTION,
            EngineError::NoSavepoint(_) => code::INVALID_SAVEPOINT,
            EngineError::InTransactionBlock { .. } | EngineError::IsolationAfterQuery => {
                code::ACTIVE_TRANSACTION
            }
            EngineError::UnknownSetting(_) => code::UNDEFINED_OBJECT,
            EngineError::Parameter(p) => p.sqlstate(),
        }
    }

    /// The storage error under it, if one is (through any DataFusion error that wraps it).
    pub fn storage_cause(&self) -> Option<&StorageError> {
        match self {
            EngineError::Storage(s) => Some(s.root()),
            EngineError::DataFusion(d) => crate::exec::storage_cause(d),
            EngineError::Catalog(_)
            | EngineError::NotSupported(_)
            | EngineError::InFailedTransaction
            | EngineError::NoTransactionBlock(_)
            | EngineError::NoSavepoint(_)
            | EngineError::UnknownSetting(_)
            | EngineError::Parameter(_)
            | EngineError::InTransactionBlock { .. }
            | EngineError::IsolationAfterQuery => None,
        }
    }
}

/// The SQLSTATE of a DataFusion failure, through the wrappers it adds, for
/// the front ends: the planner's own errors carried in it first (exec,
/// below the planner, cannot name them), then exec's reading
/// (`exec::sqlstate`).
pub fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    planner_sqlstate(e).unwrap_or_else(|| crate::exec::sqlstate::of_datafusion(e))
}

/// The code of a planner error that `e` carries, if it carries one.
fn planner_sqlstate(e: &DataFusionError) -> Option<&'static str> {
    use crate::planner::parameters::ParameterError;
    use crate::planner::undefined::Undefined;
    match e {
        DataFusionError::External(x) => {
            if let Some(u) = x.downcast_ref::<Undefined>() {
                Some(u.sqlstate())
            } else if let Some(p) = x.downcast_ref::<ParameterError>() {
                Some(p.sqlstate())
            } else {
                x.downcast_ref::<DataFusionError>()
                    .and_then(planner_sqlstate)
            }
        }
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            planner_sqlstate(inner)
        }
        DataFusionError::Shared(inner) => planner_sqlstate(inner),
        DataFusionError::Collection(errors) => errors.first().and_then(planner_sqlstate),
        _ => None,
    }
}
