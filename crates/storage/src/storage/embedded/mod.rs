//! The embedded persistent backend on redb, the default store: one file, durable
//! on commit (a write acknowledged to the caller survives `kill -9`), readers
//! running beside the writer on their own snapshots.

mod commit;
mod counts;
mod dict;
mod format1;
mod key;
pub mod migrate;
mod open;
mod scan;
mod snapshot;
mod value;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use dict::{Dict, Dicts};
pub use open::{DEFAULT_PAGE_CACHE, Opened, Opening};

use super::write::validate_batch;
use super::{
    Clock, ContinuationToken, DEFAULT_SCAN_BUDGET, DerivedCache, KeyRange, Page, PageEnd,
    PartitionCount, PartitionKey, PartitionPage, Query, Result, RowKey, RowSink, StorageError,
    StoredEntity, TableName, TableStore, WriteOp, WriteOutcome,
};

/// The on-disk format this build reads and writes: 2, keys in CESU-8 and
/// values naming properties by id (`key`, `value`, `dict`), with counts
/// kept beside (`counts`). Format 1 (UTF-16 keys, names in every value) is
/// read only by `migrate`.
pub const FORMAT_VERSION: u32 = 2;
/// The file inside the store's directory.
pub const FILE_NAME: &str = "tablesql.redb";

/// Store-wide settings: format version, last write clock.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("tablesql_meta");
/// Folded table name -> name as created.
const TABLES: TableDefinition<&str, &str> = TableDefinition::new("tablesql_tables");
const FORMAT_KEY: &str = "format_version";
const CLOCK_KEY: &str = "last_timestamp_ticks";

/// The redb table that holds one table's entities.
fn entity_table_name(table: &TableName) -> String {
    format!("entities_{}", table.folded())
}

fn entities(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

/// Each table's partition counts, under the write version they were read at.
type PartitionCountCache = HashMap<String, (u64, Option<Arc<[PartitionCount]>>)>;

/// Tables of entities in a redb database file.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    /// Reads' opened tables, kept until the next commit. Declared before
    /// `db`, so dropped first: the database closes with no read
    /// transaction of ours still live.
    snapshots: Arc<snapshot::Snapshots>,
    db: Arc<Database>,
    clock: Arc<Clock>,
    commits: Arc<commit::GroupCommit>,
    dicts: Arc<Dicts>,
    derived: Arc<DerivedCache>,
    /// Each table's `partition_counts`, under the table's write version
    /// when read.
    partition_counts: Arc<Mutex<PartitionCountCache>>,
    scan_budget: usize,
    opened: Opened,
}

/// Most partitions whose counts `partition_counts` reads as a table's
/// statistics. The first plan after each write reads them all again (a
/// point query's plan too), so this bounds what a workload alternating
/// writes and reads pays per statement (a thousand partitions'
/// counters, not measured apart); past it `ANALYZE`'s statistics, read
/// once, serve better.
pub const MAX_COUNTED_PARTITIONS: usize = 1_000;

/// The bytes of decoded pages a store keeps for scans by default
/// (`EmbeddedStore::with_derived_cache`).
pub const DEFAULT_DERIVED_CACHE: usize = 256 << 20;

