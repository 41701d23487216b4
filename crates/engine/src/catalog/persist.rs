//! The catalog persisted in the store itself: one entity per mapped table in
//! the storage table `TablesqlCatalog`, holding the table's canonical DDL and,
//! apart from it, the catalog's own state of the table (`state`), so that
//! every front end over one store reads the same definitions. One more
//! entity of that partition, the version (RowKey `""`, a name no table can
//! have), is rewritten in the same entity group transaction as every change
//! of a definition, so the two never disagree: an engine in another process
//! learns of a change by one point read of the version's ETag.

use super::state::TableState;
use super::{CatalogError, TableDef, ddl};
use crate::storage::{
    ETag, EdmValue, Entity, PartitionKey, Query, RowKey, StorageError, StoredEntity, TableName,
    TableStore, WriteOp,
};

/// The storage table holding the catalog.
pub const CATALOG_TABLE: &str = "TablesqlCatalog";
/// The PartitionKey of table definitions.
const TABLES_PARTITION: &str = "table";
/// The version of the stored form; a reader refuses versions it does not know.
/// Version 1 is the DDL alone (before the state had a property of its own,
/// it also held the state as options: `TableState::split_legacy`).
const FORMAT_VERSION: i32 = 1;
/// The version of a definition stored with a state (an index still being
/// built). A row without one stays version 1, the form engines before the
/// state record read, so that they refuse only a row they would misread.
const STATE_FORMAT_VERSION: i32 = 2;
/// The property of a definition's DDL.
const DEFINITION_PROPERTY: &str = "definition";
/// The property of a table's state ([`TableState`], as JSON), absent when
/// there is none.
const STATE_PROPERTY: &str = "state";
/// The RowKey of the catalog's version entity, in the definitions'
/// partition: empty, which no table name is (`TableDef::validate`).
const VERSION_ROW: &str = "";

/// The catalog's storage table, created if it is not there yet.
pub(crate) async fn created(store: &dyn TableStore) -> Result<TableName, CatalogError> {
    let table = table()?;
    match store.create_table(&table).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => Ok(table),
        Err(e) => Err(e.into()),
    }
}

/// The catalog's storage table.
pub(super) fn table() -> Result<TableName, CatalogError> {
    Ok(TableName::new(CATALOG_TABLE).map_err(StorageError::from)?)
}

fn row_key(name: &str) -> Result<RowKey, CatalogError> {
    RowKey::new(name).map_err(|e| CatalogError::Definition(format!("table name {name:?}: {e}")))
}

/// Every stored definition, by name; none when the catalog table is absent.
pub async fn load(store: &dyn TableStore) -> Result<Vec<TableDef>, CatalogError> {
    Ok(load_all(store).await?.tables)
}

/// The property that holds a view's `CREATE VIEW` text. Views share the
/// tables' partition (PostgreSQL's relations share one namespace), so that
/// a view changes in one entity group transaction with the version.
const VIEW_PROPERTY: &str = "view";

/// The catalog's relations, read in one query of their partition.
#[derive(Debug, Default)]
pub struct Relations {
    /// The table definitions.
    pub tables: Vec<TableDef>,
    /// The views: each name with its `CREATE VIEW` statement's text.
    pub views: Vec<(String, String)>,
}

