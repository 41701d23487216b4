//! COMMIT of a transaction block whose writes span several partitions or
//! tables, or more than one entity group transaction holds.
//!
//! The store makes one partition's writes atomic (an entity group
//! transaction, at most 100 entities) and nothing wider. But an ORM commits
//! a new order and its lines together, a migration copies a table, pandas
//! writes 10,000 rows in one transaction: refused, none of them can use the
//! database. The storage guidance's answer for writes that cannot share one
//! transaction is to make them eventually consistent through a durable
//! record of the intent (`../shared/DOMAIN.md`, "Secondary lookups"). So:
//!
//! 1. The block's writes are recorded first, as JSON, in tablesql's own
//!    storage table (`TablesqlCatalog`) under a partition of their own
//!    (`commit:<time>-<random>`), and the record's header entity is written
//!    last. The header is the commit point: before it nothing of the block
//!    is written; after it the block is finished whole by this process or
//!    a recovery, unless a conflict puts it back (3).
//! 2. The writes go partition by partition, in entity group transactions,
//!    each conditional on the version the block read (`If-Match`, or an
//!    insert where there was none);
//!    a global index's entity puts before every other write and its deletes
//!    after them ([`Order`]), as outside a block. The base rows must follow
//!    the entities within `global::LAND_WITHIN`, else the block is put back
//!    (a unique value its entity holds could otherwise be taken over once
//!    the entity looks abandoned); a recovery that finds such an entity
//!    taken by another writer puts the block back instead of finishing it.
//! 3. If one meets a row another client changed since the block read it
//!    (or one the store refuses whatever the data), the header is marked
//!    undone and the partitions already written are put back (each
//!    conditional on the version this commit gave it), and COMMIT fails
//!    with 40001 (or the refusal's own error). Only if putting back meets
//!    yet another write does something stay, and the error names the
//!    partitions (40003). If the answer was lost (the batch may have
//!    landed), nothing is put back: COMMIT fails with 40003, and the
//!    record is left for recovery to finish.
//! 4. The header is marked done and the record deleted. A process that
//!    stops between 1 and 4 leaves it; the next engine to open the store,
//!    or to commit across partitions, finishes it ([`recover`]) once it is
//!    older than [`RECOVER_AFTER`]: a write is redone where the row still
//!    has the version the block read, left where it already holds the
//!    block's values, and skipped where a later write has changed it.
//!
//! A row's version cannot tell "never written" from "written, then
//! changed back": a row the block inserted that another client deleted
//! before the recovery looks untouched, and redoing its insert would bring
//! back what the other client deleted. So the record numbers the entity
//! group transactions, and the commit counts those that landed in the
//! header (`landed`, written If-Match the lease after each one but the
//! last, which renews the lease too). A recovery redoes nothing of a
//! counted transaction. The one that may have landed uncounted (the
//! process stopped between its answer and the count) did not if a row it
//! wrote still has the version the block read, and did if a row holds the
//! block's values under another: a transaction lands whole. A recovery
//! settles that once in the header before it redoes anything, and counts
//! each transaction it finishes, since its own writes go row by row and
//! show nothing. Only if every row of that one transaction was changed by
//! others between the stop and the recovery, one of them an insert since
//! deleted, is that row inserted again. The count costs a request per
//! transaction but the last.
//!
//! The record keeps each row as the block read it too, so a recovery that
//! meets a record marked undone (its process stopped while putting back)
//! puts back what is still the block's.
//!
//! A running commit renews its header (If-Match its last version) every
//! `RENEW_EVERY`, so its record never looks stale; a recovery claims a
//! stale header (If-Match the version it read) before touching the record.
//! Of a commit that stalled past [`RECOVER_AFTER`] and a recovery, or of
//! two recoveries, one write wins and the other stands back (the commit
//! with 40003: its block is the recovery's to finish).
//!
//! What this is not: isolated. A reader between 2 and 4 can see some of the
//! block's partitions written and others not, as it can see any
//! multi-partition statement halfway. A block that stays in one partition
//! and within one entity group transaction commits as that transaction,
//! atomic and isolated, with one request.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value, json};

use crate::storage::odata::{entity_body, entity_from_body};
use crate::storage::write::{MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS};
use crate::storage::{
    EdmValue, Entity, IfMatch, KeyRange, PartitionKey, Query, Result, RowKey, StorageError,
    StoredEntity, TableName, TableStore, TransactionScope, WriteOp,
};

/// The PartitionKey prefix of commit records in the catalog's table.
const RECORD_PREFIX: &str = "commit:";
/// The RowKey of a record's header (its commit point); its chunks follow.
const HEADER: &str = "";
/// The header property that marks a commit being put back.
const UNDONE: &str = "undone";
/// The header property that marks a commit whose writes all landed.
const DONE: &str = "done";
/// The header property counting the entity group transactions that landed.
const LANDED: &str = "landed";
/// The header property that marks a count a recovery settled: past it,
/// writes are redone row by row, and no longer land whole.
const SETTLED: &str = "settled";
/// The property of a chunk holding its part of the JSON.
const PART: &str = "part";
/// UTF-16 units of JSON per chunk: within a property's 64 KiB.
const CHUNK_UNITS: usize = 30_000;
/// How old a record must be before another process finishes it: far longer
/// than a commit takes, so that a live commit is never finished twice.
pub const RECOVER_AFTER: Duration = Duration::from_secs(120);

/// Which tables hold global index entities (`exec/write/global.rs`), whose
/// writes a commit orders around the rest: their puts first, their
/// deletes last, as a statement outside a block sends them. A commit that
/// stops midway then leaves no base row without its entity, and a unique
/// value is taken before the row that holds it lands.
#[derive(Debug, Clone, Default)]
pub struct Order {
    index_tables: std::collections::HashSet<String>,
    /// Written after everything else (`landing_last`).
    last: Option<String>,
}

impl Order {
    /// The order for a store whose global index entities live in `tables`.
    pub fn new<'a>(tables: impl IntoIterator<Item = &'a TableName>) -> Self {
        Self {
            index_tables: tables
                .into_iter()
                .map(|t| t.as_str().to_ascii_lowercase())
                .collect(),
            last: None,
        }
    }

    /// The same order, `table`'s writes after all the others: a block's
    /// catalog changes, after the rows of the tables they name.
    pub fn landing_last(mut self, table: &TableName) -> Self {
        self.last = Some(table.as_str().to_ascii_lowercase());
        self
    }

    /// 0: an index entity's put; 1: any other table's write; 2: an index
    /// entity's delete; 3: the table that lands last.
    fn phase(&self, c: &Change) -> u8 {
        if self
            .last
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case(c.table.as_str()))
        {
            3
        } else if !self
            .index_tables
            .contains(&c.table.as_str().to_ascii_lowercase())
        {
            1
        } else if matches!(c.op, WriteOp::Delete { .. }) {
            2
        } else {
            0
        }
    }
}

