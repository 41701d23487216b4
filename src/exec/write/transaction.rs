//! `BEGIN ... COMMIT` as one entity group transaction.
//!
//! A session's [`Transaction`] buffers the writes of its statements while
//! a transaction block is open; [`TxStore`] is the store those statements
//! see (`StoreTable` hands it to their plans): writes go to the buffer,
//! reads see the buffer over the store. COMMIT sends the buffer as one
//! entity group transaction, so it lands whole or not at all. That is
//! all the store can make atomic, so a transaction's writes must fall in
//! one table and one partition, within 100 entities and 4 MiB: a write
//! past that fails at its statement (and the session then aborts the
//! transaction, as PostgreSQL does after any error).
//!
//! Each buffered entity remembers the version it had in the store when the
//! transaction first touched it; COMMIT writes If-Match that version (or
//! Insert where there was none), so a row another client changed in the
//! meantime fails the commit (40001) instead of being overwritten.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::storage::write::{Effect, MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS, apply, validate_batch};
use crate::storage::{
    ContinuationToken, IfMatch, KeyRange, Page, PartitionKey, PartitionPage, Query, Result, RowKey,
    StorageError, StoredEntity, TableName, TableStore, TransactionScope, WriteOp, WriteOutcome,
};

/// One entity the transaction wrote: as the store had it, and as the
/// transaction leaves it (`None`: absent).
#[derive(Debug, Clone)]
struct Touched {
    base: Option<StoredEntity>,
    now: Option<StoredEntity>,
    /// Every write to it was an upsert (InsertOrMerge, InsertOrReplace):
    /// where the store had none, COMMIT upserts too, so that a row another
    /// client inserted meanwhile is not a duplicate-key failure.
    upserts_only: bool,
}

impl Touched {
    /// The write COMMIT makes for it, if any.
    fn op(&self) -> Option<WriteOp> {
        match (&self.base, &self.now) {
            (None, None) => None,
            (None, Some(n)) if self.upserts_only => {
                Some(WriteOp::InsertOrReplace(n.entity.clone()))
            }
            (None, Some(n)) => Some(WriteOp::Insert(n.entity.clone())),
            (Some(b), Some(n)) => Some(WriteOp::Update(
                n.entity.clone(),
                IfMatch::ETag(b.etag.clone()),
            )),
            (Some(b), None) => Some(WriteOp::Delete {
                partition_key: b.partition_key().clone(),
                row_key: b.row_key().clone(),
                if_match: IfMatch::ETag(b.etag.clone()),
            }),
        }
    }
}

/// The buffer of one open transaction.
#[derive(Debug, Clone, Default)]
struct Buffer {
    /// The table and partition of its first write.
    scope: Option<(TableName, PartitionKey)>,
    touched: BTreeMap<RowKey, Touched>,
    /// The newest timestamp given to a buffered write (each write gets a
    /// later one, so that its ETag differs from the one before).
    clock: Option<DateTime<Utc>>,
}

impl Buffer {
    fn ops(&self) -> Vec<WriteOp> {
        self.touched.values().filter_map(Touched::op).collect()
    }

    /// The buffered version of an entity, if the transaction touched it.
    fn entity(&self, table: &TableName, pk: &PartitionKey, rk: &RowKey) -> Option<&Touched> {
        match &self.scope {
            Some((t, p)) if t == table && p == pk => self.touched.get(rk),
            _ => None,
        }
    }

