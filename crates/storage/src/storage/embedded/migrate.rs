//! `tablesql migrate`: a format 1 store rewritten in format 2, resumably.
//!
//! The new store is built beside the old file, as `tablesql.redb.migrating`,
//! table by table in key order, a chunk of entities per commit; each commit
//! also records the last old key it copied, so a migration stopped at any
//! point (a kill, a full disk) starts again after that key. Entities keep
//! their Timestamps (and so their ETags), and the write clock carries over.
//! When every table is copied the old file is kept as
//! `tablesql.redb.format1` (a hard link, so no copy) and the new one
//! renamed over `tablesql.redb` in one step: a process opening the store
//! meets either the old format, which it refuses with a message naming
//! this command, or the whole new one.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};

use super::dict;
use super::{
    CLOCK_KEY, EmbeddedStore, FILE_NAME, FORMAT_KEY, FORMAT_VERSION, META, TABLES, commit, counts,
    entities, entity_table_name, format1, key,
};
use crate::storage::write::Effect;
use crate::storage::{Result, StorageError, TableName};

/// Where a migration builds the new store.
pub const MIGRATING: &str = "tablesql.redb.migrating";
/// What the old file is kept as once the new one replaces it.
pub const KEPT: &str = "tablesql.redb.format1";

/// Entities copied per commit of the new store.
pub const CHUNK: usize = 10_000;

/// What a migration did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The old format version (`FORMAT_VERSION` where there was nothing to do).
    pub from: u32,
    /// Tables in the store.
    pub tables: usize,
    /// Entities copied in this run (a resumed run counts only its own).
    pub entities: u64,
    /// Whether it finished: the store is now in format 2.
    pub finished: bool,
    /// Where the old file is kept, once finished.
    pub kept: Option<PathBuf>,
}

/// How a migration runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Entities per commit.
    pub chunk: usize,
    /// Stop (unfinished, resumable) after this many entities: a test's
    /// stand-in for an interrupted run.
    pub stop_after: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            chunk: CHUNK,
            stop_after: None,
        }
    }
}

/// The progress keys in the new store's meta table.
fn next_key(folded: &str) -> String {
    format!("migrate_after:{folded}")
}
fn done_key(folded: &str) -> String {
    format!("migrate_done:{folded}")
}

/// Migrates the store in `dir` to format 2, or resumes a migration;
/// `progress` hears of each table copied (its name and entities so far).
pub fn migrate(
    dir: &Path,
    options: &Options,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Migrated> {
    let path = dir.join(FILE_NAME);
    let target_path = dir.join(MIGRATING);
    if !path.exists() {
        return Err(StorageError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no store at {}", path.display()),
        )));
    }
    let source = Database::open(&path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StorageError::InUse(path.display().to_string()),
        e => e.into(),
    })?;
    let from = version(&source)?;
    if from == FORMAT_VERSION {
        return Ok(Migrated {
            from,
            finished: true,
            ..Migrated::default()
        });
    }
    if from != 1 {
        return Err(StorageError::FormatVersion {
            found: from,
            expected: FORMAT_VERSION,
        });
    }
    let kept = dir.join(KEPT);
    if kept.exists() && !same_file(&kept, &path)? {
        return Err(left_over(&kept));
    }
    let target = EmbeddedStore::open_file(
        &target_path,
        super::open::DEFAULT_PAGE_CACHE,
        super::open::log_repair(&target_path),
    )?;
    let mut done = Migrated {
        from,
        ..Migrated::default()
    };
    let tables = source_tables(&source)?;
    done.tables = tables.len();
    for table in &tables {
        if !copy_table(&source, &target, table, options, &mut done, progress)? {
            return Ok(done);
        }
    }
    finish(&source, &target)?;
    drop((source, target));
    if !kept.exists() {
        std::fs::hard_link(&path, &kept)?;
    } else if !same_file(&kept, &path)? {
        return Err(left_over(&kept));
    }
    std::fs::rename(&target_path, &path)?;
    done.finished = true;
    done.kept = Some(kept);
    Ok(done)
}

/// A kept file of an earlier migration, which keeping this store's old
/// file would replace.
fn left_over(kept: &Path) -> StorageError {
    StorageError::Io(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{} is there from an earlier migration; move it away and run again",
            kept.display()
        ),
    ))
}

/// Whether two paths name one file (the link an interrupted run made).
fn same_file(a: &Path, b: &Path) -> Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
        Ok((a.dev(), a.ino()) == (b.dev(), b.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        Ok(false)
    }
}