/// One write of a block: the operation COMMIT sends, and the entity as the
/// block read it (`None`: absent), to put back.
#[derive(Debug, Clone)]
pub struct Change {
    pub table: TableName,
    pub op: WriteOp,
    pub before: Option<StoredEntity>,
    /// A global index entity's put, written before every other write
    /// ([`Order`]); set by `commit` and kept in the record, so that a
    /// recovery can tell whether another writer took it meanwhile.
    pub first: bool,
}

/// Commits `changes` as the module doc says, in `order`; returns how many
/// it wrote.
pub async fn commit(
    store: &dyn TableStore,
    mut changes: Vec<Change>,
    order: &Order,
) -> Result<usize> {
    // The record keeps the order too, so that a recovery redoes in it (and
    // puts back in reverse).
    changes.sort_by_key(|c| order.phase(c));
    for c in &mut changes {
        c.first = order.phase(c) == 0;
    }
    // Best effort: a record left by a stopped process is finished first,
    // so its rows are not met half-written; its failure is not this one's.
    let _ = recover(store, RECOVER_AFTER).await;
    let log = commits_table()?;
    match store.create_table(&log).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    let id = record_id()?;
    let plan = batches(&changes, order);
    let mut number = vec![0; changes.len()];
    for (n, (_, members)) in plan.iter().enumerate() {
        for &i in members {
            number[i] = n;
        }
    }
    let mut lease = write_record(store, &log, &id, &changes, &number).await?;
    let mut written: Vec<(Change, Option<crate::storage::ETag>)> = Vec::new();
    // When the first index entity was put: the base rows must land soon
    // after, or another row could take a unique value it holds.
    let mut since: Option<std::time::Instant> = None;
    let count = plan.len();
    for (n, (table, members)) in plan.into_iter().enumerate() {
        let ops: Vec<&Change> = members.iter().map(|&i| &changes[i]).collect();
        if ops.first().is_some_and(|c| c.first) {
            since.get_or_insert_with(std::time::Instant::now);
        } else if since.is_some_and(|t| t.elapsed() > super::global::LAND_WITHIN) {
            let reason = format!(
                "the block's index entities took over {} s to write; its rows were not written",
                super::global::LAND_WITHIN.as_secs()
            );
            let left = abandon(store, &log, &id, &written, order, &reason).await;
            return Err(
                left.unwrap_or(StorageError::Transaction(TransactionScope::Undone {
                    reason,
                })),
            );
        }
        // A record a recovery has claimed is the recovery's to finish.
        if !lease.renewed(store, &log, &id).await {
            return Err(StorageError::Transaction(TransactionScope::Unknown {
                reason: "a recovery took over the block's record".into(),
            }));
        }
        let sent: Vec<WriteOp> = ops.iter().map(|c| c.op.clone()).collect();
        match store.execute_batch(&table, sent).await {
            Ok(outcomes) => {
                for (change, outcome) in ops.into_iter().zip(outcomes) {
                    written.push((change.clone(), outcome.etag));
                }
                // Counted, so that a recovery never redoes it (module
                // doc); the last is counted by the mark done.
                if n + 1 < count
                    && let Err(reason) = lease.landed(store, &log, &id, n + 1).await
                {
                    return Err(StorageError::Transaction(TransactionScope::Unknown {
                        reason,
                    }));
                }
            }
            Err(e) => {
                let failure = Failure::of(&e);
                let reason = e.to_string();
                if failure == Failure::Unknown {
                    // The batch may have landed: the record stays, unmarked,
                    // and recovery finishes the block.
                    return Err(StorageError::Transaction(TransactionScope::Unknown {
                        reason,
                    }));
                }
                let left = abandon(store, &log, &id, &written, order, &reason).await;
                return Err(match (left, failure) {
                    (Some(left), _) => left,
                    (None, Failure::Conflict) => {
                        StorageError::Transaction(TransactionScope::Undone { reason })
                    }
                    // A write the store refuses every time: its own error,
                    // with nothing of the block left.
                    (None, _) => e,
                });
            }
        }
    }
    // Every write holds: the record is marked done, so that a recovery
    // meeting it (if deleting it fails) redoes nothing.
    if mark(store, &log, &id, DONE).await.is_ok() {
        let _ = forget(store, &log, &id).await;
    }
    Ok(changes.len())
}

/// Gives a commit up: its record marked undone, what it wrote put back,
/// the record deleted. The error COMMIT answers, `reason` why it gave up,
/// should something of it stay; `None` when nothing does.
async fn abandon(
    store: &dyn TableStore,
    log: &TableName,
    id: &PartitionKey,
    written: &[(Change, Option<crate::storage::ETag>)],
    order: &Order,
    reason: &str,
) -> Option<StorageError> {
    // Unmarked, the record still says committed: a recovery would finish
    // it, and must not meet it half put back.
    if let Err(e) = mark(store, log, id, UNDONE).await {
        return Some(StorageError::Transaction(TransactionScope::Unknown {
            reason: format!(
                "{reason}; the block's record could not be marked to be put back, \
                 so a recovery finishes it: {e}"
            ),
        }));
    }
    let undone = put_back(store, written, order).await;
    let _ = forget(store, log, id).await;
    undone.err().map(|undo| {
        StorageError::Transaction(TransactionScope::PartlyCommitted {
            reason: reason.to_owned(),
            undo: undo.to_string(),
            partitions: partitions_of(written),
        })
    })
}

/// What a failed batch of a commit means for the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// A row changed since the block read it (or a key it takes exists):
    /// the block cannot land, and what it wrote is put back.
    Conflict,
    /// A write the store refuses whatever the data (a limit, a table gone):
    /// put back too, and reported as itself.
    Refused,
    /// The answer was lost or the store was unavailable: the batch may
    /// have landed, so only recovery can finish the block.
    Unknown,
}

impl Failure {
    fn of(e: &StorageError) -> Self {
        match e {
            StorageError::Batch { source, .. } => Self::of(source),
            StorageError::PreconditionFailed { .. }
            | StorageError::EntityAlreadyExists { .. }
            | StorageError::EntityNotFound { .. } => Self::Conflict,
            StorageError::Invalid(_)
            | StorageError::TableNotFound(_)
            | StorageError::TableBeingDeleted(_)
            | StorageError::Unauthorized { .. } => Self::Refused,
            _ => Self::Unknown,
        }
    }
}

