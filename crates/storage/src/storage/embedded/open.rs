//! Opening the store's redb file, and saying so when it needs repair.
//!
//! redb records where its free pages are only when a database is closed
//! (dropped). A file whose process died without closing it (SIGKILL, a
//! crash, `std::process::exit` with the store still held) is repaired at
//! the next open: redb reads every page of the file, checking checksums
//! and rebuilding the free-page map, before the first statement. On a
//! 500,000-entity store that was 84,732 reads, 0.46 s and 453 MB before
//! `SELECT 1` (issue 68); it grows with the file. A clean open reads a
//! header and the saved map: the same few milliseconds at any size.
//!
//! So every process closes its store (the binary checks that it did), and
//! an open that has to repair says so, with redb's progress, instead of
//! looking hung.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redb::{Database, RepairSession};

use super::super::{Result, StorageError};
use super::EmbeddedStore;

/// The bytes of the file's pages a store keeps in memory by default:
/// redb's own default. They count in the process's memory like any other:
/// a scan of a table grows it by the pages it reads, up to this.
pub const DEFAULT_PAGE_CACHE: usize = 1 << 30;

/// How a store's file is opened: the pages it keeps in memory, and who is
/// told how a repair goes.
pub struct Opening {
    page_cache: usize,
    progress: Option<Box<dyn Fn(f64)>>,
}

impl Default for Opening {
    fn default() -> Self {
        Self::new()
    }
}

impl Opening {
    /// [`DEFAULT_PAGE_CACHE`], a repair reported in the log.
    pub fn new() -> Self {
        Self {
            page_cache: DEFAULT_PAGE_CACHE,
            progress: None,
        }
    }

    /// Keeps at most `bytes` of the file's pages in memory (redb's read
    /// cache; each process its own).
    pub fn page_cache(mut self, bytes: usize) -> Self {
        self.page_cache = bytes;
        self
    }

    /// Tells `progress` how far a repair has come (from 0.0 to below 1.0)
    /// instead of the log.
    pub fn progress(mut self, progress: impl Fn(f64) + 'static) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// Opens the store in `dir`, creating both if needed.
    pub fn open(self, dir: impl AsRef<Path>) -> Result<EmbeddedStore> {
        let path = EmbeddedStore::file_in(dir.as_ref())?;
        match self.progress {
            Some(progress) => EmbeddedStore::open_file(&path, self.page_cache, progress),
            None => EmbeddedStore::open_file(&path, self.page_cache, log_repair(&path)),
        }
    }
}

/// How an open went: how long it took, and whether the file was repaired.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Opened {
    /// From the call to the database ready (the repair included).
    pub took: Duration,
    /// Whether redb repaired the file: it had not been closed cleanly.
    pub repaired: bool,
}

/// Opens (or creates) the database at `path`, telling `progress` how far
/// a repair has come (redb's estimate, from 0.0) when one is needed.
pub(super) fn create(
    path: &Path,
    page_cache: usize,
    progress: impl Fn(f64) + 'static,
) -> Result<(Database, Opened)> {
    let started = Instant::now();
    let repaired = Arc::new(AtomicBool::new(false));
    let seen = repaired.clone();
    let db = Database::builder()
        .set_cache_size(page_cache)
        .set_repair_callback(move |session: &mut RepairSession| {
            seen.store(true, Ordering::Relaxed);
            progress(session.progress());
        })
        .create(path)
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                StorageError::InUse(path.display().to_string())
            }
            e => e.into(),
        })?;
    let opened = Opened {
        took: started.elapsed(),
        repaired: repaired.load(Ordering::Relaxed),
    };
    if opened.repaired {
        tracing::warn!(
            path = %path.display(),
            seconds = opened.took.as_secs_f64(),
            "the store is repaired"
        );
    }
    tracing::debug!(
        path = %path.display(),
        ms = opened.took.as_secs_f64() * 1000.0,
        repaired = opened.repaired,
        "store opened"
    );
    Ok((db, opened))
}

/// The default report of a repair, in the log: one line as it starts,
/// saying why it reads the whole file, and one at each step redb reports.
pub(super) fn log_repair(path: &Path) -> impl Fn(f64) + 'static {
    let path = path.display().to_string();
    move |progress| {
        if progress == 0.0 {
            tracing::warn!(
                path = %path,
                "the store was not closed (its last process was killed, crashed, or exited holding it): \
                 repairing it, which reads the whole file before the first statement"
            );
        }
        tracing::warn!(
            path = %path,
            "repairing the store: {:.0}%",
            progress * 100.0
        );
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};

    use super::{DEFAULT_PAGE_CACHE, create};

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    fn write_some(db: &redb::Database) -> Result<(), Box<dyn std::error::Error>> {
        let txn = db.begin_write()?;
        {
            let mut t = txn.open_table(T)?;
            for i in 0..1000 {
                t.insert(i, i)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    #[test]
    fn a_closed_file_opens_without_repair_and_a_dropped_one_is_repaired_with_progress()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("db.redb");
        let (db, opened) = create(&path, DEFAULT_PAGE_CACHE, |_| {})?;
        assert!(!opened.repaired, "a new file");
        write_some(&db)?;
        drop(db);
        let (db, opened) = create(&path, DEFAULT_PAGE_CACHE, |_| {})?;
        assert!(!opened.repaired, "a file closed by drop");
        write_some(&db)?;
        // As a killed process leaves it: never dropped.
        std::mem::forget(db);
        // redb's lock on the file is this process's; a new handle on the
        // file is what another process would open.
        let copy = dir.path().join("copy.redb");
        std::fs::copy(&path, &copy)?;
        let steps = Rc::new(RefCell::new(Vec::new()));
        let seen = steps.clone();
        let (db, opened) = create(&copy, DEFAULT_PAGE_CACHE, move |p| {
            seen.borrow_mut().push(p)
        })?;
        assert!(opened.repaired, "a file never closed is repaired");
        let steps = steps.borrow().clone();
        assert_eq!(steps.first(), Some(&0.0), "{steps:?}");
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
        let read = db.begin_read()?;
        assert_eq!(read.open_table(T)?.len()?, 1000);
        Ok(())
    }
}
