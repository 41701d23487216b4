//! Group commit: entity group transactions that arrive while a commit is under
//! way wait, then share the next redb transaction and its one fsync. Each keeps
//! its own all-or-nothing outcome: its effects are all worked out against the
//! transaction's state before any of them is written, so a failing one leaves
//! the shared transaction untouched. Every caller is answered only after the
//! commit that holds its writes is durable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{ReadableTable, WriteTransaction};

use super::dict::{self, Dict};
use super::{
    CLOCK_KEY, EmbeddedStore, META, TABLES, counts, entities, entity_table_name, key, value,
};
use crate::storage::value::to_ticks;
use crate::storage::write::{Effect, apply};
use crate::storage::{
    InvalidInput, PartitionKey, Result, StorageError, TableName, WriteOp, WriteOutcome,
};

/// One submitted transaction and, once a commit has run, its answer. The
/// commit takes the operations out, so their entities are stored without a
/// copy.
struct Pending {
    table: TableName,
    ops: Mutex<Vec<WriteOp>>,
    answer: Mutex<Option<Result<Vec<WriteOutcome>>>>,
}

/// The queue of transactions waiting for a commit, and the commit's turn.
#[derive(Debug, Default)]
pub struct GroupCommit {
    queue: Mutex<Vec<Arc<Pending>>>,
    turn: Mutex<()>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Pending({} ops on {})",
            lock(&self.ops).len(),
            self.table
        )
    }
}

/// A lock whose holder panicked still guards consistent data here: answers
/// are written whole, and the queue only grows or is taken whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GroupCommit {
    /// Runs a validated transaction, blocking until it is durable or has failed.
    pub fn submit(
        &self,
        store: &EmbeddedStore,
        table: TableName,
        ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        let mine = Arc::new(Pending {
            table,
            ops: Mutex::new(ops),
            answer: Mutex::new(None),
        });
        lock(&self.queue).push(Arc::clone(&mine));
        let _turn = lock(&self.turn);
        if let Some(answer) = lock(&mine.answer).take() {
            return answer; // an earlier commit carried it
        }
        let group = std::mem::take(&mut *lock(&self.queue));
        match commit(store, &group) {
            Ok(answers) => {
                for (p, answer) in group.iter().zip(answers) {
                    *lock(&p.answer) = Some(answer);
                }
            }
            Err(e) => {
                let text = e.to_string();
                for p in &group {
                    *lock(&p.answer) = Some(Err(StorageError::CommitFailed(text.clone())));
                }
            }
        }
        lock(&mine.answer)
            .take()
            .unwrap_or_else(|| Err(StorageError::Task("no answer".into())))
    }
}

/// Writes every transaction of the group that can succeed into one redb
/// transaction and commits it; the outer error fails the whole group.
fn commit(store: &EmbeddedStore, group: &[Arc<Pending>]) -> Result<Vec<Result<Vec<WriteOutcome>>>> {
    let epoch = store.dicts.epoch();
    let txn = store.db.begin_write()?;
    let mut answers = Vec::with_capacity(group.len());
    let mut last = None;
    // Each table's names as this transaction extends them, published once
    // it is durable.
    let mut dicts: HashMap<String, Dict> = HashMap::new();
    let mut known = 0;
    // The partitions each table's writes touch, for the derived cache.
    let mut touched: HashMap<&TableName, Vec<PartitionKey>> = HashMap::new();
    for p in group {
        let timestamp = store.clock.next();
        let ops = std::mem::take(&mut *lock(&p.ops));
        let partitions = touched.entry(&p.table).or_default();
        for op in &ops {
            let pk = op.keys().0;
            if partitions.last() != Some(pk) {
                partitions.push(pk.clone());
            }
        }
        let folded = p.table.folded();
        if txn.open_table(TABLES)?.get(folded.as_str())?.is_none() {
            answers.push(Err(StorageError::TableNotFound(
                p.table.as_str().to_owned(),
            )));
            continue;
        }
        if !dicts.contains_key(&folded) {
            let names = txn.open_table(dict::definition(&dict::table_name(&folded)))?;
            let kept = store.dict(&folded, &names, epoch)?;
            known += kept.len();
            dicts.insert(folded.clone(), Dict::clone(&kept));
        }
        let Some(dict) = dicts.get_mut(&folded) else {
            return Err(StorageError::Task("no dictionary".into()));
        };
        match stage(&txn, &p.table, dict, ops, timestamp) {
            Ok(Ok(effects)) => {
                answers.push(Ok(write(&txn, &p.table, dict, effects)?));
                last = Some(timestamp);
            }
            Ok(Err(refused)) => answers.push(Err(refused)),
            Err(e) => return Err(e),
        }
    }
    if let Some(t) = last {
        txn.open_table(META)?
            .insert(CLOCK_KEY, to_ticks(&t).to_le_bytes().as_slice())?;
    }
    // New names are committed before they are kept: readers check their
    // dictionaries against their snapshots meanwhile.
    let _changing =
        (dicts.values().map(Dict::len).sum::<u64>() > known).then(|| store.dicts.changing());
    // Before and after, whatever the outcome: pages kept while the commit
    // lands may hold either state, and readers that began before it may
    // have kept the old one; a failed commit may still have landed, and a
    // needless miss costs only a read.
    for (table, partitions) in &touched {
        store.derived.writing(table, partitions);
    }
    let committed = store.snapshots.commit(|| txn.commit());
    for (table, partitions) in &touched {
        store.derived.written(table, partitions);
    }
    committed?;
    for (folded, dict) in dicts {
        store.dicts.offer(&folded, Arc::new(dict), epoch);
    }
    Ok(answers)
}

