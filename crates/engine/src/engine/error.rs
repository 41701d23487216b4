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
            EngineError::DataFusion(d) => crate::exec::sqlstate::of_datafusion(d),
            EngineError::NotSupported(_) => code::FEATURE_NOT_SUPPORTED,
            EngineError::InFailedTransaction => code::IN_FAILED_TRANSACTION,
            EngineError::NoTransactionBlock(_) => code::NO_ACTIVE_TRANSACTION,
            EngineError::NoSavepoint(_) => code::INVALID_SAVEPOINT,
            EngineError::InTransactionBlock { .. } => code::ACTIVE_TRANSACTION,
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
            | EngineError::InTransactionBlock { .. } => None,
        }
    }
}