/// Finishes the records older than `older_than` that stopped processes left
/// (see the module doc); returns how many it finished.
pub async fn recover(store: &dyn TableStore, older_than: Duration) -> Result<usize> {
    let log = commits_table()?;
    let mut headers = Vec::new();
    let mut token = None;
    // A claim writes the header back as read: every property it has.
    let mut query =
        Query::all().select([UNDONE, DONE, LANDED, SETTLED].map(str::to_owned).to_vec());
    query.partitions = KeyRange {
        start: std::ops::Bound::Included(PartitionKey::new(RECORD_PREFIX)?),
        // The prefix's successor: ':' + 1.
        end: std::ops::Bound::Excluded(PartitionKey::new("commit;")?),
    };
    // Per record seen: whether it has a header, whether an old chunk.
    let mut seen: BTreeMap<PartitionKey, (bool, bool)> = BTreeMap::new();
    loop {
        let page = match store.query(&log, &query, token.as_ref()).await {
            Ok(p) => p,
            Err(StorageError::TableNotFound(_)) => return Ok(0),
            Err(e) => return Err(e),
        };
        for e in &page.entities {
            let old = Utc::now() - e.timestamp
                > chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
            if e.row_key().as_str() == HEADER {
                match seen.get_mut(e.partition_key()) {
                    Some(record) => record.0 = true,
                    None => {
                        seen.insert(e.partition_key().clone(), (true, false));
                    }
                }
                if old {
                    let marked = |name| {
                        matches!(e.entity.properties.get(name), Some(EdmValue::Boolean(true)))
                    };
                    let state = if marked(DONE) {
                        Stale::Done
                    } else if marked(UNDONE) {
                        Stale::Undone
                    } else {
                        let landed = match e.entity.properties.get(LANDED) {
                            Some(EdmValue::Int32(n)) => usize::try_from(*n).unwrap_or(0),
                            _ => 0,
                        };
                        Stale::Committed {
                            landed,
                            settled: marked(SETTLED),
                        }
                    };
                    headers.push((e.clone(), state));
                }
            } else if old {
                match seen.get_mut(e.partition_key()) {
                    Some(record) => record.1 = true,
                    None => {
                        seen.insert(e.partition_key().clone(), (false, true));
                    }
                }
            }
        }
        match page.continuation {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    // An old record with chunks and no header never reached its commit
    // point. Decided once the scan is whole: on a store that is not key
    // ordered ([`TableStore::key_ordered`]) a chunk may come before its
    // header, on another page or the same one.
    let orphans: Vec<PartitionKey> = seen
        .into_iter()
        .filter(|(_, (header, old_chunk))| !*header && *old_chunk)
        .map(|(id, _)| id)
        .collect();
    // Oldest first, as the scan of a key-ordered store lists them.
    headers.sort_by(|a: &(StoredEntity, Stale), b: &(StoredEntity, Stale)| {
        a.0.partition_key().cmp(b.0.partition_key())
    });
    // Record by record: one that cannot be finished now (a store error, a
    // corrupt record) stays for a later recovery and stops no other.
    let mut finished = 0;
    for (header, state) in headers {
        let id = header.partition_key().clone();
        let done = async {
            let Some(claimed) = claim(store, &log, &header).await? else {
                return Ok(false);
            };
            match state {
                Stale::Done => {}
                Stale::Committed { landed, settled } => {
                    let recorded = read_record(store, &log, &id).await?;
                    let changes: Vec<&Change> = recorded.iter().map(|(c, _)| c).collect();
                    if taken_over(store, &changes).await? {
                        // Finished now, its rows would hold values another
                        // row took: the block is put back instead.
                        for (change, _) in recorded.into_iter().rev() {
                            undo(store, change).await?;
                        }
                    } else {
                        let lease = Lease {
                            etag: claimed,
                            since: std::time::Instant::now(),
                            landed,
                            settled,
                        };
                        finish(store, &log, &id, lease, recorded).await?;
                    }
                }
                Stale::Undone => {
                    // Newest first, as the commit itself puts back.
                    for (change, _) in read_record(store, &log, &id).await?.into_iter().rev() {
                        undo(store, change).await?;
                    }
                }
            }
            forget(store, &log, &id).await.map(|()| true)
        }
        .await;
        finished += usize::from(matches!(done, Ok(true)));
    }
    for id in orphans {
        let _ = forget(store, &log, &id).await;
    }
    // A record may hold a block's catalog changes (`engine::block_ddl`),
    // which its version entity's write, redone only where absent, would not
    // announce: engines reload when they next look. Best effort, as above.
    if finished > 0 {
        let _ = crate::catalog::persist::touch(store).await;
    }
    Ok(finished)
}

fn commits_table() -> Result<TableName> {
    Ok(TableName::new(crate::catalog::persist::CATALOG_TABLE)?)
}

/// A new record's PartitionKey: its time first, so records list oldest
/// first, then a random part, so two processes never share one.
fn record_id() -> Result<PartitionKey> {
    let now = Utc::now().timestamp_micros();
    Ok(PartitionKey::new(format!(
        "{RECORD_PREFIX}{now:020}-{}",
        uuid::Uuid::new_v4().simple()
    ))?)
}

/// The changes (by their place in `changes`) grouped per phase of
/// `order`, table and partition, in key order, cut into entity group
/// transactions.
fn batches(changes: &[Change], order: &Order) -> Vec<(TableName, Vec<usize>)> {
    type Group = (TableName, Vec<usize>);
    let mut groups: BTreeMap<(u8, String, PartitionKey), Group> = BTreeMap::new();
    for (i, c) in changes.iter().enumerate() {
        let key = (
            order.phase(c),
            c.table.as_str().to_ascii_lowercase(),
            c.op.keys().0.clone(),
        );
        groups
            .entry(key)
            .or_insert_with(|| (c.table.clone(), Vec::new()))
            .1
            .push(i);
    }
    let mut out = Vec::new();
    for (_, (table, group)) in groups {
        let mut batch: Vec<usize> = Vec::new();
        let mut bytes = 0;
        for i in group {
            let size = changes[i].op.stored_size();
            if !batch.is_empty()
                && (batch.len() == MAX_BATCH_OPERATIONS || bytes + size > MAX_BATCH_BYTES)
            {
                out.push((table.clone(), std::mem::take(&mut batch)));
                bytes = 0;
            }
            bytes += size;
            batch.push(i);
        }
        if !batch.is_empty() {
            out.push((table.clone(), batch));
        }
    }
    out
}

/// A commit's hold on its record: the header's version, renewed (each
/// renewal is a new Timestamp, so the record never looks stale to a
/// recovery while its commit runs) at most every [`RENEW_EVERY`].
struct Lease {
    etag: Option<crate::storage::ETag>,
    since: std::time::Instant,
    /// The entity group transactions counted as landed: every write of
    /// the header carries the count.
    landed: usize,
    /// Whether a recovery settled the count ([`SETTLED`]).
    settled: bool,
}

/// How often a running commit renews its record's header: far inside
/// [`RECOVER_AFTER`].
const RENEW_EVERY: Duration = Duration::from_secs(20);

impl Lease {
    /// Renews the header If-Match the version it last wrote, when due;
    /// `false` when a recovery has claimed it meanwhile.
    async fn renewed(
        &mut self,
        store: &dyn TableStore,
        log: &TableName,
        id: &PartitionKey,
    ) -> bool {
        if self.since.elapsed() < RENEW_EVERY {
            return true;
        }
        match self.write(store, log, id).await {
            Ok(()) => true,
            Err(e) => Failure::of(&e) != Failure::Conflict,
        }
    }

    /// Counts `n` entity group transactions landed in the header (which
    /// renews the lease). The reason it could not, should a recovery have
    /// claimed the record or the answer been lost: the commit then stops,
    /// and the record is the recovery's.
    async fn landed(
        &mut self,
        store: &dyn TableStore,
        log: &TableName,
        id: &PartitionKey,
        n: usize,
    ) -> std::result::Result<(), String> {
        self.landed = n;
        match self.write(store, log, id).await {
            Ok(()) => Ok(()),
            Err(e) if Failure::of(&e) == Failure::Conflict => {
                Err("a recovery took over the block's record".into())
            }
            Err(e) => Err(format!(
                "counting a landed write in the block's record: {e}"
            )),
        }
    }

    /// Writes the header, with the count, If-Match the version last
    /// written (a header that gave none is left as it is).
    async fn write(
        &mut self,
        store: &dyn TableStore,
        log: &TableName,
        id: &PartitionKey,
    ) -> Result<()> {
        let Some(etag) = self.etag.clone() else {
            return Ok(());
        };
        let mut header = Entity::new(id.clone(), RowKey::new(HEADER)?);
        if self.landed > 0 {
            header.properties.insert(
                LANDED.into(),
                EdmValue::Int32(i32::try_from(self.landed).unwrap_or(i32::MAX)),
            );
        }
        if self.settled {
            header
                .properties
                .insert(SETTLED.into(), EdmValue::Boolean(true));
        }
        let outcomes = store
            .execute_batch(log, vec![WriteOp::Update(header, IfMatch::ETag(etag))])
            .await?;
        self.etag = outcomes.into_iter().next().and_then(|o| o.etag);
        self.since = std::time::Instant::now();
        Ok(())
    }
}

/// Claims a stale record for this recovery: its header rewritten If-Match
/// the version read, so that its commit (renewing) or another recovery
/// (claiming) fails theirs. The header's new version; `None` when someone
/// else got there first.
async fn claim(
    store: &dyn TableStore,
    log: &TableName,
    header: &StoredEntity,
) -> Result<Option<Option<crate::storage::ETag>>> {
    let op = WriteOp::Update(header.entity.clone(), IfMatch::ETag(header.etag.clone()));
    match store.execute_batch(log, vec![op]).await {
        Ok(outcomes) => Ok(Some(outcomes.into_iter().next().and_then(|o| o.etag))),
        Err(e) if Failure::of(&e) == Failure::Conflict => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the record: its chunks, then its header (the commit point);
/// the lease on it.
async fn write_record(
    store: &dyn TableStore,
    log: &TableName,
    id: &PartitionKey,
    changes: &[Change],
    number: &[usize],
) -> Result<Lease> {
    let text = Value::Array(
        changes
            .iter()
            .zip(number)
            .map(|(c, &n)| to_json(c, n))
            .collect(),
    )
    .to_string();
    // Cut by UTF-16 units, which the property's limit counts.
    let mut parts = vec![String::new()];
    let mut units = 0;
    for c in text.chars() {
        if units + c.len_utf16() > CHUNK_UNITS {
            parts.push(String::new());
            units = 0;
        }
        units += c.len_utf16();
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    let mut chunks = Vec::new();
    for (i, part) in parts.into_iter().enumerate() {
        let mut e = Entity::new(id.clone(), RowKey::new(format!("{i:08}"))?);
        e.properties.insert(PART.into(), EdmValue::String(part));
        chunks.push(WriteOp::Insert(e));
    }
    let mut batch = Vec::new();
    let mut bytes = 0;
    for op in chunks {
        let size = op.stored_size();
        if !batch.is_empty()
            && (batch.len() == MAX_BATCH_OPERATIONS || bytes + size > MAX_BATCH_BYTES)
        {
            store.execute_batch(log, std::mem::take(&mut batch)).await?;
            bytes = 0;
        }
        bytes += size;
        batch.push(op);
    }
    if !batch.is_empty() {
        store.execute_batch(log, batch).await?;
    }
    let header = Entity::new(id.clone(), RowKey::new(HEADER)?);
    let outcomes = store
        .execute_batch(log, vec![WriteOp::Insert(header)])
        .await?;
    Ok(Lease {
        etag: outcomes.into_iter().next().and_then(|o| o.etag),
        since: std::time::Instant::now(),
        landed: 0,
        settled: false,
    })
}

/// The changes a record holds, read back, each with the number of its
/// entity group transaction (`None` in a record written before they were
/// numbered).
async fn read_record(
    store: &dyn TableStore,
    log: &TableName,
    id: &PartitionKey,
) -> Result<Vec<(Change, Option<usize>)>> {
    let mut parts: Vec<(RowKey, String)> = Vec::new();
    let mut token = None;
    let query = Query::partition(id.clone());
    loop {
        let page = store.query(log, &query, token.as_ref()).await?;
        for e in &page.entities {
            if let Some(EdmValue::String(part)) = e.entity.properties.get(PART) {
                parts.push((e.row_key().clone(), part.clone()));
            }
        }
        match page.continuation {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    // Joined in RowKey order (zero-padded numbers, `write_record`), not in
    // the order the pages brought them: a store that is not key ordered
    // ([`TableStore::key_ordered`]) brings them in any.
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let text: String = parts.into_iter().map(|(_, part)| part).collect();
    let corrupt = |why: String| StorageError::Corrupt(format!("commit record {id:?}: {why}"));
    let json: Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let Value::Array(items) = json else {
        return Err(corrupt("not a list of writes".into()));
    };
    items
        .iter()
        .map(|item| {
            let number = item
                .get("batch")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok());
            from_json(item).map_err(&corrupt).map(|c| (c, number))
        })
        .collect()
}

/// Marks the record's header `UNDONE` (its writes are being put back) or
/// `DONE` (they all landed): either way a recovery must not redo them.
async fn mark(
    store: &dyn TableStore,
    log: &TableName,
    id: &PartitionKey,
    what: &str,
) -> Result<()> {
    let mut header = Entity::new(id.clone(), RowKey::new(HEADER)?);
    header
        .properties
        .insert(what.into(), EdmValue::Boolean(true));
    store
        .execute_batch(log, vec![WriteOp::InsertOrReplace(header)])
        .await?;
    Ok(())
}

/// Deletes a record, header and chunks.
async fn forget(store: &dyn TableStore, log: &TableName, id: &PartitionKey) -> Result<()> {
    let query = Query::partition(id.clone()).select(Vec::<String>::new());
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let page = store.query(log, &query, token.as_ref()).await?;
        keys.extend(page.entities.into_iter().map(|e| e.entity.row_key));
        match page.continuation {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    for chunk in keys.chunks(MAX_BATCH_OPERATIONS) {
        let ops = chunk
            .iter()
            .map(|rk| WriteOp::Delete {
                partition_key: id.clone(),
                row_key: rk.clone(),
                if_match: IfMatch::Any,
            })
            .collect();
        store.execute_batch(log, ops).await?;
    }
    Ok(())
}

/// Puts back what a failed commit had written, each write conditional on
/// the version the commit gave it, in `order`: an undo that writes an
/// index entity (one the commit deleted or replaced) goes before the base
/// rows, one that deletes it (one the commit inserted) after them. (A
/// recovery puts back in reverse record order instead: a replaced entity
/// last.)
async fn put_back(
    store: &dyn TableStore,
    written: &[(Change, Option<crate::storage::ETag>)],
    order: &Order,
) -> Result<()> {
    let mut undo: Vec<Change> = Vec::new();
    for (change, etag) in written.iter().rev() {
        let (pk, rk) = change.op.keys();
        let given = || match etag {
            Some(e) => IfMatch::ETag(e.clone()),
            None => IfMatch::Any,
        };
        let op = match (&change.before, &change.op) {
            (Some(before), WriteOp::Delete { .. }) => WriteOp::Insert(before.entity.clone()),
            (Some(before), _) => WriteOp::Update(before.entity.clone(), given()),
            (None, WriteOp::Delete { .. }) => continue,
            (None, _) => WriteOp::Delete {
                partition_key: pk.clone(),
                row_key: rk.clone(),
                if_match: given(),
            },
        };
        undo.push(Change {
            table: change.table.clone(),
            op,
            before: None,
            first: false,
        });
    }
    for (table, members) in batches(&undo, order) {
        let ops = members.into_iter().map(|i| undo[i].op.clone()).collect();
        store.execute_batch(&table, ops).await?;
    }
    Ok(())
}

/// Where a record a stopped process left stands.
#[derive(Debug, Clone, Copy)]
enum Stale {
    /// Past its commit point: its writes are finished, but for the
    /// `landed` entity group transactions counted (`settled`: by a
    /// recovery, which redoes the rest row by row).
    Committed { landed: usize, settled: bool },
    /// Being put back: the rest of its writes are put back.
    Undone,
    /// Every write landed: only the record is left to delete.
    Done,
}

/// Whether another writer changed an index entity the record puts first
/// since the block read it: a unique value taken over once the entity,
/// its base row not yet written, looked abandoned (`global::IN_FLIGHT`).
async fn taken_over(store: &dyn TableStore, changes: &[&Change]) -> Result<bool> {
    for c in changes.iter().filter(|c| c.first) {
        let (pk, rk) = c.op.keys();
        let now = match store.get(&c.table, pk, rk).await {
            Ok(now) => now,
            Err(StorageError::TableNotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let done =
            now.as_ref().map(|n| &n.entity.properties) == c.op.entity().map(|e| &e.properties);
        let untouched = now.as_ref().map(|n| n.etag.to_string())
            == c.before.as_ref().map(|b| b.etag.to_string());
        if !done && !untouched {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Finishes a committed record's writes (module doc, 4) whose entity group
/// transactions are numbered in the record, `lease` holding the claimed
/// header and its count: nothing of a counted one, nothing of the next if
/// it shows that it landed, every write of the rest that a later write has
/// not changed. A record without numbers has every write redone that way.
///
/// The recovery redoes row by row, so what it writes does not land whole
/// and cannot show anything to a later recovery: the uncounted one is
/// decided once, and the count settled in the header before anything is
/// redone, then raised after each transaction finished.
async fn finish(
    store: &dyn TableStore,
    log: &TableName,
    id: &PartitionKey,
    mut lease: Lease,
    recorded: Vec<(Change, Option<usize>)>,
) -> Result<()> {
    let mut groups: BTreeMap<usize, Vec<Change>> = BTreeMap::new();
    let mut unnumbered = Vec::new();
    for (change, number) in recorded {
        match number {
            Some(n) => groups.entry(n).or_default().push(change),
            None => unnumbered.push(change),
        }
    }
    if !unnumbered.is_empty() {
        let all = groups.into_values().flatten();
        for change in unnumbered.into_iter().chain(all) {
            redo(store, change).await?;
        }
        return Ok(());
    }
    for (n, group) in groups {
        if n < lease.landed {
            continue;
        }
        if !lease.settled {
            let whole = transaction_landed(store, &group).await?;
            lease.landed = n + usize::from(whole);
            lease.settled = true;
            lease.write(store, log, id).await?;
            if whole {
                continue;
            }
        }
        for change in group {
            redo(store, change).await?;
        }
        lease.landed = n + 1;
        lease.write(store, log, id).await?;
    }
    Ok(())
}

/// Whether an entity group transaction of a record landed (whole, or not
/// at all). Not if a row it wrote still has the version the block read: a
/// transaction gives every row it writes a new one. Else yes if a row
/// holds the values it wrote under a version other than the one the block
/// read. A delete shows only the former (another client may have deleted
/// the row), a merge neither. Wrong only when another client wrote the
/// block's very values into a row and no row of the transaction had a
/// version to compare (all inserts).
async fn transaction_landed(store: &dyn TableStore, group: &[Change]) -> Result<bool> {
    let mut shown = false;
    for c in group {
        let (pk, rk) = c.op.keys();
        let now = match store.get(&c.table, pk, rk).await {
            Ok(now) => now,
            Err(StorageError::TableNotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let base = c.before.as_ref().map(|b| b.etag.to_string());
        let version = now.as_ref().map(|n| n.etag.to_string());
        if base.is_some() && version == base {
            return Ok(false);
        }
        if let (Some(now), Some(wanted)) = (&now, c.op.entity()) {
            shown |= now.entity.properties == wanted.properties;
        }
    }
    Ok(shown)
}

/// Puts back one write of a record its process stopped putting back: where
/// the row still holds the block's values, the row as the block read it
/// returns; elsewhere (put back already, or changed since) nothing.
async fn undo(store: &dyn TableStore, change: Change) -> Result<()> {
    let (pk, rk) = change.op.keys();
    let now = match store.get(&change.table, pk, rk).await {
        Ok(now) => now,
        Err(StorageError::TableNotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let written = change.op.entity().map(|e| &e.properties);
    if now.as_ref().map(|n| &n.entity.properties) != written {
        return Ok(());
    }
    let op = match (now, change.before) {
        (Some(now), Some(before)) => WriteOp::Update(before.entity, IfMatch::ETag(now.etag)),
        (Some(now), None) => WriteOp::Delete {
            partition_key: pk.clone(),
            row_key: rk.clone(),
            if_match: IfMatch::ETag(now.etag),
        },
        (None, Some(before)) => WriteOp::Insert(before.entity),
        (None, None) => return Ok(()),
    };
    match store.execute_batch(&change.table, vec![op]).await {
        Ok(_) => Ok(()),
        Err(e) if Failure::of(&e) == Failure::Conflict => Ok(()),
        Err(e) => Err(e),
    }
}

/// Redoes one write of a record a stopped process left (module doc, 4).
async fn redo(store: &dyn TableStore, change: Change) -> Result<()> {
    let (pk, rk) = change.op.keys();
    let now = match store.get(&change.table, pk, rk).await {
        Ok(now) => now,
        // A table dropped since: nothing of it to finish.
        Err(StorageError::TableNotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let base = change.before.as_ref().map(|b| b.etag.to_string());
    let wanted = change.op.entity().map(|e| &e.properties);
    let done = now.as_ref().map(|n| &n.entity.properties) == wanted;
    let untouched = now.as_ref().map(|n| n.etag.to_string()) == base;
    if done || !untouched {
        return Ok(());
    }
    match store.execute_batch(&change.table, vec![change.op]).await {
        // A write that came between the look and the redo wins.
        Ok(_)
        | Err(StorageError::PreconditionFailed { .. })
        | Err(StorageError::EntityAlreadyExists { .. })
        | Err(StorageError::EntityNotFound { .. }) => Ok(()),
        Err(StorageError::Batch { source, .. })
            if matches!(
                *source,
                StorageError::PreconditionFailed { .. }
                    | StorageError::EntityAlreadyExists { .. }
                    | StorageError::EntityNotFound { .. }
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The partitions a failed commit may have left written, as an error
/// names them.
fn partitions_of(written: &[(Change, Option<crate::storage::ETag>)]) -> String {
    let mut names: Vec<String> = written
        .iter()
        .map(|(c, _)| format!("{}/{:?}", c.table, c.op.keys().0.as_str()))
        .collect();
    names.dedup();
    names.join(", ")
}

/// One change as the record keeps it: its table, the operation's kind, the
/// entity it writes (or the keys it deletes), and the version it requires
/// (`base`: the ETag the block read; absent for a row that was not there).
fn to_json(c: &Change, batch: usize) -> Value {
    let (kind, entity) = match &c.op {
        WriteOp::Insert(e) => ("insert", Some(e)),
        WriteOp::Update(e, _) => ("update", Some(e)),
        WriteOp::Merge(e, _) => ("merge", Some(e)),
        WriteOp::InsertOrReplace(e) => ("insert_or_replace", Some(e)),
        WriteOp::InsertOrMerge(e) => ("insert_or_merge", Some(e)),
        WriteOp::Delete { .. } => ("delete", None),
    };
    let (pk, rk) = c.op.keys();
    json!({
        "table": c.table.as_str(),
        "op": kind,
        "pk": pk.as_str(),
        "rk": rk.as_str(),
        "base": c.before.as_ref().map(|b| b.etag.to_string()),
        "entity": entity.map(entity_body),
        "before": c.before.as_ref().map(|b| entity_body(&b.entity)),
        "first": c.first,
        "batch": batch,
    })
}

fn from_json(v: &Value) -> std::result::Result<Change, String> {
    let text = |name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .ok_or(format!("no {name}"))
    };
    let table = TableName::new(text("table")?).map_err(|e| e.to_string())?;
    let base = v
        .get("base")
        .and_then(Value::as_str)
        .map(crate::storage::ETag::from_wire);
    let if_match = || match &base {
        Some(e) => IfMatch::ETag(e.clone()),
        None => IfMatch::Any,
    };
    let entity = || -> std::result::Result<Entity, String> {
        let obj: &Map<String, Value> = v
            .get("entity")
            .and_then(Value::as_object)
            .ok_or("no entity")?;
        entity_from_body(obj).map_err(|e| e.to_string())
    };
    let op = match text("op")? {
        "insert" => WriteOp::Insert(entity()?),
        "update" => WriteOp::Update(entity()?, if_match()),
        "merge" => WriteOp::Merge(entity()?, if_match()),
        "insert_or_replace" => WriteOp::InsertOrReplace(entity()?),
        "insert_or_merge" => WriteOp::InsertOrMerge(entity()?),
        "delete" => WriteOp::Delete {
            partition_key: PartitionKey::new(text("pk")?).map_err(|e| e.to_string())?,
            row_key: RowKey::new(text("rk")?).map_err(|e| e.to_string())?,
            if_match: if_match(),
        },
        other => return Err(format!("unknown operation {other:?}")),
    };
    // The row as the block read it: its version for a redo, its values
    // for a recovery that puts the block back.
    let before = match base {
        Some(etag) => {
            let entity = match v.get("before").and_then(Value::as_object) {
                Some(obj) => entity_from_body(obj).map_err(|e| e.to_string())?,
                None => Entity::new(op.keys().0.clone(), op.keys().1.clone()),
            };
            Some(StoredEntity {
                entity,
                timestamp: Utc::now(),
                etag,
            })
        }
        None => None,
    };
    let first = v.get("first").and_then(Value::as_bool).unwrap_or(false);
    Ok(Change {
        table,
        op,
        before,
        first,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::exec::write::transaction::Transaction;
    use crate::storage::WriteOutcome;
    use crate::storage::layer::{Derived, StoreLayer};
    use crate::storage::memory::MemoryStore;

    /// A store whose writes fail from the `n`th on, as a process that stops
    /// midway leaves the store.
    #[derive(Debug)]
    struct Stops {
        inner: Arc<dyn TableStore>,
        writes_left: AtomicUsize,
    }

    #[async_trait]
    impl StoreLayer for Stops {
        const DERIVED: Derived = Derived::Here;

        fn below(&self) -> &dyn TableStore {
            self.inner.as_ref()
        }

        async fn execute_batch(
            &self,
            table: &TableName,
            ops: Vec<WriteOp>,
        ) -> Result<Vec<WriteOutcome>> {
            let left = self.writes_left.load(Ordering::SeqCst);
            if left == 0 {
                return Err(StorageError::Task("the process stopped".into()));
            }
            self.writes_left.store(left - 1, Ordering::SeqCst);
            self.inner.execute_batch(table, ops).await
        }
    }

    fn table(name: &str) -> TableName {
        TableName::new(name).expect("a table name")
    }

    fn row(pk: &str, rk: &str, n: i32) -> Entity {
        let mut e = Entity::new(
            PartitionKey::new(pk).expect("a key"),
            RowKey::new(rk).expect("a key"),
        );
        e.properties.insert("n".into(), EdmValue::Int32(n));
        e
    }

    async fn n_of(store: &dyn TableStore, t: &str, pk: &str, rk: &str) -> Option<i32> {
        let got = store
            .get(
                &table(t),
                &PartitionKey::new(pk).expect("a key"),
                &RowKey::new(rk).expect("a key"),
            )
            .await
            .expect("a read");
        match got?.entity.properties.get("n") {
            Some(EdmValue::Int32(n)) => Some(*n),
            _ => None,
        }
    }

    /// A block writing rows of two tables and 3 partitions, 150 rows in one
    /// of them: more than one entity group transaction holds.
    async fn wide_block(tx: &Arc<Transaction>, store: Arc<dyn TableStore>) {
        tx.begin(crate::exec::write::reads::Isolation::default());
        let seen = tx.store_for(store);
        for (t, pk, count) in [("orders", "a", 150), ("orders", "b", 1), ("lines", "a", 2)] {
            for i in 0..count {
                seen.execute_batch(
                    &table(t),
                    vec![WriteOp::Insert(row(pk, &format!("{i:04}"), i))],
                )
                .await
                .expect("buffered");
            }
        }
    }

    /// `inner`, seen through a store that stops after `writes` writes.
    fn stopping(inner: &Arc<dyn TableStore>, writes: usize) -> Arc<dyn TableStore> {
        Arc::new(Stops {
            inner: inner.clone(),
            writes_left: AtomicUsize::new(writes),
        })
    }

    /// A memory store where a wide block's commit stopped after `writes`
    /// writes, and the commit's error.
    async fn wide_block_stopped(writes: usize) -> (Arc<dyn TableStore>, StorageError) {
        let inner: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        tables(inner.as_ref()).await;
        let stops = stopping(&inner, writes);
        let tx = Arc::new(Transaction::default());
        wide_block(&tx, stops.clone()).await;
        let e = tx
            .commit(stops.as_ref(), &Order::default())
            .await
            .expect_err("stopped");
        (inner, e)
    }

    async fn tables(store: &dyn TableStore) {
        for t in ["orders", "lines"] {
            store.create_table(&table(t)).await.expect("created");
        }
    }

    #[tokio::test]
    async fn a_block_over_partitions_and_tables_commits_whole() {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        tables(store.as_ref()).await;
        let tx = Arc::new(Transaction::default());
        wide_block(&tx, store.clone()).await;
        assert_eq!(
            tx.commit(store.as_ref(), &Order::default())
                .await
                .expect("committed"),
            153
        );
        assert_eq!(n_of(store.as_ref(), "orders", "a", "0149").await, Some(149));
        assert_eq!(n_of(store.as_ref(), "orders", "b", "0000").await, Some(0));
        assert_eq!(n_of(store.as_ref(), "lines", "a", "0001").await, Some(1));
        // The record is gone.
        assert_eq!(
            recover(store.as_ref(), Duration::ZERO).await.expect("read"),
            0
        );
    }

    /// A block that updates row `x` of partitions `a` and `b` of `orders`
    /// (1 to 2), read through `seen`, after which another client changes
    /// b's row in `store` (to 9).
    async fn conflicting_block(
        store: &Arc<dyn TableStore>,
        seen: Arc<dyn TableStore>,
    ) -> Arc<Transaction> {
        tables(store.as_ref()).await;
        let orders = table("orders");
        for pk in ["a", "b"] {
            store
                .execute_batch(&orders, vec![WriteOp::Insert(row(pk, "x", 1))])
                .await
                .expect("seeded");
        }
        let tx = Arc::new(Transaction::default());
        tx.begin(crate::exec::write::reads::Isolation::default());
        let through = tx.store_for(seen);
        for pk in ["a", "b"] {
            let key = (
                PartitionKey::new(pk).expect("k"),
                RowKey::new("x").expect("k"),
            );
            let read = through
                .get(&orders, &key.0, &key.1)
                .await
                .expect("read")
                .expect("there");
            through
                .execute_batch(
                    &orders,
                    vec![WriteOp::Update(row(pk, "x", 2), IfMatch::ETag(read.etag))],
                )
                .await
                .expect("buffered");
        }
        store
            .execute_batch(
                &orders,
                vec![WriteOp::Update(row("b", "x", 9), IfMatch::Any)],
            )
            .await
            .expect("written");
        tx
    }

    #[tokio::test]
    async fn a_change_by_another_client_puts_back_what_was_written() {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        let tx = conflicting_block(&store, store.clone()).await;
        let e = tx
            .commit(store.as_ref(), &Order::default())
            .await
            .expect_err("a conflict");
        assert!(
            matches!(
                e,
                StorageError::Transaction(TransactionScope::Undone { .. })
            ),
            "{e}"
        );
        // a was written first and put back; b keeps the other client's value.
        assert_eq!(n_of(store.as_ref(), "orders", "a", "x").await, Some(1));
        assert_eq!(n_of(store.as_ref(), "orders", "b", "x").await, Some(9));
        assert_eq!(
            recover(store.as_ref(), Duration::ZERO).await.expect("read"),
            0
        );
    }

    #[tokio::test]
    async fn a_commit_stopped_while_putting_back_is_put_back_by_the_next_recovery() {
        let inner: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        // The record (2), a's batch (3) and its count (4), b's conflicting
        // batch (5) and the mark undone (6) reach the store; putting back a
        // does not.
        let stops = stopping(&inner, 6);
        let tx = conflicting_block(&inner, stops.clone()).await;
        let e = tx
            .commit(stops.as_ref(), &Order::default())
            .await
            .expect_err("a conflict");
        assert!(
            matches!(
                e,
                StorageError::Transaction(TransactionScope::PartlyCommitted { .. })
            ),
            "{e}"
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "x").await, Some(2));
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO)
                .await
                .expect("finished"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "x").await, Some(1));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "x").await, Some(9));
    }

    /// A store with a base table and a global index's table, the base
    /// sorting first by name (so only `Order` puts the index first).
    async fn base_and_index() -> Arc<dyn TableStore> {
        let inner: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        for t in ["abase", "zindex"] {
            inner.create_table(&table(t)).await.expect("created");
        }
        inner
    }

    /// Commits `writes` in one block, `zindex` holding index entities, over
    /// a store that stops after three writes: the record's two and the
    /// block's first batch.
    async fn stopped_block(inner: &Arc<dyn TableStore>, writes: Vec<(&str, WriteOp)>) {
        let stops = stopping(inner, 3);
        let tx = Arc::new(Transaction::default());
        tx.begin(crate::exec::write::reads::Isolation::default());
        let seen = tx.store_for(stops.clone());
        for (t, op) in writes {
            seen.execute_batch(&table(t), vec![op])
                .await
                .expect("buffered");
        }
        let order = Order::new([&table("zindex")]);
        tx.commit(stops.as_ref(), &order)
            .await
            .expect_err("stopped");
    }

    #[tokio::test]
    async fn index_entities_are_put_before_the_base_rows_and_deleted_after_them() {
        // The base table sorts before the index table by name, so only the
        // order puts the entity first.
        let inner = base_and_index().await;
        for (t, pk, rk) in [("abase", "p", "r"), ("zindex", "v1", "p_r")] {
            inner
                .execute_batch(&table(t), vec![WriteOp::Insert(row(pk, rk, 1))])
                .await
                .expect("written");
        }
        // The record (its chunk, its header) and one batch land.
        stopped_block(
            &inner,
            vec![
                ("zindex", WriteOp::Insert(row("v2", "p_r", 2))),
                ("abase", WriteOp::InsertOrReplace(row("p", "r", 2))),
                (
                    "zindex",
                    WriteOp::Delete {
                        partition_key: PartitionKey::new("v1").expect("a key"),
                        row_key: RowKey::new("p_r").expect("a key"),
                        if_match: IfMatch::Any,
                    },
                ),
            ],
        )
        .await;
        // Stopped after the first batch: the new entity, not the base row.
        assert_eq!(n_of(inner.as_ref(), "zindex", "v2", "p_r").await, Some(2));
        assert_eq!(n_of(inner.as_ref(), "abase", "p", "r").await, Some(1));
        assert_eq!(n_of(inner.as_ref(), "zindex", "v1", "p_r").await, Some(1));
        // Recovery redoes the rest in the record's order.
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO).await.expect("read"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "abase", "p", "r").await, Some(2));
        assert_eq!(n_of(inner.as_ref(), "zindex", "v1", "p_r").await, None);
    }

    #[tokio::test]
    async fn a_recovery_puts_back_a_block_whose_index_entity_another_writer_took() {
        let inner = base_and_index().await;
        inner
            .execute_batch(&table("abase"), vec![WriteOp::Insert(row("p", "r", 1))])
            .await
            .expect("written");
        // The record and the entity's put land; then the process stops.
        stopped_block(
            &inner,
            vec![
                ("zindex", WriteOp::Insert(row("v", "", 2))),
                ("abase", WriteOp::InsertOrReplace(row("p", "r", 2))),
            ],
        )
        .await;
        assert_eq!(n_of(inner.as_ref(), "zindex", "v", "").await, Some(2));
        // Another row takes the value, the entity looking abandoned.
        inner
            .execute_batch(
                &table("zindex"),
                vec![WriteOp::InsertOrReplace(row("v", "", 7))],
            )
            .await
            .expect("taken over");
        // Finishing the block would give its row a value another row
        // holds: the recovery puts it back instead.
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO).await.expect("read"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "abase", "p", "r").await, Some(1));
        assert_eq!(n_of(inner.as_ref(), "zindex", "v", "").await, Some(7));
    }

    #[tokio::test]
    async fn a_commit_stopped_midway_is_finished_by_the_next_recovery() {
        // The record (2 transactions: its chunk, its header) and one
        // partition's first transaction land; then the process stops.
        // The store stopped answering: whether the batch landed is not
        // known, so nothing is put back and the record stays.
        let (inner, e) = wide_block_stopped(3).await;
        assert!(
            matches!(
                e,
                StorageError::Transaction(TransactionScope::Unknown { .. })
            ),
            "{e}"
        );
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0001").await, Some(1));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "0000").await, None);
        // Too young to finish: a live commit's record is left alone.
        assert_eq!(
            recover(inner.as_ref(), RECOVER_AFTER).await.expect("read"),
            0
        );
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO)
                .await
                .expect("finished"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0149").await, Some(149));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "0000").await, Some(0));
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0000").await, Some(0));
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO).await.expect("read"),
            0
        );
    }

    /// A wide block's commit stopped after `writes` writes, then another
    /// client deleting row 0000 of `lines` partition `a`, which the block's
    /// first entity group transaction inserted (and, `sibling`, changing
    /// its row 0001 to 7); then a recovery.
    async fn stopped_then_deleted(writes: usize, sibling: bool) -> Arc<dyn TableStore> {
        let (inner, _) = wide_block_stopped(writes).await;
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0000").await, Some(0));
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0000").await, None);
        inner
            .execute_batch(
                &table("lines"),
                vec![WriteOp::Delete {
                    partition_key: PartitionKey::new("a").expect("a key"),
                    row_key: RowKey::new("0000").expect("a key"),
                    if_match: IfMatch::Any,
                }],
            )
            .await
            .expect("deleted by another client");
        if sibling {
            inner
                .execute_batch(
                    &table("lines"),
                    vec![WriteOp::Update(row("a", "0001", 7), IfMatch::Any)],
                )
                .await
                .expect("changed by another client");
        }
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO)
                .await
                .expect("finished"),
            1
        );
        // The rest of the block is finished.
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0149").await, Some(149));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "0000").await, Some(0));
        inner
    }

    #[tokio::test]
    async fn a_recovery_redoes_nothing_of_a_counted_transaction() {
        // The record (2), the first transaction (3) and its count (4) land.
        // Its other row changed too, only the count tells that it landed.
        let inner = stopped_then_deleted(4, true).await;
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0000").await, None);
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0001").await, Some(7));
    }

    #[tokio::test]
    async fn a_recovery_redoes_nothing_of_an_uncounted_transaction_one_row_shows_landed() {
        // The record (2) and the first transaction (3) land, not its count:
        // its other row, still as the block wrote it, shows that it landed.
        let inner = stopped_then_deleted(3, false).await;
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0000").await, None);
        assert_eq!(n_of(inner.as_ref(), "lines", "a", "0001").await, Some(1));
    }

    #[tokio::test]
    async fn a_recovery_that_stopped_midway_leaves_the_rest_to_the_next() {
        // The record (2), the first transaction (3) and its count (4) land.
        let (inner, _) = wide_block_stopped(4).await;
        // A recovery claims (1), settles the count (2) and redoes one row
        // of `orders` partition `a` (3), then stops.
        let stops = stopping(&inner, 3);
        assert_eq!(
            recover(stops.as_ref(), Duration::ZERO).await.expect("read"),
            0
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0000").await, Some(0));
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0001").await, None);
        // Its row, as the block wrote it, shows nothing: the next recovery
        // redoes the rest.
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO)
                .await
                .expect("finished"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0099").await, Some(99));
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "0149").await, Some(149));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "0000").await, Some(0));
    }

    #[tokio::test]
    async fn a_row_another_client_gave_the_blocks_values_does_not_pass_for_a_landed_transaction() {
        let inner: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        tables(inner.as_ref()).await;
        let orders = table("orders");
        for (pk, rk) in [("a", "x"), ("a", "y"), ("b", "x")] {
            inner
                .execute_batch(&orders, vec![WriteOp::Insert(row(pk, rk, 1))])
                .await
                .expect("seeded");
        }
        // A block updating the three rows to 2; only its record (2)
        // lands.
        let stops = stopping(&inner, 2);
        let tx = Arc::new(Transaction::default());
        tx.begin(crate::exec::write::reads::Isolation::default());
        let through = tx.store_for(stops.clone());
        for (pk, rk) in [("a", "x"), ("a", "y"), ("b", "x")] {
            let (pk, rk) = (
                PartitionKey::new(pk).expect("k"),
                RowKey::new(rk).expect("k"),
            );
            let read = through
                .get(&orders, &pk, &rk)
                .await
                .expect("read")
                .expect("there");
            through
                .execute_batch(
                    &orders,
                    vec![WriteOp::Update(
                        row(pk.as_str(), rk.as_str(), 2),
                        IfMatch::ETag(read.etag),
                    )],
                )
                .await
                .expect("buffered");
        }
        tx.commit(stops.as_ref(), &Order::default())
            .await
            .expect_err("stopped");
        // Another client writes the block's very value into a/y; a/x still
        // has the version the block read, so partition a's transaction did
        // not land, and the recovery finishes it.
        inner
            .execute_batch(
                &orders,
                vec![WriteOp::Update(row("a", "y", 2), IfMatch::Any)],
            )
            .await
            .expect("written by another client");
        assert_eq!(
            recover(inner.as_ref(), Duration::ZERO)
                .await
                .expect("finished"),
            1
        );
        assert_eq!(n_of(inner.as_ref(), "orders", "a", "x").await, Some(2));
        assert_eq!(n_of(inner.as_ref(), "orders", "b", "x").await, Some(2));
    }
}
