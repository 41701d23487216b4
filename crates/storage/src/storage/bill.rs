//! Billable transactions: what a statement costs on Azure, where every
//! request is billed, counted by kind as the store is asked (a page of a
//! query, a point read, an entity group transaction, a single write).
//! A [`BilledStore`] counts the requests made through it into a [`Bill`];
//! the engine gives each scan and each write of a plan a store of its own,
//! so that EXPLAIN ANALYZE shows each one's bill and the statement's is
//! their sum. A store that keeps no accounts (the embedded one) is billed
//! all the same: the figures say what the statement would cost on Azure.
//!
//! A retry the store below makes is not seen here: the counts are the
//! requests the engine asked for, which is what a plan can change.

use std::fmt;
use std::ops::AddAssign;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::layer::StoreLayer;
use super::{
    ContinuationToken, KeyRange, Page, PageEnd, PartitionKey, PartitionPage, Query, Result, RowKey,
    RowSink, StoredEntity, TableName, TableStore, WriteOp, WriteOutcome,
};

/// Transactions by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transactions {
    /// Pages of queries, partition listings among them.
    pub query_pages: u64,
    /// Point reads: a GET of one entity, or a query of a run of keys of
    /// one partition (`TableStore::get_many_limit`).
    pub point_reads: u64,
    /// Entity group transactions (`$batch`), each one transaction.
    pub batches: u64,
    /// Writes of one entity sent on their own.
    pub writes: u64,
    /// Tables created, deleted or listed.
    pub other: u64,
}

impl Transactions {
    /// Every kind together.
    pub fn total(&self) -> u64 {
        self.query_pages + self.point_reads + self.batches + self.writes + self.other
    }

    /// The kinds as `(name, count)`, in a fixed order: the names are metric
    /// labels and column names.
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("query_pages", self.query_pages),
            ("point_reads", self.point_reads),
            ("batches", self.batches),
            ("writes", self.writes),
            ("other", self.other),
        ]
    }
}

impl AddAssign for Transactions {
    fn add_assign(&mut self, o: Self) {
        self.query_pages += o.query_pages;
        self.point_reads += o.point_reads;
        self.batches += o.batches;
        self.writes += o.writes;
        self.other += o.other;
    }
}

/// `7 (query_pages=2 point_reads=5)`: the total, then the kinds that are
/// not zero.
impl fmt::Display for Transactions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.total())?;
        let mut kinds = self.by_kind().into_iter().filter(|(_, n)| *n > 0);
        if let Some((name, n)) = kinds.next() {
            write!(f, " ({name}={n}")?;
            for (name, n) in kinds {
                write!(f, " {name}={n}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// Transactions counted as they are made, from any thread.
#[derive(Debug, Default)]
pub struct Bill {
    query_pages: AtomicU64,
    point_reads: AtomicU64,
    batches: AtomicU64,
    writes: AtomicU64,
    other: AtomicU64,
}

impl Bill {
    /// The counts so far.
    pub fn get(&self) -> Transactions {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Transactions {
            query_pages: n(&self.query_pages),
            point_reads: n(&self.point_reads),
            batches: n(&self.batches),
            writes: n(&self.writes),
            other: n(&self.other),
        }
    }

    /// Adds `t`.
    pub fn add(&self, t: Transactions) {
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.query_pages, t.query_pages);
        add(&self.point_reads, t.point_reads);
        add(&self.batches, t.batches);
        add(&self.writes, t.writes);
        add(&self.other, t.other);
    }

    fn one(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The requests a read of `keys` RowKeys of one partition takes from
/// `store`: one per run it reads together, or one per key.
pub fn point_read_requests(store: &dyn TableStore, keys: usize) -> u64 {
    keys.div_ceil(store.get_many_limit().max(1)) as u64
}

/// `inner`, its requests counted into a [`Bill`] (see the module doc).
#[derive(Debug)]
pub struct BilledStore {
    inner: Arc<dyn TableStore>,
    bill: Arc<Bill>,
}

impl BilledStore {
    /// `inner`, billed to `bill`.
    pub fn over(inner: Arc<dyn TableStore>, bill: Arc<Bill>) -> Arc<dyn TableStore> {
        Arc::new(Self { inner, bill })
    }
}

#[async_trait]
impl StoreLayer for BilledStore {
    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
    }

    async fn create_table(&self, table: &TableName) -> Result<()> {
        Bill::one(&self.bill.other);
        self.inner.create_table(table).await
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        Bill::one(&self.bill.other);
        self.inner.delete_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        Bill::one(&self.bill.other);
        self.inner.list_tables().await
    }

    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        Bill::one(&self.bill.point_reads);
        self.inner.get(table, pk, rk).await
    }

    async fn get_many(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        let requests = point_read_requests(self.inner.as_ref(), row_keys.len());
        self.bill.point_reads.fetch_add(requests, Ordering::Relaxed);
        self.inner.get_many(table, pk, row_keys).await
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        Bill::one(&self.bill.query_pages);
        self.inner.query(table, query, continuation).await
    }

    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<std::sync::Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        Bill::one(&self.bill.query_pages);
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
        Bill::one(&self.bill.query_pages);
        self.inner.partitions(table, range, after).await
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        Bill::one(&self.bill.batches);
        self.inner.execute_batch(table, ops).await
    }

    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        Bill::one(&self.bill.writes);
        self.inner.execute(table, op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;
    use crate::storage::entity::Entity;

    #[tokio::test]
    async fn each_request_is_billed_by_its_kind() -> Result<()> {
        let bill = Arc::new(Bill::default());
        let store = BilledStore::over(Arc::new(MemoryStore::new()), bill.clone());
        let t = TableName::new("Billed")?;
        store.create_table(&t).await?;
        let (pk, rk) = (PartitionKey::new("p")?, RowKey::new("r")?);
        let entity = Entity::new(pk.clone(), rk.clone());
        store.execute(&t, WriteOp::Insert(entity.clone())).await?;
        store
            .execute_batch(&t, vec![WriteOp::InsertOrReplace(entity)])
            .await?;
        store.get(&t, &pk, &rk).await?;
        // The memory store reads a key a request: three keys, three reads.
        let keys = [rk.clone(), RowKey::new("s")?, RowKey::new("t")?];
        store.get_many(&t, &pk, &keys).await?;
        store.query(&t, &Query::all(), None).await?;
        let billed = bill.get();
        assert_eq!(
            billed,
            Transactions {
                query_pages: 1,
                point_reads: 4,
                batches: 1,
                writes: 1,
                other: 1,
            }
        );
        assert_eq!(
            billed.to_string(),
            "8 (query_pages=1 point_reads=4 batches=1 writes=1 other=1)"
        );
        assert_eq!(Transactions::default().to_string(), "0");
        Ok(())
    }
}