/// Entities' stored keys and what becomes of them.
pub(super) type Staged = Vec<(Vec<u8>, Effect)>;

/// Works out a transaction's effects without writing: the inner error is the
/// transaction's own refusal (naming the operation), the outer one a failure
/// of the store.
fn stage(
    txn: &WriteTransaction,
    table: &TableName,
    dict: &Dict,
    ops: Vec<WriteOp>,
    timestamp: chrono::DateTime<chrono::Utc>,
) -> Result<Result<Staged>> {
    let name = entity_table_name(table);
    let rows = txn.open_table(entities(&name))?;
    let mut staged = Vec::with_capacity(ops.len());
    for (index, op) in ops.into_iter().enumerate() {
        let (pk, rk) = op.keys();
        let key = key::encode(pk, rk);
        let existing = match rows.get(key.as_slice())? {
            Some(v) => Some(value::decode(
                pk.clone(),
                rk.clone(),
                v.value(),
                dict,
                None,
            )?),
            None => None,
        };
        match apply(existing.as_ref(), op, timestamp) {
            Ok(effect) => staged.push((key, effect)),
            Err(e) => {
                return Ok(Err(StorageError::Batch {
                    index,
                    source: Box::new(e),
                }));
            }
        }
    }
    // A transaction that would number more names than the table may hold
    // is refused alone, before any of it is written.
    let names = staged.iter().flat_map(|(_, effect)| match effect {
        Effect::Put(e) => Some(e.entity.properties.keys().map(String::as_str)),
        Effect::Delete => None,
    });
    if dict.len() as usize + dict.missing(names.flatten()) > dict::MAX_NAMES {
        return Ok(Err(InvalidInput::TooManyPropertyNames {
            limit: dict::MAX_NAMES,
        }
        .into()));
    }
    Ok(Ok(staged))
}

/// Writes staged effects, with the names they bring and the counts they
/// change, into the caller's transaction.
pub(super) fn write(
    txn: &WriteTransaction,
    table: &TableName,
    dict: &mut Dict,
    staged: Staged,
) -> Result<Vec<WriteOutcome>> {
    let folded = table.folded();
    let name = entity_table_name(table);
    let mut rows = txn.open_table(entities(&name))?;
    let mut names = txn.open_table(dict::definition(&dict::table_name(&folded)))?;
    let mut deltas = counts::Deltas::default();
    let mut outcomes = Vec::with_capacity(staged.len());
    let (mut last, mut ids) = (Vec::new(), Vec::new());
    for (key, effect) in staged {
        match effect {
            Effect::Put(e) => {
                let props = &e.entity.properties;
                dict.ids_of(
                    props.keys().map(String::as_str),
                    &mut names,
                    &mut last,
                    &mut ids,
                )?;
                let value = value::encode(&e.timestamp, props, &ids)?;
                if rows.insert(key.as_slice(), value.as_slice())?.is_none() {
                    deltas.add(&key, 1)?;
                }
                outcomes.push(WriteOutcome { etag: Some(e.etag) });
            }
            Effect::Delete => {
                if rows.remove(key.as_slice())?.is_some() {
                    deltas.add(&key, -1)?;
                }
                outcomes.push(WriteOutcome { etag: None });
            }
        }
    }
    deltas.apply(&mut txn.open_table(counts::definition(&counts::table_name(&folded)))?)?;
    Ok(outcomes)
}
