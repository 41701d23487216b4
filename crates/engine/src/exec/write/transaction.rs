//! `BEGIN ... COMMIT`: a session's writes buffered until COMMIT.
//!
//! A session's [`Transaction`] buffers the writes of its statements while
//! a transaction block is open; [`TxStore`] is the store those statements
//! see (`StoreTable` hands it to their plans): writes go to the buffer,
//! reads see the buffer over the store. COMMIT of a block whose writes fall
//! in one table and one partition, within 100 entities and 4 MiB, sends
//! them as one entity group transaction, so it lands whole or not at all.
//! A wider block commits through a durable record of its writes
//! (`commit.rs`): whole, or put back, or finished by the next engine if
//! the process stops midway; not isolated from readers while it runs.
//!
//! Each buffered entity remembers the version it had in the store when the
//! transaction first touched it; COMMIT writes If-Match that version (or
//! Insert where there was none), so a row another client changed in the
//! meantime fails the commit (40001) instead of being overwritten.
//!
//! A block may write many rows (pandas writes 10,000 in one): each batch
//! of a statement's writes changes the buffer in place, keeping what it
//! replaced, and puts that back if it fails, so a write never copies the
//! whole buffer (a SAVEPOINT does: it is a copy).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::commit::{self, Change};
use super::locks::{Locking, Owner, RowLocks, Taken};
use super::reads::{Isolation, ReadSet};
use crate::storage::layer::{Derived, StoreLayer};
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

    /// Whether COMMIT writes it (`op` without building the write).
    fn writes(&self) -> bool {
        !(self.base.is_none() && self.now.is_none())
    }
}

/// Entities one block may write: its buffer is held in memory until COMMIT,
/// and its record written before it (`commit.rs`). A load larger than
/// this goes through autocommit or COPY, partition by partition.
pub const MAX_BLOCK_WRITES: usize = 100_000;

/// The entities one table's writes touched, by partition and RowKey.
type Partitions = BTreeMap<PartitionKey, BTreeMap<RowKey, Touched>>;

/// The buffer of one open transaction.
#[derive(Debug, Clone, Default)]
struct Buffer {
    tables: HashMap<TableName, Partitions>,
    /// How many writes COMMIT would make, kept as entities change.
    writes: usize,
    /// The newest timestamp given to a buffered write (each write gets a
    /// later one, so that its ETag differs from the one before).
    clock: Option<DateTime<Utc>>,
}

/// What a statement's writes replaced in the buffer, to put back if it
/// fails: each entity's former state (`None`: it was not touched).
struct Journal {
    table: TableName,
    partition: PartitionKey,
    replaced: Vec<(RowKey, Option<Touched>)>,
    writes: usize,
}

impl Buffer {
    /// The buffered version of an entity, if the transaction touched it.
    fn entity(&self, table: &TableName, pk: &PartitionKey, rk: &RowKey) -> Option<&Touched> {
        self.tables.get(table)?.get(pk)?.get(rk)
    }

    /// Every write COMMIT makes, with the entity as the block read it, by
    /// table and partition.
    fn changes(&self) -> Vec<Change> {
        let mut tables: Vec<(&TableName, &Partitions)> = self.tables.iter().collect();
        tables.sort_by_key(|(t, _)| t.as_str().to_ascii_lowercase());
        let mut out = Vec::with_capacity(self.writes);
        for (table, partitions) in tables {
            for touched in partitions.values().flat_map(BTreeMap::values) {
                if let Some(op) = touched.op() {
                    out.push(Change {
                        table: table.clone(),
                        op,
                        before: touched.base.clone(),
                        first: false,
                    });
                }
            }
        }
        out
    }

