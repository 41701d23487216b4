//! Storage: the entity model of partitioned table storage and the `TableStore`
//! trait that speaks its semantics, with its backends (`memory`, `embedded`,
//! `azure`).
//!
//! - `entity`: entities (keys and typed properties), their limits, and the
//!   Timestamp and ETag a store gives every write.
//! - `value`: property values, the eight EDM types of the service.
//! - `key`: PartitionKey and RowKey, ordered as the service orders them (by
//!   UTF-16 code unit).
//! - `table_name`: table names, case kept, compared case-insensitively.
//! - `error`: `StorageError`, what Table Storage would answer, typed.
//! - `query`: queries (key ranges, filter, projection, top), pages of at most
//!   1,000 entities and their continuation tokens.
//! - `filter`: property filters (OData `$filter`) and their evaluation against
//!   an entity.
//! - `view`: entities lent rather than built (`EntityView`, `RowSink`), for
//!   readers that copy values straight into Arrow.
//! - `write`: writes and their semantics: the six operations, entity group
//!   transactions and their limits, the pure rules every backend applies.
//! - `clock`: the write clock, Timestamps that strictly increase.
//! - `memory`: the memory backend, a `BTreeMap` per table: the reference
//!   oracle.
//! - `embedded`: the embedded backend on redb, the default store: its file
//!   format, group commit, kept counts, `tablesql migrate`.
//! - `azure`: the Azure Table REST backend (feature `azure`): `config`
//!   (connection strings), `auth` (signing), `http` (requests, retries, error
//!   answers), `filter_text` (`$filter`), `batch` (multipart).
//! - `layer`: `StoreLayer`, a store that wraps another (a decorator or a test
//!   double): it writes only what it changes, and the rest forwards; `Derived`
//!   says whether the backend's own `get_many`, `query_into`, `partitions`,
//!   `count` and counts serve through it.
//! - `defaults`: the trait's default bodies, for a layer that runs them over
//!   itself.
//! - `metered`: requests counted by operation, for the metrics.
//! - `derived`: `DerivedCache`, a cache of what readers derive from a range of
//!   partitions (a scan's decoded pages), kept while no write lands in it.
//! - `location`: where a store lives (`--store`, `TABLESQL_STORE`).
//! - `odata`: entities as the service's JSON (`odata=minimalmetadata`).
//! - `retry`: the backoff formula, shared with the sequences' conflict retries.
//! - `retries`: a store's retries told to the statement that sent the request.

#[cfg(feature = "azure")]
pub mod azure;
pub mod bill;
mod clock;
pub mod defaults;
pub mod derived;
pub mod embedded;
pub mod entity;
mod error;
pub mod filter;
pub mod key;
pub mod layer;
pub mod location;
pub mod memory;
pub mod metered;
pub mod odata;
pub mod query;
pub mod retries;
pub mod retry;
pub mod table_name;
pub mod value;
pub mod view;
pub mod write;

use std::sync::Arc;

use async_trait::async_trait;

#[cfg(feature = "azure")]
pub use azure::{AzureConfig, AzureStore};
pub use clock::Clock;
pub use derived::DerivedCache;
pub use embedded::EmbeddedStore;
pub use entity::{ETag, Entity, IfMatch, Properties, StoredEntity};
pub use error::{InvalidInput, Result, StorageError, TransactionScope};
pub use filter::{CmpOp, Filter, Operand};
pub use key::{KeyKind, PartitionKey, RowKey};
pub use location::StoreLocation;
pub use memory::MemoryStore;
pub use query::{
    ContinuationToken, KeyRange, Page, PartitionCount, PartitionPage, Query, ServiceToken,
};
pub use table_name::TableName;
pub use value::{EdmType, EdmValue};
pub use view::{EntityView, PageEnd, RowSink, ValueRef};
pub use write::{WriteOp, WriteOutcome};

