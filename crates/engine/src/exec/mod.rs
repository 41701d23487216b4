//! Execution: the physical plans a statement runs, below the planner.
//!
//! The planner decides what a statement should do and builds these plans
//! into DataFusion's; exec carries them out against a `TableStore` and
//! never imports the planner or the engine, so that what runs can be read
//! without the choices that led to it. Four concerns, one folder each:
//!
//! - `read`: the scan. Access paths, the parallel, paged partition scan
//!   (`PartitionScanExec`), entities into Arrow, index rows to base rows,
//!   page tokens.
//! - `write`: INSERT, UPDATE, DELETE and upserts (`DmlExec`), rows into
//!   entities, transaction blocks, index upkeep, sequences.
//! - `stats`: `ANALYZE`, the workload statistics, and the partition
//!   advisor's findings drawn from them.
//! - `ops`: SQL operators DataFusion lacks or runs differently from
//!   PostgreSQL (correlated subqueries, scalar subqueries, checked
//!   arithmetic, joins that yield).
//!
//! Here, what they share: a statement's bill as EXPLAIN shows it (`bill`),
//! the layer's error ([`ExecError`]) and how a
//! front end reads one ([`storage_cause`], [`is_conflict`]), a write's row
//! count ([`rows_written`]), and the notices a statement leaves for its
//! front end (`notices`).

pub mod bill;
pub mod notices;
pub mod ops;
pub mod read;
pub mod sqlstate;
pub mod stats;
pub mod write;

pub use read::decode::Layout;
pub use read::scan::{PartitionScanExec, ScanOptions};
pub use write::dml::{DmlExec, DmlOp};

/// The SQL rows a write's plan has committed so far (its root's
/// `rows_written` metric); `None` for a plan that writes nothing.
pub fn rows_written(plan: &dyn datafusion::physical_plan::ExecutionPlan) -> Option<u64> {
    read::metrics::count(plan, write::dml::ROWS_WRITTEN)
}

use crate::catalog::ColumnType;
use crate::keys::KeyError;
use crate::storage::{KeyKind, StorageError};

