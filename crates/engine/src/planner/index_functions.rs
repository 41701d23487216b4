//! `tablesql_check_index(table [, index])` and
//! `tablesql_repair_index(table [, index])`: index upkeep
//! (`exec::write::upkeep`) as table functions, the way PostgreSQL's amcheck
//! offers `bt_index_check()`, so that psql, the shell and an embedder reach
//! it alike. Each returns one row per index: what it read, what it found
//! (missing, orphaned, stale), what it fixed and what a concurrent writer
//! changed first, with a few example keys. The work runs when the query
//! runs, not when it is planned.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{ScalarValue, plan_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;

use crate::catalog::{TableDef, persist};
use crate::exec::write::upkeep::{self, IndexHealth, Upkeep};
use crate::storage::TableStore;

/// The SQL names of the two functions.
pub const CHECK: &str = "tablesql_check_index";
/// See [`CHECK`].
pub const REPAIR: &str = "tablesql_repair_index";

/// One of the two functions over a store.
#[derive(Debug)]
pub struct IndexFunction {
    store: Arc<dyn TableStore>,
    upkeep: Upkeep,
}

impl IndexFunction {
    /// The function that checks (or repairs) indexes of `store`'s tables.
    pub fn new(store: Arc<dyn TableStore>, upkeep: Upkeep) -> Self {
        Self { store, upkeep }
    }

    fn name(&self) -> &'static str {
        match self.upkeep {
            Upkeep::Check => CHECK,
            Upkeep::Repair => REPAIR,
        }
    }
}

/// The columns of the report.
pub fn schema() -> SchemaRef {
    let count = |name: &str| Field::new(name, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("index", DataType::Utf8, false),
        count("partitions"),
        count("base_rows"),
        count("index_rows"),
        count("missing"),
        count("unindexable"),
        count("orphaned"),
        count("stale"),
        count("repaired"),
        count("conflicts"),
        Field::new("examples", DataType::Utf8, false),
    ]))
}

impl TableFunctionImpl for IndexFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let texts = args
            .exprs()
            .iter()
            .map(text)
            .collect::<Option<Vec<String>>>();
        let (table, index) = match texts.as_deref() {
            Some([table]) => (table.clone(), None),
            Some([table, index]) => (table.clone(), Some(index.clone())),
            _ => {
                return plan_err!(
                    "{}(table [, index]) takes the table's name and optionally an index's, as text",
                    self.name()
                );
            }
        };
        let run = Run {
            store: self.store.clone(),
            table,
            index,
            upkeep: self.upkeep,
            schema: schema(),
        };
        Ok(Arc::new(StreamingTable::try_new(
            schema(),
            vec![Arc::new(run)],
        )?))
    }
}

fn text(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Some(s.clone()),
        _ => None,
    }
}

/// One call, run when its stream is read.
#[derive(Debug)]
struct Run {
    store: Arc<dyn TableStore>,
    table: String,
    index: Option<String>,
    upkeep: Upkeep,
    schema: SchemaRef,
}

impl PartitionStream for Run {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (store, table, index, upkeep, schema) = (
            self.store.clone(),
            self.table.clone(),
            self.index.clone(),
            self.upkeep,
            self.schema.clone(),
        );
        let report = async move {
            let def = find(store.as_ref(), &table).await?;
            let health = health(store.as_ref(), &def, index.as_deref(), upkeep, |_| {}).await?;
            batch(&schema, &health)
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(report),
        ))
    }
}

/// The definition of mapped table `name` (as written, or lower case).
pub async fn find(store: &dyn TableStore, name: &str) -> Result<TableDef> {
    let defs = persist::load(store)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let lower = name.to_lowercase();
    defs.into_iter()
        .find(|d| d.name == name || d.name == lower)
        .ok_or_else(|| DataFusionError::Plan(format!("table {name} is not a mapped table")))
}

/// Checks (or repairs) the indexes named (all of them for `None`), the
/// index rows' then the global indexes'; `progress` hears of base rows read.
pub async fn health(
    store: &dyn TableStore,
    def: &TableDef,
    index: Option<&str>,
    upkeep: Upkeep,
    mut progress: impl FnMut(u64),
) -> Result<Vec<IndexHealth>> {
    let positions = positions(def, index)?;
    let mut health = if positions.is_empty() {
        Vec::new()
    } else {
        upkeep::run(store, def, &positions, upkeep, &mut progress).await?
    };
    for g in def
        .global_indexes
        .iter()
        .filter(|g| index.is_none_or(|n| n == g.name))
    {
        let repair = upkeep == Upkeep::Repair;
        health.push(
            crate::exec::write::global::upkeep(store, def, g, repair, &mut progress)
                .await
                .map_err(DataFusionError::from)?,
        );
    }
    Ok(health)
}

/// The positions of the index row templates named (all of them for
/// `None`; none for a global index's name).
pub fn positions(def: &TableDef, index: Option<&str>) -> Result<Vec<usize>> {
    match index {
        None if def.indexes.is_empty() && def.global_indexes.is_empty() => {
            plan_err!("table {} declares no index", def.name)
        }
        None => Ok((0..def.indexes.len()).collect()),
        Some(name) if def.global_indexes.iter().any(|g| g.name == name) => Ok(Vec::new()),
        Some(name) => match def.indexes.iter().position(|i| i.name == name) {
            Some(i) => Ok(vec![i]),
            None => {
                let known: Vec<&str> = def
                    .indexes
                    .iter()
                    .map(|i| i.name.as_str())
                    .chain(def.global_indexes.iter().map(|g| g.name.as_str()))
                    .collect();
                plan_err!(
                    "table {} has no index {name} (its indexes: {})",
                    def.name,
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                )
            }
        },
    }
}

fn batch(schema: &SchemaRef, health: &[IndexHealth]) -> Result<RecordBatch> {
    let count = |f: fn(&IndexHealth) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            health
                .iter()
                .map(|h| i64::try_from(f(h)).unwrap_or(i64::MAX)),
        ))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            health.iter().map(|h| h.index.clone()),
        )),
        count(|h| h.partitions),
        count(|h| h.base_rows),
        count(|h| h.index_rows),
        count(|h| h.missing),
        count(|h| h.unindexable),
        count(|h| h.orphaned),
        count(|h| h.stale),
        count(|h| h.repaired),
        count(|h| h.conflicts),
        Arc::new(StringArray::from_iter_values(
            health.iter().map(|h| h.examples.join("; ")),
        )),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}
