//! `ANALYZE`: reads a storage table once, partition by partition (several at
//! a time), and counts what `catalog::stats` keeps: entities, bytes and a
//! guidepost every `every` entities, the oldest and newest Timestamp, and
//! the distinct leading RowKey fields of each key path it is given.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use chrono::Utc;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::catalog::stats::{
    KeyPrefixes, MAX_GUIDEPOST_BYTES, MAX_GUIDEPOSTS, PartitionStats, TableStats,
};
use crate::keys::KeyTemplate;
use crate::storage::value::utf16_bytes;
use crate::storage::{
    ContinuationToken, KeyRange, PartitionKey, Query, Result, RowKey, TableName, TableStore,
};

/// A key path whose distinct RowKey prefixes `ANALYZE` counts: its name
/// in [`KeyPrefixes`] and its RowKey template.
#[derive(Debug, Clone)]
pub struct KeyPath {
    /// `catalog::stats::PRIMARY_PATH` or the index's name.
    pub name: String,
    /// The template its rows' RowKeys are written by.
    pub row_key: KeyTemplate,
}

/// The statistics of `table` now, reading `width` partitions at a time,
/// with the distinct prefixes of `paths`.
pub async fn analyze(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    every: u64,
    width: usize,
    paths: &[KeyPath],
) -> Result<TableStats> {
    let every = every.max(1);
    let taken = Utc::now();
    let mut keys = Vec::new();
    let mut after: Option<PartitionKey> = None;
    loop {
        let page = store
            .partitions(table, &KeyRange::all(), after.as_ref())
            .await?;
        keys.extend(page.partitions);
        match page.after {
            Some(a) => after = Some(a),
            None => break,
        }
    }
    let partitions = stream::iter(keys)
        .map(|pk| partition(store, table, pk, every, paths))
        .buffered(width.max(1))
        .try_filter(|p| futures::future::ready(p.entities > 0))
        .try_collect()
        .await?;
    Ok(TableStats {
        taken,
        guidepost_every: every,
        partitions,
    })
}

/// One partition's statistics: a guidepost at every `every`th entity, the
/// step doubled (every other guidepost dropped) whenever they pass the most
/// a partition keeps, in number or in bytes.
async fn partition(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    pk: PartitionKey,
    every: u64,
    paths: &[KeyPath],
) -> Result<PartitionStats> {
    let query = Query::partition(pk.clone());
    let mut stats = PartitionStats {
        partition: pk,
        entities: 0,
        bytes: 0,
        largest: 0,
        widest: 0,
        guideposts: Vec::new(),
        oldest: None,
        newest: None,
        prefixes: KeyPrefixes::default(),
    };
    let mut counters: Vec<PrefixCounter> = paths.iter().map(PrefixCounter::new).collect();
    let mut step = every;
    let mut token: Option<ContinuationToken> = None;
    loop {
        let page = store.query(table, &query, token.as_ref()).await?;
        for e in &page.entities {
            if stats.entities > 0 && stats.entities.is_multiple_of(step) {
                stats.guideposts.push(e.row_key().clone());
                while stats.guideposts.len() > MAX_GUIDEPOSTS
                    || guidepost_bytes(&stats.guideposts) > MAX_GUIDEPOST_BYTES
                {
                    step *= 2;
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
            for c in &mut counters {
                c.add(e.row_key().as_str());
            }
            let size = e.entity.stored_size() as u64;
            stats.bytes += size;
            stats.largest = stats.largest.max(size);
            stats.widest = stats.widest.max(e.entity.properties.len() as u64);
            let at = e.timestamp;
            stats.oldest = Some(stats.oldest.map_or(at, |o| o.min(at)));
            stats.newest = Some(stats.newest.map_or(at, |n| n.max(at)));
        }
        match page.continuation {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    stats.prefixes = KeyPrefixes(
        counters
            .into_iter()
            .map(|c| (c.path.name.clone(), c.distinct))
            .collect::<BTreeMap<_, _>>(),
    );
    Ok(stats)
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
        if self.path.row_key.split(key, &mut self.spans).is_err() {
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

/// The size of guideposts as the one string that stores them (UTF-16, a
/// newline between). Counted only when one is added: at most 400 keys.
fn guidepost_bytes(guideposts: &[RowKey]) -> usize {
    guideposts.iter().map(|k| utf16_bytes(k.as_str()) + 2).sum()
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
        let paths = [path(PRIMARY_PATH, "r:{id}__{name}"), path("age", "AGE:{age}__{id}")];
        let stats = analyze(&store, &table, 1_000, 2, &paths).await?;
        let boston = &stats.partitions[1].prefixes;
        assert_eq!(stats.partitions[1].partition.as_str(), "Boston");
        // Entities, then distinct first field, first two fields.
        assert_eq!(boston.0[PRIMARY_PATH], vec![3, 2, 3]);
        assert_eq!(boston.0["age"], vec![3, 2, 3]);
        assert_eq!(stats.partitions[0].prefixes.0["age"], vec![1, 1, 1]);
        // Over the table: a value per partition it appears in.
        assert_eq!(stats.distinct(PRIMARY_PATH, 0, |_| true), Some(2));
        assert_eq!(stats.distinct(PRIMARY_PATH, 1, |_| true), Some(3));
        assert_eq!(stats.path_entities("age", |_| true), Some(4));
        Ok(())
    }
}