fn version(db: &Database) -> Result<u32> {
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(StorageError::Corrupt("no format marker".into()));
        }
        other => other?,
    };
    let found = meta
        .get(FORMAT_KEY)?
        .ok_or_else(|| StorageError::Corrupt("no format marker".into()))?;
    super::read_u32(found.value())
}

fn source_tables(db: &Database) -> Result<Vec<TableName>> {
    let txn = db.begin_read()?;
    let tables = txn.open_table(TABLES)?;
    let mut out = Vec::new();
    for item in tables.iter()? {
        let (_, name) = item?;
        out.push(TableName::new(name.value()).map_err(|e| StorageError::Corrupt(e.to_string()))?);
    }
    Ok(out)
}

/// Copies one table from where the last run stopped; false where it
/// stopped early (`stop_after`).
fn copy_table(
    source: &Database,
    target: &EmbeddedStore,
    table: &TableName,
    options: &Options,
    done: &mut Migrated,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<bool> {
    let folded = table.folded();
    let (mut after, finished) = {
        let txn = target.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let after = meta
            .get(next_key(&folded).as_str())?
            .map(|v| v.value().to_vec());
        (after, meta.get(done_key(&folded).as_str())?.is_some())
    };
    if finished {
        return Ok(true);
    }
    let read = source.begin_read()?;
    let rows = read.open_table(entities(&entity_table_name(table)))?;
    let mut copied = 0u64;
    loop {
        let budget = match options.stop_after {
            Some(limit) if done.entities >= limit => return Ok(false),
            Some(limit) => options.chunk.max(1).min((limit - done.entities) as usize),
            None => options.chunk.max(1),
        };
        let range = match &after {
            Some(k) => rows.range::<&[u8]>((
                std::ops::Bound::Excluded(k.as_slice()),
                std::ops::Bound::Unbounded,
            ))?,
            None => rows.range::<&[u8]>(..)?,
        };
        let mut staged = Vec::new();
        let mut last = None;
        for item in range.take(budget) {
            let (k, v) = item?;
            let (pk, rk) = format1::decode_key(k.value())?;
            let entity = format1::decode_value(pk.clone(), rk.clone(), v.value(), None)?;
            staged.push((key::encode(&pk, &rk), Effect::Put(entity)));
            last = Some(k.value().to_vec());
        }
        let end = staged.len() < budget;
        let epoch = target.dicts.epoch();
        let txn = target.db.begin_write()?;
        {
            ensure_table(target, &txn, table)?;
            let names = txn.open_table(dict::definition(&dict::table_name(&folded)))?;
            let mut names_now = dict::Dict::clone(&*target.dict(&folded, &names, epoch)?);
            drop(names);
            copied += staged.len() as u64;
            done.entities += staged.len() as u64;
            // The target store serves no reads yet: no derived cache to tell.
            commit::write(&txn, table, &mut names_now, staged)?;
            let mut meta = txn.open_table(META)?;
            if let Some(last) = &last {
                meta.insert(next_key(&folded).as_str(), last.as_slice())?;
            }
            if end {
                meta.insert(done_key(&folded).as_str(), [].as_slice())?;
            }
            drop(meta);
            txn.commit()?;
            target
                .dicts
                .offer(&folded, std::sync::Arc::new(names_now), epoch);
        }
        progress(table.as_str(), copied);
        if end {
            return Ok(true);
        }
        after = last;
    }
}

/// Makes a table in the new store, as `create_table` does, unless a
/// earlier chunk made it.
fn ensure_table(
    target: &EmbeddedStore,
    txn: &redb::WriteTransaction,
    table: &TableName,
) -> Result<()> {
    let folded = table.folded();
    let mut tables = txn.open_table(TABLES)?;
    if tables.get(folded.as_str())?.is_some() {
        return Ok(());
    }
    tables.insert(folded.as_str(), table.as_str())?;
    txn.open_table(entities(&entity_table_name(table)))?;
    dict::stamp(
        &mut txn.open_table(dict::definition(&dict::table_name(&folded)))?,
        &target.making(),
    )?;
    txn.open_table(counts::definition(&counts::table_name(&folded)))?;
    Ok(())
}

/// Carries the write clock over.
fn finish(source: &Database, target: &EmbeddedStore) -> Result<()> {
    let clock = {
        let txn = source.begin_read()?;
        let meta = txn.open_table(META)?;
        meta.get(CLOCK_KEY)?.map(|v| v.value().to_vec())
    };
    let txn = target.db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        if let Some(clock) = clock {
            meta.insert(CLOCK_KEY, clock.as_slice())?;
        }
    }
    txn.commit()?;
    Ok(())
}