    /// Lays the buffer over a page of the store's answer to `query`: over
    /// the keys the page covers, from where it starts (`continuation`) to
    /// where its own continuation resumes.
    fn overlay(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        page: &mut Page,
    ) -> Result<()> {
        let Some((t, pk)) = &self.scope else {
            return Ok(());
        };
        if t != table || !query.partitions.contains(pk) {
            return Ok(());
        }
        let position =
            |c: &ContinuationToken| (c.next_partition_key.clone(), c.next_row_key.clone());
        let start = continuation.map(position);
        let end = page.continuation.as_ref().map(position);
        let covers = |key: (&PartitionKey, &RowKey)| {
            start.as_ref().is_none_or(|(p, r)| key >= (p, r))
                && end.as_ref().is_none_or(|(p, r)| key < (p, r))
        };
        page.entities
            .retain(|e| !(e.partition_key() == pk && self.touched.contains_key(e.row_key())));
        for (rk, touched) in &self.touched {
            let Some(now) = &touched.now else { continue };
            if covers((pk, rk)) && query.rows.contains(rk) && query.passes(now) {
                let mut e = now.clone();
                query.project(&mut e.entity.properties);
                page.entities.push(e);
            }
        }
        page.entities.sort_by(|a, b| {
            (a.partition_key(), a.row_key()).cmp(&(b.partition_key(), b.row_key()))
        });
        let size = query.page_size()?;
        if page.entities.len() > size {
            let rest = page.entities.split_off(size);
            if let Some(next) = rest.first() {
                page.continuation = Some(ContinuationToken::at(
                    next.partition_key().clone(),
                    next.row_key().clone(),
                ));
            }
        }
        Ok(())
    }

    /// Lists the buffer's partition in a page of the store's listing where
    /// the transaction gives it its first entity.
    fn add_partition(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
        page: &mut PartitionPage,
    ) {
        if let Some((t, pk)) = &self.scope
            && t == table
            && range.contains(pk)
            && after.is_none_or(|a| pk > a)
            && page.after.as_ref().is_none_or(|last| pk <= last)
            && self.touched.values().any(|t| t.now.is_some())
            && !page.partitions.contains(pk)
        {
            let at = page.partitions.partition_point(|p| p < pk);
            page.partitions.insert(at, pk.clone());
        }
    }

    fn stamp(&mut self) -> DateTime<Utc> {
        let now = Utc::now();
        let at = match self.clock {
            Some(last) if now <= last => last + chrono::Duration::microseconds(1),
            _ => now,
        };
        self.clock = Some(at);
        at
    }
}

#[derive(Debug, Default)]
struct State {
    /// `Some` while a transaction block is open.
    open: Option<Buffer>,
    /// The buffer at each savepoint, oldest first.
    marks: Vec<(String, Buffer)>,
    /// A write of the block failed, perhaps after earlier writes of its
    /// statement were buffered: the block commits nothing until `ROLLBACK
    /// TO` returns to a mark.
    aborted: bool,
}

/// A session's transaction: none, or an open one with its buffer.
#[derive(Debug, Default)]
pub struct Transaction {
    state: Mutex<State>,
}

impl Transaction {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a transaction block is open.
    pub fn is_open(&self) -> bool {
        self.lock().open.is_some()
    }

    /// Whether a statement of the open block failed (a write, or any
    /// statement a session ran: [`Self::fail`]).
    pub fn is_aborted(&self) -> bool {
        let state = self.lock();
        state.open.is_some() && state.aborted
    }

    /// Whether a block is open, and whether a statement of it failed, in
    /// one look (the wire server asks after every message).
    pub fn open_and_failed(&self) -> (bool, bool) {
        let state = self.lock();
        (state.open.is_some(), state.open.is_some() && state.aborted)
    }

    /// Whether the open block holds a write COMMIT would make: catalog DDL
    /// runs in a block only before its first (the store cannot put a
    /// catalog change and a partition's rows in one atomic write).
    pub fn has_buffered_writes(&self) -> bool {
        self.lock()
            .open
            .as_ref()
            .is_some_and(|b| b.touched.values().any(|t| t.op().is_some()))
    }

    /// A statement of the open block failed: nothing but its end runs
    /// until `ROLLBACK` (or `ROLLBACK TO` a savepoint), and its `COMMIT`
    /// rolls back, as in PostgreSQL. Outside a block, nothing.
    pub fn fail(&self) {
        let mut state = self.lock();
        if state.open.is_some() {
            state.aborted = true;
        }
    }

