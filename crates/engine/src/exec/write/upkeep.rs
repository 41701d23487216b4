//! Index upkeep: per partition, the index rows each base row should have
//! (composed from its values as a write composes them) against the index
//! rows there are. `CHECK` counts base rows without their index row
//! (missing), index rows without a base row that composes them (orphaned)
//! and index rows whose carried values differ from the base row's (stale),
//! with a few example keys; `REPAIR` (and the backfill of `CREATE INDEX`)
//! fixes exactly those. Every fix is guarded by the ETags it read: an
//! index row is written in one entity group transaction with a keys-only
//! merge of its base row If-Match the base row's ETag (which gives the
//! base row a new ETag and Timestamp), and an orphan is deleted If-Match
//! its own, so a row a concurrent writer changed is left to that writer
//! (counted as a conflict) and never overwritten.
//!
//! A partition's index rows are read before its base rows: a write landing
//! between the two reads then shows as a base row whose index row is
//! missing (and the fix fails against the writer's row, a conflict), never
//! as a fresh index row without a base row, which a repair would delete.

use std::collections::HashMap;

use super::encode;
use crate::catalog::{IndexDef, TableDef};
use crate::exec::ExecError;
use crate::exec::read::access::KeyRequest;
use crate::keys::{KeyBounds, KeyTemplate, KeyValue};
use crate::storage::{
    EdmValue, Entity, IfMatch, KeyRange, PartitionKey, Query, RowKey, StorageError, StoredEntity,
    TableStore, WriteOp,
};

/// Example keys kept per index and kind.
const EXAMPLES: usize = 3;

/// Operations per entity group transaction (the service's limit is 100).
const BATCH: usize = 100;

/// What one index's check (or repair) found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexHealth {
    /// The index.
    pub index: String,
    /// Partitions read.
    pub partitions: u64,
    /// Base rows read.
    pub base_rows: u64,
    /// Index rows read.
    pub index_rows: u64,
    /// Base rows without their index row, `unindexable` included.
    pub missing: u64,
    /// Base rows no index row can hold (a value the template cannot
    /// write): no repair can give them one.
    pub unindexable: u64,
    /// Index rows no base row composes.
    pub orphaned: u64,
    /// Index rows at the right key carrying other values than the base row.
    pub stale: u64,
    /// Rows written or deleted by a repair.
    pub repaired: u64,
    /// Fixes left undone because a concurrent writer changed the row first.
    pub conflicts: u64,
    /// A few keys of each kind found, as `kind (PartitionKey, RowKey)`.
    pub examples: Vec<String>,
}

impl IndexHealth {
    /// Damaged rows found.
    pub fn damaged(&self) -> u64 {
        self.missing + self.orphaned + self.stale
    }

    fn example(&mut self, kind: &str, pk: &PartitionKey, rk: &str) {
        let shown = self.examples.iter().filter(|e| e.starts_with(kind)).count();
        if shown < EXAMPLES {
            self.examples
                .push(format!("{kind} ({:?}, {rk:?})", pk.as_str()));
        }
    }
}

/// Whether to fix what is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upkeep {
    /// Count only.
    Check,
    /// Count, then fix.
    Repair,
}

