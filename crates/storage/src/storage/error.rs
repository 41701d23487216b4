//! Errors of the storage layer: what Table Storage would answer, typed.

use super::key::KeyKind;
use crate::sqlstate as code;

/// Result of a storage operation.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Input that breaks a rule of the storage model; nothing was written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A key longer than 1 KiB (measured as UTF-16, as the service stores it).
    #[error("{kind} is {bytes} bytes as UTF-16; the limit is 1024")]
    KeyTooLong {
        /// Which key.
        kind: KeyKind,
        /// Its length in bytes as UTF-16.
        bytes: usize,
    },
    /// A key holding a character keys may not hold.
    #[error("{kind} contains the character {ch:?} (U+{code:04X}), which keys may not hold")]
    KeyCharacter {
        /// Which key.
        kind: KeyKind,
        /// The character.
        ch: char,
        /// Its Unicode code point.
        code: u32,
    },
    /// A table name outside `^[A-Za-z][A-Za-z0-9]{2,62}$` or a reserved one.
    #[error("invalid table name {name:?}: {reason}")]
    TableName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A property name that is not a C# identifier of at most 255 characters.
    #[error("invalid property name {name:?}: {reason}")]
    PropertyName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A custom property named after a system property.
    #[error("property {name:?} is a system property and cannot be set")]
    SystemProperty {
        /// The property's name.
        name: String,
    },
    /// More custom properties than an entity may carry.
    #[error("entity has {count} custom properties; the limit is 252")]
    TooManyProperties {
        /// The entity's custom properties.
        count: usize,
    },
    /// A String or Binary value over 64 KiB.
    #[error("property {name:?} is {bytes} bytes; the limit for one value is 65536")]
    ValueTooLarge {
        /// The property's name.
        name: String,
        /// The value's size in bytes.
        bytes: usize,
    },
    /// A DateTime outside the range the service stores.
    #[error("property {name:?} holds a DateTime outside 1601-01-01 .. 9999-12-31")]
    DateTimeOutOfRange {
        /// The property's name.
        name: String,
    },
    /// An entity over 1 MiB by the service's size formula.
    #[error("entity is {bytes} bytes; the limit is 1048576")]
    EntityTooLarge {
        /// The entity's size in bytes.
        bytes: usize,
    },
    /// A batch with no operations.
    #[error("an entity group transaction needs at least one operation")]
    EmptyBatch,
    /// A new property name in a table of the embedded store that has
    /// numbered as many names as its values can refer to.
    #[error("a table of the embedded store holds at most {limit} distinct property names")]
    TooManyPropertyNames {
        /// The most names a table holds.
        limit: usize,
    },
    /// A batch with more than 100 operations.
    #[error("entity group transaction has {count} operations; the limit is 100")]
    TooManyOperations {
        /// The batch's operations.
        count: usize,
    },
    /// Over a limit of one service that the model's own limits allow
    /// (Cosmos DB's Table API: RowKeys of 255 bytes, batches of 2 MB).
    #[error("{what} is {size} bytes; {service} takes at most {limit}")]
    ServiceLimit {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The service's limit.
        limit: usize,
        /// The service.
        service: &'static str,
    },
    /// A batch over 4 MiB.
    #[error("entity group transaction is {bytes} bytes; the limit is 4194304")]
    BatchTooLarge {
        /// The batch's size in bytes.
        bytes: usize,
    },
    /// A batch operation outside the partition of the first operation.
    #[error("operation is in partition {found:?}, but the transaction is in {expected:?}")]
    CrossPartition {
        /// The PartitionKey of the first operation.
        expected: String,
        /// The PartitionKey of the operation outside it.
        found: String,
    },
    /// A second operation on one entity in a batch.
    #[error("row {row_key:?} appears more than once in the transaction")]
    DuplicateRow {
        /// The entity's RowKey.
        row_key: String,
    },
    /// A `top` outside 1..=1000.
    #[error("top must be between 1 and 1000, got {0}")]
    Top(u32),
    /// A continuation token this store did not issue.
    #[error("malformed continuation token")]
    ContinuationToken,
    /// A value that cannot travel in a request (an ETag with a line break, say).
    #[error("the request cannot be sent: {0}")]
    Unsendable(String),
    /// Input the remote service refused, with its error code (a limit the
    /// client-side checks did not know of, or a service-specific rule).
    #[error("the service refused the input ({code}): {message}")]
    Rejected {
        /// The service's error code.
        code: String,
        /// The service's error message.
        message: String,
    },
}