    /// `BEGIN`: opens a block (a second `BEGIN` keeps the first's buffer,
    /// as PostgreSQL warns and goes on).
    pub fn begin(&self) {
        let mut state = self.lock();
        if state.open.is_none() {
            state.open = Some(Buffer::default());
            state.marks.clear();
            state.aborted = false;
        }
    }

    /// `ROLLBACK`: discards the buffer and closes the block.
    pub fn rollback(&self) {
        let mut state = self.lock();
        state.open = None;
        state.marks.clear();
        state.aborted = false;
    }

    /// `COMMIT`: applies the buffer to `store` as one entity group
    /// transaction and closes the block, whether it lands or not. Returns
    /// how many entities it wrote; an aborted block is rolled back instead
    /// (as PostgreSQL ends a failed transaction), which is
    /// `StorageError::Transaction(TransactionScope::Aborted)`.
    pub async fn commit(&self, store: &dyn TableStore) -> Result<usize> {
        let (buffer, aborted) = {
            let mut state = self.lock();
            state.marks.clear();
            (state.open.take(), std::mem::take(&mut state.aborted))
        };
        let Some(buffer) = buffer else {
            return Ok(0);
        };
        if aborted {
            return Err(StorageError::Transaction(TransactionScope::Aborted));
        }
        let ops = buffer.ops();
        match (&buffer.scope, ops.is_empty()) {
            (Some((table, _)), false) => {
                let n = ops.len();
                store.execute_batch(table, ops).await?;
                Ok(n)
            }
            _ => Ok(0),
        }
    }

    /// `SAVEPOINT name`: remembers the buffer as it is; `false` outside a
    /// transaction block.
    pub fn savepoint(&self, name: &str) -> bool {
        let mut state = self.lock();
        let Some(buffer) = state.open.clone() else {
            return false;
        };
        state.marks.push((name.to_owned(), buffer));
        true
    }

    /// `ROLLBACK TO name`: the buffer as it was at the newest savepoint of
    /// that name, which stays; `false` if there is none.
    pub fn rollback_to(&self, name: &str) -> bool {
        let mut state = self.lock();
        let Some(at) = state.marks.iter().rposition(|(n, _)| n == name) else {
            return false;
        };
        state.marks.truncate(at + 1);
        let buffer = state.marks.get(at).map(|(_, b)| b.clone());
        state.open = buffer;
        state.aborted = false;
        true
    }

    /// `RELEASE name`: forgets that savepoint and the ones after it; the
    /// buffer stays. `false` if there is none.
    pub fn release(&self, name: &str) -> bool {
        let mut state = self.lock();
        let Some(at) = state.marks.iter().rposition(|(n, _)| n == name) else {
            return false;
        };
        state.marks.truncate(at);
        true
    }

    /// The store a statement of this session sees: `store` itself outside
    /// a transaction block, the buffer over it inside one.
    pub fn store_for(self: &Arc<Self>, store: Arc<dyn TableStore>) -> Arc<dyn TableStore> {
        if self.is_open() {
            Arc::new(TxStore {
                inner: store,
                tx: self.clone(),
            })
        } else {
            store
        }
    }
}

/// A store seen through an open transaction.
#[derive(Debug)]
pub struct TxStore {
    inner: Arc<dyn TableStore>,
    tx: Arc<Transaction>,
}

impl TxStore {
    /// `f` of the buffer, under its lock (no copy of it); `None` once the
    /// transaction has ended (a plan that outlives it reads and writes the
    /// store).
    fn read<T>(&self, f: impl FnOnce(&Buffer) -> T) -> Option<T> {
        self.tx.lock().open.as_ref().map(f)
    }

