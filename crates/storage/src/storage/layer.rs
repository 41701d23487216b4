//! A store that wraps another and changes part of what it does: a count of
//! requests, the workload's observations, a transaction's overlay, a test's
//! injected fault. Written against `TableStore` directly, such a layer has
//! to forward all of its methods by hand, and one it forgets falls back to
//! the trait's default without a word: the Azure store's batched point
//! reads or the embedded store's counts silently lost behind it.
//!
//! So a layer implements [`StoreLayer`] instead: it names the store below
//! it and writes only the methods it changes; every other method forwards,
//! and `TableStore` comes from the one blanket implementation here. What a
//! layer must decide is what happens to the methods a backend may
//! implement its own way ([`Derived`]).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    ContinuationToken, DerivedCache, KeyRange, Page, PageEnd, PartitionCount, PartitionKey,
    PartitionPage, Query, Result, RowKey, RowSink, ServiceCounters, StoredEntity, TableName,
    TableStore, WriteOp, WriteOutcome, defaults,
};

/// Where a layer's specialized methods run: `get_many`, `execute`,
/// `query_into`, `partitions` and `count`, which `TableStore` derives from
/// its primitives (`get`, `execute_batch`, `query`) and a backend may
/// implement its own faster way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// Forwarded to the store below, with its capabilities (`get_many_limit`,
    /// `counted`, `partition_counts`, `derived`): for a layer that watches
    /// requests and leaves the answers alone, so a backend's specializations
    /// still serve.
    Below,
    /// Run over this layer's own primitives, as `TableStore`'s defaults do,
    /// and the store's counts and cache not claimed (they would leave out
    /// what the layer changes): for a layer that changes what the store
    /// holds or answers, so that every read and write passes through it.
    Here,
}

/// A [`TableStore`] over another one (see the module doc). Every method
/// forwards to [`StoreLayer::below`] unless the layer writes it, or
/// [`StoreLayer::DERIVED`] is [`Derived::Here`] for the specialized ones.
/// `query_all` is no method here: it always pages through the layer's
/// own `query`.
#[async_trait]
pub trait StoreLayer: Sized + Send + Sync + std::fmt::Debug {
    /// Where the specialized methods run; [`Derived::Below`] unless the
    /// layer changes what the store answers.
    const DERIVED: Derived = Derived::Below;

    /// The store this one wraps.
    fn below(&self) -> &dyn TableStore;

    /// [`TableStore::create_table`], forwarded.
    async fn create_table(&self, table: &TableName) -> Result<()> {
        self.below().create_table(table).await
    }

    /// [`TableStore::delete_table`], forwarded.
    async fn delete_table(&self, table: &TableName) -> Result<()> {
        self.below().delete_table(table).await
    }

