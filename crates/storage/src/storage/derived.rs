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
//! A commit lands inside the store at a moment no one sees from outside, so
//! a write is announced twice: [`DerivedCache::writing`] before the commit
//! and [`DerivedCache::written`] after it. Between the two, nothing is kept
//! of the table: a reader that took its version then may have read either
//! state. (Moving the version only around the commit let a reader take it
//! between the first move and the landing, read the old state, and keep it
//! under a version that held until the second move: pages from before a
//! landed commit were served.)
//!
//! The rule for a store: call [`DerivedCache::writing`] before each commit
//! and [`DerivedCache::written`] after it, whatever its outcome, and before
//! answering the writer ([`DerivedCache::replacing`] and
//! [`DerivedCache::replaced`] for a table made or dropped); a reader then
//! never meets an entry older than a write it was told of. For a reader:
//! take [`DerivedCache::version`] before the first read, and
//! [`DerivedCache::put`] keeps the entry only if the version has not moved
//! and no commit of the table is in flight.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{KeyRange, PartitionKey, RowKey, TableName};

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
    /// The last write number given to any of its partitions: the version
    /// of the whole table without a walk of them all.
    latest: u64,
    /// In the store's order of PartitionKeys (UTF-16 code units), so that a
    /// range here holds the partitions the store's range does.
    partitions: BTreeMap<PartitionKey, u64>,
    /// Commits of the table announced and not yet ended: nothing is kept
    /// while there are any.
    in_flight: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EntryKey {
    table: String,
    partitions: KeyRange<PartitionKey>,
    rows: KeyRange<RowKey>,
    /// What the reader derived (shared by a scan's requests, not copied).
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

    /// The most bytes one entry may take: a reader gathering more stops
    /// gathering (one big scan must not hold its pages, nor push out all
    /// the others).
    pub fn max_entry(&self) -> usize {
        self.budget / 8
    }

    /// Whether a commit of `table` is in flight: what a reader derives now
    /// may hold either state, and is not to be kept.
    pub fn landing(&self, table: &TableName) -> bool {
        lock(&self.inner).landing(&table.folded())
    }

    /// The version of a range of a table's partitions, to take before
    /// reading what will be kept.
    pub fn version(&self, table: &TableName, partitions: &KeyRange<PartitionKey>) -> u64 {
        lock(&self.inner).version(&table.folded(), partitions)
    }

    /// A commit of writes in these partitions of `table` is about to land.
    pub fn writing<'a>(
        &self,
        table: &TableName,
        partitions: impl IntoIterator<Item = &'a PartitionKey>,
    ) {
        let mut inner = lock(&self.inner);
        inner.moved(table, partitions);
        inner.in_flight(table, true);
    }

    /// Writes landed (or may have) in these partitions of `table`: the
    /// commit `writing` announced ended.
    pub fn written<'a>(
        &self,
        table: &TableName,
        partitions: impl IntoIterator<Item = &'a PartitionKey>,
    ) {
        let mut inner = lock(&self.inner);
        inner.moved(table, partitions);
        inner.in_flight(table, false);
    }

    /// A commit that makes or drops `table` is about to land.
    pub fn replacing(&self, table: &TableName) {
        self.replaced(table);
        lock(&self.inner).in_flight(table, true);
    }

    /// The table was made or dropped (the commit `replacing` announced
    /// ended): nothing kept of it holds.
    pub fn replaced(&self, table: &TableName) {
        let mut inner = lock(&self.inner);
        inner.in_flight(table, false);
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

    /// What was kept for `shape` over these key ranges, if nothing was
    /// written there since (an entry written over is dropped).
    pub fn get(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        rows: &KeyRange<RowKey>,
        shape: &Arc<str>,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let key = EntryKey {
            table: table.folded(),
            partitions: partitions.clone(),
            rows: rows.clone(),
            shape: shape.clone(),
        };
        let mut inner = lock(&self.inner);
        let entry = inner.entries.get(&key)?;
        if entry.version == inner.version(&key.table, partitions) {
            return Some(entry.value.clone());
        }
        if let Some(gone) = inner.entries.remove(&key) {
            inner.bytes -= gone.bytes;
            inner.order.retain(|k| *k != key);
        }
        None
    }

    /// Keeps `value` (about `bytes` in memory), derived from reads begun at
    /// `version`, unless a write landed in the range since or it would take
    /// more than `max_entry`. The oldest entries make room.
    pub fn put(
        &self,
        table: &TableName,
        (partitions, rows): (&KeyRange<PartitionKey>, &KeyRange<RowKey>),
        shape: Arc<str>,
        version: u64,
        value: Arc<dyn Any + Send + Sync>,
        bytes: usize,
    ) {
        // The key's name of the shape is shared, but counted per entry.
        let bytes = bytes + shape.len();
        if bytes > self.max_entry() {
            return;
        }
        let key = EntryKey {
            table: table.folded(),
            partitions: partitions.clone(),
            rows: rows.clone(),
            shape,
        };
        let mut inner = lock(&self.inner);
        if inner.landing(&key.table) || inner.version(&key.table, partitions) != version {
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
    /// Gives these partitions of `table` a write number past every other.
    fn moved<'a>(
        &mut self,
        table: &TableName,
        partitions: impl IntoIterator<Item = &'a PartitionKey>,
    ) {
        self.seq += 1;
        let seq = self.seq;
        let versions = self.tables.entry(table.folded()).or_default();
        versions.latest = seq;
        for pk in partitions {
            match versions.partitions.get_mut(pk) {
                Some(v) => *v = seq,
                None => {
                    versions.partitions.insert(pk.clone(), seq);
                }
            }
        }
        if versions.partitions.len() > MAX_TRACKED {
            versions.partitions.clear();
            versions.table = seq;
        }
    }

    /// Whether a commit of the table is in flight.
    fn landing(&self, folded: &str) -> bool {
        self.tables.get(folded).is_some_and(|v| v.in_flight > 0)
    }

    /// Counts a commit of `table` announced (`begun`) or ended.
    fn in_flight(&mut self, table: &TableName, begun: bool) {
        let versions = self.tables.entry(table.folded()).or_default();
        versions.in_flight = match begun {
            true => versions.in_flight.saturating_add(1),
            false => versions.in_flight.saturating_sub(1),
        };
    }

    fn version(&self, folded: &str, partitions: &KeyRange<PartitionKey>) -> u64 {
        let Some(versions) = self.tables.get(folded) else {
            return 0;
        };
        // An empty range holds no partition (and BTreeMap::range would
        // panic on an inverted one).
        let written = if partitions.start == Bound::Unbounded && partitions.end == Bound::Unbounded
        {
            Some(versions.latest)
        } else if partitions.is_empty() {
            None
        } else {
            let range = (partitions.start.as_ref(), partitions.end.as_ref());
            versions.partitions.range(range).map(|(_, v)| *v).max()
        };
        written.map_or(versions.table, |w| w.max(versions.table))
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

    fn table() -> TableName {
        TableName::new("things").expect("name")
    }

    /// Keeps `value` over `partitions` (every row) as read from now.
    fn keep(cache: &DerivedCache, partitions: &KeyRange<PartitionKey>, value: u8, bytes: usize) {
        let v = cache.version(&table(), partitions);
        let all = KeyRange::all();
        cache.put(
            &table(),
            (partitions, &all),
            "s".into(),
            v,
            Arc::new(value),
            bytes,
        );
    }

    fn kept(cache: &DerivedCache, partitions: &KeyRange<PartitionKey>) -> bool {
        cache
            .get(&table(), partitions, &KeyRange::all(), &"s".into())
            .is_some()
    }

    #[test]
    fn an_entry_is_served_until_a_write_lands_in_its_range_and_only_then() {
        let cache = DerivedCache::new(1 << 20);
        keep(&cache, &range("a", "c"), 7, 4);
        assert!(kept(&cache, &range("a", "c")));
        assert!(
            cache
                .get(
                    &table(),
                    &range("a", "c"),
                    &KeyRange::all(),
                    &"other".into()
                )
                .is_none(),
            "another shape"
        );
        cache.written(&table(), &[pk("c"), pk("z")]);
        assert!(kept(&cache, &range("a", "c")), "outside");
        // A partition the range did not have before is a write in it.
        cache.written(&table(), &[pk("b")]);
        assert!(!kept(&cache, &range("a", "c")));
        assert_eq!(lock(&cache.inner).bytes, 0, "dropped when found stale");
    }

    #[test]
    fn ranges_hold_partitions_in_the_stores_order_of_keys() {
        // U+1F600 is a surrogate pair in UTF-16 (D83D DE00), below U+FF21,
        // though above it in UTF-8: the store's range [a, U+FF21) holds it.
        let cache = DerivedCache::new(1 << 20);
        let r = range("a", "\u{FF21}");
        keep(&cache, &r, 1, 1);
        cache.written(&table(), &[pk("\u{1F600}")]);
        assert!(!kept(&cache, &r));
        let inverted = KeyRange {
            start: Bound::Included(pk("\u{1F600}")),
            end: Bound::Included(pk("\u{FF21}")),
        };
        keep(&cache, &inverted, 1, 1);
        cache.written(&table(), &[pk("\u{FF00}")]);
        assert!(!kept(&cache, &inverted));
    }

    #[test]
    fn nothing_read_while_a_commit_lands_is_kept() {
        let cache = DerivedCache::new(1 << 20);
        let all = KeyRange::all();
        cache.writing(&table(), &[pk("a")]);
        // Its version taken after the announcement, its read maybe before
        // the landing.
        keep(&cache, &all, 1, 1);
        assert!(!kept(&cache, &all), "kept while the commit was in flight");
        assert!(cache.landing(&table()));
        cache.written(&table(), &[pk("a")]);
        keep(&cache, &all, 1, 1);
        assert!(kept(&cache, &all));

        cache.replacing(&table());
        keep(&cache, &all, 1, 1);
        assert!(
            !kept(&cache, &all),
            "kept while the table was being dropped"
        );
        cache.replaced(&table());
        assert!(!cache.landing(&table()));
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_not_kept() {
        let cache = DerivedCache::new(1 << 20);
        let all = KeyRange::all();
        let v = cache.version(&table(), &all);
        cache.written(&table(), &[pk("a")]);
        cache.put(
            &table(),
            (&all, &KeyRange::all()),
            "s".into(),
            v,
            Arc::new(1u8),
            1,
        );
        assert!(!kept(&cache, &all));
    }

    #[test]
    fn a_table_made_again_keeps_nothing_of_the_old_one() {
        let cache = DerivedCache::new(1 << 20);
        let all = KeyRange::all();
        keep(&cache, &all, 1, 1);
        cache.replaced(&table());
        assert!(!kept(&cache, &all));
        keep(&cache, &all, 2, 1);
        assert!(kept(&cache, &all));
    }

    #[test]
    fn the_oldest_entries_make_room_and_big_ones_are_not_kept() {
        // 100 bytes of value and 1 of the shape's name each: 8 fit.
        let cache = DerivedCache::new(808);
        for (i, name) in ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .enumerate()
        {
            keep(&cache, &range(name, "zz"), i as u8, 100);
        }
        assert!(!kept(&cache, &range("a", "zz")));
        assert!(kept(&cache, &range("i", "zz")));
        keep(&cache, &range("j", "zz"), 0, 101);
        assert!(!kept(&cache, &range("j", "zz")));
    }

    #[test]
    fn too_many_partitions_move_the_whole_table() {
        let cache = DerivedCache::new(1 << 20);
        keep(&cache, &range("a", "b"), 1, 1);
        let many: Vec<PartitionKey> = (0..=MAX_TRACKED).map(|i| pk(&format!("p{i:06}"))).collect();
        cache.written(&table(), &many);
        assert!(!kept(&cache, &range("a", "b")));
        assert!(lock(&cache.inner).tables["things"].partitions.is_empty());
    }

    #[test]
    fn the_whole_table_moves_with_a_write_in_any_of_its_partitions() {
        let cache = DerivedCache::new(1 << 20);
        let all = KeyRange::all();
        let before = cache.version(&table(), &all);
        cache.written(&table(), &[pk("m")]);
        let after = cache.version(&table(), &all);
        assert!(after > before);
        assert_eq!(after, cache.version(&table(), &range("a", "z")));
        cache.written(&table(), &[pk("n")]);
        assert_eq!(cache.version(&table(), &range("a", "n")), after);
        assert!(cache.version(&table(), &all) > after);
        let last = cache.version(&table(), &all);
        cache.replaced(&table());
        assert!(cache.version(&table(), &all) > last);
    }
}
