//! Token paging: one page of a query's rows, read in key order, and the key
//! of its last row, where the next page resumes (`exec::read::token` signs it).
//!
//! A query pages when it reads one store table and only filters and
//! projects its rows: then its rows come in the table's key order and each
//! carries its entity's keys, so a page ends on one key whatever the fan-out
//! read in parallel, and resuming reads the access path after that key. The
//! filters and projections run here on each batch (DataFusion's physical
//! expressions), beside the key columns they must not lose.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{filter, filter_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{LogicalPlan, TableScan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use super::StoreTable;
use crate::exec::ExecError;
use crate::storage::{PartitionKey, RowKey};

/// One page of rows.
#[derive(Debug)]
pub struct PageRows {
    /// The statement's columns.
    pub schema: SchemaRef,
    /// At most the page size of rows, in key order.
    pub batches: Vec<RecordBatch>,
    /// The key of the last row when the page is full and more rows follow.
    pub last: Option<(PartitionKey, RowKey)>,
}

/// An operator above the scan, run on each batch.
enum Step {
    Filter(Arc<dyn PhysicalExpr>),
    Project(Vec<Arc<dyn PhysicalExpr>>, SchemaRef),
    /// A subquery alias: the same columns under other qualifiers.
    Rename(SchemaRef),
}

/// A batch on its way up, with the keys of its rows.
struct Keyed {
    batch: RecordBatch,
    partition_keys: Arc<dyn Array>,
    row_keys: Arc<dyn Array>,
}

/// Whether token paging runs a plan.
#[derive(Debug)]
pub enum Paging {
    /// It pages (see the module doc).
    Pages,
    /// It reads no store table (system tables, `VALUES`): nothing to page.
    NoStoreTable,
    /// It reads a store table but cannot page; the error says why.
    Cannot(ExecError),
}

/// How token paging treats a plan.
pub fn paging(plan: &LogicalPlan) -> Paging {
    let split = split(plan);
    if let Ok((_, scan)) = &split
        && let Some(provider) = store_table(scan)
    {
        let any: &dyn std::any::Any = provider.as_ref();
        let ordered = any
            .downcast_ref::<StoreTable>()
            .is_none_or(StoreTable::key_ordered);
        // A page resumes after the last row's key: only rows in key order
        // leave none behind it.
        return match ordered {
            true => Paging::Pages,
            false => Paging::Cannot(not_pageable(
                "a store whose rows come in no key order (Cosmos DB's Table API)",
            )),
        };
    }
    let reads_store = plan
        .exists(|node| {
            Ok(matches!(node, LogicalPlan::TableScan(scan) if store_table(scan).is_some()))
        })
        .unwrap_or(true);
    match split {
        Err(why) if reads_store => Paging::Cannot(why),
        _ => Paging::NoStoreTable,
    }
}

fn store_table(scan: &TableScan) -> Option<Arc<dyn datafusion::datasource::TableProvider>> {
    let provider = source_as_provider(&scan.source).ok()?;
    let any: &dyn std::any::Any = provider.as_ref();
    any.is::<StoreTable>().then_some(provider)
}

/// What a pageable plan reads, for a page token to name beside the
/// statement's text: the storage table and the columns it reads.
pub fn identity(plan: &LogicalPlan) -> String {
    match split(plan) {
        Ok((_, scan)) => {
            let table = store_table(scan).and_then(|p| {
                let any: &dyn std::any::Any = p.as_ref();
                any.downcast_ref::<StoreTable>()
                    .map(|t| t.layout().table.as_str().to_owned())
            });
            format!(
                "{} {:?}",
                table.unwrap_or_default(),
                scan.projected_schema.as_arrow().fields()
            )
        }
        Err(_) => String::new(),
    }
}

/// Runs one page of at most `size` rows of an optimized query plan, after
/// the row keyed `after` if given.
pub async fn run_page(
    state: &SessionState,
    plan: &LogicalPlan,
    size: usize,
    after: Option<(PartitionKey, RowKey)>,
) -> Result<PageRows> {
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let mut page = PageRows {
        schema,
        batches: Vec::new(),
        last: None,
    };
    if empty(plan) {
        return Ok(page);
    }
    let (chain, scan) = split(plan).map_err(DataFusionError::from)?;
    let not_store = || DataFusionError::from(not_pageable("a table that is not the store's"));
    let provider = store_table(scan).ok_or_else(not_store)?;
    let any: &dyn std::any::Any = provider.as_ref();
    let table = any.downcast_ref::<StoreTable>().ok_or_else(not_store)?;
    let exec = table.page_scan(
        state,
        scan.projection.as_ref(),
        &scan.filters,
        after.as_ref(),
    )?;
    let scan_schema: SchemaRef = Arc::new(scan.projected_schema.as_arrow().clone());
    let steps = chain
        .iter()
        .rev()
        .map(|node| step(state, node))
        .collect::<Result<Vec<_>>>()?;
    let mut stream = exec.execute(0, state.task_ctx())?;
    let mut rows = 0;
    let mut last = None;
    while let Some(batch) = stream.next().await.transpose()? {
        let keyed = steps
            .iter()
            .try_fold(split_keys(&scan_schema, batch)?, apply)?;
        let n = keyed.batch.num_rows();
        if n == 0 {
            continue;
        }
        if rows == size {
            // The page was full at the end of the last batch; rows follow.
            page.last = last;
            return Ok(page);
        }
        let take = (size - rows).min(n);
        page.batches.push(keyed.batch.slice(0, take));
        rows += take;
        if rows == size {
            last = Some(key_at(&keyed, take - 1)?);
            if take < n {
                page.last = last;
                return Ok(page);
            }
        }
    }
    Ok(page)
}