impl EmbeddedStore {
    /// Opens the store in a directory, creating both if needed, with
    /// [`Opening`]'s defaults. A file its last process did not close is
    /// repaired first, which reads all of it; the log says so, with its
    /// progress (`open::log_repair`).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Opening::new().open(dir)
    }

    /// The database file in `dir`, which is made if missing.
    fn file_in(dir: &Path) -> Result<std::path::PathBuf> {
        std::fs::create_dir_all(dir)?;
        Ok(dir.join(FILE_NAME))
    }

    /// Opens the store in a file, creating it if needed.
    fn open_file(path: &Path, page_cache: usize, progress: impl Fn(f64) + 'static) -> Result<Self> {
        let (db, opened) = open::create(path, page_cache, progress)?;
        Self::init(db, opened)
    }

    /// A store in memory, with the same code paths as on disk but no file.
    pub fn in_memory() -> Result<Self> {
        let started = std::time::Instant::now();
        let db = Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?;
        let opened = Opened {
            took: started.elapsed(),
            repaired: false,
        };
        Self::init(db, opened)
    }

    /// How the store's file was opened: how long it took, and whether it
    /// had to be repaired.
    pub fn opened(&self) -> Opened {
        self.opened
    }

    /// Keeps at most `bytes` of scans' decoded pages (0: none). Set it on
    /// the store as opened, before cloning: clones share one cache, and a
    /// commit tells only its own handle's cache of its writes.
    pub fn with_derived_cache(mut self, bytes: usize) -> Self {
        self.derived = Arc::new(DerivedCache::new(bytes));
        self
    }

    /// Sets how many entities one page may examine before it stops with a token.
    pub fn with_scan_budget(mut self, budget: usize) -> Self {
        self.scan_budget = budget.max(1);
        self
    }

    fn init(db: Database, opened: Opened) -> Result<Self> {
        // A store already made is only read: a write transaction here
        // would be a commit, a wait for the disk, at every open.
        let (format, last_ticks) = {
            let txn = db.begin_read()?;
            match txn.open_table(META) {
                Ok(meta) => (
                    meta.get(FORMAT_KEY)?
                        .map(|v| read_u32(v.value()))
                        .transpose()?,
                    meta.get(CLOCK_KEY)?
                        .map(|v| read_i64(v.value()))
                        .transpose()?,
                ),
                Err(redb::TableError::TableDoesNotExist(_)) => (None, None),
                Err(e) => return Err(e.into()),
            }
        };
        match format {
            Some(found) if found != FORMAT_VERSION => {
                return Err(StorageError::FormatVersion {
                    found,
                    expected: FORMAT_VERSION,
                });
            }
            Some(_) => {}
            None => {
                let txn = db.begin_write()?;
                txn.open_table(META)?
                    .insert(FORMAT_KEY, FORMAT_VERSION.to_le_bytes().as_slice())?;
                txn.open_table(TABLES)?;
                txn.commit()?;
            }
        }
        Ok(Self {
            db: Arc::new(db),
            clock: Arc::new(Clock::starting_after(last_ticks.unwrap_or(i64::MIN))),
            commits: Arc::default(),
            dicts: Arc::default(),
            derived: Arc::new(DerivedCache::new(DEFAULT_DERIVED_CACHE)),
            partition_counts: Arc::default(),
            snapshots: Arc::default(),
            scan_budget: DEFAULT_SCAN_BUDGET,
            opened,
        })
    }

    /// Runs blocking work (a commit waits for the disk) off the async threads.
    async fn blocking<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&EmbeddedStore) -> Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| StorageError::Task(e.to_string()))?
    }

    /// `work` over a table's entities and the names their values use, in
    /// a snapshot no older than the last commit (kept between reads:
    /// `snapshot`). The entities' redb table stands for the table:
    /// `create_table` and `delete_table` make and drop it with the table's
    /// name (and its names and counts), in one commit.
    fn with_rows<T>(
        &self,
        table: &TableName,
        work: impl FnOnce(&snapshot::Rows, &Dict) -> Result<T>,
    ) -> Result<T> {
        let opened = self.snapshots.table(table, || self.open_rows(table))?;
        work(&opened.rows, &opened.dict)
    }

    /// A table's entities and names in a read transaction of its own.
    fn open_rows(&self, table: &TableName) -> Result<(snapshot::Rows, Arc<Dict>)> {
        let epoch = self.dicts.epoch();
        let txn = self.db.begin_read()?;
        let name = entity_table_name(table);
        let rows = match txn.open_table(entities(&name)) {
            Err(redb::TableError::TableDoesNotExist(_)) => {
                return Err(StorageError::TableNotFound(table.as_str().to_owned()));
            }
            other => other?,
        };
        let folded = table.folded();
        // Begun after the snapshot: a settled dictionary holds its names.
        if let Some(dict) = self.dicts.settled(&folded) {
            return Ok((rows, dict));
        }
        let names = txn.open_table(dict::definition(&dict::table_name(&folded)))?;
        let dict = self.dict(&folded, &names, epoch)?;
        Ok((rows, dict))
    }

    /// A stamp for a table made now, unique in the store: the write
    /// clock's next tick (it never repeats, also across restarts).
    fn making(&self) -> String {
        crate::storage::value::to_ticks(&self.clock.next()).to_string()
    }

    /// The table's dictionary as of the transaction that opened `names`:
    /// the kept one where it is as long, else loaded from `names` (and kept,
    /// unless a table was deleted since `epoch`).
    fn dict(
        &self,
        folded: &str,
        names: &impl ReadableTable<u16, &'static str>,
        epoch: u64,
    ) -> Result<Arc<Dict>> {
        if let Some(kept) = self.dicts.get(folded)
            && kept.matches(names)?
        {
            return Ok(kept);
        }
        let loaded = Arc::new(Dict::load(names)?);
        self.dicts.offer(folded, loaded.clone(), epoch);
        Ok(loaded)
    }

    /// One page of `query` into `sink`, on the calling thread.
    fn page_into(
        &self,
        table: &TableName,
        query: &Query,
        token: Option<&ContinuationToken>,
        sink: &std::sync::Mutex<dyn RowSink>,
    ) -> Result<PageEnd> {
        let mut sink = sink
            .lock()
            .map_err(|_| StorageError::Task("a row sink panicked".into()))?;
        self.with_rows(table, |rows, dict| {
            scan::page_into(rows, dict, query, token, self.scan_budget, &mut *sink)
        })
    }
}

