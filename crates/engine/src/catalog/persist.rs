//! The catalog persisted in the store itself: one entity per mapped table in
//! the storage table `TablesqlCatalog`, holding the table's canonical DDL, so
//! that every front end over one store reads the same definitions. One more
//! entity of that partition, the version (RowKey `""`, a name no table can
//! have), is rewritten in the same entity group transaction as every change
//! of a definition, so the two never disagree: an engine in another process
//! learns of a change by one point read of the version's ETag.

use super::{CatalogError, TableDef, ddl};
use crate::storage::{
    ETag, EdmValue, Entity, PartitionKey, Query, RowKey, StorageError, TableName, TableStore,
    WriteOp,
};

/// The storage table holding the catalog.
pub const CATALOG_TABLE: &str = "TablesqlCatalog";
/// The PartitionKey of table definitions.
const TABLES_PARTITION: &str = "table";
/// The version of the stored form; a reader refuses versions it does not know.
const FORMAT_VERSION: i32 = 1;
/// The RowKey of the catalog's version entity, in the definitions'
/// partition: empty, which no table name is (`TableDef::validate`).
const VERSION_ROW: &str = "";

/// The catalog's storage table, created if it is not there yet.
async fn created(store: &dyn TableStore) -> Result<TableName, CatalogError> {
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
    let entity = Entity::new(pk, row_key(name)?)
        .with("format_version", EdmValue::Int32(FORMAT_VERSION))
        .with(VIEW_PROPERTY, EdmValue::String(sql.to_owned()));
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

/// The definition a catalog entity holds.
fn parse(e: &crate::storage::StoredEntity) -> Result<TableDef, CatalogError> {
    let name = e.row_key().as_str();
    let bad = |why: &str| CatalogError::Definition(format!("stored definition of {name}: {why}"));
    match e.get("format_version") {
        Some(EdmValue::Int32(FORMAT_VERSION)) => {}
        Some(other) => return Err(bad(&format!("unknown format version {other:?}"))),
        None => return Err(bad("no format version")),
    }
    let Some(EdmValue::String(sql)) = e.get("definition") else {
        return Err(bad("no definition text"));
    };
    ddl::parse_from(sql, ddl::Origin::Stored).map_err(|err| bad(&err.to_string()))
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
        let entity = Entity::new(pk.clone(), row_key(name)?)
            .with("format_version", EdmValue::Int32(FORMAT_VERSION))
            .with("definition", EdmValue::String(def.to_ddl()));
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
    let entity = Entity::new(
        PartitionKey::new(TABLES_PARTITION).map_err(StorageError::from)?,
        row_key(&def.name)?,
    )
    .with("format_version", EdmValue::Int32(FORMAT_VERSION))
    .with("definition", EdmValue::String(def.to_ddl()));
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
        let entity = Entity::new(pk.clone(), row_key(&def.name)?)
            .with("format_version", EdmValue::Int32(FORMAT_VERSION))
            .with("definition", EdmValue::String(def.to_ddl()));
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
