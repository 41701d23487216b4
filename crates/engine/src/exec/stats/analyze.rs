//! `ANALYZE`: reads a storage table once and counts what `catalog::stats`
//! keeps: per partition entities, bytes and a guidepost every `every`
//! entities, the oldest and newest Timestamp, and the distinct leading
//! RowKey fields of each key path it is given.
//!
//! Requests are the cost on Azure, and a partition is not a unit of them:
//! a query over a range of partitions returns pages of up to 1,000
//! entities whatever partitions they belong to, while reading partition by
//! partition pays a request per partition to list it (Table Storage has no
//! listing) and at least one to read it. A table of a million small
//! partitions is a thousand requests read as one range, two million read
//! partition by partition. So the table is read as ranges of partitions,
//! `width` at a time, each one chain of pages: split where the last
//! statistics balance the entities, or where a store that lists
//! partitions cheaply (one request for many) puts as many partitions in
//! each, and otherwise one range, the whole table. Where sizes are not
//! needed (a global index's table, which only the planner reads) the
//! pages carry keys only.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::catalog::stats::{
    KeyPrefixes, MAX_GUIDEPOST_BYTES, MAX_GUIDEPOSTS, PartitionStats, TableStats,
};
use crate::keys::KeyTemplate;
use crate::storage::value::utf16_bytes;
use crate::storage::{
    ContinuationToken, KeyRange, PartitionKey, Query, Result, RowKey, StoredEntity, TableName,
    TableStore,
};

/// A key path whose distinct RowKey prefixes `ANALYZE` counts: its name
/// in [`KeyPrefixes`] and its RowKey template.
#[derive(Debug, Clone)]
pub struct KeyPath {
    /// `catalog::stats::PRIMARY_PATH` or the index's name.
    pub name: String,
    /// The template its rows' RowKeys are written by.
    pub row_key: KeyTemplate,
    /// RowKey prefixes of other paths' rows, which a template that starts
    /// with a field (`{id}`) would read as its own.
    pub others: Vec<String>,
}

/// What one `ANALYZE` of a storage table counts, and how it reads.
#[derive(Debug, Clone)]
pub struct Analysis<'a> {
    /// A guidepost every this many entities (doubled in a partition whose
    /// guideposts pass the most kept).
    pub every: u64,
    /// Ranges of partitions read at once.
    pub width: usize,
    /// The key paths whose distinct prefixes are counted.
    pub paths: &'a [KeyPath],
    /// Whether entities' sizes are measured (bytes, the largest, the
    /// widest): else the pages carry keys only and the sizes are 0.
    pub sizes: bool,
    /// The table's statistics before, to split the reading by.
    pub previous: Option<&'a TableStats>,
    /// Entities to sample (`tablesql.analyze_sample`), 0 to read them all:
    /// see `sample`, which needs `previous` to place its reads.
    pub sample: u64,
}

/// The statistics of `table` now, every entity read.
pub async fn analyze(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    how: &Analysis<'_>,
) -> Result<TableStats> {
    let taken = Utc::now();
    let width = how.width.max(1);
    let ranges = match how.previous {
        Some(before) if !before.partitions.is_empty() => {
            let weights: Vec<(PartitionKey, u64)> = before
                .partitions
                .iter()
                .map(|p| (p.partition.clone(), p.entities))
                .collect();
            split(&weights, width)
        }
        _ => match listed(store, table).await? {
            Some(keys) => {
                let weights: Vec<(PartitionKey, u64)> = keys.into_iter().map(|k| (k, 1)).collect();
                split(&weights, width)
            }
            None => vec![KeyRange::all()],
        },
    };
    let parts: Vec<Vec<PartitionStats>> = stream::iter(ranges)
        .map(|range| read_range(store, table, range, how))
        .buffered(width)
        .try_collect()
        .await?;
    Ok(TableStats {
        taken,
        guidepost_every: how.every.max(1),
        counted: false,
        partitions: parts.into_iter().flatten().collect(),
    })
}

