//! `StoreTable`: the DataFusion `TableProvider` of a mapped or raw table. Both
//! `supports_filters_pushdown` and `scan` ask the one pushdown function, so
//! what DataFusion drops as Exact is what the scan answers.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, not_impl_err, plan_err};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::async_func::{AsyncFuncExec, AsyncMapper};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::GlobalLimitExec;

use super::pushdown::push_down;
use super::settings::TablesqlConfig;
use crate::catalog::stats::{StatsCache, TableStats};
use crate::exec::read::access::{Access, AccessPath};
use crate::exec::read::decode::Source;
use crate::exec::read::rescan::Rescan;
use crate::exec::write::transaction::Transaction;
use crate::exec::{DmlExec, DmlOp, ExecError, Layout, PartitionScanExec, ScanOptions};
use crate::storage::{ETag, PartitionKey, RowKey, TableStore};

/// A write's assignments: a column's index and the expression it gets.
type Assignments = Vec<(usize, Arc<dyn PhysicalExpr>)>;

/// A table of the store, as DataFusion sees it.
#[derive(Debug)]
pub struct StoreTable {
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    options: ScanOptions,
    pushdown: bool,
    stats: Arc<StatsCache>,
    /// Column `DEFAULT`s, by column name.
    defaults: std::collections::HashMap<String, Expr>,
}

impl StoreTable {
    /// Whether its store's pages come in key order ([`TableStore::key_ordered`]).
    pub fn key_ordered(&self) -> bool {
        self.store.key_ordered()
    }

    /// The table `layout` describes, read from `store`.
    pub fn new(store: Arc<dyn TableStore>, layout: Layout, options: ScanOptions) -> Self {
        Self {
            store,
            layout: Arc::new(layout),
            options,
            pushdown: true,
            stats: Arc::default(),
            defaults: Default::default(),
        }
    }

    /// The expressions an INSERT gives the columns it leaves out.
    pub fn with_defaults(mut self, defaults: std::collections::HashMap<String, Expr>) -> Self {
        self.defaults = defaults;
        self
    }

    /// Plans fan-outs from the statistics in `stats` where its table has them.
    pub fn with_stats(mut self, stats: Arc<StatsCache>) -> Self {
        self.stats = stats;
        self
    }

    /// Turns key pushdown off: every scan reads the whole table and DataFusion
    /// applies every filter (the reference the pushdown is tested against).
    pub fn without_pushdown(mut self) -> Self {
        self.pushdown = false;
        self
    }

    /// Whether filters on keys are pushed into the scan (see `without_pushdown`).
    pub fn pushes_down(&self) -> bool {
        self.pushdown
    }

    /// The store table behind a provider, if it is one (a mapped or raw
    /// storage table, not an embedder's or a view).
    pub fn of(provider: &dyn TableProvider) -> Option<&StoreTable> {
        let any: &dyn std::any::Any = provider;
        any.downcast_ref::<StoreTable>()
    }

    /// Where the columns come from.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The store a statement of `session` reads and writes: inside a
    /// transaction block, the block's buffer over the store
    /// (`exec::write::transaction`).
    fn store_for(&self, session: &dyn Session) -> Arc<dyn TableStore> {
        self.store_in(session.config().get_extension::<Transaction>().as_ref())
    }

    /// The store seen from transaction block `tx` (the store itself for
    /// `None`).
    pub(crate) fn store_in(&self, tx: Option<&Arc<Transaction>>) -> Arc<dyn TableStore> {
        self.store_lent(tx).into_owned()
    }

