//! The workload statistics kept in the store, so that they survive a
//! restart and every process over one store sees all of them.
//!
//! In `TablesqlCatalog` (which no listing shows), partition `workload`:
//! - `h_<instance>`: one head per process (an instance id drawn at start),
//!   saying which generation of its snapshot is whole, when it was stored,
//!   and whether the process closed;
//! - `c_<instance>_<generation>_<n>`: the snapshot's text
//!   (`snapshot::encode`) in chunks, four properties of at most 30,000
//!   UTF-16 units each (a property holds 64 KiB, an entity 1 MiB);
//! - `reset`: when `tablesql_stat_reset()` last ran anywhere.
//!
//! Each process writes only its own head and chunks, so processes never
//! overwrite one another; readers merge every head's snapshot. A flush
//! writes a new generation's chunks, then the head (with the last chunks
//! and in one entity group transaction, which most snapshots fit whole),
//! then deletes the old generation. A process that closed, or stored
//! nothing for long, is taken over by the next that flushes: its snapshot
//! is merged into the taker's own, and its head deleted If-Match in the
//! taker's head's transaction, so that two takers never both count it.
//! A reset is stored as the `reset` marker: each process forgets its own
//! counts older than it at its next flush, and readers skip heads older.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::snapshot;
use super::workload::{Kept, Workload};
use crate::catalog::persist::CATALOG_TABLE;
use crate::storage::{
    ETag, EdmValue, Entity, IfMatch, KeyRange, PartitionKey, Query, Result, RowKey, StorageError,
    StoredEntity, TableName, TableStore, WriteOp,
};

/// The partition of `TablesqlCatalog` that holds them.
const PARTITION: &str = "workload";
const HEAD: &str = "h_";
const CHUNK: &str = "c_";
const RESET_ROW: &str = "reset";
const FORMAT_VERSION: i32 = 1;
/// UTF-16 units of snapshot text per property: 60,000 bytes, under 64 KiB.
const PROPERTY_UNITS: usize = 30_000;
/// Properties per chunk entity: about 240 KB, so that four chunks and a head
/// fit one entity group transaction (4 MiB) even with JSON's escapes.
const PROPERTIES_PER_CHUNK: usize = 4;
const CHUNKS_PER_BATCH: usize = 4;
/// Other processes taken over in one flush (their deletes share the head's
/// transaction of at most 100 operations).
const TAKEN_PER_FLUSH: usize = 50;
/// An idle process rewrites its head this often, so that it is not taken
/// for stopped.
const HEARTBEAT: Duration = Duration::from_secs(300);
/// A process whose head is older than this many of its flush intervals (or
/// heartbeats, the longer) is taken for stopped.
const STALE_INTERVALS: u32 = 4;

/// One process's statistics in the store, and the others' read from it.
pub struct PersistedWorkload {
    store: Arc<dyn TableStore>,
    workload: Arc<Workload>,
    instance: String,
    every: Duration,
    state: tokio::sync::Mutex<State>,
    /// Set by `Engine::close`: the timer stops.
    stopped: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PersistedWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistedWorkload")
            .field("instance", &self.instance)
            .field("every", &self.every)
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// This process's last generation stored, and its chunks.
    generation: u64,
    chunks: usize,
    /// The last generation an attempt wrote chunks of: each attempt takes a
    /// new one, so that chunks a failed one left cannot join a later one's.
    tried: u64,
    /// An attempt whose last transaction may have landed (its answer was
    /// lost): the head, read back, tells.
    unsure: Option<Attempt>,
    /// Its head's ETag, while it is this process's.
    etag: Option<ETag>,
    /// `Workload::changes` when last stored; `None` before.
    stored: Option<u64>,
    stored_at: Option<Instant>,
    /// Whether the head stored says closed.
    closed: bool,
    /// Other processes' heads and snapshots, by instance.
    others: HashMap<String, Other>,
}

/// One attempt at storing this process's snapshot, as its head would say.
struct Attempt {
    generation: u64,
    chunks: usize,
    /// `Workload::changes` it stored.
    changes: u64,
    closing: bool,
    /// The stopped processes whose heads it deletes.
    taken: Vec<(String, Other)>,
}

/// Another process's head, and its snapshot when it could be read.
#[derive(Clone)]
struct Other {
    generation: u64,
    chunks: usize,
    etag: ETag,
    since: DateTime<Utc>,
    flushed: DateTime<Utc>,
    every: Duration,
    closed: bool,
    kept: Option<Kept>,
}