/// Every partition of `table`, where the store lists them cheaply (more
/// partitions than requests on the first page, or all of them in it);
/// `None` where it lists one partition per request, as Azure does.
async fn listed(
    store: &Arc<dyn TableStore>,
    table: &TableName,
) -> Result<Option<Vec<PartitionKey>>> {
    let mut keys = Vec::new();
    let mut after: Option<PartitionKey> = None;
    loop {
        let page = store
            .partitions(table, &KeyRange::all(), after.as_ref())
            .await?;
        let cheap = page.partitions.len() > page.requests || page.after.is_none();
        if after.is_none() && !cheap {
            return Ok(None);
        }
        keys.extend(page.partitions);
        match page.after {
            Some(a) => after = Some(a),
            None => return Ok(Some(keys)),
        }
    }
}

/// Ranges of partitions, at most `n`, of about equal weight: `weights`
/// (partitions in key order with their weights) cut after the partition
/// that reaches each next share. The first range is open below and the
/// last above, so partitions made since the weights were taken are read.
pub fn split(weights: &[(PartitionKey, u64)], n: usize) -> Vec<KeyRange<PartitionKey>> {
    let total: u64 = weights.iter().map(|(_, w)| *w).sum();
    let share = total.div_ceil(n.max(1) as u64).max(1);
    let mut cuts: Vec<PartitionKey> = Vec::new();
    let mut acc = 0;
    for (key, weight) in weights {
        if acc >= share && cuts.len() + 1 < n {
            cuts.push(key.clone());
            acc = 0;
        }
        acc += weight;
    }
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = Bound::Unbounded;
    for cut in cuts {
        ranges.push(KeyRange {
            start,
            end: Bound::Excluded(cut.clone()),
        });
        start = Bound::Included(cut);
    }
    ranges.push(KeyRange {
        start,
        end: Bound::Unbounded,
    });
    ranges
}

