//! `StoreTable`: the DataFusion `TableProvider` of a mapped or raw table. Both
//! `supports_filters_pushdown` and `scan` ask the one pushdown function, so
//! what DataFusion drops as Exact is what the scan answers.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalSortExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;

use super::access::AccessPath;
use super::pushdown::push_down;
use crate::exec::decode::Source;
use crate::exec::{Layout, PartitionScanExec, ScanOptions};
use crate::storage::TableStore;

/// A table of the store, as DataFusion sees it.
#[derive(Debug)]
pub struct StoreTable {
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    options: ScanOptions,
    pushdown: bool,
}

impl StoreTable {
    /// The table `layout` describes, read from `store`.
    pub fn new(store: Arc<dyn TableStore>, layout: Layout, options: ScanOptions) -> Self {
        Self {
            store,
            layout: Arc::new(layout),
            options,
            pushdown: true,
        }
    }

    /// Turns key pushdown off: every scan reads the whole table and DataFusion
    /// applies every filter (the reference the pushdown is tested against).
    pub fn without_pushdown(mut self) -> Self {
        self.pushdown = false;
        self
    }

    /// Where the columns come from.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The scan of `filters` when the pushdown answers every one of them
    /// exactly, `None` otherwise: one pushdown, where DataFusion's protocol
    /// (`supports_filters_pushdown`, then `scan`) runs two. The wire server's
    /// direct path uses it.
    pub fn exact_scan(
        &self,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let pushdown = self.plan(filters);
        if !pushdown.exact.iter().all(|e| *e) {
            return Ok(None);
        }
        self.exec(pushdown.path, projection, limit).map(Some)
    }

    fn exec(
        &self,
        path: AccessPath,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.layout.schema.fields().len()).collect(),
        };
        let ordering = key_ordering(&self.layout, &path, &projection);
        Ok(Arc::new(PartitionScanExec::new(
            self.store.clone(),
            self.layout.clone(),
            path,
            projection,
            limit,
            ordering,
            self.options,
        )?))
    }

    fn plan(&self, filters: &[Expr]) -> super::pushdown::Pushdown {
        let def = self.layout.def.as_deref();
        if self.pushdown {
            push_down(def, filters)
        } else {
            let mut p = push_down(def, &[]);
            p.exact = vec![false; filters.len()];
            p
        }
    }
}

/// The key order rows arrive in, as sort expressions over the projected
/// columns: the order-preserving key fields in key order (RowKey fields only
/// when one partition is read), up to the first that is not order-preserving
/// or not projected.
fn key_ordering(layout: &Layout, path: &AccessPath, projection: &[usize]) -> Vec<PhysicalSortExpr> {
    let Some(def) = &layout.def else {
        return Vec::new();
    };
    let pk_fields = def.partition_key.columns().count();
    let mut fields: Vec<(Source, crate::keys::FieldFormat)> = Vec::new();
    if !path.single_partition() {
        fields.extend(
            (0..pk_fields)
                .filter_map(|i| Some((Source::PartitionField(i), def.partition_key.field(i)?.1))),
        );
    }
    let rk_fields = def.row_key.columns().count();
    fields.extend(
        (0..rk_fields).filter_map(|i| Some((Source::RowField(i), def.row_key.field(i)?.1))),
    );
    let mut ordering = Vec::new();
    for (source, format) in fields {
        let Some(ascending) = format.order() else {
            break;
        };
        let Some(pos) = projection
            .iter()
            .position(|&i| layout.columns[i].0 == source)
        else {
            break;
        };
        let name = layout.schema.field(projection[pos]).name();
        ordering.push(PhysicalSortExpr::new(
            Arc::new(Column::new(name, pos)),
            SortOptions {
                descending: !ascending,
                nulls_first: false,
            },
        ));
    }
    ordering
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        self.layout.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let owned: Vec<Expr> = filters.iter().map(|e| (*e).clone()).collect();
        Ok(self
            .plan(&owned)
            .exact
            .into_iter()
            .map(|exact| {
                if exact {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.exec(self.plan(filters).path, projection, limit)
    }
}