impl Other {
    /// Closed, or silent for longer than it would be alive.
    fn stopped(&self, now: DateTime<Utc>) -> bool {
        let quiet = self.every.max(HEARTBEAT) * STALE_INTERVALS;
        self.closed
            || chrono::Duration::from_std(quiet).is_ok_and(|quiet| self.flushed + quiet < now)
    }
}

fn partition() -> Result<PartitionKey> {
    Ok(PartitionKey::new(PARTITION)?)
}

fn table() -> Result<TableName> {
    Ok(TableName::new(CATALOG_TABLE)?)
}

fn head_key(instance: &str) -> Result<RowKey> {
    Ok(RowKey::new(format!("{HEAD}{instance}"))?)
}

fn chunk_prefix(instance: &str, generation: u64) -> String {
    format!("{CHUNK}{instance}_{generation:016x}_")
}

fn chunk_key(instance: &str, generation: u64, n: usize) -> Result<RowKey> {
    Ok(RowKey::new(format!(
        "{}{n:04}",
        chunk_prefix(instance, generation)
    ))?)
}

/// RowKeys that start with `prefix` (which ends in `_`; the next
/// character up is a backtick).
fn starting_with(prefix: &str) -> Result<KeyRange<RowKey>> {
    let end = format!("{}`", &prefix[..prefix.len() - 1]);
    Ok(KeyRange {
        start: Bound::Included(RowKey::new(prefix)?),
        end: Bound::Excluded(RowKey::new(end)?),
    })
}

/// `text` cut into properties of at most `PROPERTY_UNITS` UTF-16 units,
/// at character boundaries.
fn cut(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut units) = (0, 0);
    for (i, c) in text.char_indices() {
        if units + c.len_utf16() > PROPERTY_UNITS {
            out.push(&text[start..i]);
            (start, units) = (i, 0);
        }
        units += c.len_utf16();
    }
    if start < text.len() || out.is_empty() {
        out.push(&text[start..]);
    }
    out
}

/// The property names of a chunk's parts.
fn part_name(i: usize) -> String {
    format!("d{i}")
}