/// The operators above the table scan, top first, and the scan; an error
/// naming what a pageable query may not have.
fn split(plan: &LogicalPlan) -> std::result::Result<(Vec<&LogicalPlan>, &TableScan), ExecError> {
    let mut chain = Vec::new();
    let mut node = plan;
    loop {
        let input = match node {
            LogicalPlan::Projection(p) => p.input.as_ref(),
            LogicalPlan::Filter(f) => f.input.as_ref(),
            LogicalPlan::SubqueryAlias(a) => a.input.as_ref(),
            LogicalPlan::TableScan(scan) if scan.fetch.is_none() => return Ok((chain, scan)),
            LogicalPlan::TableScan(_) | LogicalPlan::Limit(_) => {
                return Err(not_pageable("a LIMIT (the page size is the limit)"));
            }
            LogicalPlan::Sort(_) => {
                return Err(not_pageable(
                    "an ORDER BY (pages come in key order; for another order, page with a row-value condition such as (a, b) > (x, y))",
                ));
            }
            LogicalPlan::Aggregate(_) => return Err(not_pageable("an aggregate")),
            LogicalPlan::Join(_) => return Err(not_pageable("a join")),
            LogicalPlan::Union(_) => return Err(not_pageable("a UNION")),
            LogicalPlan::Distinct(_) => return Err(not_pageable("a DISTINCT")),
            LogicalPlan::Window(_) => return Err(not_pageable("a window function")),
            _ => {
                return Err(not_pageable(
                    "an operator that does not keep rows one by one",
                ));
            }
        };
        chain.push(node);
        node = input;
    }
}

/// Whether the optimizer proved the query empty (`WHERE b IS NULL` of a
/// NOT NULL column): its one page has no rows.
fn empty(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(p) => empty(&p.input),
        LogicalPlan::Filter(f) => empty(&f.input),
        LogicalPlan::SubqueryAlias(a) => empty(&a.input),
        LogicalPlan::EmptyRelation(e) => !e.produce_one_row,
        _ => false,
    }
}

fn not_pageable(what: &str) -> ExecError {
    ExecError::NotPageable(what.to_owned())
}

fn step(state: &SessionState, node: &LogicalPlan) -> Result<Step> {
    let input_schema = |input: &LogicalPlan| -> Arc<DFSchema> { input.schema().clone() };
    match node {
        LogicalPlan::Filter(f) => Ok(Step::Filter(
            state.create_physical_expr(f.predicate.clone(), &input_schema(&f.input))?,
        )),
        LogicalPlan::Projection(p) => {
            let schema = input_schema(&p.input);
            let exprs = p
                .expr
                .iter()
                .map(|e| state.create_physical_expr(e.clone(), &schema))
                .collect::<Result<Vec<_>>>()?;
            Ok(Step::Project(exprs, Arc::new(p.schema.as_arrow().clone())))
        }
        LogicalPlan::SubqueryAlias(a) => Ok(Step::Rename(Arc::new(a.schema.as_arrow().clone()))),
        other => Err(DataFusionError::Internal(format!(
            "token paging has no step for {}",
            other.display()
        ))),
    }
}

/// The scan's batch without its two trailing key columns, and those keys.
fn split_keys(scan_schema: &SchemaRef, batch: RecordBatch) -> Result<Keyed> {
    let n = batch.num_columns();
    if n < 2 {
        return Err(DataFusionError::Internal(
            "a page scan without key columns".into(),
        ));
    }
    let columns = batch.columns()[..n - 2].to_vec();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(Keyed {
        partition_keys: batch.column(n - 2).clone(),
        row_keys: batch.column(n - 1).clone(),
        batch: RecordBatch::try_new_with_options(scan_schema.clone(), columns, &options)?,
    })
}

fn apply(k: Keyed, step: &Step) -> Result<Keyed> {
    let rows = k.batch.num_rows();
    match step {
        Step::Filter(predicate) => {
            let mask = predicate.evaluate(&k.batch)?.into_array(rows)?;
            let mask = mask
                .as_boolean_opt()
                .ok_or_else(|| DataFusionError::Internal("a filter that is not boolean".into()))?;
            Ok(Keyed {
                batch: filter_record_batch(&k.batch, mask)?,
                partition_keys: filter(&k.partition_keys, mask)?,
                row_keys: filter(&k.row_keys, mask)?,
            })
        }
        Step::Project(exprs, schema) => {
            let columns = exprs
                .iter()
                .map(|e| e.evaluate(&k.batch)?.into_array(rows))
                .collect::<Result<Vec<_>>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            Ok(Keyed {
                batch: RecordBatch::try_new_with_options(schema.clone(), columns, &options)?,
                ..k
            })
        }
        Step::Rename(schema) => Ok(Keyed {
            batch: k.batch.with_schema(schema.clone())?,
            ..k
        }),
    }
}

fn key_at(k: &Keyed, row: usize) -> Result<(PartitionKey, RowKey)> {
    let text = |a: &Arc<dyn Array>| -> Result<String> {
        a.as_string_opt::<i32>()
            .filter(|s| s.is_valid(row))
            .map(|s| s.value(row).to_owned())
            .ok_or_else(|| DataFusionError::Internal("a row without its keys".into()))
    };
    Ok((
        PartitionKey::from_stored(text(&k.partition_keys)?),
        RowKey::from_stored(text(&k.row_keys)?),
    ))
}