/// Checks (or repairs) indexes `positions` of `def`, partition by
/// partition; `progress` hears of each partition done with the base rows
/// read so far. Returns one report per index, in `positions` order.
pub async fn run(
    store: &dyn TableStore,
    def: &TableDef,
    positions: &[usize],
    upkeep: Upkeep,
    mut progress: impl FnMut(u64),
) -> Result<Vec<IndexHealth>, ExecError> {
    let mut health: Vec<IndexHealth> = positions
        .iter()
        .map(|&i| IndexHealth {
            index: def
                .indexes
                .get(i)
                .map(|ix| ix.name.clone())
                .unwrap_or_default(),
            ..IndexHealth::default()
        })
        .collect();
    let table = &def.storage_table;
    let mut after: Option<PartitionKey> = None;
    let mut base_rows = 0;
    loop {
        let page = store
            .partitions(table, &KeyRange::all(), after.as_ref())
            .await?;
        for pk in &page.partitions {
            let mut existing = Vec::with_capacity(positions.len());
            for &position in positions {
                let template = def.indexes.get(position).map(|ix| &ix.row_key);
                existing.push(match template {
                    Some(t) => read_rows(store, def, pk, t).await?,
                    None => Vec::new(),
                });
            }
            let mut base = read_rows(store, def, pk, &def.row_key).await?;
            base.retain(|b| def.index_prefix_of(b.row_key().as_str()).is_none());
            base_rows += base.len() as u64;
            let rows = Rows::new(def, &base);
            let mut fixes = Vec::new();
            for (slot, ((h, &position), existing)) in
                health.iter_mut().zip(positions).zip(existing).enumerate()
            {
                fixes.extend(partition(def, pk, &rows, existing, position, slot, h));
            }
            if upkeep == Upkeep::Repair {
                apply(store, def, &rows, fixes, &mut health).await?;
            }
            progress(base_rows);
        }
        match page.after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(health)
}

/// The entities of partition `pk` whose RowKeys `template` writes.
pub(super) async fn read_rows(
    store: &dyn TableStore,
    def: &TableDef,
    pk: &PartitionKey,
    template: &KeyTemplate,
) -> Result<Vec<StoredEntity>, ExecError> {
    let mut query = Query::partition(pk.clone());
    query.rows = match template.prefix_range(&[], None)? {
        KeyBounds::Range { start, end } => KeyRange {
            start: start.map(RowKey::from_stored),
            end: end.map(RowKey::from_stored),
        },
        KeyBounds::All | KeyBounds::Empty => KeyRange::all(),
    };
    Ok(store.query_all(&def.storage_table, &query).await?)
}

/// A partition's base rows, with their column values.
struct Rows<'a> {
    base: &'a [StoredEntity],
    values: Vec<Result<Vec<Option<EdmValue>>, ExecError>>,
    by_key: HashMap<&'a str, usize>,
}

impl<'a> Rows<'a> {
    fn new(def: &TableDef, base: &'a [StoredEntity]) -> Self {
        Self {
            base,
            values: base.iter().map(|b| row_values(def, b)).collect(),
            by_key: base
                .iter()
                .enumerate()
                .map(|(i, b)| (b.row_key().as_str(), i))
                .collect(),
        }
    }

    /// Whether index row `o` stands for a base row here: it names one
    /// that exists and holds its values (though that row's own index row
    /// could not be composed). Such a row is no orphan.
    fn stands_for_one(&self, def: &TableDef, ix: &IndexDef, o: &StoredEntity) -> bool {
        let agrees = |b: &StoredEntity| crate::exec::read::lookup::agrees(def, ix, o, b);
        match crate::exec::read::lookup::base_request(def, ix, o) {
            Ok(KeyRequest::Get(_, rk)) => self
                .by_key
                .get(rk.as_str())
                .is_some_and(|&i| agrees(&self.base[i])),
            Ok(KeyRequest::Scan { rows, .. }) => self
                .base
                .iter()
                .filter(|b| rows.contains(b.row_key()))
                .any(agrees),
            Err(_) => false,
        }
    }
}

/// One fix of one index row.
struct Fix {
    /// The base row (in `Rows::base`) it is written under, guarded by its
    /// ETag; `None` for an orphan's delete.
    base: Option<usize>,
    /// The write.
    op: WriteOp,
    /// The report it counts in.
    slot: usize,
}