impl PersistedWorkload {
    /// The statistics of `workload` stored in `store` (not one that counts
    /// requests into them: storing them is not the users' workload), by
    /// `every` when the engine's timer flushes them.
    pub fn new(store: Arc<dyn TableStore>, workload: Arc<Workload>, every: Duration) -> Self {
        Self {
            store,
            workload,
            instance: format!("{:016x}", rand::random::<u64>()),
            every,
            state: tokio::sync::Mutex::default(),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Stops the engine's timer (`Engine::close`).
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the engine closed.
    pub fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How often the engine's timer flushes.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Reads what other processes stored, for the views and the advisor.
    pub async fn refresh(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.read_others(&mut state).await?;
        Ok(())
    }

    /// Stores this process's statistics if they changed (and a reset, if
    /// one ran here), takes over stopped processes', and reads the others'.
    /// `closing`: the head says this process stopped, so that the next
    /// process to flush takes its counts over.
    pub async fn flush(&self, closing: bool) -> Result<()> {
        let mut state = self.state.lock().await;
        // Once the engine closed, every head stored says so: a timer tick
        // that waited on the lock while `close` flushed must not store the
        // head as open again (a later `flush_workload` still stores counts).
        let closing = closing || self.stopped();
        if let Some(at) = self.workload.take_reset()
            && let Err(e) = self.store_reset(at).await
        {
            self.workload.put_back_reset(at);
            return Err(e);
        }
        let reset = self.read_others(&mut state).await?;
        let own_since = self.workload.own_since();
        if reset.is_some_and(|at| at > own_since) {
            self.workload.reset_to(reset.unwrap_or(own_since));
        }
        if !self.workload.enabled() {
            return Ok(());
        }
        for _ in 0..3 {
            match self.store_own(&mut state, closing).await? {
                Stored::Done => break,
                Stored::Again => continue,
            }
        }
        let rest = merged(state.others.values());
        self.workload.set_others(rest);
        Ok(())
    }

    /// Writes the reset marker (the heads it makes old are deleted by
    /// whoever reads them next: `read_others`).
    async fn store_reset(&self, at: DateTime<Utc>) -> Result<()> {
        let table = table()?;
        create(self.store.as_ref(), &table).await?;
        let marker =
            Entity::new(partition()?, RowKey::new(RESET_ROW)?).with("at", EdmValue::DateTime(at));
        self.store
            .execute(&table, WriteOp::InsertOrReplace(marker))
            .await?;
        Ok(())
    }

    /// Reads the heads, the reset marker and the snapshots that changed
    /// since the last read; sets the others' statistics; returns the last
    /// reset. Heads older than it are deleted (best effort).
    ///
    /// A head and the chunks it names are separate requests, with no
    /// snapshot across them: a process that stores a new generation
    /// between the two has deleted the chunks its old head named, and a
    /// reader that took the old head finds them gone. Its new head has
    /// landed by then, so the heads are read again (up to [`READS`] times
    /// in all) while a snapshot that did not read whole has a new head, and
    /// the new one read; a process merged without one would be missing from
    /// the sum (a reader that knew it before keeps what it read then). A
    /// snapshot that does not read under an unchanged head is not read again.
    async fn read_others(&self, state: &mut State) -> Result<Option<DateTime<Utc>>> {
        let Some(mut heads) = self.read_heads().await? else {
            return Ok(None);
        };
        let (mut seen, mut torn) = self.read_snapshots(&state.others, &heads).await?;
        let mut reads = 1;
        while !torn.is_empty() && reads < READS {
            let Some(again) = self.read_heads().await? else {
                break;
            };
            reads += 1;
            let replaced = torn.iter().any(|(instance, generation)| {
                again
                    .current
                    .iter()
                    .any(|(i, o)| i == instance && o.generation != *generation)
            });
            // Unreplaced, the snapshots read stay with the heads they were
            // read under (a reset read since would delete what was merged).
            if !replaced {
                break;
            }
            heads = again;
            (seen, torn) = self.read_snapshots(&seen, &heads).await?;
        }
        if !torn.is_empty() {
            tracing::debug!(
                torn = torn.len(),
                "workload snapshots that did not read whole"
            );
        }
        for (instance, o) in heads.old {
            // Best effort: another process may be deleting it too.
            let _ = self.delete_other(&instance, &o).await;
        }
        state.others = seen;
        self.workload.set_others(merged(state.others.values()));
        Ok(heads.reset)
    }

    /// The other processes' heads and the reset marker; `None` before
    /// any process stored statistics.
    async fn read_heads(&self) -> Result<Option<Heads>> {
        let table = table()?;
        let query = Query::partition(partition()?).rows(starting_with(HEAD)?);
        let heads = match self.store.query_all(&table, &query).await {
            Ok(h) => h,
            Err(StorageError::TableNotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let reset = match self
            .store
            .get(&table, &partition()?, &RowKey::new(RESET_ROW)?)
            .await?
            .and_then(|e| e.get("at").cloned())
        {
            Some(EdmValue::DateTime(at)) => Some(at),
            _ => None,
        };
        let mut found = Heads {
            current: Vec::new(),
            old: Vec::new(),
            reset,
        };
        for h in &heads {
            let Some(instance) = h.row_key().as_str().strip_prefix(HEAD) else {
                continue;
            };
            if instance == self.instance {
                continue;
            }
            let Some(other) = parse_head(h) else {
                continue;
            };
            if reset.is_some_and(|at| other.since < at) {
                found.old.push((instance.to_owned(), other));
            } else {
                found.current.push((instance.to_owned(), other));
            }
        }
        Ok(Some(found))
    }

    /// The snapshots `heads` name, read where they changed since `known`
    /// held them; and those that could not be read whole (replaced
    /// meanwhile, or unreadable), by instance and generation.
    async fn read_snapshots(
        &self,
        known: &HashMap<String, Other>,
        heads: &Heads,
    ) -> Result<(HashMap<String, Other>, Vec<(String, u64)>)> {
        let mut seen = HashMap::new();
        let mut torn = Vec::new();
        for (instance, head) in &heads.current {
            let mut other = head.clone();
            let known = known.get(instance);
            match known {
                Some(o) if o.generation == other.generation && o.kept.is_some() => {
                    other.kept = o.kept.clone();
                }
                _ => other.kept = self.read_snapshot(instance, &other).await?,
            }
            if other.kept.is_none() {
                torn.push((instance.clone(), other.generation));
            }
            match known {
                // Replaced while it was read: the snapshot read before (its
                // own generation and ETag, so that it is read again next
                // time, and never taken over under the new head) until then.
                Some(o) if other.kept.is_none() && o.kept.is_some() => {
                    seen.insert(instance.clone(), o.clone());
                }
                _ => {
                    seen.insert(instance.clone(), other);
                }
            }
        }
        Ok((seen, torn))
    }

    /// The snapshot `head` names; `None` where it is not whole (its process
    /// replaced it meanwhile) or does not read.
    async fn read_snapshot(&self, instance: &str, head: &Other) -> Result<Option<Kept>> {
        let prefix = chunk_prefix(instance, head.generation);
        let query = Query::partition(partition()?).rows(starting_with(&prefix)?);
        let mut chunks = self.store.query_all(&table()?, &query).await?;
        if chunks.len() != head.chunks {
            return Ok(None);
        }
        // Joined in RowKey order (`chunk_key`'s zero-padded numbers), not
        // in the order the pages brought them: a store that is not key
        // ordered ([`TableStore::key_ordered`]) brings them in any.
        chunks.sort_by(|a, b| a.row_key().cmp(b.row_key()));
        let mut text = String::new();
        for c in &chunks {
            for i in 0..PROPERTIES_PER_CHUNK {
                if let Some(EdmValue::String(part)) = c.get(&part_name(i)) {
                    text.push_str(part);
                }
            }
        }
        Ok(snapshot::decode(&text))
    }

    /// One attempt at storing this process's snapshot (see the module doc).
    async fn store_own(&self, state: &mut State, closing: bool) -> Result<Stored> {
        if state.unsure.is_some() {
            self.settle(state).await?;
        }
        let now = Utc::now();
        let own = self.workload.own();
        let changed = state.stored != Some(own.changes);
        let taken: Vec<(String, Other)> = state
            .others
            .iter()
            .filter(|(_, o)| o.stopped(now) && o.kept.is_some())
            .take(TAKEN_PER_FLUSH)
            .map(|(i, o)| (i.clone(), o.clone()))
            .collect();
        let heartbeat = state.stored_at.is_some_and(|at| at.elapsed() >= HEARTBEAT);
        let nothing_yet = state.stored.is_none() && own.is_empty();
        if taken.is_empty() && (nothing_yet || (!changed && closing == state.closed && !heartbeat))
        {
            return Ok(Stored::Done);
        }
        // The stopped processes' counts first, this process's over them: its
        // statements' last access paths are the newest.
        let mut all = Kept::empty(own.since);
        let mut by_age: Vec<&Kept> = taken.iter().filter_map(|(_, o)| o.kept.as_ref()).collect();
        by_age.sort_by_key(|k| k.since);
        for k in by_age {
            all.merge(k);
        }
        all.merge(&own);
        all.limit();
        let text = snapshot::encode(&all);
        let parts = cut(&text);
        state.tried = state.tried.max(state.generation) + 1;
        let generation = state.tried;
        let table = table()?;
        create(self.store.as_ref(), &table).await?;
        let mut chunks = Vec::new();
        for (n, group) in parts.chunks(PROPERTIES_PER_CHUNK).enumerate() {
            let mut e = Entity::new(partition()?, chunk_key(&self.instance, generation, n)?);
            for (i, part) in group.iter().enumerate() {
                e = e.with(part_name(i), EdmValue::String((*part).to_owned()));
            }
            chunks.push(WriteOp::InsertOrReplace(e));
        }
        let count = chunks.len();
        let head = Entity::new(partition()?, head_key(&self.instance)?)
            .with("format_version", EdmValue::Int32(FORMAT_VERSION))
            .with("generation", EdmValue::Int64(generation as i64))
            .with("chunks", EdmValue::Int64(count as i64))
            .with("since", EdmValue::DateTime(all.since))
            .with("flushed", EdmValue::DateTime(now))
            .with("every_ms", EdmValue::Int64(self.every.as_millis() as i64))
            .with("closed", EdmValue::Boolean(closing));
        // The last chunks go with the head; the others before it.
        let last = chunks.split_off(count.saturating_sub(CHUNKS_PER_BATCH - 1));
        for batch in chunks.chunks(CHUNKS_PER_BATCH) {
            if let Err(e) = self.store.execute_batch(&table, batch.to_vec()).await {
                self.delete_chunks(&self.instance, generation, count).await;
                return Err(e);
            }
        }
        let mut ops = last;
        let head_at = ops.len();
        ops.push(match &state.etag {
            Some(etag) => WriteOp::Update(head, IfMatch::ETag(etag.clone())),
            None => WriteOp::InsertOrReplace(head),
        });
        for (instance, o) in &taken {
            ops.push(WriteOp::Delete {
                partition_key: partition()?,
                row_key: head_key(instance)?,
                if_match: IfMatch::ETag(o.etag.clone()),
            });
        }
        let attempt = Attempt {
            generation,
            chunks: count,
            changes: own.changes,
            closing,
            taken,
        };
        let e = match self.store.execute_batch(&table, ops).await {
            Ok(outcomes) => {
                let etag = outcomes.get(head_at).and_then(|o| o.etag.clone());
                self.landed(state, attempt, etag).await;
                return Ok(Stored::Done);
            }
            Err(e) => e,
        };
        let refused = match &e {
            StorageError::Batch { index, source } => Some((*index, source.root())),
            _ => None,
        };
        match refused {
            Some((i, StorageError::EntityNotFound { .. })) if i == head_at => {
                self.delete_chunks(&self.instance, generation, count).await;
                self.taken_over(state);
                Ok(Stored::Again)
            }
            Some((i, StorageError::PreconditionFailed { .. })) if i == head_at => {
                // Only this process writes its head, so a write of its own
                // landed unseen (a lost answer): read it back, not a takeover.
                state.unsure = Some(attempt);
                self.settle(state).await
            }
            Some((
                i,
                StorageError::PreconditionFailed { .. } | StorageError::EntityNotFound { .. },
            )) if i > head_at => {
                // Another process took that one over first.
                self.delete_chunks(&self.instance, generation, count).await;
                if let Some((instance, _)) = attempt.taken.get(i - head_at - 1) {
                    state.others.remove(instance);
                }
                Ok(Stored::Again)
            }
            _ if may_have_landed(&e) => {
                // Its chunks stay: the head may name them.
                state.unsure = Some(attempt);
                match self.settle(state).await {
                    Ok(Stored::Done) => Ok(Stored::Done),
                    _ => Err(e),
                }
            }
            _ => {
                self.delete_chunks(&self.instance, generation, count).await;
                Err(e)
            }
        }
    }

    /// Records `attempt` as stored (its head's ETag `etag`), takes the
    /// processes it deleted the heads of over, and deletes the chunks no
    /// head names any longer.
    async fn landed(&self, state: &mut State, attempt: Attempt, etag: Option<ETag>) {
        let (old, old_chunks) = (state.generation, state.chunks);
        state.generation = attempt.generation;
        state.chunks = attempt.chunks;
        state.etag = etag;
        state.stored = Some(attempt.changes);
        state.stored_at = Some(Instant::now());
        state.closed = attempt.closing;
        // Out of the others' first: a reader in between counts them once
        // too few, never twice.
        for (instance, _) in &attempt.taken {
            state.others.remove(instance);
        }
        self.workload.set_others(merged(state.others.values()));
        for (_, o) in &attempt.taken {
            if let Some(k) = &o.kept {
                self.workload.absorb(k);
            }
        }
        if old > 0 && old != attempt.generation {
            self.delete_chunks(&self.instance, old, old_chunks).await;
        }
        for (instance, o) in &attempt.taken {
            self.delete_chunks(instance, o.generation, o.chunks).await;
        }
    }

    /// Another process took this one's head over (it looked stopped): what
    /// it stored is counted there. Starts again from nothing, under a head
    /// of its own.
    fn taken_over(&self, state: &mut State) {
        self.workload.reset_to(Utc::now());
        state.etag = None;
        state.stored = None;
        state.chunks = 0;
    }

    /// Reads this process's head back to learn whether `state.unsure`
    /// landed: `Done` if it did, `Again` if there is something to store
    /// (it did not, the head was taken over, or it names a generation this
    /// process lost track of). A failed read keeps it unsure.
    async fn settle(&self, state: &mut State) -> Result<Stored> {
        let (table, pk, rk) = (table()?, partition()?, head_key(&self.instance)?);
        let Some(attempt) = state.unsure.take() else {
            return Ok(Stored::Done);
        };
        let head = match self.store.get(&table, &pk, &rk).await {
            Ok(h) => h,
            Err(StorageError::TableNotFound(_)) => None,
            Err(e) => {
                state.unsure = Some(attempt);
                return Err(e);
            }
        };
        let Some(head) = head else {
            self.delete_chunks(&self.instance, attempt.generation, attempt.chunks)
                .await;
            if state.etag.is_some() {
                self.taken_over(state);
            }
            return Ok(Stored::Again);
        };
        let named = parse_head(&head).map(|o| (o.generation, o.chunks));
        if named.is_some_and(|(g, _)| g == attempt.generation) {
            self.landed(state, attempt, Some(head.etag)).await;
            return Ok(Stored::Done);
        }
        self.delete_chunks(&self.instance, attempt.generation, attempt.chunks)
            .await;
        if named != Some((state.generation, state.chunks)) {
            // Not the head last stored (an earlier write landed late): its
            // snapshot is not known whole, so it is written again over it.
            if state.generation > 0 {
                self.delete_chunks(&self.instance, state.generation, state.chunks)
                    .await;
            }
            let (generation, chunks) = named.unwrap_or((0, 0));
            state.generation = generation;
            state.chunks = chunks;
            state.tried = state.tried.max(generation);
            state.stored = None;
        }
        state.etag = Some(head.etag);
        Ok(Stored::Again)
    }

    /// Deletes a head older than the last reset, and its chunks.
    async fn delete_other(&self, instance: &str, o: &Other) -> Result<()> {
        let op = WriteOp::Delete {
            partition_key: partition()?,
            row_key: head_key(instance)?,
            if_match: IfMatch::ETag(o.etag.clone()),
        };
        self.store.execute(&table()?, op).await?;
        self.delete_chunks(instance, o.generation, o.chunks).await;
        Ok(())
    }

    /// Deletes a generation's chunks, best effort: a chunk left behind is
    /// read by no one (no head names its generation).
    async fn delete_chunks(&self, instance: &str, generation: u64, count: usize) {
        let (Ok(table), Ok(pk)) = (table(), partition()) else {
            return;
        };
        let mut ops = Vec::new();
        for n in 0..count {
            if let Ok(rk) = chunk_key(instance, generation, n) {
                ops.push(WriteOp::Delete {
                    partition_key: pk.clone(),
                    row_key: rk,
                    if_match: IfMatch::Any,
                });
            }
        }
        for batch in ops.chunks(crate::storage::write::MAX_BATCH_OPERATIONS) {
            if self
                .store
                .execute_batch(&table, batch.to_vec())
                .await
                .is_err()
            {
                // One missing refuses the transaction: each alone.
                for op in batch {
                    let _ = self.store.execute(&table, op.clone()).await;
                }
            }
        }
    }
}

/// Whether a failed write may have been applied all the same (its answer
/// was lost, or the store cannot say); a refusal wrote nothing.
fn may_have_landed(e: &StorageError) -> bool {
    match e {
        StorageError::Unavailable {
            may_have_applied, ..
        } => *may_have_applied,
        StorageError::Batch { .. }
        | StorageError::Invalid(_)
        | StorageError::CommitFailed(_)
        | StorageError::TableNotFound(_)
        | StorageError::TableBeingDeleted(_)
        | StorageError::Unauthorized { .. }
        | StorageError::PreconditionFailed { .. }
        | StorageError::EntityNotFound { .. }
        | StorageError::EntityAlreadyExists { .. } => false,
        _ => true,
    }
}

/// Reads of the heads that `read_others` makes at most, while snapshots
/// are replaced under it.
const READS: u32 = 5;

/// What the heads said in one read.
struct Heads {
    /// The other processes' heads, by instance.
    current: Vec<(String, Other)>,
    /// Heads older than the last reset (deleted by the reader).
    old: Vec<(String, Other)>,
    reset: Option<DateTime<Utc>>,
}

/// Whether to try storing again (after another process took a head over).
enum Stored {
    Done,
    Again,
}

/// The others' snapshots merged, the most recently stored last.
fn merged<'a>(others: impl Iterator<Item = &'a Other>) -> Kept {
    let mut all: Vec<&Other> = others.filter(|o| o.kept.is_some()).collect();
    all.sort_by_key(|o| o.flushed);
    let mut out = Kept::empty(Utc::now());
    for o in all {
        if let Some(k) = &o.kept {
            out.merge(k);
        }
    }
    out
}

fn parse_head(h: &StoredEntity) -> Option<Other> {
    if h.get("format_version") != Some(&EdmValue::Int32(FORMAT_VERSION)) {
        return None;
    }
    let int = |name: &str| match h.get(name) {
        Some(EdmValue::Int64(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let time = |name: &str| match h.get(name) {
        Some(EdmValue::DateTime(t)) => Some(*t),
        _ => None,
    };
    Some(Other {
        generation: int("generation")?,
        chunks: usize::try_from(int("chunks")?).ok()?,
        etag: h.etag.clone(),
        since: time("since")?,
        flushed: time("flushed")?,
        every: Duration::from_millis(int("every_ms").unwrap_or(0)),
        closed: matches!(h.get("closed"), Some(EdmValue::Boolean(true))),
        kept: None,
    })
}

async fn create(store: &dyn TableStore, table: &TableName) -> Result<()> {
    match store.create_table(table).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::super::workload::Run;
    use super::*;
    use crate::storage::layer::{Derived, StoreLayer};
    use crate::storage::{ContinuationToken, MemoryStore, Page, WriteOutcome};

    fn process(store: &Arc<dyn TableStore>) -> (Arc<Workload>, PersistedWorkload) {
        let w = Arc::new(Workload::default());
        let p = PersistedWorkload::new(store.clone(), w.clone(), Duration::from_secs(10));
        (w, p)
    }

    fn calls(w: &Workload) -> u64 {
        w.statements().iter().map(|(_, s)| s.calls).sum()
    }

    /// Statements long enough that the snapshot takes several chunks and
    /// transactions; a second process reads them merged, takes the first
    /// over once it closed (counted once), and a reset clears them.
    #[tokio::test]
    async fn snapshots_are_stored_merged_taken_over_and_reset() -> Result<()> {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        let (a, pa) = process(&store);
        let long = "x".repeat(20_000);
        for i in 0..150 {
            a.ran(&format!("SELECT '{long}', {i}"), Run::default());
        }
        a.wrote(
            "T",
            ("p", 3),
            false,
            crate::storage::bill::Transactions::default(),
        );
        pa.flush(false).await?;
        let state = pa.state.lock().await;
        assert!(state.chunks > CHUNKS_PER_BATCH, "{} chunks", state.chunks);
        drop(state);

        let (b, pb) = process(&store);
        pb.refresh().await?;
        assert_eq!(calls(&b), 150);
        b.ran("SELECT 1", Run::default());
        pb.flush(false).await?;
        assert_eq!(calls(&b), 151);
        // Nothing changed: nothing written.
        let before = store
            .query_all(&table()?, &Query::partition(partition()?))
            .await?;
        pb.flush(false).await?;
        let after = store
            .query_all(&table()?, &Query::partition(partition()?))
            .await?;
        assert_eq!(before, after);

        pa.flush(true).await?;
        pb.flush(false).await?;
        let heads = store
            .query_all(
                &table()?,
                &Query::partition(partition()?).rows(starting_with(HEAD)?),
            )
            .await?;
        assert_eq!(heads.len(), 1, "a's head taken over by b");
        assert_eq!(calls(&b), 151);
        let partition_rows = b.partitions();
        assert_eq!(partition_rows[0].traffic.written, 3);
        let (c, pc) = process(&store);
        pc.refresh().await?;
        assert_eq!(calls(&c), 151, "counted once");

        b.reset();
        pb.flush(false).await?;
        let (d, pd) = process(&store);
        pd.refresh().await?;
        assert_eq!(calls(&d), 0);
        // Chunks of generations no head names are gone.
        let left = store
            .query_all(&table()?, &Query::partition(partition()?))
            .await?;
        let chunks = left
            .iter()
            .filter(|e| e.row_key().as_str().starts_with(CHUNK))
            .count();
        assert!(chunks <= 1, "{chunks} chunks left");
        Ok(())
    }

    /// A store that applies the next `lose` transactions writing a head but
    /// loses their answers: with `retry`, as Azure's retry meeting its own
    /// first attempt (`AmbiguousRetry`); else as an outage
    /// (`Unavailable`, may have applied). Also fails the next `fail_gets`
    /// point reads.
    #[derive(Debug)]
    struct Lossy {
        inner: MemoryStore,
        lose: AtomicUsize,
        retry: AtomicBool,
        fail_gets: AtomicUsize,
    }

    fn unavailable(may_have_applied: bool) -> StorageError {
        StorageError::Unavailable {
            attempts: 3,
            detail: "timed out".into(),
            may_have_applied,
        }
    }

    fn take_one(n: &AtomicUsize) -> bool {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    #[async_trait]
    impl StoreLayer for Lossy {
        const DERIVED: Derived = Derived::Here;

        fn below(&self) -> &dyn TableStore {
            &self.inner
        }

        async fn get(
            &self,
            table: &TableName,
            pk: &PartitionKey,
            rk: &RowKey,
        ) -> Result<Option<StoredEntity>> {
            if take_one(&self.fail_gets) {
                return Err(unavailable(false));
            }
            self.inner.get(table, pk, rk).await
        }
        async fn execute_batch(
            &self,
            table: &TableName,
            ops: Vec<WriteOp>,
        ) -> Result<Vec<WriteOutcome>> {
            let head = ops.iter().any(|op| op.keys().1.as_str().starts_with(HEAD));
            if !head || !take_one(&self.lose) {
                return self.inner.execute_batch(table, ops).await;
            }
            self.inner.execute_batch(table, ops.clone()).await?;
            if !self.retry.load(Ordering::SeqCst) {
                return Err(unavailable(true));
            }
            self.inner
                .execute_batch(table, ops)
                .await
                .map_err(|e| StorageError::AmbiguousRetry {
                    attempts: 2,
                    source: Box::new(e),
                })
        }
    }

    /// A flush whose head transaction landed but whose answer was lost
    /// (the head read back at once, or only at the next flush) is counted
    /// as stored: the counts survive, the chunks it wrote stay readable,
    /// and the next flush is not taken for a takeover.
    #[tokio::test]
    async fn a_lost_answer_that_landed_keeps_the_counts() -> Result<()> {
        for (retry, fail_gets) in [(false, 0), (true, 0), (false, 1), (true, 1)] {
            let lossy = Arc::new(Lossy {
                inner: MemoryStore::new(),
                lose: AtomicUsize::new(0),
                retry: AtomicBool::new(retry),
                fail_gets: AtomicUsize::new(0),
            });
            let store: Arc<dyn TableStore> = lossy.clone();
            let (a, pa) = process(&store);
            a.ran("SELECT 1", Run::default());
            pa.flush(false).await?;
            a.ran("SELECT 2", Run::default());
            lossy.lose.store(1, Ordering::SeqCst);
            lossy.fail_gets.store(fail_gets, Ordering::SeqCst);
            let first = pa.flush(false).await;
            a.ran("SELECT 3", Run::default());
            pa.flush(false).await?;
            assert_eq!(calls(&a), 3, "{retry} {fail_gets}: not reset");
            let (b, pb) = process(&store);
            pb.refresh().await?;
            assert_eq!(calls(&b), 3, "{retry} {fail_gets}: readable");
            // Only the head's generation's chunks are left.
            let chunks = store
                .query_all(
                    &table()?,
                    &Query::partition(partition()?).rows(starting_with(CHUNK)?),
                )
                .await?;
            assert_eq!(chunks.len(), pa.state.lock().await.chunks);
            // An error only while the head could not be read back.
            assert_eq!(first.is_err(), fail_gets > 0, "{retry} {fail_gets}");
        }
        Ok(())
    }

    /// A store whose first query of chunks first lets another process
    /// store a new generation (deleting the chunks the head read before
    /// named), as a flush landing between a reader's two requests does.
    struct Replacing {
        inner: Arc<MemoryStore>,
        writer: tokio::sync::Mutex<Option<(Arc<Workload>, PersistedWorkload)>>,
    }

    impl std::fmt::Debug for Replacing {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Replacing")
        }
    }

    #[async_trait]
    impl StoreLayer for Replacing {
        const DERIVED: Derived = Derived::Here;

        fn below(&self) -> &dyn TableStore {
            self.inner.as_ref()
        }

        async fn query(
            &self,
            table: &TableName,
            query: &Query,
            token: Option<&ContinuationToken>,
        ) -> Result<Page> {
            let chunks =
                matches!(&query.rows.start, Bound::Included(k) if k.as_str().starts_with(CHUNK));
            if chunks && let Some((w, writer)) = self.writer.lock().await.take() {
                w.ran("SELECT 3", Run::default());
                writer.flush(false).await?;
            }
            self.inner.query(table, query, token).await
        }
    }

    /// A snapshot replaced while another process reads it is read again
    /// under its new head: the reader's sum misses no process.
    #[tokio::test]
    async fn a_snapshot_replaced_while_read_is_read_again_under_its_new_head() -> Result<()> {
        let inner = Arc::new(MemoryStore::new());
        let direct: Arc<dyn TableStore> = inner.clone();
        let (a, pa) = process(&direct);
        a.ran("SELECT 1", Run::default());
        a.ran("SELECT 2", Run::default());
        pa.flush(false).await?;
        let store: Arc<dyn TableStore> = Arc::new(Replacing {
            inner,
            writer: tokio::sync::Mutex::new(Some((a, pa))),
        });
        let (b, pb) = process(&store);
        pb.refresh().await?;
        assert_eq!(calls(&b), 3, "the new generation, read whole");
        Ok(())
    }

    /// A flush that waited on the lock while `close` stored the closed head
    /// does not store it as open again.
    #[tokio::test]
    async fn a_flush_after_close_keeps_the_head_closed() -> Result<()> {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        let (a, pa) = process(&store);
        a.ran("SELECT 1", Run::default());
        pa.stop();
        pa.flush(true).await?;
        a.ran("SELECT 2", Run::default());
        pa.flush(false).await?;
        let head = store
            .get(&table()?, &partition()?, &head_key(&pa.instance)?)
            .await?;
        let closed = head.and_then(|h| parse_head(&h)).map(|o| o.closed);
        assert_eq!(closed, Some(true));
        let (b, pb) = process(&store);
        pb.refresh().await?;
        assert_eq!(calls(&b), 2);
        Ok(())
    }

    #[test]
    fn text_is_cut_at_character_boundaries_within_the_limit() {
        let text = format!(
            "{}é{}",
            "a".repeat(PROPERTY_UNITS - 1),
            "\u{1F600}".repeat(3)
        );
        let parts = cut(&text);
        assert_eq!(parts.concat(), text);
        assert!(
            parts
                .iter()
                .all(|p| p.encode_utf16().count() <= PROPERTY_UNITS)
        );
        assert_eq!(parts.len(), 2);
        assert_eq!(cut(""), [""]);
    }
}