/// A remote store's counts of its exchanges with the service (see
/// [`TableStore::service_counters`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceCounters {
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Retries made.
    pub retries: u64,
    /// Attempts the service refused as busy (503 ServerBusy, 429).
    pub busy: u64,
    /// Attempts that timed out (408, 504, 500 `OperationTimedOut`, or no
    /// whole answer in time).
    pub timeouts: u64,
    /// Time spent waiting before retries.
    pub waited: std::time::Duration,
}

impl ServiceCounters {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ServiceCounters) -> ServiceCounters {
        ServiceCounters {
            requests: self.requests.saturating_sub(earlier.requests),
            retries: self.retries.saturating_sub(earlier.retries),
            busy: self.busy.saturating_sub(earlier.busy),
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            waited: self.waited.saturating_sub(earlier.waited),
        }
    }
}

/// Most entities a store examines for one page before it answers with what it has
/// and a continuation token (the service answers after 5 seconds the same way).
pub const DEFAULT_SCAN_BUDGET: usize = 100_000;

/// A store of tables of entities with Table Storage semantics.
///
/// Every backend passes the one conformance suite (`tests/it/conformance`).
/// A store that retries a request within one call says so
/// ([`TableStore::retries_requests`]) and reports each retry with
/// [`retries::note`], so that its caller can count them. A store that wraps
/// another is a [`layer::StoreLayer`], which forwards what it does not change
/// (`retries_requests` among them, or the retries would go uncounted).
#[async_trait]
pub trait TableStore: Send + Sync + std::fmt::Debug {
    /// Creates a table; fails if one of that name (in any case) exists.
    async fn create_table(&self, table: &TableName) -> Result<()>;

    /// Deletes a table and every entity in it.
    async fn delete_table(&self, table: &TableName) -> Result<()>;

    /// The tables, with their names as created, in case-insensitive name order.
    async fn list_tables(&self) -> Result<Vec<TableName>>;

