//! Global indexes' entities (see `catalog::GlobalIndexDef` for why they are
//! written around the base row and checked on read): one per base row and
//! index, composed from the row's values; the base row it names; and the
//! passes over a whole table that `CREATE INDEX` (backfill),
//! `tablesql_check_index` and `tablesql_repair_index` make.
//!
//! An entity's properties are the index's key columns and the base row's
//! key columns, as the base row stores them: an application reads it as a
//! plain entity, and a reader finds the base row from it without parsing
//! its keys. An application's own entities (a declared layout,
//! `GlobalIndexDef::declared`) may carry other properties, which writes
//! keep (they merge), or none of these: the base row's keys are then read
//! from the entity's keys by the index's templates.

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
    let rk = match unique_fields(def, g, values) {
        // The unique columns' fields only: one entity per value.
        Some(n) => encode::compose_first(def, &g.row_key, values, n)?,
        None => encode::compose(def, &g.row_key, values)?,
    };
    let rk = RowKey::new(rk).map_err(invalid)?;
    let mut e = Entity::new(pk, rk);
    for (c, v) in def.columns.iter().zip(values) {
        // The base row's every key column (its RowKey may hold more than
        // the primary key): the entity names its base row by them.
        let kept = g.key_columns().any(|k| k == c.name) || def.is_key_column(&c.name);
        if let (true, Some(v)) = (kept, v) {
            e.properties.insert(c.property_name().to_owned(), v.clone());
        }
    }
    e.validate().map_err(invalid)?;
    Ok(e)
}

/// For a unique index and a row whose unique columns are all non-NULL,
/// how many RowKey fields those columns are (the PartitionKey holds the
/// first); `None` otherwise (the entity's key then holds the primary key).
fn unique_fields(def: &TableDef, g: &GlobalIndexDef, values: &[Option<EdmValue>]) -> Option<usize> {
    let n = g.unique?;
    let all_set = g.key_columns().take(n).all(|c| {
        def.columns
            .iter()
            .position(|d| d.name == c)
            .and_then(|i| values.get(i)?.as_ref())
            .is_some()
    });
    all_set.then(|| n.saturating_sub(g.partition_key.columns().count()))
}

/// Whether an entity may stand for a row being written now: its base row
/// is missing, but it is younger than this (a write that puts the entity
/// first and the base row next may be in flight). A unique value it holds
/// stays taken until then.
const IN_FLIGHT: chrono::TimeDelta = chrono::TimeDelta::seconds(120);

/// How long a statement may take to put one unique index's entities
/// before it gives them back and fails: a quarter of `IN_FLIGHT`; the
/// whole flush is bounded by [`LAND_WITHIN`].
pub const PUTS_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// How long after a statement's first unique entity is put its base rows
/// may still be sent: `IN_FLIGHT` less a margin for the send itself.
pub const LAND_WITHIN: std::time::Duration = std::time::Duration::from_secs(90);

/// What [`put_unique`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Inserted: the value was free.
    New,
    /// Replaced the row's own entity (an UPDATE that keeps the value, or
    /// a hand-over): a statement that fails leaves it, as it stands for
    /// the row.
    Own,
    /// Replaced one that stood for no row: a statement that fails gives
    /// it back, as a new one.
    TakenOver,
}

