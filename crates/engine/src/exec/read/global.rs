//! `GlobalIndexExec`: a read through a global index. Its requests read the
//! index's own storage table (one partition per looked-up value); every
//! entity found names a base row, which is read by a point get, several at
//! once; an entity is kept only where that base row exists and writes this
//! very entity (`exec::write::global::agrees`), so an entity left by a
//! write that died halfway, or by one still running, stands for no row.
//! The base rows found are decoded as a scan of the table decodes them, a
//! batch at a time as they come: pages and lookups are made as the
//! consumer asks for rows, so a LIMIT met early stops the reading.
//! EXPLAIN ANALYZE counts the index requests, the entities, the base
//! lookups and the entities that stood for no row.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::access::{AccessPath, KeyRequest};
use super::decode::{Layout, decode};
use super::scan::leaf;
use crate::exec::ExecError;
use crate::exec::write::global;
use crate::storage::{ContinuationToken, Query, StoredEntity, TableName, TableStore};

/// Base rows looked up at once.
const LOOKUPS_IN_FLIGHT: usize = 16;

/// A read of base rows through global index `position` of the layout's
/// definition.
#[derive(Debug)]
pub struct GlobalIndexExec {
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    position: usize,
    path: AccessPath,
    projection: Vec<usize>,
    schema: SchemaRef,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// The planner's handle to read the table again by key.
    rescan: Option<Arc<dyn super::rescan::Rescan>>,
}

impl GlobalIndexExec {
    /// The read of `path` (a global index's) producing the `projection`
    /// columns of `layout`'s base rows.
    pub fn new(
        store: Arc<dyn TableStore>,
        layout: Arc<Layout>,
        path: AccessPath,
        projection: Vec<usize>,
        limit: Option<usize>,
    ) -> Result<Self> {
        let position = path
            .index()
            .filter(|r| r.global)
            .map(|r| r.position)
            .ok_or_else(|| DataFusionError::Internal("not a global index's path".into()))?;
        let schema = Arc::new(layout.schema.project(&projection)?);
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            store,
            layout,
            position,
            path,
            projection,
            schema,
            limit,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            rescan: None,
        })
    }

    /// With the planner's handle to read the same table again under more
    /// conditions (a lookup join's reads by key).
    pub fn with_rescan(mut self, rescan: Arc<dyn super::rescan::Rescan>) -> Self {
        self.rescan = Some(rescan);
        self
    }

    /// The handle to read the table again, if the planner gave one.
    pub fn rescan(&self) -> Option<&Arc<dyn super::rescan::Rescan>> {
        self.rescan.as_ref()
    }

    /// The most rows it reads.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The storage table of the base rows it reads.
    pub fn table(&self) -> &TableName {
        &self.layout.table
    }

    /// The access path it runs.
    pub fn path(&self) -> &AccessPath {
        &self.path
    }

    fn counter(&self, name: &'static str) -> Count {
        MetricBuilder::new(&self.metrics).counter(name, 0)
    }
}

/// The pages of index entities `request` reads from `table`, one request
/// each, read as the consumer asks for them (so a LIMIT met early stops
/// the reading).
fn pages(
    store: Arc<dyn TableStore>,
    table: TableName,
    request: KeyRequest,
    requests: Count,
) -> BoxStream<'static, Result<Vec<StoredEntity>, ExecError>> {
    match request {
        KeyRequest::Get(pk, rk) => futures::stream::once(async move {
            requests.add(1);
            Ok(store.get(&table, &pk, &rk).await?.into_iter().collect())
        })
        .boxed(),
        KeyRequest::Scan {
            partitions, rows, ..
        } => {
            let query = Arc::new(Query {
                partitions,
                rows,
                ..Query::all()
            });
            // `Some(token)`: a page to read (the first has none); `None`: done.
            let first: Option<Option<ContinuationToken>> = Some(None);
            futures::stream::try_unfold(first, move |state| {
                let (store, table, query, requests) = (
                    store.clone(),
                    table.clone(),
                    query.clone(),
                    requests.clone(),
                );
                async move {
                    let Some(token) = state else {
                        return Ok(None);
                    };
                    requests.add(1);
                    let page = store.query(&table, &query, token.as_ref()).await?;
                    Ok(Some((page.entities, page.continuation.map(Some))))
                }
            })
            .boxed()
        }
    }
}