/// Why a transaction block's COMMIT wrote nothing, or not all of it
/// (`exec::write::commit`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionScope {
    /// A write of the block failed, so COMMIT rolled it back.
    #[error(
        "a write of the transaction block failed, so it was rolled back and nothing of it was written"
    )]
    Aborted,
    /// COMMIT over several partitions met a row another client changed
    /// since the block read it; what it had written was put back.
    #[error(
        "COMMIT met a change by another client ({reason}); the partitions it had written were put back, and nothing of the block was written"
    )]
    Undone {
        /// The write that failed.
        reason: String,
    },
    /// A batch's answer was lost: it may have landed. The block's record
    /// stays in the store, and a recovery finishes the block.
    #[error(
        "COMMIT's outcome is unknown ({reason}): the block's record stays in the store, and the next engine to open it or to commit across partitions finishes the block"
    )]
    Unknown {
        /// The failure that left it unknown.
        reason: String,
    },
    /// More writes than a block holds (`MAX_BLOCK_WRITES`).
    #[error(
        "the transaction block would write more than {limit} entities, which it holds in memory until COMMIT: write so much in autocommit, or with COPY outside a block"
    )]
    TooLarge {
        /// The most a block writes.
        limit: usize,
    },
    /// A row the block read (`FOR UPDATE`, or any read under REPEATABLE
    /// READ or SERIALIZABLE) has another version now: another client
    /// changed, added or removed it since. Nothing of the block is written.
    #[error(
        "could not serialize access due to concurrent update: row ({partition_key:?}, {row_key:?}) of {table} changed since the transaction block read it"
    )]
    ReadChanged {
        /// The table the row is in.
        table: String,
        /// The row's PartitionKey.
        partition_key: String,
        /// The row's RowKey.
        row_key: String,
    },
    /// `FOR UPDATE NOWAIT` (or `FOR SHARE NOWAIT`) met a row another
    /// session of this engine holds.
    #[error("could not obtain lock on row in relation \"{table}\"")]
    LockNotAvailable {
        /// The table the row is in.
        table: String,
    },
    /// Waiting for a row lock would wait forever: its holder waits, directly
    /// or through others, for a lock this block holds.
    #[error(
        "deadlock detected: a row of {table} is locked by a transaction that waits for this one"
    )]
    Deadlock {
        /// The table of the row waited for.
        table: String,
    },
    /// A read a SERIALIZABLE block cannot keep serializable here: the store
    /// has no lock over a range, so rows another client adds to it are not
    /// seen at COMMIT.
    #[error(
        "SERIALIZABLE cannot read a range of rows ({what}): read rows by their whole key, or use REPEATABLE READ, which allows the rows another client adds (phantoms)"
    )]
    NotSerializable {
        /// What was read.
        what: String,
    },
    /// As `Undone`, but putting back failed too (yet another write came).
    #[error(
        "COMMIT met a change by another client ({reason}), and putting back what it had written failed ({undo}): these partitions may hold the block's writes: {partitions}"
    )]
    PartlyCommitted {
        /// The write that failed.
        reason: String,
        /// Why putting back failed.
        undo: String,
        /// The partitions written, as `table/"PartitionKey"`.
        partitions: String,
    },
}

