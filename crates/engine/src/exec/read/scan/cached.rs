//! A request's pages kept in the store's derived cache (`storage::derived`)
//! and served from it: a scan asked again over partitions nobody wrote to
//! since decodes nothing and reads no entity.
//!
//! Only a request that reads every row of its key ranges as stored is kept:
//! no filter for the store, no `top`, no base rows looked up behind index
//! rows. Its key is the scan's shape (layout with the table's definition,
//! projection, properties) and its key ranges, so a changed definition or
//! another projection reads afresh. Pages are gathered as they are sent and
//! kept only when every one reached the consumer, at most the cache's
//! `max_entry` bytes: a bigger read stops gathering and streams as before.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use tokio::sync::mpsc;

use super::RequestRun;
use crate::exec::read::decode::Skipped;
use crate::storage::{DerivedCache, Query};

/// A request's decoded pages, as the derived cache keeps them.
pub(super) struct KeptPages {
    batches: Vec<RecordBatch>,
    /// The partitions met, for the scan's count of them.
    partitions: Vec<String>,
    index_rows: usize,
    bytes: usize,
    /// The most bytes to gather; past it nothing is (and `None` is kept).
    limit: usize,
    over: bool,
}

impl KeptPages {
    fn new(limit: usize) -> Self {
        Self {
            batches: Vec::new(),
            partitions: Vec::new(),
            index_rows: 0,
            bytes: 0,
            limit,
            over: false,
        }
    }

    /// Gathers one page sent (its batch shares the sent one's buffers).
    pub(super) fn take(&mut self, batch: &RecordBatch, skipped: Skipped, partitions: Vec<String>) {
        if self.over {
            return;
        }
        self.bytes +=
            batch.get_array_memory_size() + partitions.iter().map(String::len).sum::<usize>();
        if self.bytes > self.limit {
            // Let the pages go with the consumer: this read is not kept.
            *self = Self {
                over: true,
                ..Self::new(self.limit)
            };
            return;
        }
        self.index_rows += skipped.index_rows;
        for pk in partitions {
            if self.partitions.last() != Some(&pk) {
                self.partitions.push(pk);
            }
        }
        if batch.num_rows() > 0 {
            self.batches.push(batch.clone());
        }
    }
}

impl RequestRun {
    /// The store's derived cache, where this request's pages may be kept.
    pub(super) fn cache(&self, query: &Query, at_most_one: bool) -> Option<&DerivedCache> {
        let cache = self.store.derived()?;
        let plain = self.shape.is_some()
            && self.lookup.is_none()
            && query.filter.is_none()
            && query.top.is_none()
            && !at_most_one;
        plain.then_some(cache)
    }

    /// A request's pages from the derived cache where nothing was written
    /// in its partitions since they were kept; else read, and kept when
    /// every page reached the consumer.
    pub(super) async fn scan_cached(
        &self,
        cache: &DerivedCache,
        query: &Query,
        tx: &mpsc::Sender<Result<RecordBatch>>,
    ) -> Result<()> {
        let Some(shape) = self.shape.clone() else {
            return self.scan(query, false, tx, None).await.map(|_| ());
        };
        let table = &self.layout.table;
        if let Some(kept) = cache.get(table, &query.partitions, &query.rows, &shape)
            && let Ok(pages) = kept.downcast::<KeptPages>()
        {
            self.counters.cached.add(1);
            self.counters.index_rows.add(pages.index_rows);
            self.count_partitions(pages.partitions.iter().map(String::as_str));
            for batch in &pages.batches {
                if self
                    .send(batch.clone(), Skipped::default(), tx)
                    .await
                    .is_none()
                {
                    break;
                }
            }
            return Ok(());
        }
        let version = cache.version(table, &query.partitions);
        let mut pages = KeptPages::new(cache.max_entry());
        if self.scan(query, false, tx, Some(&mut pages)).await? && !pages.over {
            let bytes = pages.bytes;
            let ranges = (&query.partitions, &query.rows);
            cache.put(table, ranges, shape, version, Arc::new(pages), bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;

    fn batch(n: i32) -> RecordBatch {
        let column = Arc::new(Int32Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("n", column as _)]).expect("batch")
    }

    #[test]
    fn pages_past_the_limit_are_let_go_and_never_kept() {
        let one = batch(100);
        let size = one.get_array_memory_size();
        let mut pages = KeptPages::new(size * 2 + 10);
        for _ in 0..2 {
            pages.take(&one, Skipped::default(), vec!["p".into()]);
        }
        assert!(!pages.over);
        assert_eq!((pages.batches.len(), pages.partitions.len()), (2, 1));
        pages.take(&one, Skipped::default(), vec!["p".into()]);
        assert!(pages.over);
        assert!(pages.batches.is_empty(), "what was gathered is let go");
        pages.take(&batch(1), Skipped::default(), vec!["q".into()]);
        assert!(pages.batches.is_empty() && pages.over);
    }
}
