//! Reads' opened tables, kept between reads until the next commit.
//!
//! Every read began a redb read transaction and opened its table: a lock
//! in redb's transaction tracker, the store's dictionary locks, and a
//! descent of redb's table of tables, whose pages' locks and reference
//! counts every core touches. On a prepared point query that was about a
//! twelfth of the server's time, most of it cache lines moving between
//! cores rather than work.
//!
//! So a read keeps the table it opened (the snapshot with it) in its
//! thread's slot, and the next read of that table on that thread reuses
//! it while no commit has begun since. A commit lands inside redb at a
//! moment the store cannot see from outside, so the store counts commits
//! begun and ended around it: a snapshot opened while one is in flight is
//! not kept (it may hold either state), and a kept one is served only
//! while no commit has begun since it was opened. Counting only ended
//! commits let a read that began after another read had seen a landed
//! commit be served an older snapshot kept on its own thread, and a table
//! seemed to lose rows between two reads. Each ended commit also empties
//! every slot: redb frees no page that a live snapshot can see, so a slot
//! that kept an old snapshot while writes went on would grow the file
//! without bound. A snapshot outlives the commit after it only while a
//! read is still using it.
//!
//! The rule: every commit of the store goes through [`Snapshots::commit`]
//! (those made while the store opens, before any read, need not).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::dict::Dict;
use crate::storage::{Result, TableName};
use crate::striped::Striped;

/// A table's entities as one snapshot holds them.
pub(super) type Rows = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// Tables one slot keeps; past it, the longest kept gives way.
const TABLES_PER_SLOT: usize = 4;

/// The kept opened tables of a store.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    /// Commits begun so far: a kept snapshot's version.
    begun: AtomicU64,
    /// Commits ended so far, landed or failed.
    ended: AtomicU64,
    /// A slot per thread (`crate::striped`): the server's runtime threads
    /// and the blocking pool's. Two runtime threads' slots once shared a
    /// cache line, and every read by one core took it from the other.
    slots: Striped<Mutex<Vec<Kept>>>,
}

/// A table as one snapshot holds it, with the names its values use.
#[derive(Debug)]
pub(super) struct Opened {
    pub(super) rows: Rows,
    pub(super) dict: Arc<Dict>,
}

#[derive(Debug)]
struct Kept {
    version: u64,
    table: TableName,
    /// The slot's own reference: a read counts it, not the store's
    /// dictionary that every thread shares.
    opened: Arc<Opened>,
}

impl Snapshots {
    /// The table as a snapshot no older than the last commit that landed
    /// holds it: the slot's kept one, or `open`'s, which is kept for the
    /// next read when no commit was in flight while it opened.
    pub(super) fn table(
        &self,
        table: &TableName,
        open: impl FnOnce() -> Result<(Rows, Arc<Dict>)>,
    ) -> Result<Arc<Opened>> {
        let slot = self.slots.local();
        // Read before the snapshot begins: a commit that begins in between
        // makes the version newer than the snapshot is kept under, never
        // older.
        let version = self.begun.load(Ordering::SeqCst);
        if let Some(kept) = lock(slot)
            .iter()
            .find(|k| k.version == version && k.table == *table)
        {
            return Ok(kept.opened.clone());
        }
        // Every commit begun had ended before the snapshot began: it holds
        // them all, and it is current until the next one begins.
        let settled = self.ended.load(Ordering::SeqCst) == version;
        let (rows, dict) = open()?;
        let opened = Arc::new(Opened { rows, dict });
        let mut kept = lock(slot);
        // Checked under the slot's lock, which `commit` takes after the
        // commit ends: either this sees the commit begun and keeps
        // nothing, or the commit empties the slot after this keeps it.
        if settled && self.begun.load(Ordering::SeqCst) == version {
            kept.retain(|k| k.version == version && k.table != *table);
            if kept.len() >= TABLES_PER_SLOT {
                kept.remove(0);
            }
            kept.push(Kept {
                version,
                table: table.clone(),
                opened: opened.clone(),
            });
        }
        Ok(opened)
    }