/// Whether a page is read on the calling thread: the first page of one
/// partition (or one entity), with no filter: at most 1,000 entities past
/// a seek or two, as a PostgreSQL backend reads its page without giving up
/// its CPU. Handing such a page to the blocking pool and back cost a
/// 1,000-row range read more than the read itself waited: 5 to 7% of its
/// CPU time and a fifth of its system time (BENCHMARKS.md). The rest go to
/// the pool: over many partitions, or past rows a filter refuses, a page
/// can seek and scan too long for an async thread; and a long scan's later
/// pages are read there while the consumer takes the one before.
fn read_here(query: &Query, continuation: Option<&ContinuationToken>) -> bool {
    let first = continuation.is_none() || query.top == Some(1);
    first && query.partitions.single().is_some() && query.filter.is_none()
}

fn read_u32(b: &[u8]) -> Result<u32> {
    Ok(u32::from_le_bytes(b.try_into().map_err(|_| {
        StorageError::Corrupt("format marker".into())
    })?))
}

fn read_i64(b: &[u8]) -> Result<i64> {
    Ok(i64::from_le_bytes(
        b.try_into()
            .map_err(|_| StorageError::Corrupt("clock".into()))?,
    ))
}

#[async_trait]
impl TableStore for EmbeddedStore {
    async fn create_table(&self, table: &TableName) -> Result<()> {
        let table = table.clone();
        self.blocking(move |s| {
            let txn = s.db.begin_write()?;
            {
                let mut tables = txn.open_table(TABLES)?;
                let existing = tables
                    .get(table.folded().as_str())?
                    .map(|v| v.value().to_owned());
                if let Some(existing) = existing {
                    return Err(StorageError::TableAlreadyExists(existing));
                }
                tables.insert(table.folded().as_str(), table.as_str())?;
                txn.open_table(entities(&entity_table_name(&table)))?;
                dict::stamp(
                    &mut txn.open_table(dict::definition(&dict::table_name(&table.folded())))?,
                    &s.making(),
                )?;
                txn.open_table(counts::definition(&counts::table_name(&table.folded())))?;
            }
            s.derived.replacing(&table);
            let committed = s.snapshots.commit(|| txn.commit());
            s.derived.replaced(&table);
            committed?;
            Ok(())
        })
        .await
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        let table = table.clone();
        self.blocking(move |s| {
            let _changing = s.dicts.changing();
            let txn = s.db.begin_write()?;
            {
                let removed = txn
                    .open_table(TABLES)?
                    .remove(table.folded().as_str())?
                    .is_some();
                if !removed {
                    return Err(StorageError::TableNotFound(table.as_str().to_owned()));
                }
                txn.delete_table(entities(&entity_table_name(&table)))?;
                txn.delete_table(dict::definition(&dict::table_name(&table.folded())))?;
                txn.delete_table(counts::definition(&counts::table_name(&table.folded())))?;
            }
            s.derived.replacing(&table);
            let committed = s.snapshots.commit(|| txn.commit());
            s.derived.replaced(&table);
            committed?;
            s.dicts.forget(&table.folded());
            Ok(())
        })
        .await
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        let txn = self.db.begin_read()?;
        let tables = txn.open_table(TABLES)?;
        let mut out = Vec::new();
        for item in tables.iter()? {
            let (_, name) = item?;
            let name =
                TableName::new(name.value()).map_err(|e| StorageError::Corrupt(e.to_string()))?;
            out.push(name);
        }
        Ok(out)
    }

    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.with_rows(table, |rows, dict| {
            let found = rows.get(key::encode(pk, rk).as_slice())?;
            found
                .map(|v| value::decode(pk.clone(), rk.clone(), v.value(), dict, None))
                .transpose()
        })
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        query.page_size()?;
        if read_here(query, continuation) {
            return self.with_rows(table, |rows, dict| {
                scan::page(rows, dict, query, continuation, self.scan_budget)
            });
        }
        let (table, query, token) = (table.clone(), query.clone(), continuation.cloned());
        self.blocking(move |s| {
            s.with_rows(&table, |rows, dict| {
                scan::page(rows, dict, &query, token.as_ref(), s.scan_budget)
            })
        })
        .await
    }

    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<std::sync::Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        query.page_size()?;
        if read_here(query, continuation) {
            return self.page_into(table, query, continuation, &sink);
        }
        let (table, query, token) = (table.clone(), query.clone(), continuation.cloned());
        self.blocking(move |s| s.page_into(&table, &query, token.as_ref(), &sink))
            .await
    }

    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        let (table, range, after) = (table.clone(), range.clone(), after.cloned());
        self.blocking(move |s| {
            s.with_rows(&table, |rows, _| {
                scan::partitions(rows, &range, after.as_ref())
            })
        })
        .await
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        validate_batch(&mut ops)?;
        let table = table.clone();
        self.blocking(move |s| s.commits.submit(s, table, ops))
            .await
    }

    fn derived(&self) -> Option<&DerivedCache> {
        (self.derived.budget() > 0).then_some(self.derived.as_ref())
    }

    fn counted(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        rows: &KeyRange<RowKey>,
    ) -> Result<Option<u64>> {
        match rows.kind() {
            Some(kind) => self.count_kind(table, partitions, kind).map(Some),
            None => Ok(None),
        }
    }

    fn partition_counts(&self, table: &TableName) -> Result<Option<Arc<[PartitionCount]>>> {
        let folded = table.folded();
        // Taken before reading, as the derived cache's readers do: a write
        // landing meanwhile moves it, and the next plan reads again.
        let version = self.derived.version(table, &KeyRange::all());
        let kept = || {
            self.partition_counts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
        };
        if let Some((v, counts)) = kept().get(&folded)
            && *v == version
        {
            return Ok(counts.clone());
        }
        let txn = self.db.begin_read()?;
        let name = counts::table_name(&folded);
        let counters = match txn.open_table(counts::definition(&name)) {
            // Planning a table another process dropped: no statistics.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            other => other?,
        };
        let read: Option<Arc<[PartitionCount]>> =
            counts::by_partition(&counters, MAX_COUNTED_PARTITIONS)?.map(Arc::from);
        if !self.derived.landing(table) {
            kept().insert(folded, (version, read.clone()));
        }
        Ok(read)
    }

    async fn count(&self, table: &TableName) -> Result<u64> {
        self.count_kind(table, &KeyRange::all(), "")
    }
}

