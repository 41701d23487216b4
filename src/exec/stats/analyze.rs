//! `ANALYZE`: reads a storage table once, partition by partition (several at
//! a time), and counts what `catalog::stats` keeps: entities, bytes and a
//! guidepost every `every` entities, and the oldest and newest Timestamp.

use std::sync::Arc;

use chrono::Utc;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::catalog::stats::{MAX_GUIDEPOST_BYTES, MAX_GUIDEPOSTS, PartitionStats, TableStats};
use crate::storage::value::utf16_bytes;
use crate::storage::{
    ContinuationToken, KeyRange, PartitionKey, Query, Result, RowKey, TableName, TableStore,
};

/// The statistics of `table` now, reading `width` partitions at a time.
pub async fn analyze(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    every: u64,
    width: usize,
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
        .map(|pk| partition(store, table, pk, every))
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
    };
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
    Ok(stats)
}

/// The size of guideposts as the one string that stores them (UTF-16, a
/// newline between). Counted only when one is added: at most 400 keys.
fn guidepost_bytes(guideposts: &[RowKey]) -> usize {
    guideposts.iter().map(|k| utf16_bytes(k.as_str()) + 2).sum()
}