    /// Applies validated `ops` to a copy of the buffer, reading each
    /// entity's stored version the first time the transaction touches it.
    async fn buffered(
        &self,
        table: &TableName,
        ops: &[WriteOp],
        mut buffer: Buffer,
    ) -> Result<(Buffer, Vec<WriteOutcome>)> {
        let Some(first) = ops.first() else {
            return Ok((buffer, Vec::new()));
        };
        let pk = first.keys().0.clone();
        match &buffer.scope {
            Some((t, _)) if t != table => {
                return Err(StorageError::Transaction(TransactionScope::SecondTable {
                    first: t.as_str().to_owned(),
                    second: table.as_str().to_owned(),
                }));
            }
            Some((_, p)) if *p != pk => {
                return Err(StorageError::Transaction(
                    TransactionScope::SecondPartition {
                        first: p.as_str().to_owned(),
                        second: pk.as_str().to_owned(),
                    },
                ));
            }
            Some(_) => {}
            None => buffer.scope = Some((table.clone(), pk.clone())),
        }
        let timestamp = buffer.stamp();
        let mut outcomes = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let rk = op.keys().1.clone();
            if !buffer.touched.contains_key(&rk) {
                let base = self.inner.get(table, &pk, &rk).await?;
                buffer.touched.insert(
                    rk.clone(),
                    Touched {
                        now: base.clone(),
                        base,
                        upserts_only: true,
                    },
                );
            }
            let entry = buffer
                .touched
                .get_mut(&rk)
                .ok_or_else(|| StorageError::Task("buffered entity vanished".into()))?;
            entry.upserts_only &=
                matches!(op, WriteOp::InsertOrMerge(_) | WriteOp::InsertOrReplace(_));
            let effect = apply(entry.now.as_ref(), op.clone(), timestamp).map_err(|e| {
                StorageError::Batch {
                    index,
                    source: Box::new(e),
                }
            })?;
            entry.now = match effect {
                Effect::Put(stored) => Some(stored),
                Effect::Delete => None,
            };
            outcomes.push(WriteOutcome {
                etag: entry.now.as_ref().map(|e| e.etag.clone()),
            });
        }
        let ops = buffer.ops();
        if ops.len() > MAX_BATCH_OPERATIONS {
            return Err(StorageError::Transaction(TransactionScope::Operations {
                count: ops.len(),
            }));
        }
        let bytes: usize = ops.iter().map(WriteOp::stored_size).sum();
        if bytes > MAX_BATCH_BYTES {
            return Err(StorageError::Transaction(TransactionScope::Bytes { bytes }));
        }
        Ok((buffer, outcomes))
    }
}

#[async_trait]
impl TableStore for TxStore {
    fn service_counters(&self) -> Option<crate::storage::ServiceCounters> {
        self.inner.service_counters()
    }

    fn retries_requests(&self) -> bool {
        self.inner.retries_requests()
    }

    async fn create_table(&self, table: &TableName) -> Result<()> {
        self.inner.create_table(table).await
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        self.inner.delete_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.inner.list_tables().await
    }

    async fn get(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        let buffered = self.read(|b| {
            b.entity(table, partition_key, row_key)
                .map(|t| t.now.clone())
        });
        match buffered.flatten() {
            Some(now) => Ok(now),
            None => self.inner.get(table, partition_key, row_key).await,
        }
    }

    /// The store's page with the buffer laid over the keys it covers: from
    /// where it starts to where its continuation resumes.
    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        let mut page = self.inner.query(table, query, continuation).await?;
        self.read(|b| b.overlay(table, query, continuation, &mut page))
            .transpose()?;
        Ok(page)
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        // Statements outside a block (or after it ended) write through.
        // A copy: the buffer changes only if the whole batch applies.
        let Some(buffer) = self.read(Buffer::clone) else {
            return self.inner.execute_batch(table, ops).await;
        };
        let done = match validate_batch(&mut ops) {
            Ok(()) => self.buffered(table, &ops, buffer).await,
            Err(e) => Err(e),
        };
        let mut state = self.tx.lock();
        match done {
            Ok((buffer, outcomes)) => {
                if state.open.is_some() {
                    state.open = Some(buffer);
                }
                Ok(outcomes)
            }
            Err(e) => {
                state.aborted = true;
                Err(e)
            }
        }
    }

    /// The store's partitions, with the transaction's own where it puts the
    /// first entity of a partition the store does not have yet.
    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        let mut page = self.inner.partitions(table, range, after).await?;
        self.read(|b| b.add_partition(table, range, after, &mut page));
        Ok(page)
    }
}