/// Rows decoded into one batch at most: few, so that a consumer that stops
/// early (a LIMIT above a filter) stops the lookups early too; each row
/// costs a request, which dwarfs a batch's overhead.
const BATCH_ROWS: usize = 64;

impl DisplayAs for GlobalIndexExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let table = self
            .layout
            .def
            .as_ref()
            .and_then(|d| d.global_indexes.get(self.position))
            .map_or_else(String::new, |g| g.table.to_string());
        write!(
            f,
            "GlobalIndexExec: table={} index_table={table} {} lookup=base_rows",
            self.layout.table, self.path
        )?;
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        write!(f, " projection=[{}]", names.join(", "))?;
        if let Some(l) = self.limit {
            write!(f, " limit={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GlobalIndexExec {
    fn name(&self) -> &str {
        "GlobalIndexExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        leaf(self, children)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        leaf(self, children)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// The rows it returns at most: the index entities `ANALYZE`'s
    /// statistics of the index table estimate (one base row each), or a
    /// LIMIT; unknown otherwise. Join selection and lookup joins read it.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let estimate = self
            .path
            .estimate
            .map(|e| usize::try_from(e.rows).unwrap_or(usize::MAX));
        let mut stats = Statistics::new_unknown(&self.schema);
        if let Some(rows) = [estimate, self.limit].into_iter().flatten().min() {
            stats.num_rows = Precision::Inexact(rows);
        }
        Ok(Arc::new(stats))
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "GlobalIndexExec has one partition, not {partition}"
            )));
        }
        let def = self
            .layout
            .def
            .clone()
            .ok_or_else(|| DataFusionError::Internal("a global index of a raw table".into()))?;
        let g = def
            .global_indexes
            .get(self.position)
            .cloned()
            .ok_or_else(|| DataFusionError::Internal("no such global index".into()))?;
        // The index's pages and the base rows' point reads, billed here.
        let billed = super::metrics::BillCount::register(&self.metrics).billed(self.store.clone());
        let (store, layout, path) = (billed.clone(), self.layout.clone(), self.path.clone());
        let (projection, schema, limit) =
            (self.projection.clone(), self.schema.clone(), self.limit);
        let (requests, found, lookups, stale) = (
            self.counter("index_requests"),
            self.counter("index_entities"),
            self.counter("base_lookups"),
            self.counter("stood_for_no_row"),
        );
        let g = Arc::new(g);
        let index_table = g.table.clone();
        let entities = futures::stream::iter(path.requests.clone())
            .flat_map(move |request| {
                pages(
                    store.clone(),
                    index_table.clone(),
                    request,
                    requests.clone(),
                )
            })
            .map_ok(|page| futures::stream::iter(page.into_iter().map(Ok::<_, ExecError>)))
            .try_flatten();
        let base_store = billed;
        let checked = entities
            .map(move |e| {
                let (store, def, g, layout) =
                    (base_store.clone(), def.clone(), g.clone(), layout.clone());
                let (found, lookups) = (found.clone(), lookups.clone());
                async move {
                    let e = e?;
                    found.add(1);
                    // The row it names, or the one it was handed over
                    // from (`global::named_bases`): the first that exists
                    // and writes this entity.
                    for (pk, rk) in global::named_bases(&def, &g, &e.entity) {
                        lookups.add(1);
                        let Some(row) = store.get(&layout.table, &pk, &rk).await? else {
                            continue;
                        };
                        let values = crate::exec::write::upkeep::row_values(&def, &row)?;
                        if global::agrees(&def, &g, &e.entity, &values) {
                            return Ok::<_, ExecError>(Some(row));
                        }
                    }
                    Ok(None)
                }
            })
            .buffered(LOOKUPS_IN_FLIGHT)
            .try_filter_map(move |row| {
                if row.is_none() {
                    stale.add(1);
                }
                futures::future::ready(Ok(row))
            });
        let limited: BoxStream<'static, Result<StoredEntity, ExecError>> = match limit {
            Some(l) => checked.take(l).boxed(),
            None => checked.boxed(),
        };
        let decode_layout = self.layout.clone();
        let batches = limited.try_ready_chunks(BATCH_ROWS).map(move |rows| {
            let rows = rows.map_err(|e| DataFusionError::from(e.1))?;
            let (batch, _) = decode(&decode_layout, &projection, &schema, &rows)?;
            Ok(batch)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches,
        )))
    }
}
