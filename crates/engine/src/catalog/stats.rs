//! Per-partition statistics, as `ANALYZE` takes them, kept in the store
//! beside the catalog so that every engine over the store plans with them:
//! per partition its entity count, approximate bytes (the service's size
//! formula) and guideposts, the RowKey of every Nth entity, which split a
//! big partition into chunks of about N entities each (Phoenix's
//! guideposts). Statistics say when they were taken; they describe the
//! partitions then, and a scan planned from them still reads partitions
//! created since (see `exec::read::fanout`).
//!
//! In `TablesqlCatalog`: one summary entity per storage table (partition
//! `stats`, RowKey the table's name) and one entity per partition
//! (partition `stats:<table>`, RowKey the PartitionKey, which keys may hold
//! as RowKeys), guideposts joined by a newline (which no key holds).
//!
//! Per partition `ANALYZE` also counts the distinct leading RowKey fields
//! of each key path (the primary key's RowKey template, each local
//! index's): how many rows one value of a key prefix holds, which a lookup
//! join by that prefix reads per key, and DataFusion's distinct counts of
//! the key columns, which its join estimates divide by.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use chrono::{DateTime, Utc};

use super::persist::table;
mod counted;

pub use counted::{KindPaths, template_kind};

use super::{CatalogError, TableDef};
use crate::storage::{
    EdmValue, Entity, IfMatch, PartitionCount, PartitionKey, Query, RowKey, StorageError,
    TableName, TableStore, WriteOp,
};

const SUMMARIES: &str = "stats";
const FORMAT_VERSION: i32 = 1;
/// Most guideposts kept per partition.
pub const MAX_GUIDEPOSTS: usize = 400;
/// Most bytes of them (UTF-16, as the service counts): they share one
/// string property, which holds at most 64 KiB.
pub const MAX_GUIDEPOST_BYTES: usize = 60 * 1024;
/// Bytes of partition entities per entity group transaction, by a generous
/// estimate: a transaction holds 4 MiB, and JSON escapes can make a UTF-16
/// byte of a guidepost three on the wire.
const BATCH_BYTES: usize = 3 * 1024 * 1024;

/// Statistics of one storage table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableStats {
    /// When they were taken.
    pub taken: DateTime<Utc>,
    /// Entities between guideposts, as asked.
    pub guidepost_every: u64,
    /// Read from the counts the store keeps (`TableStats::counted`), not
    /// taken by `ANALYZE`: each partition's entities, per key path, and
    /// nothing else (no guideposts, sizes, times or distinct prefixes).
    pub counted: bool,
    /// The partitions, in key order.
    pub partitions: Vec<PartitionStats>,
}

/// Statistics of one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionStats {
    /// Its key.
    pub partition: PartitionKey,
    /// Entities, index rows included.
    pub entities: u64,
    /// Their size by the service's formula.
    pub bytes: u64,
    /// The largest entity's size, by the same formula (0 in statistics
    /// taken before it was kept).
    pub largest: u64,
    /// The most properties one entity has (0 likewise).
    pub widest: u64,
    /// RowKeys that split the partition into chunks of about equal size, ascending.
    pub guideposts: Vec<RowKey>,
    /// The oldest and the newest Timestamp of its entities (the store's
    /// time of their last write): where writes land over time, for the
    /// advisor's append-only finding. `None` in statistics taken before
    /// they were kept.
    pub oldest: Option<DateTime<Utc>>,
    /// See `oldest`.
    pub newest: Option<DateTime<Utc>>,
    /// Distinct leading RowKey fields per key path (empty in statistics
    /// taken before they were counted).
    pub prefixes: KeyPrefixes,
}

/// The name of the primary key's path in [`KeyPrefixes`]; an index's path
/// is its name.
pub const PRIMARY_PATH: &str = "";

/// Per key path (by [`PRIMARY_PATH`] or an index's name), in one
/// partition: the path's entities (keys that read as its RowKey template;
/// another path's rows do not), then the number of distinct values of the
/// template's first field, first two fields, ... to the whole key.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyPrefixes(pub BTreeMap<String, Vec<u64>>);

impl KeyPrefixes {
    /// Distinct values of `path`'s first `fields` RowKey fields (0: one
    /// where the partition holds any of its rows), if counted.
    pub fn distinct(&self, path: &str, fields: usize) -> Option<u64> {
        let counts = self.0.get(path)?;
        match fields {
            0 => counts.first().map(|n| u64::from(*n > 0)),
            n => counts.get(n).copied(),
        }
    }