/// The statistics of the partitions in `range`, read as one chain of pages.
async fn read_range(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    range: KeyRange<PartitionKey>,
    how: &Analysis<'_>,
) -> Result<Vec<PartitionStats>> {
    let mut query = Query::all();
    query.partitions = range;
    if !how.sizes {
        query = query.select(Vec::<String>::new());
    }
    let mut out = Vec::new();
    let mut current: Option<Partition<'_>> = None;
    let mut token: Option<ContinuationToken> = None;
    if !store.key_ordered() {
        // Pages in no key order (`TableStore::key_ordered`): a partition's
        // entities are counted together, its guideposts placed and its
        // prefixes counted in RowKey order, so the range's entities are
        // gathered (keys, Timestamp and sizes, not properties) and sorted.
        let mut all: Vec<Counted> = Vec::new();
        loop {
            let page = store.query(table, &query, token.as_ref()).await?;
            all.extend(page.entities.iter().map(|e| Counted::of(e, how.sizes)));
            match page.continuation {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        all.sort_by(|a, b| {
            a.partition
                .cmp(&b.partition)
                .then_with(|| a.row.cmp(&b.row))
        });
        for c in &all {
            if current
                .as_ref()
                .is_none_or(|p| p.stats.partition != c.partition)
            {
                out.extend(current.take().map(Partition::finish));
                current = Some(Partition::new(c.partition.clone(), how));
            }
            if let Some(p) = current.as_mut() {
                p.add_counted(&c.row, c.timestamp, c.measured);
            }
        }
        out.extend(current.map(Partition::finish));
        return Ok(out);
    }
    loop {
        let page = store.query(table, &query, token.as_ref()).await?;
        for e in &page.entities {
            if current
                .as_ref()
                .is_none_or(|p| p.stats.partition != *e.partition_key())
            {
                out.extend(current.take().map(Partition::finish));
                current = Some(Partition::new(e.partition_key().clone(), how));
            }
            if let Some(p) = current.as_mut() {
                p.add(e, how.sizes);
            }
        }
        match page.continuation {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    out.extend(current.map(Partition::finish));
    Ok(out)
}

/// An entity as [`Partition`] counts it, kept to be sorted: its keys, its
/// Timestamp and, where sizes are measured, its stored size and number of
/// properties.
struct Counted {
    partition: PartitionKey,
    row: RowKey,
    timestamp: DateTime<Utc>,
    measured: Option<(u64, u64)>,
}

impl Counted {
    fn of(e: &StoredEntity, sizes: bool) -> Self {
        Self {
            partition: e.partition_key().clone(),
            row: e.row_key().clone(),
            timestamp: e.timestamp,
            measured: measured(e, sizes),
        }
    }
}

/// An entity's stored size and number of properties, where sizes are
/// measured.
fn measured(e: &StoredEntity, sizes: bool) -> Option<(u64, u64)> {
    sizes.then(|| {
        (
            e.entity.stored_size() as u64,
            e.entity.properties.len() as u64,
        )
    })
}

/// One partition's statistics as its entities come, in key order: a
/// guidepost at every `step`th entity, the step doubled (every other
/// guidepost dropped) whenever they pass the most a partition keeps, in
/// number or in bytes.
pub(super) struct Partition<'a> {
    pub(super) stats: PartitionStats,
    step: u64,
    counters: Vec<PrefixCounter<'a>>,
}

impl<'a> Partition<'a> {
    pub(super) fn new(partition: PartitionKey, how: &Analysis<'a>) -> Self {
        Self {
            stats: PartitionStats {
                partition,
                entities: 0,
                bytes: 0,
                largest: 0,
                widest: 0,
                guideposts: Vec::new(),
                oldest: None,
                newest: None,
                prefixes: KeyPrefixes::default(),
            },
            step: how.every.max(1),
            counters: how.paths.iter().map(PrefixCounter::new).collect(),
        }
    }

    pub(super) fn add(&mut self, e: &StoredEntity, sizes: bool) {
        self.add_counted(e.row_key(), e.timestamp, measured(e, sizes));
    }

    /// [`Partition::add`] of an entity by its row key, Timestamp and
    /// (where sizes are measured) stored size and number of properties.
    fn add_counted(&mut self, row_key: &RowKey, at: DateTime<Utc>, measured: Option<(u64, u64)>) {
        let stats = &mut self.stats;
        if stats.entities > 0 && stats.entities.is_multiple_of(self.step) {
            stats.guideposts.push(row_key.clone());
            while stats.guideposts.len() > MAX_GUIDEPOSTS
                || guidepost_bytes(&stats.guideposts) > MAX_GUIDEPOST_BYTES
            {
                self.step *= 2;
                let kept = stats
                    .guideposts
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .cloned()
                    .collect();
                stats.guideposts = kept;
            }
        }
        stats.entities += 1;
        for c in &mut self.counters {
            c.add(row_key.as_str());
        }
        if let Some((size, width)) = measured {
            stats.bytes += size;
            stats.largest = stats.largest.max(size);
            stats.widest = stats.widest.max(width);
        }
        stats.oldest = Some(stats.oldest.map_or(at, |o| o.min(at)));
        stats.newest = Some(stats.newest.map_or(at, |n| n.max(at)));
    }

    pub(super) fn finish(self) -> PartitionStats {
        let mut stats = self.stats;
        stats.prefixes = KeyPrefixes(
            self.counters
                .into_iter()
                .map(|c| (c.path.name.clone(), c.distinct))
                .collect::<BTreeMap<_, _>>(),
        );
        stats
    }
}

/// The size of guideposts as the one string that stores them (UTF-16, a
/// newline between). Counted only when one is added: at most 400 keys.
fn guidepost_bytes(guideposts: &[RowKey]) -> usize {
    guideposts.iter().map(|k| utf16_bytes(k.as_str()) + 2).sum()
}

/// Counts one path's distinct RowKey prefixes in one partition. Keys come
/// in order, so the keys sharing a prefix (the fields' text, delimiters
/// and all) are adjacent: a prefix is new where it differs from the last
/// key's, and every longer one with it.
struct PrefixCounter<'a> {
    path: &'a KeyPath,
    /// The path's keys seen, then per number of leading fields (1, 2, ...)
    /// the distinct values among them.
    distinct: Vec<u64>,
    last: String,
    last_spans: Vec<Range<usize>>,
    spans: Vec<Range<usize>>,
}

impl<'a> PrefixCounter<'a> {
    fn new(path: &'a KeyPath) -> Self {
        let fields = path.row_key.columns().count();
        Self {
            path,
            distinct: vec![0; fields + 1],
            last: String::new(),
            last_spans: Vec::new(),
            spans: Vec::new(),
        }
    }

    fn add(&mut self, key: &str) {
        if self.path.others.iter().any(|p| key.starts_with(p.as_str()))
            || self.path.row_key.split(key, &mut self.spans).is_err()
        {
            return;
        }
        let first_new = (0..self.spans.len())
            .find(|&i| {
                let end = self.spans[i].end;
                self.last_spans
                    .get(i)
                    .is_none_or(|l| self.last.get(..l.end) != key.get(..end))
            })
            .unwrap_or(self.spans.len());
        self.distinct[0] += 1;
        for n in self.distinct.iter_mut().skip(1 + first_new) {
            *n += 1;
        }
        self.last.clear();
        self.last.push_str(key);
        std::mem::swap(&mut self.last_spans, &mut self.spans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::stats::PRIMARY_PATH;
    use crate::storage::{Entity, MemoryStore, WriteOp};

    fn path(name: &str, template: &str) -> KeyPath {
        KeyPath {
            name: name.to_owned(),
            row_key: template.parse().expect("a template"),
            others: Vec::new(),
        }
    }

    #[tokio::test]
    async fn counts_the_distinct_leading_fields_of_each_key_path_per_partition()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        let table = TableName::new("Races")?;
        store.create_table(&table).await?;
        // Two events; in the first, three runners of two ages (one age's
        // index rows share a prefix with the next age's: "AGE:05" and
        // "AGE:055" are different values), in the second one runner.
        let rows = [
            ("Boston", "r:1__Ann"),
            ("Boston", "r:1__Bob"),
            ("Boston", "r:2__Cy"),
            ("Boston", "AGE:05__1"),
            ("Boston", "AGE:055__1"),
            ("Boston", "AGE:055__2"),
            ("Berlin", "r:7__Di"),
            ("Berlin", "AGE:30__7"),
        ];
        for (pk, rk) in rows {
            let e = Entity::new(PartitionKey::new(pk)?, RowKey::new(rk)?);
            store.execute(&table, WriteOp::Insert(e)).await?;
        }
        let paths = [
            path(PRIMARY_PATH, "r:{id}__{name}"),
            path("age", "AGE:{age}__{id}"),
        ];
        let how = Analysis {
            every: 1_000,
            width: 2,
            paths: &paths,
            sizes: true,
            previous: None,
            sample: 0,
        };
        let stats = analyze(&store, &table, &how).await?;
        let boston = &stats.partitions[1].prefixes;
        assert_eq!(stats.partitions[1].partition.as_str(), "Boston");
        // Entities, then distinct first field, first two fields.
        assert_eq!(boston.0[PRIMARY_PATH], vec![3, 2, 3]);
        assert_eq!(boston.0["age"], vec![3, 2, 3]);
        assert_eq!(stats.partitions[0].prefixes.0["age"], vec![1, 1, 1]);
        // Over the table: a value per partition it appears in.
        assert_eq!(stats.distinct(PRIMARY_PATH, 0), Some(2));
        assert_eq!(stats.distinct(PRIMARY_PATH, 1), Some(3));
        assert_eq!(stats.path_entities("age"), Some(4));
        Ok(())
    }

    #[test]
    fn split_cuts_ranges_of_about_equal_weight_open_at_both_ends() {
        let key = |s: &str| PartitionKey::new(s).expect("a key");
        let weights: Vec<(PartitionKey, u64)> =
            [("a", 5), ("b", 1), ("c", 4), ("d", 1), ("e", 1), ("f", 4)]
                .iter()
                .map(|(k, w)| (key(k), *w))
                .collect();
        let ranges = split(&weights, 3);
        // Shares of 6 (16 over 3): a range is cut where it reaches one:
        // a and b (6), c to e (6), f and on (4).
        assert_eq!(ranges.len(), 3);
        assert_eq!(ranges[0].start, Bound::Unbounded);
        assert_eq!(ranges[0].end, Bound::Excluded(key("c")));
        assert_eq!(ranges[1].start, Bound::Included(key("c")));
        assert_eq!(ranges[1].end, Bound::Excluded(key("f")));
        assert_eq!(ranges[2].end, Bound::Unbounded);
        // Every partition, and any made since, is in exactly one range.
        for k in ["a", "b", "c", "d", "e", "f", "g", "bb", "0"] {
            let k = key(k);
            assert_eq!(ranges.iter().filter(|r| r.contains(&k)).count(), 1, "{k:?}");
        }
        // One range where one is asked for, or nothing weighs.
        assert_eq!(split(&weights, 1), vec![KeyRange::all()]);
        assert_eq!(split(&[], 4), vec![KeyRange::all()]);
    }
}