    /// [`TableStore::list_tables`], forwarded.
    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.below().list_tables().await
    }

    /// [`TableStore::get`], forwarded.
    async fn get(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.below().get(table, partition_key, row_key).await
    }

    /// [`TableStore::get_many`]: the store's below, or this layer's ([`Derived`]).
    async fn get_many(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        match Self::DERIVED {
            Derived::Below => self.below().get_many(table, partition_key, row_keys).await,
            Derived::Here => defaults::get_many(self, table, partition_key, row_keys).await,
        }
    }

    /// [`TableStore::get_many_limit`]: the store's below, or this layer's ([`Derived`]).
    fn get_many_limit(&self) -> usize {
        match Self::DERIVED {
            Derived::Below => self.below().get_many_limit(),
            Derived::Here => 1,
        }
    }

    /// [`TableStore::query`], forwarded.
    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        self.below().query(table, query, continuation).await
    }

    /// [`TableStore::execute_batch`], forwarded.
    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        self.below().execute_batch(table, ops).await
    }

    /// [`TableStore::execute`]: the store's below, or this layer's ([`Derived`]).
    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        match Self::DERIVED {
            Derived::Below => self.below().execute(table, op).await,
            Derived::Here => defaults::execute(self, table, op).await,
        }
    }

    /// [`TableStore::query_into`]: the store's below, or this layer's ([`Derived`]).
    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        match Self::DERIVED {
            Derived::Below => {
                self.below()
                    .query_into(table, query, continuation, sink)
                    .await
            }
            Derived::Here => defaults::query_into(self, table, query, continuation, sink).await,
        }
    }

    /// [`TableStore::partitions`]: the store's below, or this layer's ([`Derived`]).
    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        match Self::DERIVED {
            Derived::Below => self.below().partitions(table, range, after).await,
            Derived::Here => defaults::partitions(self, table, range, after).await,
        }
    }

    /// [`TableStore::count`]: the store's below, or this layer's ([`Derived`]).
    async fn count(&self, table: &TableName) -> Result<u64> {
        match Self::DERIVED {
            Derived::Below => self.below().count(table).await,
            Derived::Here => defaults::count(self, table).await,
        }
    }

    /// [`TableStore::service_counters`], forwarded: the service's answers
    /// are the service's whatever a layer changes.
    fn service_counters(&self) -> Option<ServiceCounters> {
        self.below().service_counters()
    }

    /// [`TableStore::retries_requests`], forwarded.
    fn retries_requests(&self) -> bool {
        self.below().retries_requests()
    }

    /// [`TableStore::key_ordered`], forwarded: a layer keeps the order of
    /// what it passes on.
    fn key_ordered(&self) -> bool {
        self.below().key_ordered()
    }

    /// [`TableStore::counted`]: the store's below, or this layer's ([`Derived`]).
    fn counted(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        rows: &KeyRange<RowKey>,
    ) -> Result<Option<u64>> {
        match Self::DERIVED {
            Derived::Below => self.below().counted(table, partitions, rows),
            Derived::Here => Ok(None),
        }
    }

    /// [`TableStore::partition_counts`]: the store's below, or this layer's ([`Derived`]).
    fn partition_counts(&self, table: &TableName) -> Result<Option<Arc<[PartitionCount]>>> {
        match Self::DERIVED {
            Derived::Below => self.below().partition_counts(table),
            Derived::Here => Ok(None),
        }
    }

    /// [`TableStore::derived`]: the store's below, or this layer's ([`Derived`]).
    fn derived(&self) -> Option<&DerivedCache> {
        match Self::DERIVED {
            Derived::Below => self.below().derived(),
            Derived::Here => None,
        }
    }
}

// Every call is the layer's: what it writes, or else its forwarding default.
#[async_trait]
impl<L: StoreLayer> TableStore for L {
    async fn create_table(&self, table: &TableName) -> Result<()> {
        StoreLayer::create_table(self, table).await
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        StoreLayer::delete_table(self, table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        StoreLayer::list_tables(self).await
    }

    async fn get(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        StoreLayer::get(self, table, partition_key, row_key).await
    }

    async fn get_many(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        StoreLayer::get_many(self, table, partition_key, row_keys).await
    }

    fn get_many_limit(&self) -> usize {
        StoreLayer::get_many_limit(self)
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        StoreLayer::query(self, table, query, continuation).await
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        StoreLayer::execute_batch(self, table, ops).await
    }

    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        StoreLayer::execute(self, table, op).await
    }

    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: Arc<Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        StoreLayer::query_into(self, table, query, continuation, sink).await
    }

    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        StoreLayer::partitions(self, table, range, after).await
    }

    async fn count(&self, table: &TableName) -> Result<u64> {
        StoreLayer::count(self, table).await
    }

    fn service_counters(&self) -> Option<ServiceCounters> {
        StoreLayer::service_counters(self)
    }

    fn retries_requests(&self) -> bool {
        StoreLayer::retries_requests(self)
    }

    fn key_ordered(&self) -> bool {
        StoreLayer::key_ordered(self)
    }

    fn counted(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        rows: &KeyRange<RowKey>,
    ) -> Result<Option<u64>> {
        StoreLayer::counted(self, table, partitions, rows)
    }

    fn partition_counts(&self, table: &TableName) -> Result<Option<Arc<[PartitionCount]>>> {
        StoreLayer::partition_counts(self, table)
    }

    fn derived(&self) -> Option<&DerivedCache> {
        StoreLayer::derived(self)
    }
}