/// Puts `e`, an entity of unique index `g`, by an Insert. Where one is
/// there already, it is the row's own (an UPDATE that keeps the value), or
/// it stands for no row (a stale or orphan entity, older than
/// `IN_FLIGHT`): it is replaced, If-Match the version read. The row's
/// own includes the entity of its old keys where `e` is handed over from
/// them (`named_bases`). Else the value is taken: a unique violation.
/// What it did decides what a statement that then fails gives back.
pub async fn put_unique(
    store: &dyn TableStore,
    def: &TableDef,
    g: &GlobalIndexDef,
    e: &Entity,
) -> Result<Put, ExecError> {
    // The row's own entity names it, or (handed over) its old keys.
    let ours = named_bases(def, g, e);
    for _ in 0..5 {
        match store.execute(&g.table, WriteOp::Insert(e.clone())).await {
            Ok(_) => return Ok(Put::New),
            Err(StorageError::EntityAlreadyExists { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        let Some(found) = store.get(&g.table, &e.partition_key, &e.row_key).await? else {
            continue;
        };
        let theirs = named_bases(def, g, &found.entity);
        let own = theirs.first().is_some_and(|t| ours.contains(t));
        if !own && live(store, def, g, &found, &theirs).await? {
            return Err(ExecError::UniqueViolation {
                table: def.name.clone(),
                index: g.name.clone(),
                values: shown_values(def, g, e),
            });
        }
        match store
            .execute(
                &g.table,
                WriteOp::Update(e.clone(), IfMatch::ETag(found.etag)),
            )
            .await
        {
            Ok(_) if own => return Ok(Put::Own),
            Ok(_) => return Ok(Put::TakenOver),
            Err(StorageError::PreconditionFailed { .. } | StorageError::EntityNotFound { .. }) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Err(ExecError::Storage(StorageError::PreconditionFailed {
        partition_key: e.partition_key.as_str().to_owned(),
        row_key: e.row_key.as_str().to_owned(),
    }))
}

/// The properties of an entity handed over from one base row to another:
/// the keys of the row it named before. A unique index's entity is keyed
/// by the unique values alone, so an UPDATE that changes a row's primary
/// key and keeps those values moves the one entity from the old row to the
/// new. Written before the base row's transaction, it must stand for the
/// old row until that lands, and for the new one after: it names both,
/// and a reader takes whichever exists and agrees (`named_bases`). Left on
/// the entity afterwards; `tablesql_check_index` does not count them.
const WAS_PARTITION_KEY: &str = "tablesql_was_pk";
const WAS_ROW_KEY: &str = "tablesql_was_rk";

/// The base rows `e` may stand for, in the order to try them: the one its
/// key columns name, then the one it was handed over from. Empty for an
/// entity that names no row.
pub fn named_bases(def: &TableDef, g: &GlobalIndexDef, e: &Entity) -> Vec<(PartitionKey, RowKey)> {
    let mut out: Vec<(PartitionKey, RowKey)> = base_keys(def, g, e).ok().into_iter().collect();
    let text = |name| match e.properties.get(name) {
        Some(EdmValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    if let (Some(pk), Some(rk)) = (text(WAS_PARTITION_KEY), text(WAS_ROW_KEY))
        && let (Ok(pk), Ok(rk)) = (PartitionKey::new(pk), RowKey::new(rk))
        && !out.contains(&(pk.clone(), rk.clone()))
    {
        out.push((pk, rk));
    }
    out
}

/// Whether `found` holds what `wanted`, the entity index `g` writes, holds:
/// the same properties, a hand-over's marks aside; for an application's
/// layout, at least those (its other properties are its own).
pub fn holds(g: &GlobalIndexDef, wanted: &Entity, found: &Entity) -> bool {
    let kept = |e: &Entity| {
        e.properties
            .iter()
            .filter(|(k, _)| k.as_str() != WAS_PARTITION_KEY && k.as_str() != WAS_ROW_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<String, EdmValue>>()
    };
    if g.declared {
        let have = kept(found);
        kept(wanted).iter().all(|(k, v)| have.get(k) == Some(v))
    } else {
        kept(wanted) == kept(found)
    }
}

/// Whether `found`, a unique index's entity naming the base rows `named`,
/// holds its value for a row: one of them exists and writes it, or none
/// exists yet and the entity is young enough to be a write in flight.
async fn live(
    store: &dyn TableStore,
    def: &TableDef,
    g: &GlobalIndexDef,
    found: &StoredEntity,
    named: &[(PartitionKey, RowKey)],
) -> Result<bool, ExecError> {
    if named.is_empty() {
        return Ok(false);
    }
    let mut any_row = false;
    for (pk, rk) in named {
        if let Some(b) = store.get(&def.storage_table, pk, rk).await? {
            if agrees(def, g, &found.entity, &super::upkeep::row_values(def, &b)?) {
                return Ok(true);
            }
            any_row = true;
        }
    }
    Ok(!any_row && chrono::Utc::now() - found.timestamp < IN_FLIGHT)
}

/// Old entities read at once by [`pin_deletes`].
const PINS_IN_FLIGHT: usize = 16;

/// The deletes of the entities rows are leaving (`deletes`, each with the
/// base row it named), made conditional on the version each entity has
/// now. Called before the base rows are written: a delete If-Match `*`
/// after them would race a statement that moves the row back to this value
/// meanwhile, deleting that statement's put and leaving the row without its
/// entity. Pinned first, that put gives the entity a new version and the
/// delete fails harmlessly. An entity already gone, or naming another row
/// (a unique value another row took), is not deleted. Each comes back with
/// its base row.
pub async fn pin_deletes(
    store: &dyn TableStore,
    def: &TableDef,
    g: &GlobalIndexDef,
    deletes: Vec<(WriteOp, (PartitionKey, RowKey))>,
) -> Result<Vec<(WriteOp, (PartitionKey, RowKey))>, ExecError> {
    use futures::StreamExt;
    type Pinned = Result<Option<(WriteOp, (PartitionKey, RowKey))>, ExecError>;
    let pinned: Vec<Pinned> = futures::stream::iter(deletes)
        .map(|(op, base)| async move {
            let (pk, rk) = op.keys();
            let found = store.get(&g.table, pk, rk).await?;
            Ok(found
                .filter(|f| base_keys(def, g, &f.entity).ok().as_ref() == Some(&base))
                .map(|f| {
                    let delete = WriteOp::Delete {
                        partition_key: pk.clone(),
                        row_key: rk.clone(),
                        if_match: IfMatch::ETag(f.etag),
                    };
                    (delete, base)
                }))
        })
        .buffered(PINS_IN_FLIGHT)
        .collect()
        .await;
    pinned.into_iter().filter_map(Result::transpose).collect()
}

/// Deletes the entity at `pk`/`rk` of unique index `g` only where it still
/// names the base row `base`: another row may have taken the value over
/// since that row let it go.
pub async fn delete_unique(
    store: &dyn TableStore,
    def: &TableDef,
    g: &GlobalIndexDef,
    op: &WriteOp,
    base: &(PartitionKey, RowKey),
) -> Result<(), ExecError> {
    let (pk, rk) = op.keys();
    let Some(found) = store.get(&g.table, pk, rk).await? else {
        return Ok(());
    };
    if base_keys(def, g, &found.entity).ok().as_ref() != Some(base) {
        return Ok(());
    }
    let delete = WriteOp::Delete {
        partition_key: pk.clone(),
        row_key: rk.clone(),
        if_match: IfMatch::ETag(found.etag),
    };
    match store.execute(&g.table, delete).await {
        Ok(_)
        | Err(StorageError::EntityNotFound { .. } | StorageError::PreconditionFailed { .. }) => {
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// The unique columns' values of an entity, for the error.
pub fn shown_values(def: &TableDef, g: &GlobalIndexDef, e: &Entity) -> String {
    g.key_columns()
        .take(g.unique.unwrap_or(0))
        .map(|c| {
            let p = def.column(c).map_or(c, |d| d.property_name());
            e.properties
                .get(p)
                .map_or_else(|| "NULL".to_owned(), ToString::to_string)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The keys of the base row an index entity names, from the base key
/// columns' properties it carries.
pub fn base_keys(
    def: &TableDef,
    g: &GlobalIndexDef,
    e: &Entity,
) -> Result<(PartitionKey, RowKey), ExecError> {
    let mut values: Vec<Option<EdmValue>> = def
        .columns
        .iter()
        .map(|c| {
            def.is_key_column(&c.name)
                .then(|| e.properties.get(c.property_name()).cloned())
                .flatten()
        })
        .collect();
    // Where the entity lacks them as properties (an application's entity
    // holds them in its keys), the values its keys hold.
    if values
        .iter()
        .zip(&def.columns)
        .any(|(v, c)| v.is_none() && def.is_key_column(&c.name))
    {
        let fields = [
            (&g.partition_key, e.partition_key.as_str()),
            (&g.row_key, e.row_key.as_str()),
        ];
        for (template, key) in fields {
            let Ok(parts) = template.decompose(key) else {
                continue;
            };
            for (column, v) in template.columns().zip(parts) {
                if let Some(i) = def.columns.iter().position(|c| c.name == column)
                    && values[i].is_none()
                {
                    values[i] = encode::key_cell(def.columns[i].column_type, &v);
                }
            }
        }
    }
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
    let mut put = new.map(|v| entity(def, g, v)).transpose()?;
    let was = old.map(|v| entity(def, g, v)).transpose()?;
    // One entity for two base rows (a unique value kept by a row whose
    // primary key changes): handed over, naming both.
    if let (Some(p), Some(w), Some(old), Some(new)) = (&mut put, &was, old, new)
        && p.partition_key == w.partition_key
        && p.row_key == w.row_key
    {
        let (from, to) = (encode::keys(def, old)?, encode::keys(def, new)?);
        if from != to {
            p.properties.insert(
                WAS_PARTITION_KEY.to_owned(),
                EdmValue::String(from.0.as_str().to_owned()),
            );
            p.properties.insert(
                WAS_ROW_KEY.to_owned(),
                EdmValue::String(from.1.as_str().to_owned()),
            );
        }
    }
    let delete = match (&was, &put) {
        (Some(w), Some(p)) if w.partition_key == p.partition_key && w.row_key == p.row_key => None,
        (Some(w), _) => Some(WriteOp::Delete {
            partition_key: w.partition_key.clone(),
            row_key: w.row_key.clone(),
            if_match: IfMatch::Any,
        }),
        (None, _) => None,
    };
    // Unchanged (an UPDATE of other columns): nothing to write.
    if let (Some(p), Some(w)) = (&put, &was)
        && p == w
    {
        return Ok((None, None));
    }
    // An application's entity keeps its other properties.
    let put = match g.declared {
        true => put.map(WriteOp::InsertOrMerge),
        false => put.map(WriteOp::InsertOrReplace),
    };
    Ok((put, delete))
}

/// Whether a transaction of `send`'s was refused for one of its operations
/// (or its answer was lost and its retry was): sent again one by one.
fn one_by_one(e: &StorageError) -> bool {
    match e {
        StorageError::AmbiguousRetry { source, .. } => one_by_one(source),
        StorageError::Batch { .. }
        | StorageError::EntityNotFound { .. }
        | StorageError::PreconditionFailed { .. } => true,
        _ => false,
    }
}

/// Whether an operation of `send`'s was refused because the entity is gone,
/// changed or written meanwhile: that writer's version stands. So it does
/// where the answer was lost and the retry met that, since the lost attempt
/// either landed or met the same.
fn stands(e: &StorageError) -> bool {
    match e {
        StorageError::AmbiguousRetry { source, .. } => stands(source),
        StorageError::EntityNotFound { .. }
        | StorageError::PreconditionFailed { .. }
        | StorageError::EntityAlreadyExists { .. } => true,
        _ => false,
    }
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
                Err(e) if one_by_one(&e) => {
                    for op in chunk {
                        match store.execute(table, op.clone()).await {
                            Ok(_) => done += 1,
                            Err(e) if stands(&e) => {}
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
    // Unique values more than one row holds.
    let mut repeated: HashSet<(String, String)> = HashSet::new();
    each_base_row(store, def, |b| {
        health.base_rows += 1;
        partitions.insert(b.partition_key().as_str().to_owned());
        let values = super::upkeep::row_values(def, b)?;
        match entity(def, g, &values) {
            Ok(e) => {
                let key = (
                    e.partition_key.as_str().to_owned(),
                    e.row_key.as_str().to_owned(),
                );
                // Two rows with one unique value: neither can have it.
                if repeated.contains(&key) {
                    health.unindexable += 1;
                    health.missing += 1;
                } else if wanted.insert(key.clone(), e).is_some() {
                    health.unindexable += 2;
                    health.missing += 2;
                    note(&mut health, "unindexable: a duplicated unique value", &key);
                    wanted.remove(&key);
                    repeated.insert(key);
                }
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
            Some(w) if holds(g, w, &f.entity) => {}
            // A young entity that differs may be a write's in flight (a
            // hand-over names the row's new keys before its base row
            // lands): left alone, as a young orphan is.
            Some(_) if chrono::Utc::now() - f.timestamp < IN_FLIGHT => {}
            // Fixed If-Match the version read: a writer that changed it
            // since knows better than this pass's snapshot. An
            // application's entity is merged into, keeping its own.
            Some(w) => {
                health.stale += 1;
                note(&mut health, "stale", &key);
                let at = IfMatch::ETag(f.etag.clone());
                fixes.push(match g.declared {
                    true => WriteOp::Merge(w.clone(), at),
                    false => WriteOp::Update(w.clone(), at),
                });
            }
            // An entity younger than a write's flight may be a write's
            // whose base row this pass read before it landed: left alone.
            None if chrono::Utc::now() - f.timestamp < IN_FLIGHT => {}
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
            // An Insert: one written meanwhile is the writer's.
            fixes.push(WriteOp::Insert(w.clone()));
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