/// Every stored table and view; none when the catalog table is absent.
pub async fn load_all(store: &dyn TableStore) -> Result<Relations, CatalogError> {
    let query = Query::partition(PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?);
    let entities = match store.query_all(&table()?, &query).await {
        Ok(e) => e,
        Err(StorageError::TableNotFound(_)) => return Ok(Relations::default()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Relations::default();
    for e in entities
        .iter()
        .filter(|e| e.row_key().as_str() != VERSION_ROW)
    {
        match e.get(VIEW_PROPERTY) {
            Some(EdmValue::String(sql)) => out
                .views
                .push((e.row_key().as_str().to_owned(), sql.clone())),
            Some(_) => {}
            None => out.tables.push(parse(e)?),
        }
    }
    Ok(out)
}

/// Stores view `name` as `sql` (its `CREATE VIEW` text); with `replace`
/// over a view of that name. A table of that name, or a view without
/// `replace`, is `TableExists`.
pub async fn save_view(
    store: &dyn TableStore,
    name: &str,
    sql: &str,
    replace: bool,
) -> Result<(), CatalogError> {
    let table = created(store).await?;
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    let existing = store.get(&table, &pk, &row_key(name)?).await?;
    let entity = view_entity(pk, name, sql)?;
    let op = match existing {
        Some(e) if replace && e.get(VIEW_PROPERTY).is_some() => {
            WriteOp::Update(entity, crate::storage::IfMatch::ETag(e.etag))
        }
        Some(_) => return Err(CatalogError::TableExists(name.to_owned())),
        None => WriteOp::Insert(entity),
    };
    match write_versioned(store, &table, op, version_entity()?).await {
        Ok(()) => Ok(()),
        Err(StorageError::EntityAlreadyExists { .. } | StorageError::PreconditionFailed { .. }) => {
            Err(CatalogError::TableExists(name.to_owned()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes view `name`; whether there was one.
pub async fn remove_view(store: &dyn TableStore, name: &str) -> Result<bool, CatalogError> {
    let table = table()?;
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    let existing = match store.get(&table, &pk, &row_key(name)?).await {
        Ok(e) => e,
        Err(StorageError::TableNotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let Some(e) = existing.filter(|e| e.get(VIEW_PROPERTY).is_some()) else {
        return Ok(false);
    };
    let op = WriteOp::Delete {
        partition_key: pk,
        row_key: row_key(name)?,
        if_match: crate::storage::IfMatch::ETag(e.etag),
    };
    write_versioned(store, &table, op, version_entity()?).await?;
    Ok(true)
}

/// The catalog's version: the ETag of its version entity, which every
/// change rewrites; `None` before the first change.
pub async fn version(store: &dyn TableStore) -> Result<Option<ETag>, CatalogError> {
    let (pk, rk) = version_keys()?;
    match store.get(&table()?, &pk, &rk).await {
        Ok(found) => Ok(found.map(|e| e.etag)),
        Err(StorageError::TableNotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Marks the catalog changed (see [`version`]) where a change is not a
/// definition's (the statistics, in partitions of their own).
pub async fn touch(store: &dyn TableStore) -> Result<(), CatalogError> {
    store
        .execute(&table()?, WriteOp::InsertOrReplace(version_entity()?))
        .await?;
    Ok(())
}

fn version_keys() -> Result<(PartitionKey, RowKey), CatalogError> {
    Ok((
        PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?,
        RowKey::new(VERSION_ROW).map_err(StorageError::from)?,
    ))
}

fn version_entity() -> Result<Entity, CatalogError> {
    let (pk, rk) = version_keys()?;
    let at = chrono::Utc::now().to_rfc3339();
    Ok(Entity::new(pk, rk).with("changed_at", EdmValue::String(at)))
}

/// Writes `op` (of a definition) and `version` (a [`version_entity`])
/// together, in one entity group transaction; the error is `op`'s own.
async fn write_versioned(
    store: &dyn TableStore,
    table: &TableName,
    op: WriteOp,
    version: Entity,
) -> Result<(), StorageError> {
    match store
        .execute_batch(table, vec![op, WriteOp::InsertOrReplace(version)])
        .await
    {
        Ok(_) => Ok(()),
        Err(StorageError::Batch { source, .. }) => Err(*source),
        Err(e) => Err(e),
    }
}

/// The definition a catalog entity holds, its state put on it.
fn parse(e: &crate::storage::StoredEntity) -> Result<TableDef, CatalogError> {
    let name = e.row_key().as_str();
    let bad = |why: &str| CatalogError::Definition(format!("stored definition of {name}: {why}"));
    let Some(EdmValue::String(sql)) = e.get(DEFINITION_PROPERTY) else {
        return Err(bad("no definition text"));
    };
    let read = |sql: &str| -> Result<TableDef, CatalogError> {
        let mut create = ddl::create_statement(sql)?;
        let state = match e.get("format_version") {
            Some(EdmValue::Int32(STATE_FORMAT_VERSION)) => match e.get(STATE_PROPERTY) {
                Some(EdmValue::String(json)) => TableState::from_json(json)?,
                Some(other) => {
                    return Err(CatalogError::Definition(format!(
                        "a state that is not text: {other:?}"
                    )));
                }
                None => TableState::default(),
            },
            Some(EdmValue::Int32(FORMAT_VERSION)) => TableState::split_legacy(&mut create)?,
            Some(other) => {
                return Err(CatalogError::Definition(format!(
                    "unknown format version {other:?}"
                )));
            }
            None => return Err(CatalogError::Definition("no format version".into())),
        };
        let mut def = ddl::from_create_table(&create)?;
        state.apply(&mut def)?;
        Ok(def)
    };
    read(sql).map_err(|err| bad(&err.to_string()))
}

/// The catalog entity of `def`, under `row_key` of `pk`: its DDL, and its
/// state where it has one.
fn definition_entity(pk: PartitionKey, def: &TableDef) -> Result<Entity, CatalogError> {
    let entity = Entity::new(pk, row_key(&def.name)?)
        .with(DEFINITION_PROPERTY, EdmValue::String(def.to_ddl()));
    let state = TableState::of(def);
    Ok(if state.is_empty() {
        entity.with("format_version", EdmValue::Int32(FORMAT_VERSION))
    } else {
        entity
            .with("format_version", EdmValue::Int32(STATE_FORMAT_VERSION))
            .with(STATE_PROPERTY, EdmValue::String(state.to_json()?))
    })
}

/// Attempts `update` makes before it gives up on concurrent changes.
const ATTEMPTS: usize = 5;

/// Changes the stored definition of `name` by `change`, If-Match the
/// version it read, so that two processes changing one definition at once
/// (two `CREATE INDEX`, say) never lose one another's change: on a
/// conflict the definition is read again and `change` applied anew.
/// Returns the definition stored.
pub async fn update(
    store: &dyn TableStore,
    name: &str,
    mut change: impl FnMut(&mut TableDef) -> Result<(), CatalogError>,
) -> Result<TableDef, CatalogError> {
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    for _ in 0..ATTEMPTS {
        let stored = match store.get(&table()?, &pk, &row_key(name)?).await {
            Ok(Some(e)) => e,
            Ok(None) | Err(StorageError::TableNotFound(_)) => {
                return Err(CatalogError::UnknownTable(name.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        let mut def = parse(&stored)?;
        change(&mut def)?;
        def.validate()?;
        let entity = definition_entity(pk.clone(), &def)?;
        let op = WriteOp::Update(entity, crate::storage::IfMatch::ETag(stored.etag));
        match write_versioned(store, &table()?, op, version_entity()?).await {
            Ok(()) => return Ok(def),
            Err(StorageError::PreconditionFailed { .. }) => continue,
            Err(StorageError::EntityNotFound { .. }) => {
                return Err(CatalogError::UnknownTable(name.to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(CatalogError::Inconsistent {
        table: name.to_owned(),
        reason: format!("its definition changed under {ATTEMPTS} attempts to change it; try again"),
    })
}

/// Stores a definition; with `replace` it overwrites one of the same name,
/// otherwise that is an error.
pub async fn save(
    store: &dyn TableStore,
    def: &TableDef,
    replace: bool,
) -> Result<(), CatalogError> {
    let table = created(store).await?;
    let entity = definition_entity(
        PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?,
        def,
    )?;
    let op = if replace {
        WriteOp::InsertOrReplace(entity)
    } else {
        WriteOp::Insert(entity)
    };
    match write_versioned(store, &table, op, version_entity()?).await {
        Ok(()) => Ok(()),
        Err(StorageError::EntityAlreadyExists { .. }) => {
            Err(CatalogError::TableExists(def.name.clone()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Changes the definition named `old` by `change`, which may rename it
/// (an `ALTER TABLE`): read, changed, and written If-Match what was read,
/// with the version, in one entity group transaction (so that no reader
/// sees both names or neither, and a concurrent change of the definition is
/// never lost: on a conflict it is read and changed anew, as [`update`]
/// does). Returns the definition stored.
pub async fn alter(
    store: &dyn TableStore,
    old: &str,
    mut change: impl FnMut(&TableDef) -> Result<TableDef, CatalogError>,
) -> Result<TableDef, CatalogError> {
    let table = table()?;
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    for _ in 0..ATTEMPTS {
        let stored = match store.get(&table, &pk, &row_key(old)?).await {
            Ok(Some(e)) => e,
            Ok(None) | Err(StorageError::TableNotFound(_)) => {
                return Err(CatalogError::UnknownTable(old.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        let def = change(&parse(&stored)?)?;
        let entity = definition_entity(pk.clone(), &def)?;
        let read = crate::storage::IfMatch::ETag(stored.etag.clone());
        let mut ops = Vec::new();
        if old == def.name {
            ops.push(WriteOp::Update(entity, read));
        } else {
            ops.push(WriteOp::Insert(entity));
            ops.push(WriteOp::Delete {
                partition_key: pk.clone(),
                row_key: row_key(old)?,
                if_match: read,
            });
        }
        ops.push(WriteOp::InsertOrReplace(version_entity()?));
        let failed = match store.execute_batch(&table, ops).await {
            Ok(_) => return Ok(def),
            Err(StorageError::Batch { source, .. }) => *source,
            Err(e) => e,
        };
        match failed {
            StorageError::PreconditionFailed { .. } => continue,
            StorageError::EntityAlreadyExists { .. } => {
                return Err(CatalogError::TableExists(def.name.clone()));
            }
            StorageError::EntityNotFound { .. } => {
                return Err(CatalogError::UnknownTable(old.to_owned()));
            }
            e => return Err(e.into()),
        }
    }
    Err(CatalogError::Inconsistent {
        table: old.to_owned(),
        reason: format!("its definition changed under {ATTEMPTS} attempts to change it; try again"),
    })
}

/// A relation as a transaction block leaves it, for [`apply`].
#[derive(Debug, Clone)]
pub enum Change {
    /// A table's definition.
    Table(Box<TableDef>),
    /// A view's `CREATE VIEW` text.
    View(String),
}

/// Relation `name`'s stored entity; `None` when the catalog has no such
/// relation. A transaction block keeps it when it first changes the name,
/// and its COMMIT writes If-Match its version (and puts it back if the
/// commit is undone).
pub async fn stored(
    store: &dyn TableStore,
    name: &str,
) -> Result<Option<StoredEntity>, CatalogError> {
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    match store.get(&table()?, &pk, &row_key(name)?).await {
        Ok(found) => Ok(found),
        Err(StorageError::TableNotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One relation a transaction block changed.
#[derive(Debug, Clone)]
pub struct BlockChange {
    /// The relation's name.
    pub name: String,
    /// Its stored entity when the block first changed it (`None`: there
    /// was no such relation).
    pub base: Option<StoredEntity>,
    /// What the block leaves (`None`: dropped).
    pub change: Option<Change>,
}

/// A block's catalog changes as writes of the catalog's storage table,
/// each with the entity as the block found it: If-Match its version, or an
/// insert where there was none; the version entity with them. At most 99
/// relations and 4 MiB, so that they land in one entity group transaction. Also the
/// table definitions they replace or remove, whose storage the caller may
/// have to delete once they land.
#[allow(clippy::type_complexity)]
pub fn block_writes(
    changes: &[BlockChange],
) -> Result<
    (
        TableName,
        Vec<(WriteOp, Option<StoredEntity>)>,
        Vec<TableDef>,
    ),
    CatalogError,
> {
    if changes.len() + 1 > crate::storage::write::MAX_BATCH_OPERATIONS {
        return Err(CatalogError::Definition(format!(
            "a transaction block changes at most {} relations; this one changes {}",
            crate::storage::write::MAX_BATCH_OPERATIONS - 1,
            changes.len()
        )));
    }
    let pk = PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?;
    let mut writes = Vec::new();
    let mut replaced = Vec::new();
    for c in changes {
        if let Some(e) = &c.base
            && e.get(VIEW_PROPERTY).is_none()
        {
            replaced.push(parse(e)?);
        }
        let entity = match &c.change {
            Some(Change::Table(def)) => Some(definition_entity(pk.clone(), def)?),
            Some(Change::View(sql)) => Some(view_entity(pk.clone(), &c.name, sql)?),
            None => None,
        };
        let read = c
            .base
            .as_ref()
            .map(|e| crate::storage::IfMatch::ETag(e.etag.clone()));
        let op = match (entity, read) {
            (Some(entity), None) => WriteOp::Insert(entity),
            (Some(entity), Some(read)) => WriteOp::Update(entity, read),
            (None, Some(read)) => WriteOp::Delete {
                partition_key: pk.clone(),
                row_key: row_key(&c.name)?,
                if_match: read,
            },
            // Made and dropped in the block: nothing to write.
            (None, None) => continue,
        };
        writes.push((op, c.base.clone()));
    }
    if !writes.is_empty() {
        writes.push((WriteOp::InsertOrReplace(version_entity()?), None));
    }
    let bytes: usize = writes.iter().map(|(op, _)| op.stored_size()).sum();
    if bytes > crate::storage::write::MAX_BATCH_BYTES {
        return Err(CatalogError::Definition(format!(
            "a transaction block's catalog changes come to {bytes} bytes; one entity group transaction holds {}",
            crate::storage::write::MAX_BATCH_BYTES
        )));
    }
    Ok((table()?, writes, replaced))
}

/// Whether each of a block's changes still finds the relation as the block
/// found it: a name another session took is `TableExists`, a definition it
/// changed or dropped `Inconsistent`, before anything is written. (The
/// writes are conditional too; this says which name, and why.)
pub async fn check(store: &dyn TableStore, changes: &[BlockChange]) -> Result<(), CatalogError> {
    for c in changes {
        if c.base.is_none() && c.change.is_none() {
            continue;
        }
        let now = stored(store, &c.name).await?;
        match (&c.base, now) {
            (None, None) => {}
            (None, Some(_)) => return Err(CatalogError::TableExists(c.name.clone())),
            (Some(base), Some(now)) if base.etag == now.etag => {}
            (Some(_), _) => {
                return Err(CatalogError::Inconsistent {
                    table: c.name.clone(),
                    reason:
                        "another session changed it while this block's change waited for COMMIT"
                            .into(),
                });
            }
        }
    }
    Ok(())
}

/// Writes changes as a block's COMMIT does ([`block_writes`], after
/// [`check`]), alone: one entity group transaction, all or nothing.
/// Returns the table definitions it replaced or removed.
pub async fn apply(
    store: &dyn TableStore,
    changes: &[BlockChange],
) -> Result<Vec<TableDef>, CatalogError> {
    check(store, changes).await?;
    let (table, writes, replaced) = block_writes(changes)?;
    if writes.is_empty() {
        return Ok(replaced);
    }
    created(store).await?;
    let ops = writes.into_iter().map(|(op, _)| op).collect();
    match store.execute_batch(&table, ops).await {
        Ok(_) => Ok(replaced),
        Err(StorageError::Batch { source, .. }) => Err((*source).into()),
        Err(e) => Err(e.into()),
    }
}

/// The catalog entity of view `name`.
fn view_entity(pk: PartitionKey, name: &str, sql: &str) -> Result<Entity, CatalogError> {
    Ok(Entity::new(pk, row_key(name)?)
        .with("format_version", EdmValue::Int32(FORMAT_VERSION))
        .with(VIEW_PROPERTY, EdmValue::String(sql.to_owned())))
}

/// Removes a definition (the entities of its storage table stay).
pub async fn remove(store: &dyn TableStore, name: &str) -> Result<(), CatalogError> {
    let op = WriteOp::Delete {
        partition_key: PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?,
        row_key: row_key(name)?,
        if_match: crate::storage::IfMatch::Any,
    };
    match write_versioned(store, &table()?, op, version_entity()?).await {
        Ok(()) => Ok(()),
        Err(StorageError::EntityNotFound { .. } | StorageError::TableNotFound(_)) => {
            Err(CatalogError::UnknownTable(name.to_owned()))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;

    const THINGS: &str = "CREATE TABLE things (p TEXT, r TEXT, a TEXT NOT NULL, PRIMARY KEY (p, r)) \
        WITH (partition_key = '{p}', row_key = 'R:{r}', index_a = 'A:{a}__{r}'";

    /// A state is stored beside the DDL (version 2), none when there is
    /// none (version 1), and a row written before the state record (its
    /// state among the DDL's options) still reads the same.
    #[tokio::test]
    async fn the_state_is_stored_apart_and_format_one_still_reads() {
        let store = MemoryStore::new();
        let mut def = ddl::parse(&format!("{THINGS})")).unwrap();
        def.indexes[0].building = true;
        save(&store, &def, false).await.unwrap();
        let pk = PartitionKey::new(TABLES_PARTITION).unwrap();
        let stored = store
            .get(&table().unwrap(), &pk, &row_key("things").unwrap())
            .await
            .unwrap()
            .unwrap();
        let Some(EdmValue::String(sql)) = stored.get(DEFINITION_PROPERTY) else {
            panic!("no definition: {stored:?}");
        };
        assert!(!sql.contains("building"), "{sql}");
        assert_eq!(
            stored.get(STATE_PROPERTY),
            Some(&EdmValue::String(r#"{"building":["a"]}"#.into()))
        );
        assert_eq!(stored.get("format_version"), Some(&EdmValue::Int32(2)));
        assert_eq!(load(&store).await.unwrap(), [def.clone()]);

        let legacy = Entity::new(pk, row_key("things").unwrap())
            .with("format_version", EdmValue::Int32(1))
            .with(
                DEFINITION_PROPERTY,
                EdmValue::String(format!("{THINGS}, building_a = true)")),
            );
        store
            .execute(&table().unwrap(), WriteOp::InsertOrReplace(legacy))
            .await
            .unwrap();
        assert_eq!(load(&store).await.unwrap(), [def.clone()]);

        // Built: no state is stored.
        let built = update(&store, "things", |d| {
            d.indexes[0].building = false;
            Ok(())
        })
        .await
        .unwrap();
        let stored = store
            .get(
                &table().unwrap(),
                &PartitionKey::new(TABLES_PARTITION).unwrap(),
                &row_key("things").unwrap(),
            )
            .await
            .unwrap()
            .unwrap();
        // Without a state, the form engines before the state record read.
        assert_eq!(stored.get(STATE_PROPERTY), None);
        assert_eq!(stored.get("format_version"), Some(&EdmValue::Int32(1)));
        assert_eq!(load(&store).await.unwrap(), [built]);
    }
}