    /// The path's entities in the partition, if counted.
    pub fn entities(&self, path: &str) -> Option<u64> {
        self.0.get(path)?.first().copied()
    }

    /// As stored: JSON, `{"path": [n1, n2, ...]}`.
    fn to_json(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_default()
    }

    /// From the stored JSON; empty where it does not read.
    fn from_json(text: &str) -> Self {
        Self(serde_json::from_str(text).unwrap_or_default())
    }
}

/// The statistics an engine plans with, by storage table, shared by its
/// tables: loaded when the engine opens, replaced by `ANALYZE`; and for a
/// table never analyzed, those its store's counts give, kept while the
/// store hands back the same counts.
#[derive(Debug, Default)]
pub struct StatsCache(RwLock<HashMap<TableName, Arc<TableStats>>>, Mutex<Counted>);

/// A table's kept counts and the statistics made of them, by table and
/// the key paths its kinds were read as.
type Counted = HashMap<(TableName, KindPaths), (Arc<[PartitionCount]>, Arc<TableStats>)>;

impl StatsCache {
    /// A table's statistics, if it was analyzed.
    pub fn get(&self, table: &TableName) -> Option<Arc<TableStats>> {
        self.0.read().ok()?.get(table).cloned()
    }

    /// Sets a table's statistics.
    pub fn set(&self, table: TableName, stats: TableStats) {
        if let Ok(mut m) = self.0.write() {
            m.insert(table, Arc::new(stats));
        }
    }

    /// Every analyzed table's statistics.
    pub fn all(&self) -> Vec<(TableName, Arc<TableStats>)> {
        self.0
            .read()
            .map(|m| m.iter().map(|(t, s)| (t.clone(), s.clone())).collect())
            .unwrap_or_default()
    }

    /// Replaces them all.
    pub fn replace_all(&self, all: Vec<(TableName, TableStats)>) {
        if let Ok(mut m) = self.0.write() {
            *m = all.into_iter().map(|(t, s)| (t, Arc::new(s))).collect();
        }
    }
}

impl TableStats {
    /// Entities in all partitions.
    pub fn entities(&self) -> u64 {
        self.partitions.iter().map(|p| p.entities).sum()
    }

    /// Distinct values of `path`'s partition and first `fields` RowKey
    /// fields, summed partition by partition (a value in two partitions is
    /// two: the partition is part of the prefix); `None` where a partition
    /// was analyzed without them.
    pub fn distinct(&self, path: &str, fields: usize) -> Option<u64> {
        self.partitions
            .iter()
            .map(|p| p.prefixes.distinct(path, fields))
            .sum()
    }

    /// The distinct values of `column` of `def`'s rows (this being its
    /// table's statistics), where they tell it: a primary key of that
    /// column alone (one per row), the PartitionKey's only field (one per
    /// partition), or the RowKey's first field where one partition holds
    /// each of its values (a PartitionKey without fields that is no
    /// bucket of the RowKey: then its distinct values per partition,
    /// summed, are exact; otherwise they overcount, and DataFusion, which
    /// divides join sizes by them, would undercount joins).
    pub fn column_distinct(&self, def: &TableDef, column: &str) -> Option<u64> {
        if def.primary_key.len() == 1 && def.primary_key[0] == column {
            return self.path_entities(PRIMARY_PATH);
        }
        if def.partition_key.columns().eq([column]) {
            return self.distinct(PRIMARY_PATH, 0);
        }
        let one_partition_each = def.partition_key.columns().next().is_none()
            && def.partition_key.row_buckets().is_none();
        if one_partition_each && def.row_key.columns().next() == Some(column) {
            return self.distinct(PRIMARY_PATH, 1);
        }
        None
    }

    /// `path`'s entities; `None` where a partition was analyzed without
    /// counting them.
    pub fn path_entities(&self, path: &str) -> Option<u64> {
        self.partitions
            .iter()
            .map(|p| p.prefixes.entities(path))
            .sum()
    }
}

/// What `ANALYZE` says it found.
impl std::fmt::Display for TableStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} partitions, {} entities, {} bytes, {} guideposts (one every {} entities), at {}",
            self.partitions.len(),
            self.entities(),
            self.partitions.iter().map(|p| p.bytes).sum::<u64>(),
            self.partitions
                .iter()
                .map(|p| p.guideposts.len())
                .sum::<usize>(),
            self.guidepost_every,
            self.taken.format("%Y-%m-%dT%H:%M:%SZ"),
        )
    }
}

