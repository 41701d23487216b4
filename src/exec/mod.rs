//! Execution: the parallel partition scan (`PartitionScanExec`) and the
//! decoding of entities into Arrow record batches.

pub mod coop;
pub mod decode;
pub mod metrics;
pub mod scan;

pub use decode::Layout;
pub use scan::{PartitionScanExec, ScanOptions};

use crate::catalog::ColumnType;
use crate::storage::{KeyKind, StorageError};

/// A failure while reading rows.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A stored key that the table's templates did not write.
    #[error(
        "table {table}: {kind} of entity ({partition_key:?}, {row_key:?}) does not match its template: {reason}"
    )]
    KeyMismatch {
        table: String,
        kind: KeyKind,
        partition_key: String,
        row_key: String,
        reason: String,
    },
    /// A stored value its column cannot hold.
    #[error(
        "table {table}: column {column} is {expected} but entity ({partition_key:?}, {row_key:?}) holds {found}"
    )]
    TypeMismatch {
        table: String,
        column: String,
        expected: ColumnType,
        found: String,
        partition_key: String,
        row_key: String,
    },
    /// Building a batch failed.
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
}

impl From<ExecError> for datafusion::error::DataFusionError {
    fn from(e: ExecError) -> Self {
        datafusion::error::DataFusionError::External(Box::new(e))
    }
}