impl EmbeddedStore {
    /// The entities of one kind (all, for "") in a range of partitions,
    /// from the counts.
    fn count_kind(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        kind: &str,
    ) -> Result<u64> {
        let txn = self.db.begin_read()?;
        let name = counts::table_name(&table.folded());
        let counters = match txn.open_table(counts::definition(&name)) {
            Err(redb::TableError::TableDoesNotExist(_)) => {
                return Err(StorageError::TableNotFound(table.as_str().to_owned()));
            }
            other => other?,
        };
        counts::sum(&counters, partitions, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::read_here;
    use crate::storage::{
        CmpOp, ContinuationToken, EdmValue, Filter, KeyRange, PartitionKey, Query, RowKey,
    };

    fn pk(s: &str) -> PartitionKey {
        PartitionKey::new(s).expect("key")
    }

    #[test]
    fn only_a_first_unfiltered_page_of_one_partition_or_one_entity_is_read_here() {
        let one = Query::partition(pk("a"));
        let token = ContinuationToken::at(pk("a"), RowKey::new("r").expect("key"));
        assert!(read_here(&one, None));
        assert!(!read_here(&one, Some(&token)), "a later page: the pool");
        assert!(read_here(&one.clone().top(1), Some(&token)), "one entity");
        let filtered = one.filter(Filter::property("n", CmpOp::Eq, EdmValue::Int32(1)));
        assert!(
            !read_here(&filtered, None),
            "a filter can scan a whole partition"
        );
        let mut two = Query::all();
        two.partitions = KeyRange {
            start: std::ops::Bound::Included(pk("a")),
            end: std::ops::Bound::Included(pk("b")),
        };
        assert!(!read_here(&two, None), "many partitions");
        assert!(!read_here(&Query::all().top(1), None));
    }
}
