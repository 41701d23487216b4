//! A store that answers every request 10 ms late and counts them: a
//! stand-in for a remote service's round trip, over the embedded store
//! (redb in memory), which seeks to a query's first key as the service's
//! index does (the memory store walks from the table's first entity, so
//! its CPU grows with a partition's place and hides what the engine does;
//! BENCHMARKS.md). Reads of several keys of one partition take one request
//! of up to 12 keys, as the Azure store's `$filter` of RowKeys does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tablesql::storage::*;

/// The delay of every request.
pub const DELAY: Duration = Duration::from_millis(10);

/// RowKeys one `get_many` request reads (the Azure store's figure).
pub const KEYS_PER_REQUEST: usize = 12;

/// The embedded store behind a delay.
#[derive(Debug)]
pub struct Delayed {
    inner: Arc<dyn TableStore>,
    requests: AtomicU64,
}

impl Delayed {
    /// `inner` behind the delay.
    pub fn new(inner: Arc<dyn TableStore>) -> Self {
        Self {
            inner,
            requests: AtomicU64::new(0),
        }
    }

    /// Requests served so far.
    #[allow(dead_code)] // not every bench counts them
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    async fn wait(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(DELAY).await;
    }
}

// Every request waits, so whatever a store derives from its requests
// (query_into's page, execute's batch) runs over these.
#[async_trait]
impl layer::StoreLayer for Delayed {
    const DERIVED: layer::Derived = layer::Derived::Here;

    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
    }

    async fn create_table(&self, table: &TableName) -> Result<()> {
        self.wait().await;
        self.inner.create_table(table).await
    }
    async fn delete_table(&self, table: &TableName) -> Result<()> {
        self.wait().await;
        self.inner.delete_table(table).await
    }
    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.wait().await;
        self.inner.list_tables().await
    }
    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.wait().await;
        self.inner.get(table, pk, rk).await
    }
    async fn get_many(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rks: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        let mut found = Vec::with_capacity(rks.len());
        for chunk in rks.chunks(KEYS_PER_REQUEST) {
            self.wait().await;
            found.extend(self.inner.get_many(table, pk, chunk).await?);
        }
        Ok(found)
    }
    fn get_many_limit(&self) -> usize {
        KEYS_PER_REQUEST
    }
    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        token: Option<&ContinuationToken>,
    ) -> Result<Page> {
        self.wait().await;
        self.inner.query(table, query, token).await
    }
    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        self.wait().await;
        self.inner.partitions(table, range, after).await
    }
    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        self.wait().await;
        self.inner.execute_batch(table, ops).await
    }
}