fn pk(s: &str) -> Result<PartitionKey, CatalogError> {
    Ok(PartitionKey::new(s).map_err(StorageError::from)?)
}

fn rk(s: &str) -> Result<RowKey, CatalogError> {
    Ok(RowKey::new(s).map_err(StorageError::from)?)
}

fn partition_of(storage_table: &TableName) -> Result<PartitionKey, CatalogError> {
    pk(&format!("{SUMMARIES}:{}", storage_table.as_str()))
}

/// Stores a table's statistics in place of any before: the partitions'
/// first (in entity group transactions of at most 100 and about 3 MiB), then the summary, which
/// readers go by.
pub async fn save(
    store: &dyn TableStore,
    storage_table: &TableName,
    stats: &TableStats,
) -> Result<(), CatalogError> {
    let catalog = catalog_table(store).await?;
    let partition = partition_of(storage_table)?;
    let old = store
        .query_all(
            &catalog,
            &Query::partition(partition.clone()).select(Vec::<String>::new()),
        )
        .await?;
    let gone: Vec<PartitionKey> = old
        .iter()
        .filter(|e| {
            !stats
                .partitions
                .iter()
                .any(|p| p.partition.as_str() == e.row_key().as_str())
        })
        .map(|e| PartitionKey::from_stored(e.row_key().as_str().to_owned()))
        .collect();
    write(
        store,
        &catalog,
        storage_table,
        stats,
        &stats.partitions,
        &gone,
    )
    .await
}

/// Stores a table's statistics where only `changed` partitions differ
/// from the stored ones and `gone` are no more (a sampled `ANALYZE`'s,
/// whose writes then follow the sample, not the table), the stored ones
/// being those taken at `based_on`. Where the stored ones were taken at
/// another time (another process analyzed since, or they are gone), all
/// partitions are stored as [`save`] does.
pub async fn save_changes(
    store: &dyn TableStore,
    storage_table: &TableName,
    stats: &TableStats,
    changed: &[PartitionStats],
    gone: &[PartitionKey],
    based_on: DateTime<Utc>,
) -> Result<(), CatalogError> {
    let catalog = catalog_table(store).await?;
    let summary = store
        .get(&catalog, &pk(SUMMARIES)?, &rk(storage_table.as_str())?)
        .await?;
    // To the millisecond: the service keeps a tenth of a microsecond.
    let same = match summary.as_ref().and_then(|s| s.get("taken")) {
        Some(EdmValue::DateTime(at)) => (*at - based_on).num_milliseconds() == 0,
        _ => false,
    };
    if !same {
        return save(store, storage_table, stats).await;
    }
    write(store, &catalog, storage_table, stats, changed, gone).await
}

/// The catalog table, made if missing.
async fn catalog_table(store: &dyn TableStore) -> Result<TableName, CatalogError> {
    let catalog = table()?;
    match store.create_table(&catalog).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => Ok(catalog),
        Err(e) => Err(e.into()),
    }
}

/// Writes `partitions`' entities, deletes `gone`'s, then the summary.
async fn write(
    store: &dyn TableStore,
    catalog: &TableName,
    storage_table: &TableName,
    stats: &TableStats,
    partitions: &[PartitionStats],
    gone: &[PartitionKey],
) -> Result<(), CatalogError> {
    let partition = partition_of(storage_table)?;
    let mut ops = Vec::with_capacity(partitions.len() + gone.len());
    for p in partitions {
        let guideposts: Vec<&str> = p.guideposts.iter().map(RowKey::as_str).collect();
        let entity = Entity::new(partition.clone(), rk(p.partition.as_str())?)
            .with("entities", EdmValue::Int64(p.entities as i64))
            .with("bytes", EdmValue::Int64(p.bytes as i64))
            .with("largest", EdmValue::Int64(p.largest as i64))
            .with("widest", EdmValue::Int64(p.widest as i64))
            .with("guideposts", EdmValue::String(guideposts.join("\n")))
            .with("prefixes", EdmValue::String(p.prefixes.to_json()));
        let entity = [("oldest", p.oldest), ("newest", p.newest)]
            .into_iter()
            .fold(entity, |e, (name, at)| match at {
                Some(at) => e.with(name, EdmValue::DateTime(at)),
                None => e,
            });
        ops.push(WriteOp::InsertOrReplace(entity));
    }
    for key in gone {
        ops.push(WriteOp::Delete {
            partition_key: partition.clone(),
            row_key: rk(key.as_str())?,
            if_match: IfMatch::Any,
        });
    }
    for batch in batches(ops) {
        store.execute_batch(catalog, batch).await?;
    }
    let summary = Entity::new(pk(SUMMARIES)?, rk(storage_table.as_str())?)
        .with("format_version", EdmValue::Int32(FORMAT_VERSION))
        .with("taken", EdmValue::DateTime(stats.taken))
        .with(
            "guidepost_every",
            EdmValue::Int64(stats.guidepost_every as i64),
        )
        .with("partitions", EdmValue::Int64(stats.partitions.len() as i64));
    store
        .execute(catalog, WriteOp::InsertOrReplace(summary))
        .await?;
    super::persist::touch(store).await
}

