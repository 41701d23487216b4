//! A store that counts the requests made of it, by operation, into a
//! [`Meter`]: plain counters for an operator's metrics ([`StoreCounters`],
//! `serve --metrics-listen`), or a scan's or a write's bill
//! ([`super::bill::Bill`]). Every call is otherwise passed through
//! unchanged (a [`StoreLayer`] of [`super::layer::Derived::Below`]).
//! Retries and busy answers are the remote store's own counts
//! ([`TableStore::service_counters`]), forwarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::bill::{Meter, Operation, Transactions};
use super::layer::StoreLayer;
use super::{
    ContinuationToken, KeyRange, Page, PageEnd, PartitionKey, PartitionPage, Query, Result, RowKey,
    RowSink, StoredEntity, TableName, TableStore, WriteOp, WriteOutcome,
};
use crate::striped::Striped;

/// The operations' names, in the order of `Operation::ALL`: metric labels.
const OPERATIONS: [&str; 6] = ["get", "query_page", "write", "batch", "partitions", "table"];

/// Requests made of a store since it opened, by operation. Failed calls
/// count too: a request is a request. Counted by thread (`crate::striped`):
/// every connection's every read adds one.
#[derive(Debug, Default)]
pub struct StoreCounters {
    counts: Striped<[AtomicU64; OPERATIONS.len()]>,
}

impl StoreCounters {
    /// Each operation's name and its count.
    pub fn by_operation(&self) -> [(&'static str, u64); 6] {
        let mut counted = OPERATIONS.map(|name| (name, 0));
        for counts in self.counts.all() {
            for (c, (_, n)) in counts.iter().zip(counted.iter_mut()) {
                *n += c.load(Ordering::Relaxed);
            }
        }
        counted
    }

    /// The requests as billable transactions, by kind (`super::bill`).
    pub fn transactions(&self) -> Transactions {
        let mut t = Transactions::default();
        for (operation, (_, n)) in Operation::ALL.into_iter().zip(self.by_operation()) {
            t.add(operation, n);
        }
        t
    }
}

impl Meter for StoreCounters {
    fn add(&self, operation: Operation, n: u64) {
        if let Some(c) = self.counts.local().get(operation as usize) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// `inner`, its requests counted into a [`Meter`] (see the module doc).
#[derive(Debug)]
pub struct MeteredStore<M: Meter> {
    inner: Arc<dyn TableStore>,
    meter: Arc<M>,
}

impl MeteredStore<StoreCounters> {
    /// Counts the requests made of `inner`; the counters are the second half.
    pub fn wrap(inner: Arc<dyn TableStore>) -> (Arc<dyn TableStore>, Arc<StoreCounters>) {
        let counters = Arc::new(StoreCounters::default());
        (Self::over(inner, counters.clone()), counters)
    }
}

impl<M: Meter + 'static> MeteredStore<M> {
    /// `inner`, its requests counted into `meter`.
    pub fn over(inner: Arc<dyn TableStore>, meter: Arc<M>) -> Arc<dyn TableStore> {
        Arc::new(Self { inner, meter })
    }
}

#[async_trait]
impl<M: Meter + 'static> StoreLayer for MeteredStore<M> {
    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
    }

    async fn create_table(&self, table: &TableName) -> Result<()> {
        self.meter.add(Operation::Tables, 1);
        self.inner.create_table(table).await
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        self.meter.add(Operation::Tables, 1);
        self.inner.delete_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.meter.add(Operation::Tables, 1);
        self.inner.list_tables().await
    }

    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.meter.add(Operation::Get, 1);
        self.inner.get(table, pk, rk).await
    }

    async fn get_many(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        // One request of the service's, or one get per key where the store
        // reads them one by one.
        let requests = super::bill::point_read_requests(self.inner.as_ref(), row_keys.len());
        self.meter.add(Operation::Get, requests);
        self.inner.get_many(table, pk, row_keys).await
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        self.meter.add(Operation::QueryPage, 1);
        self.inner.query(table, query, continuation).await
    }

    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<std::sync::Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        self.meter.add(Operation::QueryPage, 1);
        self.inner
            .query_into(table, query, continuation, sink)
            .await
    }

    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        self.meter.add(Operation::Partitions, 1);
        self.inner.partitions(table, range, after).await
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        self.meter.add(Operation::Batch, 1);
        self.inner.execute_batch(table, ops).await
    }

    // A write of its own, not a batch of one: a store may send it
    // otherwise (Azure: a plain PUT, not a `$batch`).
    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        self.meter.add(Operation::Write, 1);
        self.inner.execute(table, op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;

    #[tokio::test]
    async fn counts_each_operation() -> Result<()> {
        let (store, counters) = MeteredStore::wrap(Arc::new(MemoryStore::new()));
        let t = TableName::new("Metered")?;
        store.create_table(&t).await?;
        let (pk, rk) = (PartitionKey::new("p")?, RowKey::new("r")?);
        store.get(&t, &pk, &rk).await?;
        store.get(&t, &pk, &rk).await?;
        store.query(&t, &Query::all(), None).await?;
        let counts = counters.by_operation();
        assert_eq!(
            counts,
            [
                ("get", 2),
                ("query_page", 1),
                ("write", 0),
                ("batch", 0),
                ("partitions", 0),
                ("table", 1)
            ]
        );
        let billed = Transactions {
            query_pages: 1,
            point_reads: 2,
            other: 1,
            ..Transactions::default()
        };
        assert_eq!(counters.transactions(), billed);
        Ok(())
    }
}