/// One index in one partition, counted in `h`: the fixes it needs.
fn partition(
    def: &TableDef,
    pk: &PartitionKey,
    rows: &Rows<'_>,
    existing: Vec<StoredEntity>,
    position: usize,
    slot: usize,
    h: &mut IndexHealth,
) -> Vec<Fix> {
    let Some(ix) = def.indexes.get(position) else {
        return Vec::new();
    };
    h.partitions += 1;
    h.base_rows += rows.base.len() as u64;
    h.index_rows += existing.len() as u64;
    let mut have: HashMap<&str, &StoredEntity> =
        existing.iter().map(|e| (e.row_key().as_str(), e)).collect();
    let mut fixes = Vec::new();
    let mut wanted_keys: HashMap<String, usize> = HashMap::new();
    let wanted: Vec<Option<Entity>> = rows
        .base
        .iter()
        .zip(&rows.values)
        .map(|(b, values)| match values {
            Ok(v) => index_entity(def, ix, b, v).ok(),
            Err(_) => None,
        })
        .collect();
    for w in wanted.iter().flatten() {
        *wanted_keys
            .entry(w.row_key.as_str().to_owned())
            .or_default() += 1;
    }
    for (i, (b, wanted)) in rows.base.iter().zip(wanted).enumerate() {
        // Two base rows (written by an application under one primary key)
        // cannot share one index row.
        let wanted = wanted.filter(|w| wanted_keys.get(w.row_key.as_str()) == Some(&1));
        let Some(wanted) = wanted else {
            h.missing += 1;
            h.unindexable += 1;
            h.example("unindexable", pk, b.row_key().as_str());
            continue;
        };
        let fix = |op| Fix {
            base: Some(i),
            op,
            slot,
        };
        match have.remove(wanted.row_key.as_str()) {
            None => {
                h.missing += 1;
                h.example("missing", pk, wanted.row_key.as_str());
                fixes.push(fix(WriteOp::Insert(wanted)));
            }
            Some(found) if ix.covering && differs(def, &wanted, found) => {
                h.stale += 1;
                h.example("stale", pk, wanted.row_key.as_str());
                let etag = found.etag.clone();
                fixes.push(fix(WriteOp::Update(wanted, IfMatch::ETag(etag))));
            }
            Some(_) => {}
        }
    }
    let mut orphans: Vec<&StoredEntity> = have
        .into_values()
        .filter(|o| !rows.stands_for_one(def, ix, o))
        .collect();
    orphans.sort_by(|a, b| a.row_key().cmp(b.row_key()));
    for o in &orphans {
        h.orphaned += 1;
        h.example("orphaned", pk, o.row_key().as_str());
        fixes.push(Fix {
            base: None,
            op: WriteOp::Delete {
                partition_key: o.partition_key().clone(),
                row_key: o.row_key().clone(),
                if_match: IfMatch::ETag(o.etag.clone()),
            },
            slot,
        });
    }
    fixes
}

/// Bytes of one transaction: the service takes 4 MiB of request body,
/// which the batch's encoding makes larger than the entities' own size (the
/// same margin SQL writes keep).
const BATCH_BYTES: usize = 3 * 1024 * 1024;

