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
use crate::storage::{KeyRange, PartitionKey, Result, RowKey, StorageError};

/// The longest name a kind has, colon excluded.
const MAX_KIND: usize = 32;

/// The redb table of a store table's counts: partition prefix (key bytes
/// and separator) and kind -> entities.
pub fn table_name(folded: &str) -> String {
    format!("counts_{folded}")
}

pub fn definition(name: &str) -> TableDefinition<'_, &'static [u8], u64> {
    TableDefinition::new(name)
}

/// A RowKey's kind: its leading `name:`, or "" (none).
pub fn kind(rk: &str) -> &str {
    // The kind is ASCII, so it ends on a character boundary.
    &rk[..kind_bytes(rk.as_bytes()).len()]
}

/// The kind of a RowKey's stored bytes (the kind is ASCII, so the same in
/// CESU-8 as in UTF-8).
fn kind_bytes(rk: &[u8]) -> &[u8] {
    let name_len = rk
        .iter()
        .take(MAX_KIND + 1)
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
    match name_len {
        Some(n) if n > 0 && rk[n] == b':' => &rk[..=n],
        _ => &[],
    }
}

/// The kind a RowKey range reads whole and alone: `[kind, kind')`, where
/// `kind'` follows every key of the kind (its colon raised to `;`), as a
/// scan of one kind of row asks. `Some("")` for every RowKey.
pub fn of_range(rows: &KeyRange<RowKey>) -> Option<&str> {
    match (&rows.start, &rows.end) {
        (Bound::Unbounded, Bound::Unbounded) => Some(""),
        (Bound::Included(start), Bound::Excluded(end)) => {
            let k = start.as_str();
            let stem = k.strip_suffix(':')?;
            (!stem.is_empty() && kind(k) == k && end.as_str().strip_suffix(';') == Some(stem))
                .then_some(k)
        }
        _ => None,
    }
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
        let counter = &entity_key[..rk_at + kind_bytes(&entity_key[rk_at..]).len()];
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

fn counter_kind(counter: &[u8]) -> Result<&[u8]> {
    Ok(&counter[key::separator(counter)? + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_a_leading_name_and_colon() {
        assert_eq!(kind("BIB:01234__John"), "BIB:");
        assert_eq!(kind("r:abc"), "r:");
        assert_eq!(kind("BY_AGE:055"), "BY_AGE:");
        assert_eq!(kind("01234"), "");
        assert_eq!(kind(":x"), "");
        assert_eq!(kind("a b:x"), "");
        assert_eq!(kind(""), "");
        assert_eq!(kind(&format!("{}:", "A".repeat(32))).len(), 33);
        assert_eq!(kind(&format!("{}:", "A".repeat(33))), "");
    }

    #[test]
    fn a_range_is_one_kind_only_when_it_holds_that_kind_exactly() {
        let range = |s: &str, e: &str| KeyRange {
            start: Bound::Included(RowKey::from_stored(s.into())),
            end: Bound::Excluded(RowKey::from_stored(e.into())),
        };
        assert_eq!(of_range(&KeyRange::all()), Some(""));
        assert_eq!(of_range(&range("BIB:", "BIB;")), Some("BIB:"));
        assert_eq!(of_range(&range("BIB:0", "BIB:1")), None);
        assert_eq!(of_range(&range("BI", "BJ")), None);
        assert_eq!(of_range(&range("BIB:", "BIC")), None);
    }
}
