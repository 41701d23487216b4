//! A store that tells the engine's `Workload` what each request did to
//! each partition, and otherwise passes every call through unchanged: a
//! [`StoreLayer`] of [`crate::storage::layer::Derived::Below`], so each method
//! the inner store implements its own way still serves.

use std::sync::Arc;

use async_trait::async_trait;

use super::workload::Workload;
use crate::storage::bill::Operation;
use crate::storage::bill::{Transactions, point_read_requests};
use crate::storage::layer::StoreLayer;
use crate::storage::{
    ContinuationToken, Page, PageEnd, PartitionKey, Query, Result, RowKey, RowSink, StorageError,
    StoredEntity, TableName, TableStore, WriteOp, WriteOutcome,
};

/// `inner`, observed (see the module doc).
#[derive(Debug)]
pub struct ObservedStore {
    inner: Arc<dyn TableStore>,
    workload: Arc<Workload>,
}

impl ObservedStore {
    /// Observes `inner` into `workload`.
    pub fn new(inner: Arc<dyn TableStore>, workload: Arc<Workload>) -> Self {
        Self { inner, workload }
    }

    /// A write of `n` entities to one partition, billed `bill`, that ended
    /// with `error`, if any: a conflict counts as one, other failures not
    /// at all.
    fn wrote(
        &self,
        table: &TableName,
        (pk, n): (&PartitionKey, u64),
        bill: Transactions,
        error: Option<&StorageError>,
    ) {
        let conflict = error.is_some_and(StorageError::is_conflict);
        if error.is_none() || conflict {
            self.workload
                .wrote(table.as_str(), (pk.as_str(), n), conflict, bill);
        }
    }

    /// A page of `query` that returned `counts` entities per partition (a
    /// page of one partition that returned none still counts a request).
    fn page_read<'a>(&self, table: &TableName, query: &'a Query, mut counts: Vec<(&'a str, u64)>) {
        if let (true, Some(pk)) = (counts.is_empty(), query.partitions.single()) {
            counts.push((pk.as_str(), 0));
        }
        let page = Transactions::of(Operation::QueryPage, 1);
        self.workload.read(table.as_str(), counts, page);
    }
}

/// Entities per PartitionKey of a page, each partition once, in key
/// order. A store whose pages are not in key order
/// (`TableStore::key_ordered`) interleaves partitions: one met again is
/// found (a binary search) and counted once. In key order an entity is of
/// the last partition or of a new one after it: no search.
fn per_partition(entities: &[StoredEntity]) -> Vec<(&str, u64)> {
    let mut counts: Vec<(&PartitionKey, u64)> = Vec::new();
    for e in entities {
        let pk = e.partition_key();
        let len = counts.len();
        let at = match counts.last() {
            None => Err(0),
            Some((last, _)) if *last == pk => Ok(len - 1),
            Some((last, _)) if *last < pk => Err(len),
            Some(_) => counts.binary_search_by(|(k, _)| (*k).cmp(pk)),
        };
        match at {
            Ok(i) => counts[i].1 += 1,
            Err(i) => counts.insert(i, (pk, 1)),
        }
    }
    counts.into_iter().map(|(pk, n)| (pk.as_str(), n)).collect()
}

#[async_trait]
impl StoreLayer for ObservedStore {
    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
    }

    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        let found = self.inner.get(table, pk, rk).await?;
        let n = u64::from(found.is_some());
        self.workload.read(
            table.as_str(),
            [(pk.as_str(), n)],
            Transactions::of(Operation::Get, 1),
        );
        Ok(found)
    }

    async fn get_many(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        let found = self.inner.get_many(table, pk, row_keys).await?;
        let requests = point_read_requests(self.inner.as_ref(), row_keys.len());
        self.workload.read(
            table.as_str(),
            [(pk.as_str(), found.len() as u64)],
            Transactions::of(Operation::Get, requests),
        );
        Ok(found)
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        let page = self.inner.query(table, query, continuation).await?;
        self.page_read(table, query, per_partition(&page.entities));
        Ok(page)
    }

    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<std::sync::Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        let end = self
            .inner
            .query_into(table, query, continuation, sink)
            .await?;
        let counts = end
            .partitions
            .iter()
            .map(|(pk, n)| (pk.as_str(), *n as u64));
        self.page_read(table, query, counts.collect());
        Ok(end)
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        // A batch is one partition's (an entity group transaction).
        let partition = ops.first().map(|op| op.keys().0.clone());
        let n = ops.len() as u64;
        let done = self.inner.execute_batch(table, ops).await;
        if let Some(pk) = partition {
            let batch = Transactions::of(Operation::Batch, 1);
            self.wrote(table, (&pk, n), batch, done.as_ref().err());
        }
        done
    }

    // A write of its own, not a batch of one: a store may send it
    // otherwise (Azure: a plain PUT, not a `$batch`).
    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        let partition = op.keys().0.clone();
        let done = self.inner.execute(table, op).await;
        let write = Transactions::of(Operation::Write, 1);
        self.wrote(table, (&partition, 1), write, done.as_ref().err());
        done
    }
}