    /// As `store_in`, lent where it is the store itself: a point read
    /// that clones the store's `Arc` moves its count, which every
    /// connection shares, between cores at every run.
    pub(crate) fn store_lent(&self, tx: Option<&Arc<Transaction>>) -> Cow<'_, Arc<dyn TableStore>> {
        match tx {
            Some(tx) => Cow::Owned(tx.store_for(self.store.clone())),
            None => Cow::Borrowed(&self.store),
        }
    }

    /// The write of `INSERT ... ON CONFLICT` (`upsert.rs`).
    pub fn upsert_exec(
        &self,
        session: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        on_existing: crate::exec::write::dml::OnExisting,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DmlExec::new(
            DmlOp::Upsert(on_existing),
            input,
            self.store_for(session),
            self.layout.clone(),
            None,
        )?))
    }

    /// The write of a DELETE or UPDATE whose rows `input` chooses
    /// (`dml_query.rs`): the table's columns, then an UPDATE's new values.
    pub fn query_write_exec(
        &self,
        session: &dyn Session,
        op: &super::dml_query::QueryWrite,
        input: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let width = self.layout.schema.fields().len();
        let op = match op {
            super::dml_query::QueryWrite::Delete => DmlOp::Delete,
            super::dml_query::QueryWrite::Update { columns } => {
                let schema = input.schema();
                let mut assignments = Vec::with_capacity(columns.len());
                for (i, name) in columns.iter().enumerate() {
                    let at = self.layout.schema.index_of(name)?;
                    if !self
                        .layout
                        .columns
                        .get(at)
                        .is_some_and(|(s, _)| s.is_column())
                    {
                        return Err(ExecError::SystemColumn {
                            column: name.clone(),
                        }
                        .into());
                    }
                    let from = width + i;
                    let field = schema.field(from);
                    let value: Arc<dyn PhysicalExpr> = Arc::new(
                        datafusion::physical_expr::expressions::Column::new(field.name(), from),
                    );
                    assignments.push((at, value));
                }
                DmlOp::Update { assignments }
            }
        };
        Ok(Arc::new(
            DmlExec::new(
                op,
                input,
                self.store_for(session),
                self.layout.clone(),
                None,
            )?
            .chosen_by_query(),
        ))
    }

    /// The scan of `filters` when the pushdown answers every one of them
    /// exactly, `None` otherwise: one pushdown, where DataFusion's protocol
    /// (`supports_filters_pushdown`, then `scan`) runs two. A session's direct
    /// path (`engine::direct`) uses it.
    pub fn exact_scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let pushdown = self.plan(filters);
        if !pushdown.exact.iter().all(|e| *e) {
            return Ok(None);
        }
        self.exec(session, pushdown, projection, limit, None)
            .map(Some)
    }

    /// The scan of one page: `projection` (all columns for `None`) then the
    /// PartitionKey and RowKey, in key order, after the key `after` if
    /// given. No LIMIT: the pager stops reading when the page is full.
    pub fn page_scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        after: Option<&(PartitionKey, RowKey)>,
    ) -> Result<PartitionScanExec> {
        // Tokens name base rows' keys: pages read the base rows.
        let planned = self.plan(filters).base().clone();
        let path = match after {
            Some((pk, rk)) => planned.after_key(pk, rk),
            None => planned.clone(),
        };
        let mut columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.layout.schema.fields().len()).collect(),
        };
        for key in [Source::PartitionKey, Source::RowKey] {
            let i = self
                .layout
                .columns
                .iter()
                .position(|(s, _)| *s == key)
                .ok_or_else(|| DataFusionError::Internal("a layout without key columns".into()))?;
            columns.push(i);
        }
        let scan = PartitionScanExec::new(
            self.store_for(session),
            self.layout.clone(),
            path,
            columns,
            None,
            self.options,
        )?
        .with_stats(self.table_stats())
        .in_key_order();
        // Judged as the statement's whole scan, wherever the page resumes.
        Ok(self.judged(session, scan, &planned))
    }

    /// The scan of a pushdown's path, or of its base rows' where the
    /// session turned index use off (`tablesql.use_indexes`), judged by the
    /// scan policy, with `rescan` to read it again by key.
    fn exec(
        &self,
        session: &dyn Session,
        pushdown: super::pushdown::Pushdown,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
        rescan: Option<Arc<dyn Rescan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let use_indexes = TablesqlConfig::get(session.config()).is_none_or(|c| c.use_indexes);
        self.build(
            self.store_for(session),
            pushdown,
            projection,
            limit,
            use_indexes,
            Some(session),
            rescan,
        )
    }

    /// The scan of a pushdown's path on `store`; judged by the scan policy
    /// of `judge`'s session where given (a lookup join's reads by key are
    /// not the statement's scans).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        &self,
        store: Arc<dyn TableStore>,
        pushdown: super::pushdown::Pushdown,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
        use_indexes: bool,
        judge: Option<&dyn Session>,
        rescan: Option<Arc<dyn Rescan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (path, alternatives) = if use_indexes {
            (pushdown.path, pushdown.alternatives)
        } else {
            (pushdown.base().clone(), Vec::new())
        };
        // Many point reads of a partition may cost fewer requests as the
        // spans they cover, on a store that reads keys in runs (not a
        // transaction block's, which reads one key a request and records
        // what it reads).
        let run = store.get_many_limit();
        let path = match self.layout.def.as_deref() {
            Some(def) if run > 1 && path.access == Access::Points && path.requests.len() > 1 => {
                let stats = super::pushdown::cost::Statistics {
                    keys_per_request: run,
                    ..self.cost_statistics()
                };
                super::pushdown::covering(def, &path, &stats).unwrap_or(path)
            }
            _ => path,
        };
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.layout.schema.fields().len()).collect(),
        };
        if path.index().is_some_and(|r| r.global) {
            let read = crate::exec::read::global::GlobalIndexExec::new(
                store,
                self.layout.clone(),
                path,
                projection,
                limit,
            )?;
            return Ok(Arc::new(match rescan {
                Some(r) => read.with_rescan(r),
                None => read,
            }));
        }
        let planned = path.clone();
        let scan = PartitionScanExec::new(
            store,
            self.layout.clone(),
            path,
            projection,
            limit,
            self.options,
        )?
        .with_stats(self.table_stats())
        .with_alternatives(alternatives);
        let scan = match judge {
            Some(session) => self.judged(session, scan, &planned),
            None => scan,
        };
        Ok(Arc::new(match rescan {
            Some(r) => scan.with_rescan(r),
            None => scan,
        }))
    }

    /// A copy that reads `store` (the statement's: a transaction block's
    /// buffer, or the store), for a lookup join's reads by key.
    fn reading(&self, store: Arc<dyn TableStore>) -> StoreTable {
        StoreTable {
            store,
            layout: self.layout.clone(),
            options: self.options,
            pushdown: self.pushdown,
            stats: self.stats.clone(),
            defaults: Default::default(),
        }
    }

    /// The scan with the scan policy's verdict on `path`, and on the
    /// analyzed partitions and entities it reads where the table has
    /// statistics or kept counts, to act on when it runs.
    fn judged(
        &self,
        session: &dyn Session,
        scan: PartitionScanExec,
        path: &AccessPath,
    ) -> PartitionScanExec {
        let estimate = || {
            if !path
                .requests
                .iter()
                .any(crate::exec::read::fanout::spans_partitions)
            {
                return None;
            }
            let stats = self.table_stats()?;
            let analyzed = crate::exec::read::fanout::analyzed(&stats, path);
            Some((analyzed.partitions, analyzed.entities))
        };
        let verdict = super::policy::verdict(session, &self.layout, path, estimate);
        scan.with_verdict(verdict)
    }

    /// The statistics its paths are costed from: its table's (`ANALYZE`'s,
    /// else the store's kept counts') and its global indexes' tables', as
    /// `ANALYZE` last took them. An index table's counts are left out:
    /// with them a global index would be costed against the base rows on
    /// counts alone, and which of the two a query takes stays the rule's
    /// (`push_down`) until the tables are analyzed. The base table's counts
    /// change no such choice: they cost only whole kinds, and an index's
    /// range is narrower.
    pub(crate) fn cost_statistics(&self) -> super::pushdown::cost::Statistics {
        let def = self.layout.def.as_deref();
        super::pushdown::cost::Statistics {
            base: self.table_stats(),
            globals: def.map_or_else(Vec::new, |d| {
                d.global_indexes
                    .iter()
                    .map(|g| self.stats.get(&g.table))
                    .collect()
            }),
            keys_per_request: self.store.get_many_limit(),
        }
    }

    /// Its table's statistics (`StatsCache::get_or_counted`), the counts
    /// read from the store itself, not a transaction's: they are
    /// estimates, and a transaction's own writes do not move them.
    fn table_stats(&self) -> Option<Arc<TableStats>> {
        let table = &self.layout.table;
        self.stats
            .get_or_counted(table, self.layout.def.as_deref(), || {
                // Statistics are estimates: a store that cannot read its
                // counts plans without them, and the scan meets the error.
                self.store
                    .partition_counts(table)
                    .map_err(|e| tracing::debug!("no kept counts of {table}: {e}"))
                    .ok()
                    .flatten()
            })
    }

    /// The pushdown of `filters`, with the table's statistics.
    pub(crate) fn plan(&self, filters: &[Expr]) -> super::pushdown::Pushdown {
        let def = self.layout.def.as_deref();
        if self.pushdown {
            super::pushdown::push_down_with(def, filters, &self.cost_statistics())
        } else {
            let mut p = push_down(def, &[]);
            p.exact = vec![false; filters.len()];
            p
        }
    }
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        self.layout.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
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
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let pushdown = self.plan(filters);
        let use_indexes = TablesqlConfig::get(state.config()).is_none_or(|c| c.use_indexes);
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.layout.schema.fields().len()).collect(),
        };
        // DataFusion asks which filters the scan answers as it pushes them,
        // some at a time over its passes, drops those answered, then plans
        // the scan with all of them, which together may be answered less
        // (a filter that narrows a scan across partitions to one leaves a
        // row value's key ranges unplanned). A filter the path answers
        // alone but not among the others is applied above the scan, and
        // the LIMIT above that.
        let open: Vec<Expr> = filters
            .iter()
            .zip(&pushdown.exact)
            .filter(|(f, exact)| {
                !**exact && filters.len() > 1 && self.plan(std::slice::from_ref(*f)).exact == [true]
            })
            .map(|(f, _)| f.clone())
            .collect();
        if !open.is_empty() {
            let plan = super::lookup::above(&columns, open, &self.layout, |columns| {
                self.exec(state, pushdown, Some(columns), None, None)
            })?;
            return Ok(match limit {
                Some(n) => Arc::new(GlobalLimitExec::new(plan, 0, Some(n))),
                None => plan,
            });
        }
        let rescan = super::lookup::Reread::new(
            self.reading(self.store_for(state)),
            filters,
            columns,
            use_indexes,
        );
        self.exec(state, pushdown, projection, limit, Some(Arc::new(rescan)))
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return not_impl_err!(
                "{insert_op} is not supported: INSERT refuses rows that exist; UPDATE changes them"
            );
        }
        Ok(Arc::new(DmlExec::new(
            DmlOp::Insert,
            input,
            self.store_for(state),
            self.layout.clone(),
            None,
        )?))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (if_match, filters) = etag_condition(filters)?;
        Ok(Arc::new(DmlExec::new(
            DmlOp::Delete,
            self.matching(state, &filters)?,
            self.store_for(state),
            self.layout.clone(),
            if_match,
        )?))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (if_match, filters) = etag_condition(filters)?;
        let schema = DFSchema::try_from(self.layout.schema.clone())?;
        let assignments = assignments
            .into_iter()
            .map(|(name, value)| {
                let i = self.layout.schema.index_of(&name)?;
                if !self
                    .layout
                    .columns
                    .get(i)
                    .is_some_and(|(s, _)| s.is_column())
                {
                    return Err(ExecError::SystemColumn { column: name }.into());
                }
                Ok((i, state.create_physical_expr(value, &schema)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let (input, assignments) = with_async(self.matching(state, &filters)?, assignments)?;
        Ok(Arc::new(DmlExec::new(
            DmlOp::Update { assignments },
            input,
            self.store_for(state),
            self.layout.clone(),
            if_match,
        )?))
    }
}

/// An UPDATE's input and assignments with their async calls (`SET id =
/// nextval('s')`) run by an `AsyncFuncExec` above the input, as DataFusion
/// runs them in a projection: the assignments then read their values as
/// columns appended to the rows (which the write ignores).
fn with_async(
    input: Arc<dyn ExecutionPlan>,
    assignments: Assignments,
) -> Result<(Arc<dyn ExecutionPlan>, Assignments)> {
    let schema = input.schema();
    let mut mapper = AsyncMapper::new(schema.fields().len());
    for (_, e) in &assignments {
        mapper.find_references(e, &schema)?;
    }
    if mapper.is_empty() {
        return Ok((input, assignments));
    }
    let assignments = assignments
        .into_iter()
        .map(|(i, e)| Ok((i, e.transform_up(|x| Ok(mapper.map_expr(x)))?.data)))
        .collect::<Result<Vec<_>>>()?;
    let input = Arc::new(AsyncFuncExec::try_new(mapper.async_exprs, input)?);
    Ok((input, assignments))
}

impl StoreTable {
    /// The rows of a DELETE or UPDATE: every column (keys and ETag included)
    /// along the pushed access path, with the filters the path does not
    /// answer applied above it.
    fn matching(&self, state: &dyn Session, filters: &[Expr]) -> Result<Arc<dyn ExecutionPlan>> {
        // A write needs the base rows' ETags: it reads base rows.
        let mut pushdown = self.plan(filters);
        pushdown.path = pushdown.base().clone();
        pushdown.alternatives.clear();
        let scan = self.exec(state, pushdown.clone(), None, None, None)?;
        let residual: Vec<Expr> = filters
            .iter()
            .zip(&pushdown.exact)
            .filter(|(_, exact)| !**exact)
            .map(|(f, _)| f.clone())
            .collect();
        let Some(predicate) = conjunction(residual) else {
            return Ok(scan);
        };
        let schema = DFSchema::try_from(self.layout.schema.clone())?;
        let predicate = state.create_physical_expr(predicate, &schema)?;
        Ok(Arc::new(FilterExec::try_new(predicate, scan)?))
    }
}

/// Splits `_etag = '...'` off a DELETE's or UPDATE's filters: it is the
/// statement's `If-Match`, not a filter. A row whose ETag differs is a
/// conflict (SQLSTATE 40001), as in Table Storage, rather than a row the
/// statement silently skips.
fn etag_condition(filters: Vec<Expr>) -> Result<(Option<ETag>, Vec<Expr>)> {
    let mut etag = None;
    let mut rest = Vec::with_capacity(filters.len());
    for f in filters {
        let found = match &f {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c))
                    if c.name == "_etag" =>
                {
                    v.try_as_str().flatten().map(str::to_owned)
                }
                _ => None,
            },
            _ => None,
        };
        match (found, &etag) {
            (Some(e), _) if e.trim() == "*" => {
                return plan_err!(
                    "_etag = '*' would match any version; name the ETag the row was read with (SELECT _etag)"
                );
            }
            (Some(e), None) => etag = Some(ETag::from_wire(e)),
            (Some(_), Some(_)) => {
                return plan_err!("a statement may name one _etag, not several");
            }
            (None, _) => rest.push(f),
        }
    }
    Ok((etag, rest))
}
