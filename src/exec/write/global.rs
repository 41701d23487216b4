//! Global indexes' entities (see `catalog::GlobalIndexDef` for why they are
//! written around the base row and checked on read): one per base row and
//! index, composed from the row's values; the base row it names; and the
//! passes over a whole table that `CREATE INDEX` (backfill),
//! `tablesql_check_index` and `tablesql_repair_index` make.
//!
//! An entity's properties are the index's key columns and the base row's
//! primary key, as the base row stores them: an application reads it as a
//! plain entity, and a reader finds the base row from it without parsing
//! its keys.

use std::collections::{BTreeMap, HashSet};

use super::encode;
use super::upkeep::IndexHealth;
use crate::catalog::{GlobalIndexDef, TableDef};
use crate::exec::ExecError;
use crate::storage::{
    EdmValue, Entity, IfMatch, KeyRange, PartitionKey, Query, RowKey, StorageError, StoredEntity,
    TableName, TableStore, WriteOp,
};

/// Most operations in one entity group transaction.
const BATCH: usize = 100;

/// The entity of index `g` for a row's values (`values` in `def.columns`
/// order).
pub fn entity(
    def: &TableDef,
    g: &GlobalIndexDef,
    values: &[Option<EdmValue>],
) -> Result<Entity, ExecError> {
    let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
    let pk = PartitionKey::new(encode::compose(def, &g.partition_key, values)?).map_err(invalid)?;
    let rk = RowKey::new(encode::compose(def, &g.row_key, values)?).map_err(invalid)?;
    let mut e = Entity::new(pk, rk);
    for (c, v) in def.columns.iter().zip(values) {
        let kept = g.key_columns().any(|k| k == c.name) || def.primary_key.contains(&c.name);
        if let (true, Some(v)) = (kept, v) {
            e.properties.insert(c.property_name().to_owned(), v.clone());
        }
    }
    e.validate().map_err(invalid)?;
    Ok(e)
}

/// The keys of the base row an index entity names, from the primary-key
/// properties it carries.
pub fn base_keys(def: &TableDef, e: &Entity) -> Result<(PartitionKey, RowKey), ExecError> {
    let values: Vec<Option<EdmValue>> = def
        .columns
        .iter()
        .map(|c| {
            def.primary_key
                .contains(&c.name)
                .then(|| e.properties.get(c.property_name()).cloned())
                .flatten()
        })
        .collect();
    encode::keys(def, &values)
}

/// Whether `found` is the entity the base row `base` (its values) writes
/// for index `g`: the same keys. Anything else stands for no row.
pub fn agrees(
    def: &TableDef,
    g: &GlobalIndexDef,
    found: &Entity,
    base: &[Option<EdmValue>],
) -> bool {
    entity(def, g, base)
        .is_ok_and(|e| e.partition_key == found.partition_key && e.row_key == found.row_key)
}

/// The writes that keep index `g` for a row going from `old` to `new`
/// values (`None`: no row): the put to make before the base row's write,
/// and the delete to make after it.
pub fn sides(
    def: &TableDef,
    g: &GlobalIndexDef,
    old: Option<&[Option<EdmValue>]>,
    new: Option<&[Option<EdmValue>]>,
) -> Result<(Option<WriteOp>, Option<WriteOp>), ExecError> {
    let put = new.map(|v| entity(def, g, v)).transpose()?;
    let was = old.map(|v| entity(def, g, v)).transpose()?;
    let delete = match (&was, &put) {
        (Some(w), Some(p)) if w.partition_key == p.partition_key && w.row_key == p.row_key => None,
        (Some(w), _) => Some(WriteOp::Delete {
            partition_key: w.partition_key.clone(),
            row_key: w.row_key.clone(),
            if_match: IfMatch::Any,
        }),
        (None, _) => None,
    };
    Ok((put.map(WriteOp::InsertOrReplace), delete))
}