    /// Applies validated `ops` (of one partition) to the buffer, `bases`
    /// holding the stored version of each entity it had not touched yet.
    /// On failure the buffer is as it was.
    fn take(
        &mut self,
        table: &TableName,
        pk: &PartitionKey,
        ops: Vec<WriteOp>,
        bases: Vec<(RowKey, Option<StoredEntity>)>,
    ) -> Result<Vec<WriteOutcome>> {
        let timestamp = self.stamp();
        let mut journal = Journal {
            table: table.clone(),
            partition: pk.clone(),
            replaced: Vec::with_capacity(ops.len()),
            writes: self.writes,
        };
        let mut done = self.apply_all(&mut journal, ops, bases, timestamp);
        if done.is_ok() && self.writes > MAX_BLOCK_WRITES {
            done = Err(StorageError::Transaction(TransactionScope::TooLarge {
                limit: MAX_BLOCK_WRITES,
            }));
        }
        if done.is_err() {
            self.undo(journal);
        }
        done
    }

    fn apply_all(
        &mut self,
        journal: &mut Journal,
        ops: Vec<WriteOp>,
        bases: Vec<(RowKey, Option<StoredEntity>)>,
        timestamp: DateTime<Utc>,
    ) -> Result<Vec<WriteOutcome>> {
        let partition = self
            .tables
            .entry(journal.table.clone())
            .or_default()
            .entry(journal.partition.clone())
            .or_default();
        let mut bases: HashMap<RowKey, Option<StoredEntity>> = bases.into_iter().collect();
        let mut outcomes = Vec::with_capacity(ops.len());
        for (index, op) in ops.into_iter().enumerate() {
            let rk = op.keys().1.clone();
            let entry = match partition.get_mut(&rk) {
                Some(entry) => {
                    journal.replaced.push((rk, Some(entry.clone())));
                    entry
                }
                None => {
                    let base = bases.remove(&rk).ok_or_else(|| {
                        StorageError::Task("an entity's stored version was not read".into())
                    })?;
                    journal.replaced.push((rk.clone(), None));
                    partition.entry(rk).or_insert(Touched {
                        now: base.clone(),
                        base,
                        upserts_only: true,
                    })
                }
            };
            let wrote = entry.writes();
            entry.upserts_only &=
                matches!(op, WriteOp::InsertOrMerge(_) | WriteOp::InsertOrReplace(_));
            let effect =
                apply(entry.now.as_ref(), op, timestamp).map_err(|e| StorageError::Batch {
                    index,
                    source: Box::new(e),
                })?;
            entry.now = match effect {
                Effect::Put(stored) => Some(stored),
                Effect::Delete => None,
            };
            match (wrote, entry.writes()) {
                (false, true) => self.writes += 1,
                (true, false) => self.writes -= 1,
                _ => {}
            }
            outcomes.push(WriteOutcome {
                etag: entry.now.as_ref().map(|e| e.etag.clone()),
            });
        }
        Ok(outcomes)
    }

    /// Puts back what a failed statement replaced, newest first.
    fn undo(&mut self, journal: Journal) {
        self.writes = journal.writes;
        let Some(partition) = self
            .tables
            .get_mut(&journal.table)
            .and_then(|t| t.get_mut(&journal.partition))
        else {
            return;
        };
        for (rk, was) in journal.replaced.into_iter().rev() {
            match was {
                Some(t) => {
                    partition.insert(rk, t);
                }
                None => {
                    partition.remove(&rk);
                }
            }
        }
    }