/// Any failure of a `TableStore` operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The input breaks a rule of the model (a limit, a name, a key).
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// A transaction block's COMMIT that did not write it whole.
    #[error(transparent)]
    Transaction(TransactionScope),
    /// The table does not exist.
    #[error("table {0:?} does not exist")]
    TableNotFound(String),
    /// The table exists already (names compare case-insensitively).
    #[error("table {0:?} already exists")]
    TableAlreadyExists(String),
    /// The entity does not exist.
    #[error("entity ({partition_key:?}, {row_key:?}) does not exist")]
    EntityNotFound {
        /// The entity's PartitionKey.
        partition_key: String,
        /// The entity's RowKey.
        row_key: String,
    },
    /// The entity exists already.
    #[error("entity ({partition_key:?}, {row_key:?}) already exists")]
    EntityAlreadyExists {
        /// The entity's PartitionKey.
        partition_key: String,
        /// The entity's RowKey.
        row_key: String,
    },
    /// An If-Match ETag that is no longer the entity's.
    #[error(
        "ETag precondition failed for ({partition_key:?}, {row_key:?}): the entity has changed"
    )]
    PreconditionFailed {
        /// The entity's PartitionKey.
        partition_key: String,
        /// The entity's RowKey.
        row_key: String,
    },
    /// One operation of an entity group transaction failed; none was applied.
    #[error("operation {index} of the transaction failed, nothing was written: {source}")]
    Batch {
        /// The failed operation's position in the transaction, from 0.
        index: usize,
        /// Why it failed.
        #[source]
        source: Box<StorageError>,
    },
    /// The store is open by another process.
    #[error("the store at {0} is in use by another process")]
    InUse(String),
    /// The store was written by an incompatible version.
    #[error(
        "the store has format version {found}; this build reads version {expected}{}",
        if found < expected { ": `tablesql migrate --store DIR` converts it (the old file is kept beside it)" } else { ": it was written by a newer tablesql" }
    )]
    FormatVersion {
        /// The store's format version.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// Stored bytes that do not decode.
    #[error("corrupt data in the store: {0}")]
    Corrupt(String),
    /// A failure of the embedded database engine.
    #[error("embedded store: {0}")]
    Embedded(#[from] Box<redb::Error>),
    /// An I/O failure outside the database engine.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The commit that carried this write failed; nothing of it was written.
    #[error("the commit failed, nothing was written: {0}")]
    CommitFailed(String),
    /// A background task of the store died.
    #[error("storage task failed: {0}")]
    Task(String),
    /// The table is being deleted; the service refuses to create it again for
    /// a while (about 40 seconds on Azure).
    #[error("table {0:?} is being deleted; retry later")]
    TableBeingDeleted(String),
    /// The service refused the credentials (the signature itself is never shown).
    #[error("the service refused the credentials ({code}): {message}")]
    Unauthorized {
        /// The service's error code.
        code: String,
        /// The service's error message.
        message: String,
    },
    /// The service stayed busy, timed out or unreachable through every retry.
    /// `may_have_applied`: a write's answer was lost on the way, so the write
    /// may have been applied even so.
    #[error(
        "the service is unavailable after {attempts} attempts: {detail}{}",
        if *may_have_applied { "; the write may have been applied" } else { "" }
    )]
    Unavailable {
        /// Requests sent, the first included.
        attempts: u32,
        /// The last attempt's failure.
        detail: String,
        /// Whether a write's answer was lost, so that it may have been applied.
        may_have_applied: bool,
    },
    /// A request was retried after its answer was lost, and the retry failed as
    /// a repeat would (409, 412, 404): the first attempt may well have been
    /// applied, so the write is not known to have failed.
    #[error(
        "a retry after a lost answer failed with: {source}; the first attempt may have been applied"
    )]
    AmbiguousRetry {
        /// Requests sent, the first included.
        attempts: u32,
        /// The retry's failure.
        #[source]
        source: Box<StorageError>,
    },
    /// An answer of the service that this client does not understand.
    #[error("unexpected answer from the service: {0}")]
    Protocol(String),
    /// Any other error the service answered with.
    #[error("the service answered {status} {code}: {message}")]
    Service {
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: String,
        /// The service's error message.
        message: String,
    },
}

