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
//! it while no commit has been made since. Each commit bumps the store's
//! version and empties every slot: redb frees no page that a live snapshot
//! can see, so a slot that kept an old snapshot while writes went on would
//! grow the file without bound. A snapshot outlives the commit after it
//! only while a read is still using it.
//!
//! The rule: every commit of the store is followed by
//! [`Snapshots::committed`], also a failed one (it may have landed).

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
    /// Commits made so far.
    version: AtomicU64,
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
    /// The table as a snapshot no older than the last commit holds it:
    /// the slot's kept one, or `open`'s, which is kept for the next read.
    pub(super) fn table(
        &self,
        table: &TableName,
        open: impl FnOnce() -> Result<(Rows, Arc<Dict>)>,
    ) -> Result<Arc<Opened>> {
        let slot = self.slots.local();
        // Read before the snapshot begins: a commit that lands in between
        // makes the version newer than the snapshot is kept under, never
        // older.
        let version = self.version.load(Ordering::SeqCst);
        if let Some(kept) = lock(slot)
            .iter()
            .find(|k| k.version == version && k.table == *table)
        {
            return Ok(kept.opened.clone());
        }
        let (rows, dict) = open()?;
        let opened = Arc::new(Opened { rows, dict });
        let mut kept = lock(slot);
        // Checked under the slot's lock, which `committed` takes after
        // bumping the version: either this sees the bump and keeps
        // nothing, or the commit empties the slot after this keeps it.
        if self.version.load(Ordering::SeqCst) == version {
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

    /// A commit was made (or tried): no kept snapshot may serve a read
    /// that begins after it, and none is kept past it.
    pub(super) fn committed(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
        for slot in self.slots.all() {
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

    #[test]
    fn a_kept_table_serves_its_threads_reads_until_a_commit_which_lets_it_go() -> Result<()> {
        let db =
            redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?;
        let txn = db.begin_write()?;
        txn.open_table(T)?
            .insert(b"k".as_slice(), b"v".as_slice())?;
        txn.commit()?;
        let snapshots = Snapshots::default();
        let opens = Cell::new(0);
        let open = || {
            opens.set(opens.get() + 1);
            Ok((db.begin_read()?.open_table(T)?, Arc::new(Dict::default())))
        };
        let table = TableName::new("Regs")
            .map_err(|e| crate::storage::StorageError::Corrupt(e.to_string()))?;
        let same = TableName::new("regs")
            .map_err(|e| crate::storage::StorageError::Corrupt(e.to_string()))?;
        let first = snapshots.table(&table, open)?;
        let again = snapshots.table(&same, open)?;
        assert_eq!(opens.get(), 1, "the second read reuses the first's table");
        assert!(Arc::ptr_eq(&first, &again));

        snapshots.committed();
        // Let go at the commit: only the reads still running hold it.
        assert_eq!(Arc::strong_count(&first), 2);
        let after = snapshots.table(&table, open)?;
        assert_eq!(opens.get(), 2, "a read after a commit opens a new snapshot");
        assert!(!Arc::ptr_eq(&first, &after));
        Ok(())
    }
}