/// Sends `ops` on `table`, partition by partition, in transactions of at
/// most 100; a delete of an entity already gone is done. Returns the
/// operations that took effect.
pub async fn send(
    store: &dyn TableStore,
    table: &TableName,
    ops: Vec<WriteOp>,
) -> Result<u64, ExecError> {
    let mut by_partition: BTreeMap<PartitionKey, Vec<WriteOp>> = BTreeMap::new();
    for op in ops {
        by_partition
            .entry(op.keys().0.clone())
            .or_default()
            .push(op);
    }
    let mut done = 0;
    for (_, ops) in by_partition {
        // One operation per entity in a transaction: the last one wins.
        let mut seen = HashSet::new();
        let mut ops: Vec<WriteOp> = ops
            .into_iter()
            .rev()
            .filter(|op| seen.insert(op.keys().1.clone()))
            .collect();
        ops.reverse();
        for chunk in ops.chunks(BATCH) {
            match store.execute_batch(table, chunk.to_vec()).await {
                Ok(_) => done += chunk.len() as u64,
                Err(StorageError::Batch { .. } | StorageError::EntityNotFound { .. }) => {
                    for op in chunk {
                        match store.execute(table, op.clone()).await {
                            Ok(_) => done += 1,
                            Err(StorageError::EntityNotFound { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(done)
}

/// Every base row of `def`, partition by partition, handed to `each`.
async fn each_base_row(
    store: &dyn TableStore,
    def: &TableDef,
    mut each: impl FnMut(&StoredEntity) -> Result<(), ExecError>,
) -> Result<(), ExecError> {
    let mut after: Option<PartitionKey> = None;
    loop {
        let page = store
            .partitions(&def.storage_table, &KeyRange::all(), after.as_ref())
            .await?;
        for pk in &page.partitions {
            for b in super::upkeep::read_rows(store, def, pk, &def.row_key).await? {
                if def.index_prefix_of(b.row_key().as_str()).is_none() {
                    each(&b)?;
                }
            }
        }
        match page.after {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// Checks index `g` of `def` against its base rows, and with `repair`
/// writes the missing entities and deletes the ones no base row writes.
/// `progress` hears of the base rows read.
pub async fn upkeep(
    store: &dyn TableStore,
    def: &TableDef,
    g: &GlobalIndexDef,
    repair: bool,
    mut progress: impl FnMut(u64),
) -> Result<IndexHealth, ExecError> {
    let mut health = IndexHealth {
        index: g.name.clone(),
        ..IndexHealth::default()
    };
    // What the base rows write.
    let mut wanted: BTreeMap<(String, String), Entity> = BTreeMap::new();
    let mut partitions = HashSet::new();
    each_base_row(store, def, |b| {
        health.base_rows += 1;
        partitions.insert(b.partition_key().as_str().to_owned());
        let values = super::upkeep::row_values(def, b)?;
        match entity(def, g, &values) {
            Ok(e) => {
                wanted.insert(
                    (
                        e.partition_key.as_str().to_owned(),
                        e.row_key.as_str().to_owned(),
                    ),
                    e,
                );
            }
            Err(_) => {
                health.unindexable += 1;
                health.missing += 1;
            }
        }
        progress(health.base_rows);
        Ok(())
    })
    .await?;
    health.partitions = partitions.len() as u64;
    // What the index holds.
    let found = match store.query_all(&g.table, &Query::all()).await {
        Ok(found) => found,
        Err(StorageError::TableNotFound(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    health.index_rows = found.len() as u64;
    let mut fixes = Vec::new();
    let mut present = HashSet::new();
    for f in &found {
        let key = (
            f.partition_key().as_str().to_owned(),
            f.row_key().as_str().to_owned(),
        );
        match wanted.get(&key) {
            Some(w) if w.properties == f.entity.properties => {}
            Some(w) => {
                health.stale += 1;
                note(&mut health, "stale", &key);
                fixes.push(WriteOp::InsertOrReplace(w.clone()));
            }
            None => {
                health.orphaned += 1;
                note(&mut health, "orphaned", &key);
                fixes.push(WriteOp::Delete {
                    partition_key: f.partition_key().clone(),
                    row_key: f.row_key().clone(),
                    if_match: IfMatch::ETag(f.etag.clone()),
                });
            }
        }
        present.insert(key);
    }
    for (key, w) in &wanted {
        if !present.contains(key) {
            health.missing += 1;
            note(&mut health, "missing", key);
            fixes.push(WriteOp::InsertOrReplace(w.clone()));
        }
    }
    if repair && !fixes.is_empty() {
        if let Err(e) = store.create_table(&g.table).await
            && !matches!(e, StorageError::TableAlreadyExists(_))
        {
            return Err(e.into());
        }
        health.repaired = send(store, &g.table, fixes).await?;
    }
    Ok(health)
}

fn note(h: &mut IndexHealth, kind: &str, (pk, rk): &(String, String)) {
    if h.examples.len() < 5 {
        h.examples.push(format!("{kind} ({pk:?}, {rk:?})"));
    }
}
