//! What the tables are, for front ends that describe them: the wire
//! server's `pg_catalog` (primary keys and indexes for pgJDBC's
//! `getPrimaryKeys`, SQLAlchemy's inspector, psql's `\d`). The answer is
//! the engine's registered tables, so it agrees with what queries see.

use std::any::Any;

use datafusion::catalog::CatalogProvider;
use datafusion::error::Result;

use super::{Engine, EngineError, RAW_SCHEMA};
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
}

impl Engine {
    /// Every table of schemas `public` and `raw`, in name order per schema.
    pub async fn describe_tables(&self) -> Result<Vec<TableInfo>, EngineError> {
        match self.ctx.catalog("datafusion") {
            Some(catalog) => Ok(describe_catalog(catalog.as_ref()).await?),
            None => Ok(Vec::new()),
        }
    }
}

/// [`Engine::describe_tables`] over the engine's catalog, for a part that
/// the engine's context itself holds (the wire server's `pg_catalog`, which
/// must not hold the engine).
pub async fn describe_catalog(catalog: &dyn CatalogProvider) -> Result<Vec<TableInfo>> {
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
                    Some(def) => (
                        def.primary_key.clone(),
                        indexes_of(def),
                        def.columns.iter().map(|c| c.name.clone()).collect(),
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

fn indexes_of(def: &TableDef) -> Vec<IndexInfo> {
    def.indexes
        .iter()
        .map(|ix| IndexInfo {
            name: ix.name.clone(),
            columns: ix.row_key.columns().map(str::to_owned).collect(),
            building: ix.building,
        })
        .collect()
}
