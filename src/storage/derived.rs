//! A cache of what readers derive from a range of partitions (a scan's
//! decoded pages), kept only while no write lands in the range.
//!
//! The problem: over the embedded store a scan's cost is per entity (redb's
//! cursor, the key's checks, the decoding), and a B-tree walk alone costs
//! more per entity than SQLite's whole aggregate does. A dashboard asks the
//! same scan again and again over data that rarely changes.
//!
//! The mechanism: the store numbers its writes. Each partition of a table
//! remembers the number of the last write that touched it, and a range's
//! version is the greatest of those in it (or the table's own, moved when
//! the table is made or dropped). Every write moves a partition's number
//! past every number given before, so a range's version changes exactly
//! when something in it (a new partition too) was written. An entry is kept
//! under the version its reader saw before reading and is served only while
//! the range still has that version.
//!
//! The rule for a store: call [`DerivedCache::written`] after each commit,
//! whatever its outcome, and before answering the writer; a reader then
//! never meets an entry older than a write it was told of. For a reader:
//! take [`DerivedCache::version`] before the first read, and
//! [`DerivedCache::put`] keeps the entry only if the version has not moved.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{KeyRange, PartitionKey, TableName};

/// Most partitions of one table whose write numbers are kept; past it a
/// write moves the whole table's version (so memory does not grow with a
/// table of a million one-entity partitions).
const MAX_TRACKED: usize = 65_536;

/// Derived values by table, partition range and what a reader derived.
#[derive(Debug)]
pub struct DerivedCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The last write number given.
    seq: u64,
    tables: HashMap<String, Versions>,
    entries: HashMap<EntryKey, Entry>,
    /// Keys in the order they were kept: the oldest goes first.
    order: VecDeque<EntryKey>,
    bytes: usize,
}

/// One table's write numbers.
#[derive(Debug, Default)]
struct Versions {
    /// Moved when the table is made, dropped, or tracks too many partitions.
    table: u64,
    partitions: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EntryKey {
    table: String,
    partitions: KeyRange<PartitionKey>,
    shape: Arc<str>,
}

struct Entry {
    version: u64,
    bytes: usize,
    value: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Entry(version {}, {} bytes)", self.version, self.bytes)
    }
}

/// A lock whose holder panicked guards consistent data: every change is
/// made whole under it.
fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DerivedCache {
    /// A cache holding at most `budget` bytes of values.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            inner: Mutex::default(),
        }
    }

    /// The most bytes it holds.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The version of a range of a table's partitions, to take before
    /// reading what will be kept.
    pub fn version(&self, table: &TableName, partitions: &KeyRange<PartitionKey>) -> u64 {
        lock(&self.inner).version(&table.folded(), partitions)
    }

    /// Writes landed (or may have) in these partitions of `table`.
    pub fn written<'a>(&self, table: &TableName, partitions: impl IntoIterator<Item = &'a str>) {
        let mut inner = lock(&self.inner);
        inner.seq += 1;
        let seq = inner.seq;
        let versions = inner.tables.entry(table.folded()).or_default();
        for pk in partitions {
            match versions.partitions.get_mut(pk) {
                Some(v) => *v = seq,
                None => {
                    versions.partitions.insert(pk.to_owned(), seq);
                }
            }
        }
        if versions.partitions.len() > MAX_TRACKED {
            versions.partitions.clear();
            versions.table = seq;
        }
    }

    /// The table was made or dropped: nothing kept of it holds.
    pub fn replaced(&self, table: &TableName) {
        let mut inner = lock(&self.inner);
        inner.seq += 1;
        let seq = inner.seq;
        let folded = table.folded();
        let versions = inner.tables.entry(folded.clone()).or_default();
        versions.partitions.clear();
        versions.table = seq;
        inner.entries.retain(|k, _| k.table != folded);
        let Inner { order, entries, .. } = &mut *inner;
        order.retain(|k| entries.contains_key(k));
        inner.bytes = inner.entries.values().map(|e| e.bytes).sum();
    }

    /// What was kept for `shape` over these partitions, if nothing was
    /// written there since.
    pub fn get(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        shape: &Arc<str>,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let key = EntryKey {
            table: table.folded(),
            partitions: partitions.clone(),
            shape: shape.clone(),
        };
        let inner = lock(&self.inner);
        let entry = inner.entries.get(&key)?;
        (entry.version == inner.version(&key.table, partitions)).then(|| entry.value.clone())
    }

    /// Keeps `value` (about `bytes` in memory), derived from reads begun at
    /// `version`, unless a write landed in the range since or it would take
    /// more than an eighth of the budget. The oldest entries make room.
    pub fn put(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        shape: Arc<str>,
        version: u64,
        value: Arc<dyn Any + Send + Sync>,
        bytes: usize,
    ) {
        if bytes > self.budget / 8 {
            return;
        }
        let key = EntryKey {
            table: table.folded(),
            partitions: partitions.clone(),
            shape,
        };
        let mut inner = lock(&self.inner);
        if inner.version(&key.table, partitions) != version {
            return;
        }
        let entry = Entry {
            version,
            bytes,
            value,
        };
        match inner.entries.insert(key.clone(), entry) {
            Some(old) => inner.bytes -= old.bytes,
            None => inner.order.push_back(key),
        }
        inner.bytes += bytes;
        while inner.bytes > self.budget {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= gone.bytes;
            }
        }
    }
}

