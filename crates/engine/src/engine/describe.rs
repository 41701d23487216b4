//! What the tables are, for front ends that describe them: the wire
//! server's `pg_catalog` (primary keys and indexes for pgJDBC's
//! `getPrimaryKeys`, SQLAlchemy's inspector, psql's `\d`). The answer is
//! the engine's registered tables, so it agrees with what queries see.

use std::any::Any;

use datafusion::catalog::CatalogProvider;
use datafusion::error::Result;

use super::{Engine, EngineError, RAW_SCHEMA, Session};
use crate::catalog::TableDef;
use crate::planner::StoreTable;

/// A table of schema `public` or `raw`, with its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// `public` or `raw`.
    pub schema: String,
    /// The SQL name.
    pub name: String,
    /// Its columns, in the order queries see them.
    pub columns: Vec<String>,
    /// The columns an INSERT sets: a mapped table's declared ones (not the
    /// system columns, which its keys and the store make); none for a table
    /// tablesql does not write.
    pub insertable: Vec<String>,
    /// The columns that identify a row: a mapped table's declared primary
    /// key, a raw table's `PartitionKey` and `RowKey`; empty for a table an
    /// embedder registered.
    pub primary_key: Vec<String>,
    /// Its index rows, as declared.
    pub indexes: Vec<IndexInfo>,
}

/// A declared index: rows under their own RowKey template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexInfo {
    /// The index's name.
    pub name: String,
    /// The fields of its RowKey template, in key order: the order its rows
    /// sort in within a partition.
    pub columns: Vec<String>,
    /// Whether `CREATE INDEX` is still writing its rows (queries do not
    /// read it yet).
    pub building: bool,
    /// A global index: its entities are in a storage table of their own.
    pub global: bool,
    /// `CREATE UNIQUE INDEX`.
    pub unique: bool,
}

impl Engine {
    /// Every table of schemas `public` and `raw`, in name order per schema.
    pub async fn describe_tables(&self) -> Result<Vec<TableInfo>, EngineError> {
        match self.base.catalog("datafusion") {
            Some(catalog) => Ok(TableInfo::all_in(catalog.as_ref()).await?),
            None => Ok(Vec::new()),
        }
    }
}

impl Session {
    /// [`Engine::describe_tables`] as this session sees them: its open
    /// block's tables among them (`engine::overlay`).
    pub async fn describe_tables(&self) -> Result<Vec<TableInfo>, EngineError> {
        let default = self
            .ctx
            .state()
            .config()
            .options()
            .catalog
            .default_catalog
            .clone();
        match self.ctx.catalog(&default) {
            Some(catalog) => Ok(TableInfo::all_in(catalog.as_ref()).await?),
            None => Ok(Vec::new()),
        }
    }
}

impl TableInfo {
    /// [`Engine::describe_tables`] over the engine's catalog, for a part
    /// that the engine's context itself holds (the wire server's
    /// `pg_catalog`, which must not hold the engine).
    pub async fn all_in(catalog: &dyn CatalogProvider) -> Result<Vec<TableInfo>> {
        let mut out = Vec::new();
        for schema_name in ["public", RAW_SCHEMA] {
            let Some(schema) = catalog.schema(schema_name) else {
                continue;
            };
            let mut names = schema.table_names();
            names.sort();
            for name in names {
                let Some(table) = schema.table(&name).await? else {
                    continue;
                };
                let columns = table
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let any: &dyn Any = table.as_ref();
                let (primary_key, indexes, insertable) = match any.downcast_ref::<StoreTable>() {
                    Some(store) => match &store.layout().def {
                        // A hidden generated row key is no key a tool
                        // can name: the table shows none, as it was created.
                        Some(def) => (
                            if def
                                .primary_key
                                .iter()
                                .any(|c| def.hidden_columns().contains(&c.as_str()))
                            {
                                Vec::new()
                            } else {
                                def.primary_key.clone()
                            },
                            indexes_of(def),
                            def.visible_columns().map(|c| c.name.clone()).collect(),
                        ),
                        None => (
                            vec!["PartitionKey".into(), "RowKey".into()],
                            Vec::new(),
                            Vec::new(),
                        ),
                    },
                    None => (Vec::new(), Vec::new(), Vec::new()),
                };
                out.push(TableInfo {
                    schema: schema_name.to_owned(),
                    name,
                    columns,
                    insertable,
                    primary_key,
                    indexes,
                });
            }
        }
        Ok(out)
    }
}

fn indexes_of(def: &TableDef) -> Vec<IndexInfo> {
    let local = def.indexes.iter().map(|ix| IndexInfo {
        name: ix.name.clone(),
        columns: ix.row_key.columns().map(str::to_owned).collect(),
        building: ix.building,
        global: false,
        unique: false,
    });
    let global = def.global_indexes.iter().map(|g| IndexInfo {
        name: g.name.clone(),
        columns: g.indexed_columns(&def.primary_key),
        building: g.building,
        global: true,
        unique: g.unique.is_some(),
    });
    local.chain(global).collect()
}