    /// Lays the buffer over a page of the store's answer to `query`: over
    /// the keys the page covers, from where it starts (`continuation`) to
    /// where its own continuation resumes. On a store whose pages come in
    /// no key order (`ordered` false: `TableStore::key_ordered`) a page
    /// covers no range of keys: see `overlay_unordered`.
    fn overlay(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
        ordered: bool,
        page: &mut Page,
    ) -> Result<()> {
        let Some(partitions) = self.tables.get(table) else {
            return Ok(());
        };
        if !ordered {
            Self::overlay_unordered(partitions, query, page);
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
        let mut changed = false;
        for (pk, touched) in partitions {
            if !query.partitions.contains(pk) || touched.is_empty() {
                continue;
            }
            changed = true;
            page.entities
                .retain(|e| !(e.partition_key() == pk && touched.contains_key(e.row_key())));
            for (rk, t) in touched {
                let Some(now) = &t.now else { continue };
                if covers((pk, rk)) && query.rows.contains(rk) && query.passes(now) {
                    let mut e = now.clone();
                    query.project(&mut e.entity.properties);
                    page.entities.push(e);
                }
            }
        }
        if !changed {
            return Ok(());
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

    /// The overlay of a page of a store whose pages come in no key order
    /// and whose tokens are opaque: every page loses the entities the
    /// transaction touched (its version is the buffer's), and the last one
    /// (no continuation) carries every buffered entity the query matches.
    /// Nothing is sorted or split, and the store's token passes unchanged:
    /// only the service's token resumes such a store.
    fn overlay_unordered(partitions: &Partitions, query: &Query, page: &mut Page) {
        page.entities.retain(|e| {
            partitions
                .get(e.partition_key())
                .is_none_or(|touched| !touched.contains_key(e.row_key()))
        });
        if page.continuation.is_some() {
            return;
        }
        for (pk, touched) in partitions {
            if !query.partitions.contains(pk) {
                continue;
            }
            for (rk, t) in touched {
                let Some(now) = &t.now else { continue };
                if query.rows.contains(rk) && query.passes(now) {
                    let mut e = now.clone();
                    query.project(&mut e.entity.properties);
                    page.entities.push(e);
                }
            }
        }
    }

    /// Lists the buffer's partitions in a page of the store's listing where
    /// the transaction gives them their first entity.
    fn add_partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
        page: &mut PartitionPage,
    ) {
        let Some(partitions) = self.tables.get(table) else {
            return;
        };
        for (pk, touched) in partitions {
            if range.contains(pk)
                && after.is_none_or(|a| pk > a)
                && page.after.as_ref().is_none_or(|last| pk <= last)
                && touched.values().any(|t| t.now.is_some())
                && !page.partitions.contains(pk)
            {
                let at = page.partitions.partition_point(|p| p < pk);
                page.partitions.insert(at, pk.clone());
            }
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
    /// The open block's isolation level.
    isolation: Isolation,
    /// The rows the open block keeps to validate at COMMIT (`reads.rs`).
    /// Not marked by savepoints: a row read after one and rolled back to
    /// is still checked, which refuses more, never less.
    reads: ReadSet,
    /// The open block has run a statement over the store
    /// (`SET TRANSACTION` must come before).
    used: bool,
    /// The locking clauses of the statements running now, by their guard's
    /// number (`FOR UPDATE` ...).
    locking: Vec<(u64, Locking)>,
    /// The buffer at each savepoint, oldest first.
    marks: Vec<(String, Buffer)>,
    /// A write of the block failed, perhaps after earlier writes of its
    /// statement were buffered: the block commits nothing until `ROLLBACK
    /// TO` returns to a mark.
    aborted: bool,
}

/// A session's transaction: none, or an open one with its buffer.
#[derive(Debug)]
pub struct Transaction {
    state: Mutex<State>,
    /// This session's name in `locks`.
    owner: Owner,
    /// The row locks of the engine's sessions (`locks.rs`).
    locks: Arc<RowLocks>,
}

/// Numbers each transaction (and each locking statement) apart.
static NEXT: AtomicU64 = AtomicU64::new(1);

impl Default for Transaction {
    /// A transaction whose row locks are its own (an engine's sessions
    /// share theirs: [`Transaction::new`]).
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl Drop for Transaction {
    /// A session that goes away lets go of its rows.
    fn drop(&mut self) {
        self.locks.release(self.owner);
    }
}

/// What a read through an open block does with the rows it finds.
#[derive(Debug, Clone, Copy)]
struct ReadRule {
    /// The lock a running statement takes on them.
    lock: Option<Locking>,
    /// Kept for COMMIT (`reads.rs`): inside a block, read with a lock or
    /// under REPEATABLE READ or SERIALIZABLE.
    keep: bool,
    /// Written back at COMMIT: read `FOR UPDATE`, or under SERIALIZABLE.
    touch: bool,
    /// A row read absent is kept too (a key the block found free).
    keep_absent: bool,
    /// A range read is refused (SERIALIZABLE).
    points_only: bool,
}

/// Lets go of a transaction's rows when dropped.
struct Release<'a>(&'a Transaction);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.locks.release(self.0.owner);
    }
}

/// While alive, the reads of a statement lock the rows they return
/// ([`Transaction::locking`]).
#[derive(Debug)]
pub struct LockingGuard {
    tx: Arc<Transaction>,
    id: u64,
}

impl Drop for LockingGuard {
    /// Outside a block a statement's locks last as long as it does.
    fn drop(&mut self) {
        let outside = {
            let mut state = self.tx.lock();
            state.locking.retain(|(id, _)| *id != self.id);
            state.open.is_none() && state.locking.is_empty()
        };
        if outside {
            self.tx.locks.release(self.tx.owner);
        }
    }
}

impl Transaction {
    /// A session's transaction over the engine's row locks.
    pub fn new(locks: Arc<RowLocks>) -> Self {
        Self {
            state: Mutex::default(),
            owner: NEXT.fetch_add(1, Ordering::Relaxed),
            locks,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reads of the statement about to run lock their rows as
    /// `locking` says, until the guard goes (and inside a block, until the
    /// block ends).
    pub fn locking(self: &Arc<Self>, locking: Locking) -> LockingGuard {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        self.lock().locking.push((id, locking));
        LockingGuard {
            tx: self.clone(),
            id,
        }
    }

    /// The open block's isolation level; `None` outside a block.
    pub fn isolation(&self) -> Option<Isolation> {
        let state = self.lock();
        state.open.as_ref().map(|_| state.isolation)
    }

    /// `SET TRANSACTION ISOLATION LEVEL`: `false` once the block has run a
    /// statement over the store, as PostgreSQL refuses it after the first
    /// query (the caller says so). Outside a block, nothing.
    pub fn set_isolation(&self, isolation: Isolation) -> bool {
        let mut state = self.lock();
        if state.open.is_none() {
            return true;
        }
        if state.used && state.isolation != isolation {
            return false;
        }
        state.isolation = isolation;
        true
    }

    /// What a read does now (`None`: nothing but read).
    fn rule(&self) -> Option<ReadRule> {
        let state = self.lock();
        let lock = state
            .locking
            .iter()
            .map(|(_, l)| *l)
            .max_by_key(|l| l.strength);
        let open = state.open.is_some();
        let level = if open {
            state.isolation
        } else {
            Isolation::ReadCommitted
        };
        let keep = open && (lock.is_some() || level != Isolation::ReadCommitted);
        if lock.is_none() && !keep {
            return None;
        }
        Some(ReadRule {
            lock,
            keep,
            touch: open
                && (level == Isolation::Serializable
                    || lock.is_some_and(|l| l.strength == super::locks::Strength::Update)),
            keep_absent: keep && level != Isolation::ReadCommitted,
            points_only: level == Isolation::Serializable,
        })
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

    /// Whether the open block holds a write COMMIT would make: the DDL a
    /// block does not hold until COMMIT (`CREATE INDEX` of an older table,
    /// sequences) runs at once, so only before its first.
    pub fn has_buffered_writes(&self) -> bool {
        self.lock().open.as_ref().is_some_and(|b| b.writes > 0)
    }

    /// The storage tables the open block's buffer writes to.
    pub fn written_tables(&self) -> Vec<TableName> {
        self.lock().open.as_ref().map_or_else(Vec::new, |b| {
            b.tables
                .iter()
                .filter(|(_, parts)| {
                    parts
                        .values()
                        .flat_map(BTreeMap::values)
                        .any(Touched::writes)
                })
                .map(|(t, _)| t.clone())
                .collect()
        })
    }

    /// Whether the open block writes to more than one table.
    pub fn spans_tables(&self) -> bool {
        self.lock().open.as_ref().is_some_and(|b| {
            b.tables
                .values()
                .filter(|parts| {
                    parts
                        .values()
                        .flat_map(BTreeMap::values)
                        .any(Touched::writes)
                })
                .take(2)
                .count()
                > 1
        })
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
    pub fn begin(&self, isolation: Isolation) {
        let mut state = self.lock();
        if state.open.is_none() {
            state.open = Some(Buffer::default());
            state.marks.clear();
            state.aborted = false;
            state.isolation = isolation;
            state.reads = ReadSet::default();
            state.used = false;
        }
    }

    /// `ROLLBACK`: discards the buffer and closes the block.
    pub fn rollback(&self) {
        {
            let mut state = self.lock();
            state.open = None;
            state.marks.clear();
            state.aborted = false;
            state.reads = ReadSet::default();
        }
        self.locks.release(self.owner);
    }

    /// `COMMIT`: applies the buffer to `store` (one entity group
    /// transaction where it fits one, else `commit.rs`) and closes the
    /// block, whether it lands or not. Returns how many entities it wrote;
    /// an aborted block is rolled back instead (as PostgreSQL ends a failed
    /// transaction), which is
    /// `StorageError::Transaction(TransactionScope::Aborted)`.
    pub async fn commit(&self, store: &dyn TableStore, order: &commit::Order) -> Result<usize> {
        self.commit_with(store, order, Vec::new()).await
    }

    /// As [`Self::commit`], `extra` written with the buffer as part of it
    /// (a block's catalog changes, each conditional on the version the
    /// block found: `engine::block_ddl`).
    pub async fn commit_with(
        &self,
        store: &dyn TableStore,
        order: &commit::Order,
        extra: Vec<commit::Change>,
    ) -> Result<usize> {
        // Its rows are let go whatever the outcome, even if the COMMIT is
        // dropped midway: the block has ended.
        let _release = Release(self);
        self.commit_buffer(store, order, extra).await
    }

    async fn commit_buffer(
        &self,
        store: &dyn TableStore,
        order: &commit::Order,
        extra: Vec<commit::Change>,
    ) -> Result<usize> {
        let (buffer, aborted, reads) = {
            let mut state = self.lock();
            state.marks.clear();
            (
                state.open.take(),
                std::mem::take(&mut state.aborted),
                std::mem::take(&mut state.reads),
            )
        };
        let Some(buffer) = buffer else {
            // Writes of a block that is not open are no one's to make.
            if !extra.is_empty() {
                return Err(StorageError::Transaction(TransactionScope::Aborted));
            }
            return Ok(0);
        };
        if aborted {
            return Err(StorageError::Transaction(TransactionScope::Aborted));
        }
        let mut changes = buffer.changes();
        // An upsert of a key the block read as absent is an insert: a row
        // another client put there since is a conflict, not overwritten.
        for c in &mut changes {
            if let WriteOp::InsertOrReplace(e) = &c.op
                && reads.read_absent(&c.table, &e.partition_key, &e.row_key)
            {
                c.op = WriteOp::Insert(e.clone());
            }
        }
        if !reads.is_empty() {
            let written = |t: &TableName, p: &PartitionKey, r: &RowKey| {
                buffer.entity(t, p, r).is_some_and(Touched::writes)
            };
            let touches = reads.validate(store, written).await?;
            // A block that writes nothing is done: its reads were all
            // current at one instant, between its last read and its
            // first check.
            if !changes.is_empty() || !extra.is_empty() {
                changes.extend(touches);
            }
        }
        changes.extend(extra);
        let Some(first) = changes.first() else {
            return Ok(0);
        };
        let one_partition = changes
            .iter()
            .all(|c| c.table == first.table && c.op.keys().0 == first.op.keys().0);
        let bytes: usize = changes.iter().map(|c| c.op.stored_size()).sum();
        if one_partition && changes.len() <= MAX_BATCH_OPERATIONS && bytes <= MAX_BATCH_BYTES {
            let table = first.table.clone();
            let n = changes.len();
            let ops = changes.into_iter().map(|c| c.op).collect();
            store.execute_batch(&table, ops).await?;
            return Ok(n);
        }
        commit::commit(store, changes, order).await
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
    /// a transaction block, the buffer over it inside one (and the row
    /// locks over it while a locking statement runs).
    pub fn store_for(self: &Arc<Self>, store: Arc<dyn TableStore>) -> Arc<dyn TableStore> {
        let through = {
            let state = self.lock();
            state.open.is_some() || !state.locking.is_empty()
        };
        if through {
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

    /// The stored version of each entity of `ops` the transaction has not
    /// touched yet, read outside the buffer's lock.
    async fn bases(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        ops: &[WriteOp],
    ) -> Result<Vec<(RowKey, Option<StoredEntity>)>> {
        let missing: Vec<RowKey> = self
            .read(|b| {
                ops.iter()
                    .map(|op| op.keys().1)
                    .filter(|rk| b.entity(table, pk, rk).is_none())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let mut bases = Vec::with_capacity(missing.len());
        for rk in missing {
            let base = self.inner.get(table, pk, &rk).await?;
            // A row the block kept is written over the version it read.
            self.tx.lock().reads.check(table, pk, &rk, base.as_ref())?;
            bases.push((rk, base));
        }
        Ok(bases)
    }

    /// Takes the locks and keeps the versions `rule` asks for, of an
    /// entity a read found in the store (`query`: the query that found it,
    /// `None` for a point read). The entity the read answers with: `None`
    /// for one `SKIP LOCKED` leaves out, the row as it is now for one whose
    /// lock it waited for (gone, or no longer a match of `query`: `None`).
    async fn observe(
        &self,
        rule: ReadRule,
        table: &TableName,
        found: StoredEntity,
        query: Option<&Query>,
    ) -> Result<Option<StoredEntity>> {
        let mut entity = found;
        if let Some(locking) = rule.lock {
            let (pk, rk) = (entity.partition_key(), entity.row_key());
            match self
                .tx
                .locks
                .lock(self.tx.owner, table, pk, rk, locking)
                .await?
            {
                Taken::Now => {}
                Taken::Skipped => return Ok(None),
                Taken::AfterWait => {
                    let Some(mut fresh) = self.inner.get(table, pk, rk).await? else {
                        return Ok(None);
                    };
                    if let Some(query) = query {
                        if !query.passes(&fresh) {
                            return Ok(None);
                        }
                        query.project(&mut fresh.entity.properties);
                    }
                    entity = fresh;
                }
            }
        }
        if rule.keep {
            let (pk, rk) = (entity.partition_key(), entity.row_key());
            let mut state = self.tx.lock();
            if state
                .open
                .as_ref()
                .is_some_and(|b| b.entity(table, pk, rk).is_none())
            {
                state
                    .reads
                    .record(table, pk, rk, Some(&entity.etag), rule.touch)?;
            }
        }
        Ok(Some(entity))
    }

    /// The rule for a read now, the block marked as used.
    fn rule(&self) -> Option<ReadRule> {
        let rule = self.tx.rule();
        let mut state = self.tx.lock();
        if state.open.is_some() {
            state.used = true;
        }
        rule
    }
}

/// What SERIALIZABLE refuses: a read of more than one whole key.
fn range_read(query: &Query) -> Option<String> {
    if query.partitions.single().is_some() && query.rows.single().is_some() {
        return None;
    }
    Some(match query.partitions.single() {
        Some(pk) => format!("rows of partition {:?}", pk.as_str()),
        None => "rows of several partitions".to_owned(),
    })
}

// Every read and write passes the buffer, so what the store would answer
// its own way (a batch of keys, a page lent in place, a count) runs over
// this layer's reads and writes, and the store's counts are not the block's.
#[async_trait]
impl StoreLayer for TxStore {
    const DERIVED: Derived = Derived::Here;

    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
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
        if let Some(now) = buffered.flatten() {
            return Ok(now);
        }
        let rule = self.rule();
        let found = self.inner.get(table, partition_key, row_key).await?;
        let Some(rule) = rule else {
            return Ok(found);
        };
        match found {
            Some(entity) => self.observe(rule, table, entity, None).await,
            None => {
                if rule.keep_absent {
                    self.tx
                        .lock()
                        .reads
                        .record(table, partition_key, row_key, None, rule.touch)?;
                }
                Ok(None)
            }
        }
    }

    /// The store's page with the buffer laid over the keys it covers: from
    /// where it starts to where its continuation resumes. On a store whose
    /// pages come in no key order, the buffer's rows come on the last page
    /// and the store's token passes unchanged (`Buffer::overlay_unordered`).
    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        let rule = self.rule();
        if let Some(what) = rule
            .filter(|r| r.points_only)
            .and_then(|_| range_read(query))
        {
            return Err(StorageError::Transaction(
                TransactionScope::NotSerializable {
                    what: format!("{what} of {table}"),
                },
            ));
        }
        let mut page = self.inner.query(table, query, continuation).await?;
        if let Some(rule) = rule {
            let mut kept = Vec::with_capacity(page.entities.len());
            for entity in std::mem::take(&mut page.entities) {
                kept.extend(self.observe(rule, table, entity, Some(query)).await?);
            }
            page.entities = kept;
        }
        let ordered = self.inner.key_ordered();
        self.read(|b| b.overlay(table, query, continuation, ordered, &mut page))
            .transpose()?;
        Ok(page)
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        // Statements outside a block (or after it ended) write through.
        if self.read(|_| ()).is_none() {
            return self.inner.execute_batch(table, ops).await;
        }
        self.tx.lock().used = true;
        let read = match validate_batch(&mut ops) {
            Ok(()) => {
                let pk = ops
                    .first()
                    .map(|op| op.keys().0.clone())
                    .ok_or_else(|| StorageError::Task("an empty batch".into()))?;
                self.bases(table, &pk, &ops).await.map(|bases| (pk, bases))
            }
            Err(e) => Err(e),
        };
        let mut state = self.tx.lock();
        let done = match (read, state.open.as_mut()) {
            (Ok((pk, bases)), Some(buffer)) => buffer.take(table, &pk, ops, bases),
            (Ok(_), None) => Err(StorageError::Task(
                "the transaction block ended during its statement".into(),
            )),
            (Err(e), _) => Err(e),
        };
        if done.is_err() {
            state.aborted = true;
        }
        done
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
        self.read(|b| b.add_partitions(table, range, after, &mut page));
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::*;
    use crate::storage::memory::MemoryStore;
    use crate::storage::{EdmValue, Entity, ServiceToken};

    /// A store whose pages come in no key order, as Cosmos DB's Table API
    /// answers: each page of the store below reversed, its token carrying a
    /// service token, and `key_ordered` false.
    #[derive(Debug)]
    struct Unordered {
        inner: Arc<dyn TableStore>,
    }

    #[async_trait]
    impl StoreLayer for Unordered {
        const DERIVED: Derived = Derived::Here;

        fn below(&self) -> &dyn TableStore {
            self.inner.as_ref()
        }

        fn key_ordered(&self) -> bool {
            false
        }

        async fn query(
            &self,
            table: &TableName,
            query: &Query,
            continuation: Option<&ContinuationToken>,
        ) -> Result<Page> {
            let mut page = self.inner.query(table, query, continuation).await?;
            page.entities.reverse();
            if let Some(token) = page.continuation.as_mut() {
                token.service = Some(ServiceToken {
                    next_partition_key: "opaque".to_owned(),
                    next_row_key: None,
                });
            }
            Ok(page)
        }
    }

    fn row(rk: &str, n: i32) -> Entity {
        let mut e = Entity::new(
            PartitionKey::new("p").expect("a key"),
            RowKey::new(rk).expect("a key"),
        );
        e.properties.insert("n".into(), EdmValue::Int32(n));
        e
    }

    fn n_of(e: &StoredEntity) -> Option<i32> {
        match e.entity.properties.get("n") {
            Some(EdmValue::Int32(n)) => Some(*n),
            _ => None,
        }
    }

    /// Every page of `query` through `seen`: each page's keys and values,
    /// its token checked against the one the store below gives there.
    async fn pages(
        seen: &dyn TableStore,
        below: &dyn TableStore,
        table: &TableName,
        query: &Query,
    ) -> Vec<(Vec<(String, Option<i32>)>, bool)> {
        let mut out = Vec::new();
        let mut token: Option<ContinuationToken> = None;
        loop {
            let page = seen
                .query(table, query, token.as_ref())
                .await
                .expect("a page");
            let stored = below
                .query(table, query, token.as_ref())
                .await
                .expect("the store's page");
            assert_eq!(
                page.continuation, stored.continuation,
                "the store's token passes unchanged"
            );
            let rows: Vec<(String, Option<i32>)> = page
                .entities
                .iter()
                .map(|e| (e.row_key().as_str().to_owned(), n_of(e)))
                .collect();
            out.push((rows, page.continuation.is_none()));
            match page.continuation {
                Some(t) => token = Some(t),
                None => return out,
            }
        }
    }

    #[tokio::test]
    async fn a_block_over_an_unordered_store_adds_its_rows_on_the_last_page() {
        let t = TableName::new("Unordered").expect("a name");
        let memory: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        memory.create_table(&t).await.expect("created");
        let stored = (1..=6)
            .map(|i| WriteOp::InsertOrReplace(row(&format!("{i:02}"), i)))
            .collect();
        memory.execute_batch(&t, stored).await.expect("written");
        let below: Arc<dyn TableStore> = Arc::new(Unordered { inner: memory });

        let tx = Arc::new(Transaction::default());
        tx.begin(Isolation::default());
        let seen = tx.store_for(below.clone());
        for op in [
            WriteOp::InsertOrReplace(row("02", 20)),
            WriteOp::Delete {
                partition_key: PartitionKey::new("p").expect("a key"),
                row_key: RowKey::new("04").expect("a key"),
                if_match: IfMatch::Any,
            },
            WriteOp::Insert(row("00", 100)),
            WriteOp::Insert(row("09", 90)),
        ] {
            seen.execute_batch(&t, vec![op]).await.expect("buffered");
        }

        // Pages of two: the buffer's rows only on the last, nothing split.
        let query = Query::partition(PartitionKey::new("p").expect("a key")).top(2);
        let got = pages(seen.as_ref(), below.as_ref(), &t, &query).await;
        let mut all = Vec::new();
        for (rows, last) in got {
            if !last {
                assert!(rows.len() <= 2, "a page is not split: {rows:?}");
                assert!(
                    rows.iter()
                        .all(|(rk, _)| !["00", "02", "04", "09"].contains(&rk.as_str())),
                    "a touched key is not on a page before the last: {rows:?}"
                );
            }
            all.extend(rows);
        }
        all.sort();
        let want: Vec<(String, Option<i32>)> = [
            ("00", 100),
            ("01", 1),
            ("02", 20),
            ("03", 3),
            ("05", 5),
            ("06", 6),
            ("09", 90),
        ]
        .into_iter()
        .map(|(rk, n)| (rk.to_owned(), Some(n)))
        .collect();
        assert_eq!(all, want);

        // A RowKey range keeps the buffer's rows outside it out.
        let mut ranged = Query::partition(PartitionKey::new("p").expect("a key")).top(2);
        ranged.rows = KeyRange {
            start: Bound::Included(RowKey::new("01").expect("a key")),
            end: Bound::Excluded(RowKey::new("05").expect("a key")),
        };
        let mut all: Vec<(String, Option<i32>)> = pages(seen.as_ref(), below.as_ref(), &t, &ranged)
            .await
            .into_iter()
            .flat_map(|(rows, _)| rows)
            .collect();
        all.sort();
        assert_eq!(
            all,
            vec![
                ("01".to_owned(), Some(1)),
                ("02".to_owned(), Some(20)),
                ("03".to_owned(), Some(3)),
            ]
        );
    }
}