impl StorageError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        match self {
            StorageError::Invalid(i) => match i {
                InvalidInput::KeyTooLong { .. }
                | InvalidInput::TooManyProperties { .. }
                | InvalidInput::ValueTooLarge { .. }
                | InvalidInput::EntityTooLarge { .. }
                | InvalidInput::TooManyOperations { .. }
                | InvalidInput::BatchTooLarge { .. }
                | InvalidInput::ServiceLimit { .. }
                | InvalidInput::TooManyPropertyNames { .. } => code::PROGRAM_LIMIT_EXCEEDED,
                InvalidInput::DuplicateRow { .. } => code::UNIQUE_VIOLATION,
                InvalidInput::DateTimeOutOfRange { .. } => code::DATETIME_FIELD_OVERFLOW,
                _ => code::INVALID_PARAMETER_VALUE,
            },
            StorageError::TableNotFound(_) | StorageError::TableBeingDeleted(_) => {
                code::UNDEFINED_TABLE
            }
            StorageError::TableAlreadyExists(_) => code::DUPLICATE_TABLE,
            StorageError::EntityAlreadyExists { .. } => code::UNIQUE_VIOLATION,
            // A conditional write that met another version, or no entity: the
            // row changed (or went) since it was read.
            StorageError::PreconditionFailed { .. } | StorageError::EntityNotFound { .. } => {
                code::SERIALIZATION_FAILURE
            }
            StorageError::Batch { source, .. } => source.sqlstate(),
            StorageError::Transaction(scope) => match scope {
                TransactionScope::Aborted => code::IN_FAILED_TRANSACTION,
                TransactionScope::Undone { .. } | TransactionScope::ReadChanged { .. } => {
                    code::SERIALIZATION_FAILURE
                }
                TransactionScope::LockNotAvailable { .. } => code::LOCK_NOT_AVAILABLE,
                TransactionScope::Deadlock { .. } => code::DEADLOCK_DETECTED,
                TransactionScope::NotSerializable { .. } => code::FEATURE_NOT_SUPPORTED,
                TransactionScope::TooLarge { .. } => code::PROGRAM_LIMIT_EXCEEDED,
                // Some of it may be written.
                TransactionScope::PartlyCommitted { .. } | TransactionScope::Unknown { .. } => {
                    code::STATEMENT_COMPLETION_UNKNOWN
                }
            },
            // The store's failures are the server's, not the client's login or
            // connection (class 28 or 08 would make pools drop the connection).
            StorageError::Unauthorized { .. }
            | StorageError::Unavailable { .. }
            | StorageError::AmbiguousRetry { .. } => code::SYSTEM_ERROR,
            StorageError::Corrupt(_) | StorageError::FormatVersion { .. } => code::DATA_CORRUPTED,
            _ => code::INTERNAL_ERROR,
        }
    }

    /// Whether the failure is transient (a busy, timed-out or unreachable
    /// service), so that the same request later may well succeed. The Azure
    /// backend has retried these already, as its retry policy allows.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StorageError::Unavailable { .. } | StorageError::TableBeingDeleted(_)
        )
    }

    /// Whether the store refused a write for an entity's state: 409 (it
    /// exists, or is missing) or 412 (it changed under its ETag), looking
    /// through a batch wrapper.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self.root(),
            StorageError::EntityAlreadyExists { .. }
                | StorageError::EntityNotFound { .. }
                | StorageError::PreconditionFailed { .. }
        )
    }

    /// The error of the operation itself, looking through a batch wrapper.
    pub fn root(&self) -> &StorageError {
        match self {
            StorageError::Batch { source, .. } => source.root(),
            other => other,
        }
    }
}

/// Converts every redb error type into `StorageError` through `redb::Error`.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                StorageError::Embedded(Box::new(redb::Error::from(e)))
            }
        }
    )*};
}
from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_limits_and_conflicts() {
        let limit = StorageError::Invalid(InvalidInput::ValueTooLarge {
            name: "note".into(),
            bytes: 70_000,
        });
        assert_eq!(limit.sqlstate(), code::PROGRAM_LIMIT_EXCEEDED);
        let key = StorageError::Invalid(InvalidInput::KeyTooLong {
            kind: KeyKind::RowKey,
            bytes: 2000,
        });
        assert_eq!(key.sqlstate(), code::PROGRAM_LIMIT_EXCEEDED);
        let dup = StorageError::EntityAlreadyExists {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        assert_eq!(dup.sqlstate(), code::UNIQUE_VIOLATION);
        let etag = StorageError::PreconditionFailed {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        assert_eq!(etag.sqlstate(), code::SERIALIZATION_FAILURE);
    }
}