/// Runs the fixes of one partition. The fixes of one base row, whatever
/// their index, go in one unit under one keys-only merge of the base row
/// If-Match its ETag (a second merge would find the first one's ETag);
/// units go many to a transaction, and a transaction refused because a
/// row changed runs again unit by unit, so that only the changed rows'
/// fixes are left undone.
async fn apply(
    store: &dyn TableStore,
    def: &TableDef,
    rows: &Rows<'_>,
    fixes: Vec<Fix>,
    health: &mut [IndexHealth],
) -> Result<(), ExecError> {
    let table = &def.storage_table;
    let mut units: Vec<(Vec<WriteOp>, Vec<usize>)> = Vec::new();
    let mut unit_of: HashMap<usize, usize> = HashMap::new();
    for fix in fixes {
        let at = match fix.base {
            Some(i) => *unit_of.entry(i).or_insert_with(|| {
                let b = &rows.base[i];
                let guard = WriteOp::Merge(
                    Entity::new(b.partition_key().clone(), b.row_key().clone()),
                    IfMatch::ETag(b.etag.clone()),
                );
                units.push((vec![guard], Vec::new()));
                units.len() - 1
            }),
            None => {
                units.push((Vec::new(), Vec::new()));
                units.len() - 1
            }
        };
        units[at].0.push(fix.op);
        units[at].1.push(fix.slot);
    }
    let mut batches: Vec<Vec<(Vec<WriteOp>, Vec<usize>)>> = vec![Vec::new()];
    let (mut ops, mut bytes) = (0, 0);
    for unit in units {
        let size: usize = unit.0.iter().map(WriteOp::stored_size).sum();
        if ops + unit.0.len() > BATCH || bytes + size > BATCH_BYTES {
            batches.push(Vec::new());
            (ops, bytes) = (0, 0);
        }
        ops += unit.0.len();
        bytes += size;
        if let Some(last) = batches.last_mut() {
            last.push(unit);
        }
    }
    let mut count = |slots: &[usize], done: bool| {
        for &slot in slots {
            if let Some(h) = health.get_mut(slot) {
                if done {
                    h.repaired += 1;
                } else {
                    h.conflicts += 1;
                }
            }
        }
    };
    for batch in batches.into_iter().filter(|b| !b.is_empty()) {
        let ops: Vec<WriteOp> = batch.iter().flat_map(|u| u.0.iter().cloned()).collect();
        match store.execute_batch(table, ops).await {
            Ok(_) => batch.iter().for_each(|u| count(&u.1, true)),
            Err(e) if changed(&e) => {
                for (ops, slots) in batch {
                    match store.execute_batch(table, ops).await {
                        Ok(_) => count(&slots, true),
                        Err(e) if changed(&e) => count(&slots, false),
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whether a write failed because a row it was guarded by changed (or
/// appeared, or went) since it was read.
fn changed(e: &StorageError) -> bool {
    match e {
        StorageError::Batch { source, .. } => changed(source),
        StorageError::PreconditionFailed { .. }
        | StorageError::EntityNotFound { .. }
        | StorageError::EntityAlreadyExists { .. } => true,
        _ => false,
    }
}

/// The index row a base row should have: its keys composed from its
/// values; a covering row carries the base row's properties (as a write
/// stores them), a keys-only row none.
fn index_entity(
    def: &TableDef,
    ix: &IndexDef,
    base: &StoredEntity,
    values: &[Option<EdmValue>],
) -> Result<Entity, ExecError> {
    let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
    let rk = RowKey::new(encode::compose(def, &ix.row_key, values)?).map_err(invalid)?;
    let mut e = Entity::new(base.partition_key().clone(), rk);
    if ix.covering {
        e.properties = base.entity.properties.clone();
        for (c, v) in def.columns.iter().zip(values) {
            match v {
                Some(v) => e.properties.insert(c.property_name().to_owned(), v.clone()),
                None => e.properties.remove(c.property_name()),
            };
        }
    }
    e.validate().map_err(invalid)?;
    Ok(e)
}

/// Whether a covering index row carries other values of the declared
/// columns than it should (properties the mapping does not declare are
/// the application's, and not compared).
fn differs(def: &TableDef, wanted: &Entity, found: &StoredEntity) -> bool {
    def.columns.iter().any(|c| {
        wanted.properties.get(c.property_name()) != found.entity.properties.get(c.property_name())
    })
}

/// A base row's column values in the definition's order: key columns from
/// the keys (what reads return), the others from properties.
pub fn row_values(def: &TableDef, e: &StoredEntity) -> Result<Vec<Option<EdmValue>>, ExecError> {
    let keys: HashMap<&str, KeyValue> =
        crate::exec::read::lookup::key_fields(def, &def.row_key, e)?
            .into_iter()
            .collect();
    def.columns
        .iter()
        .map(|c| match keys.get(c.name.as_str()) {
            Some(v) => super::encode::key_cell(c.column_type, v)
                .map(Some)
                .ok_or_else(|| ExecError::BadValue {
                    column: c.name.clone(),
                    reason: format!("key field value {v} does not fit {}", c.column_type),
                }),
            // A NOT NULL column added with a default reads it where the
            // row, stored before, lacks the property.
            None => Ok(e.get(c.property_name()).cloned().or_else(|| c.fill())),
        })
        .collect()
}