/// The statistics of every analyzed storage table.
pub async fn load_all(
    store: &dyn TableStore,
) -> Result<Vec<(TableName, TableStats)>, CatalogError> {
    let catalog = table()?;
    let summaries = match store
        .query_all(&catalog, &Query::partition(pk(SUMMARIES)?))
        .await
    {
        Ok(s) => s,
        Err(StorageError::TableNotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::with_capacity(summaries.len());
    for s in summaries {
        // Statistics only make plans faster: a table whose statistics do not
        // read (another version's, half written) is planned without them.
        if let Ok(Some(table)) = load_one(store, &catalog, &s).await {
            out.push(table);
        }
    }
    Ok(out)
}

/// One table's statistics from its summary; `None` where they are not whole.
async fn load_one(
    store: &dyn TableStore,
    catalog: &TableName,
    summary: &crate::storage::StoredEntity,
) -> Result<Option<(TableName, TableStats)>, CatalogError> {
    if summary.get("format_version") != Some(&EdmValue::Int32(FORMAT_VERSION)) {
        return Ok(None);
    }
    let (Some(EdmValue::DateTime(taken)), Some(EdmValue::Int64(every))) =
        (summary.get("taken"), summary.get("guidepost_every"))
    else {
        return Ok(None);
    };
    let storage_table = TableName::new(summary.row_key().as_str()).map_err(StorageError::from)?;
    let rows = store
        .query_all(catalog, &Query::partition(partition_of(&storage_table)?))
        .await?;
    let mut partitions = Vec::with_capacity(rows.len());
    for r in rows {
        let (Some(EdmValue::Int64(entities)), Some(EdmValue::Int64(bytes))) =
            (r.get("entities"), r.get("bytes"))
        else {
            return Ok(None);
        };
        let guideposts = match r.get("guideposts") {
            Some(EdmValue::String(g)) if !g.is_empty() => g
                .split('\n')
                .map(|k| RowKey::from_stored(k.to_owned()))
                .collect(),
            _ => Vec::new(),
        };
        let count = |name: &str| match r.get(name) {
            Some(EdmValue::Int64(n)) => *n as u64,
            _ => 0,
        };
        let time = |name: &str| match r.get(name) {
            Some(EdmValue::DateTime(at)) => Some(*at),
            _ => None,
        };
        partitions.push(PartitionStats {
            partition: PartitionKey::from_stored(r.row_key().as_str().to_owned()),
            entities: *entities as u64,
            bytes: *bytes as u64,
            largest: count("largest"),
            widest: count("widest"),
            guideposts,
            oldest: time("oldest"),
            newest: time("newest"),
            prefixes: match r.get("prefixes") {
                Some(EdmValue::String(text)) => KeyPrefixes::from_json(text),
                _ => KeyPrefixes::default(),
            },
        });
    }
    partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
    Ok(Some((
        storage_table,
        TableStats {
            taken: *taken,
            guidepost_every: *every as u64,
            counted: false,
            partitions,
        },
    )))
}

/// Writes in entity group transactions of at most 100 operations and about
/// `BATCH_BYTES` (three bytes for each UTF-16 byte of an entity).
fn batches(ops: Vec<WriteOp>) -> Vec<Vec<WriteOp>> {
    let mut out: Vec<Vec<WriteOp>> = Vec::new();
    let mut bytes = 0;
    for op in ops {
        let size = 3 * op.stored_size();
        let full = out.last().is_none_or(|b| {
            b.len() == crate::storage::write::MAX_BATCH_OPERATIONS || bytes + size > BATCH_BYTES
        });
        if full {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(b) = out.last_mut() {
            b.push(op);
        }
    }
    out
}