/// A table as the shell's `\d` shows it: where each column is stored, and
/// for a mapped table its mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableDescription {
    /// The SQL name.
    pub name: String,
    /// The storage table holding its entities.
    pub storage_table: String,
    /// Its columns, in the order queries see them.
    pub columns: Vec<ColumnInfo>,
    /// The mapping; `None` for a raw table (columns inferred from a sample).
    pub mapping: Option<MappingInfo>,
}

/// One column of a [`TableDescription`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColumnInfo {
    /// The SQL name.
    pub name: String,
    /// Its SQL type (`INT`, `TEXT`, ...).
    pub sql_type: String,
    /// Whether it may be NULL.
    pub nullable: bool,
    /// Where the entity holds it.
    pub stored_as: StoredAs,
}

/// Where an entity holds a column's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoredAs {
    /// Field `n` (from 0) of the PartitionKey template.
    PartitionKeyField(usize),
    /// Field `n` (from 0) of the RowKey template.
    RowKeyField(usize),
    /// A property of its own name.
    Property,
    /// A system column: `PartitionKey`, `RowKey`, `Timestamp`, `_etag`.
    System,
}

/// A mapped table's keys and index rows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MappingInfo {
    /// The PartitionKey template.
    pub partition_key: String,
    /// The base rows' RowKey template.
    pub row_key: String,
    /// The columns that identify a row.
    pub primary_key: Vec<String>,
    /// Its index rows.
    pub indexes: Vec<IndexTemplate>,
}

/// A declared index as written in its mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexTemplate {
    /// The index's name.
    pub name: String,
    /// Its RowKey template.
    pub row_key: String,
    /// Whether its rows carry every column (or only their keys).
    pub covering: bool,
    /// A global index's storage table and PartitionKey template; `None`
    /// for index rows in the base rows' partitions.
    pub global: Option<(String, String)>,
    /// `CREATE UNIQUE INDEX`.
    pub unique: bool,
}

impl Engine {
    /// The tables of the store that queries name without a schema: mapped
    /// tables, and storage tables without a mapping (raw), in name order;
    /// not the tables an embedder registered. Catches up with catalog
    /// changes made elsewhere first.
    pub async fn store_tables(&self) -> Result<Vec<TableDescription>, EngineError> {
        self.follow_catalog().await;
        let schema = self.public_schema();
        let mut names = schema.table_names();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            if let Some(t) = self.store_table_named(schema.as_ref(), &name).await? {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// The store's table `name` (as [`Engine::store_tables`] lists them),
    /// if there is one.
    pub async fn describe_table(
        &self,
        name: &str,
    ) -> Result<Option<TableDescription>, EngineError> {
        self.follow_catalog().await;
        let schema = self.public_schema();
        self.store_table_named(schema.as_ref(), name).await
    }

    async fn store_table_named(
        &self,
        schema: &dyn datafusion::catalog::SchemaProvider,
        name: &str,
    ) -> Result<Option<TableDescription>, EngineError> {
        let Some(table) = schema.table(name).await? else {
            return Ok(None);
        };
        let any: &dyn Any = table.as_ref();
        Ok(any
            .downcast_ref::<StoreTable>()
            .map(|t| description(name, t.layout())))
    }
}

fn description(name: &str, layout: &crate::exec::Layout) -> TableDescription {
    use crate::exec::read::decode::Source;
    let columns = layout
        .schema
        .fields()
        .iter()
        .zip(&layout.columns)
        .map(|(f, (source, t))| ColumnInfo {
            name: f.name().clone(),
            sql_type: t.to_string(),
            nullable: f.is_nullable(),
            stored_as: match source {
                Source::PartitionField(i) => StoredAs::PartitionKeyField(*i),
                Source::RowField(i) => StoredAs::RowKeyField(*i),
                Source::Property { .. } => StoredAs::Property,
                _ => StoredAs::System,
            },
        })
        .collect();
    let mapping = layout.def.as_ref().map(|def| MappingInfo {
        partition_key: def.partition_key.to_string(),
        row_key: def.row_key.to_string(),
        primary_key: def.primary_key.clone(),
        indexes: def
            .indexes
            .iter()
            .map(|ix| IndexTemplate {
                name: ix.name.clone(),
                row_key: ix.row_key.to_string(),
                covering: ix.covering,
                global: None,
                unique: false,
            })
            .chain(def.global_indexes.iter().map(|g| IndexTemplate {
                name: g.name.clone(),
                row_key: g.row_key.to_string(),
                covering: false,
                global: Some((g.table.to_string(), g.partition_key.to_string())),
                unique: g.unique.is_some(),
            }))
            .collect(),
    });
    TableDescription {
        name: name.to_owned(),
        storage_table: layout.table.to_string(),
        columns,
        mapping,
    }
}