/// A failure while reading or writing rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A stored key that the table's templates did not write.
    #[error(
        "table {table}: {kind} of entity ({partition_key:?}, {row_key:?}) does not match its template: {reason}"
    )]
    KeyMismatch {
        /// The table's name.
        table: String,
        /// Which key does not match.
        kind: KeyKind,
        /// The entity's PartitionKey.
        partition_key: String,
        /// The entity's RowKey.
        row_key: String,
        /// Why the template does not read it.
        reason: String,
    },
    /// A stored value its column cannot hold.
    #[error(
        "table {table}: column {column} is {expected} but entity ({partition_key:?}, {row_key:?}) holds {found}"
    )]
    TypeMismatch {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// The column's declared type.
        expected: ColumnType,
        /// What the entity holds instead: its stored type, or a key value that does not fit.
        found: String,
        /// The entity's PartitionKey.
        partition_key: String,
        /// The entity's RowKey.
        row_key: String,
    },
    /// Building a batch failed.
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// A value a key template cannot write.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// NULL in a NOT NULL column or in a column a key template needs.
    #[error("table {table}: column {column} must not be NULL")]
    NullValue {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
    },
    /// A value its column cannot store.
    #[error("column {column}: {reason}")]
    BadValue {
        /// The column's name.
        column: String,
        /// Why the value does not fit.
        reason: String,
    },
    /// A value given for a system column (keys, Timestamp, ETag).
    #[error("column {column} is set by the store and the key templates; leave it out")]
    SystemColumn {
        /// The system column's name.
        column: String,
    },
    /// A write to a table without a mapping.
    #[error(
        "table {table} has no mapping (key templates), so rows cannot be written through SQL; map it with CREATE TABLE ... WITH (...)"
    )]
    RawTable {
        /// The table's name.
        table: String,
    },
    /// An UPDATE that changes a PartitionKey column: a move across partitions,
    /// which no entity group transaction can make atomic.
    #[error(
        "table {table}: UPDATE cannot change the columns that place a row in its partition ({columns}); a row cannot move to another partition atomically (DELETE it and INSERT it instead)"
    )]
    PartitionMove {
        /// The table's name.
        table: String,
        /// The table's PartitionKey columns, comma-separated.
        columns: String,
    },
    /// A row whose values of a unique index's columns another row has.
    #[error(
        "duplicate key value violates unique constraint \"{index}\": table {table} already has a row with ({values})"
    )]
    UniqueViolation {
        /// The table's name.
        table: String,
        /// The unique index.
        index: String,
        /// The values, comma-separated.
        values: String,
    },
    /// A statement's unique entities took too long to put, so that the
    /// first could be taken over before their rows land
    /// (`write::global::PUTS_WITHIN`): given back, the statement fails.
    #[error(
        "putting {rows} values of unique index \"{index}\" took over {seconds} s (the store is slow or throttling); write fewer rows per statement"
    )]
    UniquePutsTooSlow {
        /// The unique index.
        index: String,
        /// The values the statement put.
        rows: usize,
        /// The bound.
        seconds: u64,
    },
    /// A row whose primary key another row has (the RowKey holds more than
    /// the key, so the store alone would take both).
    #[error(
        "duplicate key: table {table} already has a row with primary key ({columns}) = ({values})"
    )]
    DuplicateKey {
        /// The table's name.
        table: String,
        /// The primary key's columns, comma-separated.
        columns: String,
        /// The row's primary key values, comma-separated (`NULL` for none).
        values: String,
    },
    /// A statement that failed after some of its rows were committed
    /// (outside a transaction block; inside one they were only buffered,
    /// and the block is aborted).
    #[error(
        "{source} ({rows} rows of this statement were written before the failure{}: each partition's rows commit together, a statement across partitions does not)",
        more_may_have_been(.unsure)
    )]
    PartlyWritten {
        /// The SQL rows committed before the failure.
        rows: u64,
        /// The SQL rows whose transactions' answers were lost before it
        /// (`AnswersLost`): they may have been committed too.
        unsure: u64,
        /// The failure.
        source: Box<datafusion::error::DataFusionError>,
    },
    /// A statement that sent every row, but some of whose transactions'
    /// answers were lost and could not be settled (the retry met what the
    /// lost attempt would have done): those rows may have been applied.
    #[error(
        "{unsure} row(s) of this statement may or may not have been applied ({written} other rows were written): {source}"
    )]
    AnswersLost {
        /// The SQL rows whose transactions are known to have committed.
        written: u64,
        /// The SQL rows whose transactions' outcomes are unknown.
        unsure: u64,
        /// The first unsettled failure (`StorageError::AmbiguousRetry`).
        source: StorageError,
    },
    /// Two proposed rows of one `INSERT ... ON CONFLICT DO UPDATE` with one
    /// primary key.
    #[error(
        "ON CONFLICT DO UPDATE command cannot affect row a second time: two proposed rows of table {table} have one primary key"
    )]
    UpsertTwice {
        /// The table's name.
        table: String,
    },
    /// A scalar subquery that gave more than one row for an outer row.
    #[error("more than one row returned by a subquery used as an expression")]
    SubqueryRows,
    /// A correlated subquery with more distinct outer values than one
    /// statement may evaluate it for.
    #[error(
        "a correlated subquery would be evaluated for more than {limit} distinct outer values; rewrite it as a join or narrow the outer rows"
    )]
    SubqueryBound {
        /// The most distinct outer values one statement may evaluate it for.
        limit: usize,
    },
    /// `tablesql.scan_policy = deny` refused a scan of every partition.
    #[error(
        "{0}; tablesql.scan_policy = deny refuses it (SET tablesql.scan_policy = allow to run it)"
    )]
    ScanDenied(read::access::WholeTable),
    /// A page token that names no position of this statement in this store.
    #[error(transparent)]
    Token(#[from] read::token::TokenError),
    /// A statement token paging cannot page: it reads more than one table
    /// in key order with row-by-row operators.
    #[error(
        "token paging reads one table in key order, filtering and projecting its rows; this statement has {0}"
    )]
    NotPageable(String),
}

impl From<ExecError> for datafusion::error::DataFusionError {
    fn from(e: ExecError) -> Self {
        datafusion::error::DataFusionError::External(Box::new(e))
    }
}

/// The storage error under an execution error, if one is: through
/// DataFusion's wrappers and `ExecError::Storage`, whose `transparent`
/// `source()` skips it. A batch's error is given as its operation's.
pub fn storage_cause<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a crate::storage::StorageError> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(s) = c.downcast_ref::<crate::storage::StorageError>() {
            return Some(s.root());
        }
        if let Some(ExecError::Storage(s)) = c.downcast_ref::<ExecError>() {
            return Some(s.root());
        }
        cause = c.source();
    }
    None
}

/// Whether an execution error is the store refusing a write for an
/// entity's state (409: exists or missing; 412: changed under its ETag), or
/// the same refusal made before sending (`DuplicateKey`: the key exists).
pub fn is_conflict(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(ExecError::DuplicateKey { .. }) = c.downcast_ref::<ExecError>() {
            return true;
        }
        cause = c.source();
    }
    storage_cause(e).is_some_and(crate::storage::StorageError::is_conflict)
}

/// `PartlyWritten`'s word on rows whose answers were lost before it.
fn more_may_have_been(unsure: &u64) -> String {
    match unsure {
        0 => String::new(),
        n => format!(", and {n} more may have been"),
    }
}