    /// One entity by its keys (a point query).
    async fn get(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>>;

    /// The entities of partition `partition_key` whose RowKeys are among
    /// `row_keys` (sorted and distinct), in RowKey order: several point
    /// queries answered together. A lookup join reads a batch of keys so
    /// (`exec::read::scan`). This default asks [`TableStore::get`] for each
    /// key; a store that reads several keys in one request overrides it and
    /// says how many in [`TableStore::get_many_limit`] (the Azure store:
    /// one `$filter` of RowKeys), and a layer forwards both ([`layer::Derived`]).
    async fn get_many(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        defaults::get_many(self, table, partition_key, row_keys).await
    }

    /// Most RowKeys one [`TableStore::get_many`] call reads in one request:
    /// 1 where it asks `get` for each (the default), so that callers keep
    /// point reads apart and run them side by side.
    fn get_many_limit(&self) -> usize {
        1
    }

    /// One page of a query, resuming at `continuation` if given.
    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page>;

    /// Runs an entity group transaction: all operations or none. On failure the
    /// error is `StorageError::Batch` naming the failing operation, or a plain
    /// `Invalid` for a fault of the batch as a whole.
    async fn execute_batch(
        &self,
        table: &TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>>;

    /// Runs one write.
    async fn execute(&self, table: &TableName, op: WriteOp) -> Result<WriteOutcome> {
        defaults::execute(self, table, op).await
    }

    /// One page of a query read into `sink` instead of returned: the same
    /// entities, order, continuation and `scanned` count as `query`. A store
    /// that reads entities in place lends them (the embedded store); this
    /// default runs `query` and lends each entity of its page, so a page
    /// retried by the store reaches the sink once. The sink is shared so that
    /// a store may fill it on another thread; the caller holds the other end.
    async fn query_into(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        sink: std::sync::Arc<std::sync::Mutex<dyn RowSink>>,
    ) -> Result<PageEnd> {
        defaults::query_into(self, table, query, continuation, sink).await
    }

    /// One page of the distinct PartitionKeys in `range`, starting after
    /// `after` when given. A partition whose entities were all deleted no
    /// longer exists and is not listed. Table Storage has no such listing, so
    /// this default skips from partition to partition: one keys-only query
    /// with `$top=1` per partition (`PartitionKey gt 'last'`), each page
    /// holding one PartitionKey. Stores that can seek list up to
    /// `MAX_PARTITION_PAGE` per page.
    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        defaults::partitions(self, table, range, after).await
    }

    /// Every entity a query matches, following continuation tokens to the end.
    async fn query_all(&self, table: &TableName, query: &Query) -> Result<Vec<StoredEntity>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self.query(table, query, token.as_ref()).await?;
            out.extend(page.entities);
            match page.continuation {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// What a remote service has answered this store since it opened:
    /// requests, retries, and the attempts refused as busy or timed out.
    /// `None` for a store in this process, which has no such answers.
    fn service_counters(&self) -> Option<ServiceCounters> {
        None
    }

    /// Whether a query's pages come in key order (PartitionKey, then RowKey),
    /// each page after the one before, and a continuation token names the
    /// key the next page starts at. Every store here keeps it, as Azure
    /// Storage does, except Cosmos DB's Table API, whose pages come in no
    /// key order and whose tokens are opaque: there the engine sorts what
    /// a plan needs sorted, lists partitions by reading their keys, and
    /// resumes only by the service's tokens. `get_many` answers in RowKey
    /// order on every store.
    fn key_ordered(&self) -> bool {
        true
    }

    /// Whether this store retries requests within a call (and reports
    /// each retry through [`retries::note`]): a remote store does; one in
    /// this process has nothing to retry, and its callers skip the count.
    fn retries_requests(&self) -> bool {
        false
    }

    /// How many entities the RowKeys `rows` of the partitions in
    /// `partitions` hold, where the store keeps counts that say so without
    /// reading them; `None` where it would have to read them (every
    /// backend but the embedded one, and there a RowKey range that is not
    /// all keys or all of one kind, `embedded::counts`). The planner asks
    /// it for a `count(*)` with no condition but the keys' (DataFusion
    /// then answers from the number); it is synchronous because planning
    /// is, so only a store that answers from its own file or memory
    /// overrides it, and a layer forwards it only where it adds no
    /// entities of its own (a transaction's overlay does: [`layer::Derived`]).
    fn counted(
        &self,
        table: &TableName,
        partitions: &KeyRange<PartitionKey>,
        rows: &KeyRange<RowKey>,
    ) -> Result<Option<u64>> {
        let _ = (table, partitions, rows);
        Ok(None)
    }

    /// Every partition of a table with its entities by RowKey kind, in key
    /// order, where the store keeps counts that say so without reading the
    /// entities; `None` where it would have to read them (every backend
    /// but the embedded one, and there a table of more partitions than
    /// `embedded::MAX_COUNTED_PARTITIONS`, whose statistics `ANALYZE`
    /// keeps better than a read of its counters at every plan). They are
    /// the planner's statistics for a table never analyzed: exact when
    /// read, with no guideposts, sizes or distinct values. Synchronous
    /// because planning is, like `counted`, and forwarded by the same
    /// wrappers.
    fn partition_counts(&self, table: &TableName) -> Result<Option<Arc<[PartitionCount]>>> {
        let _ = table;
        Ok(None)
    }

    /// The store's cache of what scans derive from its partitions, where
    /// it keeps one: a store that numbers its own writes can tell when a
    /// range was last written (`DerivedCache`), so a reader may keep what
    /// it decoded and use it again until then. Only the embedded store
    /// does: a remote store's writes come also from other processes, which
    /// this one never hears of. A wrapper forwards it where it adds no
    /// entities of its own (a transaction's overlay does).
    fn derived(&self) -> Option<&DerivedCache> {
        None
    }

    /// How many entities a table holds (a full scan that projects nothing).
    async fn count(&self, table: &TableName) -> Result<u64> {
        defaults::count(self, table).await
    }
}