    /// Runs `land`, a redb commit: from before it can land, no kept
    /// snapshot serves a read, and none is kept past it, whatever its
    /// outcome (a failed commit may still have landed).
    pub(super) fn commit<T>(&self, land: impl FnOnce() -> T) -> T {
        self.begun.fetch_add(1, Ordering::SeqCst);
        // Ended also if `land` panics: else no snapshot would be kept again.
        let _ended = Ended(self);
        land()
    }
}

/// Ends a commit when dropped: counts it and empties every slot.
struct Ended<'a>(&'a Snapshots);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
        for slot in self.0.slots.all() {
            // Dropped outside the lock: the last reference ends its read
            // transaction, which takes redb's own lock.
            let gone = std::mem::take(&mut *lock(slot));
            drop(gone);
        }
    }
}

/// A slot's lock; a read that panicked holding it left nothing half-made.
fn lock(slot: &Mutex<Vec<Kept>>) -> MutexGuard<'_, Vec<Kept>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use redb::{ReadableDatabase, TableDefinition};

    use super::*;

    const T: TableDefinition<&'static [u8], &'static [u8]> = TableDefinition::new("t");

    fn insert(db: &redb::Database, key: &[u8]) -> redb::WriteTransaction {
        let txn = db.begin_write().expect("a write transaction");
        txn.open_table(T)
            .expect("the table")
            .insert(key, b"v".as_slice())
            .expect("an insert");
        txn
    }

    fn regs(name: &str) -> Result<TableName> {
        TableName::new(name).map_err(|e| crate::storage::StorageError::Corrupt(e.to_string()))
    }

    #[test]
    fn a_kept_table_serves_its_threads_reads_until_a_commit_which_lets_it_go() -> Result<()> {
        let db =
            redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?;
        insert(&db, b"k").commit()?;
        let snapshots = Snapshots::default();
        let opens = Cell::new(0);
        let open = || {
            opens.set(opens.get() + 1);
            Ok((db.begin_read()?.open_table(T)?, Arc::new(Dict::default())))
        };
        let first = snapshots.table(&regs("Regs")?, open)?;
        let again = snapshots.table(&regs("regs")?, open)?;
        assert_eq!(opens.get(), 1, "the second read reuses the first's table");
        assert!(Arc::ptr_eq(&first, &again));

        let txn = insert(&db, b"k2");
        snapshots.commit(|| txn.commit())?;
        // Let go at the commit: only the reads still running hold it.
        assert_eq!(Arc::strong_count(&first), 2);
        let after = snapshots.table(&regs("Regs")?, open)?;
        assert_eq!(opens.get(), 2, "a read after a commit opens a new snapshot");
        assert!(!Arc::ptr_eq(&first, &after));
        Ok(())
    }

    #[test]
    fn a_read_that_begins_after_a_commit_lands_sees_it_though_the_commit_has_not_ended()
    -> Result<()> {
        let db =
            redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?;
        insert(&db, b"k").commit()?;
        let snapshots = Snapshots::default();
        let open = || Ok((db.begin_read()?.open_table(T)?, Arc::new(Dict::default())));
        let table = regs("Regs")?;
        snapshots.table(&table, open)?;

        let txn = insert(&db, b"k2");
        let (during, opened_during) = snapshots.commit(|| -> Result<_> {
            txn.commit()?;
            // Landed, not yet ended: the kept snapshot predates it.
            let during = snapshots.table(&table, open)?;
            Ok((during.rows.get(b"k2".as_slice())?.is_some(), during))
        })?;
        assert!(during, "a read after the commit landed sees its row");
        let after = snapshots.table(&table, open)?;
        assert!(
            !Arc::ptr_eq(&opened_during, &after),
            "a snapshot opened while a commit was in flight is not kept"
        );
        assert!(after.rows.get(b"k2".as_slice())?.is_some());
        Ok(())
    }
}