impl Inner {
    fn version(&self, folded: &str, partitions: &KeyRange<PartitionKey>) -> u64 {
        let Some(versions) = self.tables.get(folded) else {
            return 0;
        };
        let range = (bound(&partitions.start), bound(&partitions.end));
        // An empty or inverted range holds no partition (BTreeMap::range
        // would panic on it).
        let empty = match range {
            (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
                s > e || (s == e && !matches!(range, (Bound::Included(_), Bound::Included(_))))
            }
            _ => false,
        };
        let written = if empty {
            None
        } else {
            versions
                .partitions
                .range::<str, _>(range)
                .map(|(_, v)| *v)
                .max()
        };
        written.map_or(versions.table, |w| w.max(versions.table))
    }
}

fn bound(b: &Bound<PartitionKey>) -> Bound<&str> {
    match b {
        Bound::Included(pk) => Bound::Included(pk.as_str()),
        Bound::Excluded(pk) => Bound::Excluded(pk.as_str()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(s: &str) -> PartitionKey {
        PartitionKey::new(s).expect("key")
    }

    fn range(a: &str, b: &str) -> KeyRange<PartitionKey> {
        KeyRange {
            start: Bound::Included(pk(a)),
            end: Bound::Excluded(pk(b)),
        }
    }

    #[test]
    fn an_entry_is_served_until_a_write_lands_in_its_range_and_only_then() {
        let cache = DerivedCache::new(1 << 20);
        let t = TableName::new("things").expect("name");
        let shape: Arc<str> = "avg".into();
        let v = cache.version(&t, &range("a", "c"));
        cache.put(&t, &range("a", "c"), shape.clone(), v, Arc::new(7u32), 4);
        assert!(cache.get(&t, &range("a", "c"), &shape).is_some());
        cache.written(&t, ["c", "z"]);
        assert!(cache.get(&t, &range("a", "c"), &shape).is_some(), "outside");
        // A partition the range did not have before is a write in it.
        cache.written(&t, ["b"]);
        assert!(cache.get(&t, &range("a", "c"), &shape).is_none());
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_not_kept() {
        let cache = DerivedCache::new(1 << 20);
        let t = TableName::new("things").expect("name");
        let shape: Arc<str> = "s".into();
        let v = cache.version(&t, &KeyRange::all());
        cache.written(&t, ["a"]);
        cache.put(&t, &KeyRange::all(), shape.clone(), v, Arc::new(1u8), 1);
        assert!(cache.get(&t, &KeyRange::all(), &shape).is_none());
    }

    #[test]
    fn a_table_made_again_keeps_nothing_of_the_old_one() {
        let cache = DerivedCache::new(1 << 20);
        let t = TableName::new("things").expect("name");
        let shape: Arc<str> = "s".into();
        let v = cache.version(&t, &KeyRange::all());
        cache.put(&t, &KeyRange::all(), shape.clone(), v, Arc::new(1u8), 1);
        cache.replaced(&t);
        assert!(cache.get(&t, &KeyRange::all(), &shape).is_none());
        let v = cache.version(&t, &KeyRange::all());
        cache.put(&t, &KeyRange::all(), shape.clone(), v, Arc::new(2u8), 1);
        assert!(cache.get(&t, &KeyRange::all(), &shape).is_some());
    }

    #[test]
    fn the_oldest_entries_make_room_and_big_ones_are_not_kept() {
        let cache = DerivedCache::new(800);
        let t = TableName::new("things").expect("name");
        let shape = |s: &str| -> Arc<str> { s.into() };
        for (i, name) in ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .enumerate()
        {
            let r = range(name, "zz");
            let v = cache.version(&t, &r);
            cache.put(&t, &r, shape("s"), v, Arc::new(i), 100);
        }
        assert!(cache.get(&t, &range("a", "zz"), &shape("s")).is_none());
        assert!(cache.get(&t, &range("i", "zz"), &shape("s")).is_some());
        let v = cache.version(&t, &range("j", "zz"));
        cache.put(&t, &range("j", "zz"), shape("s"), v, Arc::new(0u8), 101);
        assert!(cache.get(&t, &range("j", "zz"), &shape("s")).is_none());
    }

    #[test]
    fn too_many_partitions_move_the_whole_table() {
        let cache = DerivedCache::new(1 << 20);
        let t = TableName::new("things").expect("name");
        let shape: Arc<str> = "s".into();
        let v = cache.version(&t, &range("a", "b"));
        cache.put(&t, &range("a", "b"), shape.clone(), v, Arc::new(1u8), 1);
        let many: Vec<String> = (0..=MAX_TRACKED).map(|i| format!("p{i:06}")).collect();
        cache.written(&t, many.iter().map(String::as_str));
        assert!(cache.get(&t, &range("a", "b"), &shape).is_none());
        assert!(lock(&cache.inner).tables["things"].partitions.is_empty());
    }
}
