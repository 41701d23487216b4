//! Writes: the six operations of the service, entity group transactions and their
//! limits, and the pure rules that turn an operation and the entity it meets into
//! the entity to store. Every backend applies writes through `apply`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::entity::{ETag, Entity, IfMatch, StoredEntity};
use super::error::{InvalidInput, StorageError};
use super::key::{PartitionKey, RowKey};

/// Most operations in one entity group transaction.
pub const MAX_BATCH_OPERATIONS: usize = 100;
/// Largest entity group transaction, in bytes of the entity size formula.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Adds the entity; fails if it exists.
    Insert(Entity),
    /// Replaces an existing entity whole.
    Update(Entity, IfMatch),
    /// Sets the given properties of an existing entity, keeping the others.
    Merge(Entity, IfMatch),
    /// Removes an existing entity.
    Delete {
        /// The entity's PartitionKey.
        partition_key: PartitionKey,
        /// The entity's RowKey.
        row_key: RowKey,
        /// Its precondition: any version, or the ETag it must still have.
        if_match: IfMatch,
    },
    /// Inserts, or replaces whatever is there; needs no read first.
    InsertOrReplace(Entity),
    /// Inserts, or merges into whatever is there; needs no read first.
    InsertOrMerge(Entity),
}

impl WriteOp {
    /// The keys of the entity the operation writes.
    pub fn keys(&self) -> (&PartitionKey, &RowKey) {
        match self {
            WriteOp::Insert(e)
            | WriteOp::Update(e, _)
            | WriteOp::Merge(e, _)
            | WriteOp::InsertOrReplace(e)
            | WriteOp::InsertOrMerge(e) => (&e.partition_key, &e.row_key),
            WriteOp::Delete {
                partition_key,
                row_key,
                ..
            } => (partition_key, row_key),
        }
    }

    /// The entity the operation carries, if any.
    pub fn entity(&self) -> Option<&Entity> {
        match self {
            WriteOp::Insert(e)
            | WriteOp::Update(e, _)
            | WriteOp::Merge(e, _)
            | WriteOp::InsertOrReplace(e)
            | WriteOp::InsertOrMerge(e) => Some(e),
            WriteOp::Delete { .. } => None,
        }
    }

    /// As [`Self::entity`], to change it.
    pub fn entity_mut(&mut self) -> Option<&mut Entity> {
        match self {
            WriteOp::Insert(e)
            | WriteOp::Update(e, _)
            | WriteOp::Merge(e, _)
            | WriteOp::InsertOrReplace(e)
            | WriteOp::InsertOrMerge(e) => Some(e),
            WriteOp::Delete { .. } => None,
        }
    }

    /// Bytes the operation counts for against the batch limit.
    pub fn stored_size(&self) -> usize {
        match self {
            WriteOp::Insert(e)
            | WriteOp::Update(e, _)
            | WriteOp::Merge(e, _)
            | WriteOp::InsertOrReplace(e)
            | WriteOp::InsertOrMerge(e) => e.stored_size(),
            WriteOp::Delete {
                partition_key,
                row_key,
                ..
            } => Entity::new(partition_key.clone(), row_key.clone()).stored_size(),
        }
    }
}

/// What a successful write reports.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOutcome {
    /// The entity's new ETag; `None` after a delete.
    pub etag: Option<ETag>,
}

/// Checks an entity group transaction before anything is written: 1 to 100
/// operations, one partition, one operation per entity, at most 4 MiB, and every
/// entity within the limits. Normalizes the entities (see `Entity::validate`).
/// A failure of one operation names its index.
pub fn validate_batch(ops: &mut [WriteOp]) -> Result<(), StorageError> {
    if ops.is_empty() {
        return Err(InvalidInput::EmptyBatch.into());
    }
    if ops.len() > MAX_BATCH_OPERATIONS {
        return Err(InvalidInput::TooManyOperations { count: ops.len() }.into());
    }
    let partition = ops[0].keys().0.clone();
    let mut rows = HashSet::with_capacity(ops.len());
    let mut bytes = 0;
    for (index, op) in ops.iter_mut().enumerate() {
        let at = |e: InvalidInput| StorageError::Batch {
            index,
            source: Box::new(e.into()),
        };
        let (pk, rk) = op.keys();
        if *pk != partition {
            return Err(at(InvalidInput::CrossPartition {
                expected: partition.as_str().to_owned(),
                found: pk.as_str().to_owned(),
            }));
        }
        if !rows.insert(rk.clone()) {
            return Err(at(InvalidInput::DuplicateRow {
                row_key: rk.as_str().to_owned(),
            }));
        }
        bytes += match op.entity_mut() {
            Some(e) => e.validate().map_err(at)?,
            None => op.stored_size(),
        };
    }
    if bytes > MAX_BATCH_BYTES {
        return Err(InvalidInput::BatchTooLarge { bytes }.into());
    }
    Ok(())
}

/// What a write does to the stored entity.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Store this entity under its keys.
    Put(StoredEntity),
    /// Remove the entity.
    Delete,
}

/// Applies one validated operation to the entity it meets (`None` when absent),
/// stamping a write with `timestamp`. Pure: this is the service's write semantics.
/// Takes the operation whole so that the entity it carries becomes the stored
/// one without a copy (a bulk load writes each entity once).
pub fn apply(
    existing: Option<&StoredEntity>,
    op: WriteOp,
    timestamp: DateTime<Utc>,
) -> Result<Effect, StorageError> {
    let stamp = |entity: Entity| {
        Effect::Put(StoredEntity {
            entity,
            timestamp,
            etag: ETag::for_timestamp(&timestamp),
        })
    };
    match op {
        WriteOp::Insert(e) => match existing {
            Some(_) => Err(StorageError::EntityAlreadyExists {
                partition_key: e.partition_key.as_str().to_owned(),
                row_key: e.row_key.as_str().to_owned(),
            }),
            None => Ok(stamp(e)),
        },
        WriteOp::InsertOrReplace(e) => Ok(stamp(e)),
        WriteOp::InsertOrMerge(e) => Ok(stamp(merged(existing, e))),
        WriteOp::Update(e, if_match) => {
            check(existing, &e.partition_key, &e.row_key, &if_match)?;
            Ok(stamp(e))
        }
        WriteOp::Merge(e, if_match) => {
            check(existing, &e.partition_key, &e.row_key, &if_match)?;
            Ok(stamp(merged(existing, e)))
        }
        WriteOp::Delete {
            partition_key,
            row_key,
            if_match,
        } => {
            check(existing, &partition_key, &row_key, &if_match)?;
            Ok(Effect::Delete)
        }
    }
}

fn merged(existing: Option<&StoredEntity>, e: Entity) -> Entity {
    match existing {
        None => e,
        Some(old) => {
            let mut out = old.entity.clone();
            out.properties.extend(e.properties);
            out
        }
    }
}

fn check(
    existing: Option<&StoredEntity>,
    pk: &PartitionKey,
    rk: &RowKey,
    if_match: &IfMatch,
) -> Result<(), StorageError> {
    let keys = || (pk.as_str().to_owned(), rk.as_str().to_owned());
    match (existing, if_match) {
        (None, _) => {
            let (partition_key, row_key) = keys();
            Err(StorageError::EntityNotFound {
                partition_key,
                row_key,
            })
        }
        (Some(old), IfMatch::ETag(etag)) if old.etag != *etag => {
            let (partition_key, row_key) = keys();
            Err(StorageError::PreconditionFailed {
                partition_key,
                row_key,
            })
        }
        (Some(_), _) => Ok(()),
    }
}
