//! Entity counts kept beside the entities: one per partition and RowKey
//! kind, changed in the same write transaction as the entities, so that a
//! count of a table, a partition or one kind of row reads a few counters
//! instead of every entity.
//!
//! A RowKey's kind is the literal that tells base rows from index rows:
//! its leading name and colon (`BIB:`, `AGE:`, a plain table's `r:`, an
//! index's `BY_AGE:`), or none. Only a name of ASCII letters, digits and
//! `_` of at most 32 bytes is a kind, so a key without that shape counts
//! under none rather than under a kind of its own.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::{ReadableTable, TableDefinition};

use super::key;
use crate::storage::key::kind_len;
use crate::storage::{KeyRange, PartitionCount, PartitionKey, Result, StorageError};

/// The redb table of a store table's counts: partition prefix (key bytes
/// and separator) and kind -> entities.
pub fn table_name(folded: &str) -> String {
    format!("counts_{folded}")
}

pub fn definition(name: &str) -> TableDefinition<'_, &'static [u8], u64> {
    TableDefinition::new(name)
}

/// The changes a transaction makes to the counts, by counter key.
#[derive(Debug, Default)]
pub struct Deltas(BTreeMap<Vec<u8>, i64>);

impl Deltas {
    /// One entity of this stored key more (`by` 1) or fewer (-1).
    pub fn add(&mut self, entity_key: &[u8], by: i64) -> Result<()> {
        // The counter's key, the partition's prefix and the kind, is the
        // start of the entity's key: looked up borrowed, copied only when
        // new to this transaction.
        let rk_at = key::separator(entity_key)? + 1;
        let counter = &entity_key[..rk_at + kind_len(&entity_key[rk_at..])];
        match self.0.get_mut(counter) {
            Some(n) => *n += by,
            None => {
                self.0.insert(counter.to_vec(), by);
            }
        }
        Ok(())
    }

    /// Writes the changes into the counts table of the caller's
    /// transaction; a counter that reaches 0 is removed.
    pub fn apply(self, table: &mut redb::Table<'_, &'static [u8], u64>) -> Result<()> {
        for (counter, by) in self.0 {
            if by == 0 {
                continue;
            }
            let was = table.get(counter.as_slice())?.map_or(0, |v| v.value());
            let now = was
                .checked_add_signed(by)
                .ok_or_else(|| StorageError::Corrupt("an entity count below zero".into()))?;
            if now == 0 {
                table.remove(counter.as_slice())?;
            } else {
                table.insert(counter.as_slice(), now)?;
            }
        }
        Ok(())
    }
}

/// The entities of the partitions in `partitions`, of one kind (or of all,
/// for ""), from the counters.
pub fn sum(
    table: &impl ReadableTable<&'static [u8], u64>,
    partitions: &KeyRange<PartitionKey>,
    of_kind: &str,
) -> Result<u64> {
    let start = match &partitions.start {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(pk) => Bound::Included(key::partition_prefix(pk)),
        Bound::Excluded(pk) => Bound::Included(key::after_partition(pk)),
    };
    let end = match &partitions.end {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(pk) => Bound::Excluded(key::after_partition(pk)),
        Bound::Excluded(pk) => Bound::Excluded(key::partition_prefix(pk)),
    };
    let bounds = (
        start.as_ref().map(Vec::as_slice),
        end.as_ref().map(Vec::as_slice),
    );
    let mut n = 0u64;
    for item in table.range::<&[u8]>(bounds)? {
        let (counter, count) = item?;
        if of_kind.is_empty() || counter_kind(counter.value())? == of_kind.as_bytes() {
            n += count.value();
        }
    }
    Ok(n)
}

/// Counters per partition past which `by_partition` does not read.
const MOST_KINDS: u64 = 8;

/// Every partition's counters by kind, in key order; `None` past `limit`
/// partitions (the caller's bound on what one read of them may cost).
pub fn by_partition(
    table: &impl ReadableTable<&'static [u8], u64>,
    limit: usize,
) -> Result<Option<Vec<PartitionCount>>> {
    // A partition has a counter per kind it holds, and rarely more than a
    // few kinds: far more counters than that are surely too many
    // partitions, known without reading them.
    if table.len()? > (limit as u64).saturating_mul(MOST_KINDS) {
        return Ok(None);
    }
    let mut out: Vec<PartitionCount> = Vec::new();
    let mut prefix: Vec<u8> = Vec::new();
    for item in table.iter()? {
        let (counter, count) = item?;
        let counter = counter.value();
        let rk_at = key::separator(counter)? + 1;
        let kind = std::str::from_utf8(&counter[rk_at..])
            .map_err(|_| StorageError::Corrupt("a count's kind is not text".into()))?;
        if out.is_empty() || counter[..rk_at] != prefix[..] {
            if out.len() == limit {
                return Ok(None);
            }
            prefix.clear();
            prefix.extend_from_slice(&counter[..rk_at]);
            // A counter's key reads as an entity key whose RowKey is the kind.
            let (partition, _) = key::decode(counter)?;
            out.push(PartitionCount {
                partition,
                kinds: Vec::new(),
            });
        }
        if let Some(p) = out.last_mut() {
            p.kinds.push((kind.to_owned(), count.value()));
        }
    }
    Ok(Some(out))
}

fn counter_kind(counter: &[u8]) -> Result<&[u8]> {
    Ok(&counter[key::separator(counter)? + 1..])
}
