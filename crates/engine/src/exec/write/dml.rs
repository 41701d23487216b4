//! `DmlExec`: INSERT, UPDATE and DELETE on a mapped table. Each SQL row becomes
//! a group of operations on its base entity and its index rows; a group never
//! straddles two entity group transactions, so a row and its index rows are
//! written together or not at all. Groups of one partition are packed into
//! transactions of at most 100 operations.
//!
//! Up to `FLUSH_ROWS` rows are encoded and checked before anything is sent, so
//! a bad value in a statement of that size writes nothing. Larger statements,
//! and statements over several partitions that fail at the store, report how
//! many rows were written before the failure: the store has no transaction
//! across partitions, and we do not pretend otherwise.
//!
//! Where the primary key is shorter than the RowKey (the demo's RowKey also
//! holds name, gender and age after the bib), the store alone would take two
//! rows with one key; INSERT and key-changing UPDATEs check the key's RowKey
//! prefix first (23505). The check and the write are two requests, so two
//! writers racing on one new key can still both succeed.
//!
//! A statement whose input reads the table it writes (`INSERT ... SELECT`
//! from itself, an UPDATE that moves rows to new keys) reads its input to the
//! end before the first write, so it never meets its own rows.
//!
//! With RETURNING (`returning`), it yields the rows it wrote instead of
//! their count, in the table's columns: each as the store now has it
//! (decoded from the entity written, its ETag the write's and its
//! Timestamp the one that ETag names), and for a DELETE as it was read.
//! They come when the statement has written them all.
//!
//! UPDATE and DELETE are conditional writes. Each row is written `If-Match` the
//! ETag the scan read (or the one the statement names with `_etag = '...'`), so
//! a row changed by someone else in between fails the statement with a
//! precondition error (SQLSTATE 40001) instead of being overwritten.
//!
//! A transaction whose answer was lost, and whose retry met what the lost
//! attempt would have done (a conditional write's 412, an insert's 409),
//! may have landed: the store could not settle it
//! (`StorageError::AmbiguousRetry`). Stopping there would leave the rows
//! after it unwritten although they are independent of it, so the statement
//! sends the rest and then fails with 58000, naming how many rows may have
//! been applied (`ExecError::AnswersLost`): the table then holds every row
//! the statement asked for, except that those few are uncertain.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{Distribution, EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;

mod globals;
mod upsert;

pub use upsert::{Arbiter, OnExisting};

use super::encode::{Columns, compose, entities, mapped, primary_prefix};
use crate::catalog::TableDef;
use crate::exec::ExecError;
use crate::exec::read::decode::{Layout, Source, decode};
use crate::exec::read::metrics::{BillCount, ExactCount};
use crate::exec::read::scan::PartitionScanExec;
use crate::storage::key::cmp_utf16;
use crate::storage::write::MAX_BATCH_OPERATIONS;
use crate::storage::{
    ETag, EdmValue, IfMatch, KeyRange, PartitionKey, Query, RowKey, StorageError, StoredEntity,
    TableStore, WriteOp,
};

/// Rows encoded and checked before the first transaction is sent.
pub const FLUSH_ROWS: usize = 10_000;
/// Up to this many new keys in a partition are checked one query each;
/// more, by walking their range (`Writer::check_partition`).
const FEW_CLAIMS: usize = 4;
/// Keys read per page of that walk: the store's own page size.
const CLAIM_PAGE: u32 = 1000;
/// Bytes of one transaction, below the service's 4 MiB for its envelope.
const BATCH_BYTES: usize = 3 * 1024 * 1024;

/// What a `DmlExec` does with its input rows.
#[derive(Debug, Clone)]
pub enum DmlOp {
    /// Adds the rows (the input has the table's columns); a row whose base
    /// entity or index rows exist already is refused.
    Insert,
    /// Rewrites the rows the input scan matched, with new values for the
    /// columns at these layout positions, evaluated over the scanned row.
    Update {
        assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
    },
    /// Removes the rows the input scan matched, with their index rows.
    Delete,
    /// Adds the rows, and where a row's primary key exists does what
    /// `INSERT ... ON CONFLICT` says (`dml/upsert.rs`).
    Upsert(OnExisting),
}

impl DmlOp {
    fn name(&self) -> &'static str {
        match self {
            DmlOp::Insert => "insert",
            DmlOp::Update { .. } => "update",
            DmlOp::Delete => "delete",
            DmlOp::Upsert(OnExisting::Nothing(_)) => "upsert(do_nothing)",
            DmlOp::Upsert(OnExisting::Update { blind: false, .. }) => "upsert(do_update)",
            DmlOp::Upsert(OnExisting::Update { blind: true, .. }) => "upsert(blind)",
        }
    }
}

/// Writes rows into a mapped table and yields one row: `count`, the number of
/// SQL rows written.
#[derive(Debug)]
pub struct DmlExec {
    op: DmlOp,
    input: Arc<dyn ExecutionPlan>,
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    if_match: Option<ETag>,
    properties: Arc<PlanProperties>,
    /// The PartitionKeys its committed writes span, for the workload
    /// statistics' key order.
    span: Arc<std::sync::Mutex<WrittenSpan>>,
    metrics: ExecutionPlanMetricsSet,
    /// SQL rows committed so far (metric `rows_written`): what a statement
    /// stopped midway has already written.
    rows_written: ExactCount,
    /// Retries the store made for the writes and their reads (the input's
    /// scans count their own).
    retries: ExactCount,
    /// Its billable transactions, by kind (the input's scans keep their own).
    bill: BillCount,
    /// Whether it yields the rows it wrote (RETURNING), not their count.
    returning: bool,
    /// Whether a query chose its rows (`planner::dml_query`): read to the
    /// end before the first write, and each row written once.
    chosen: bool,
    /// With RETURNING, the order its input came in (`INSERT ... SELECT ...
    /// ORDER BY`), which the rows returned keep: required of the input, or
    /// the optimizer would drop the sort as no use to a write.
    ordering: Option<datafusion::physical_expr::LexOrdering>,
}

/// The first and last PartitionKey a statement wrote, and its entities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WrittenSpan {
    /// `(first, last)` in key order; `None` before a write commits.
    pub keys: Option<(String, String)>,
    /// Entities written, index rows included.
    pub entities: u64,
}

impl WrittenSpan {
    fn add(&mut self, pk: &str, n: u64) {
        self.entities += n;
        crate::exec::stats::key_order::widen(&mut self.keys, pk, pk);
    }
}

/// The metric of the SQL rows a write has committed, read while it runs
/// (a statement stopped midway says how many) and after
/// ([`crate::exec::read::metrics::count`]).
pub const ROWS_WRITTEN: &str = "rows_written";

/// The one row a write answers with: how many rows it wrote, as every
/// DML plan yields it (the library's `Session::collect` of a write).
pub fn count_batch(rows: u64) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        count_schema(),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )?)
}

/// The schema every DML plan yields (DataFusion's convention).
fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

impl DmlExec {
    /// What it does: `insert`, `update`, `delete` or an upsert.
    pub fn op_name(&self) -> &'static str {
        self.op.name()
    }

    /// The storage table it writes.
    pub fn table(&self) -> &crate::storage::TableName {
        &self.layout.table
    }

    /// `op` over `input`; `if_match` is the ETag a statement requires of the
    /// rows it changes (`None`: the ETag each row was read with).
    pub fn new(
        op: DmlOp,
        input: Arc<dyn ExecutionPlan>,
        store: Arc<dyn TableStore>,
        layout: Arc<Layout>,
        if_match: Option<ETag>,
    ) -> Result<Self> {
        mapped(&layout)?;
        let input: Arc<dyn ExecutionPlan> = if input.properties().partitioning.partition_count() > 1
        {
            Arc::new(CoalescePartitionsExec::new(input))
        } else {
            input
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        let metrics = ExecutionPlanMetricsSet::new();
        Ok(Self {
            op,
            input,
            store,
            layout,
            if_match,
            properties: Arc::new(properties),
            span: Arc::default(),
            rows_written: ExactCount::register(&metrics, ROWS_WRITTEN),
            retries: ExactCount::register(&metrics, "retries"),
            bill: BillCount::register(&metrics),
            metrics,
            returning: false,
            chosen: false,
            ordering: None,
        })
    }

    /// The same write of rows a query chose (`planner::dml_query`): the
    /// query is read to the end first (it may read the table written), and
    /// a row it yields twice is written once, with its first values.
    pub fn chosen_by_query(mut self) -> Self {
        self.chosen = true;
        self
    }

    /// The same write yielding the rows it writes, in the table's columns
    /// (`layout.schema`), instead of their count: a RETURNING's input.
    pub fn returning(&self) -> Result<Self> {
        let mut plan = Self::new(
            self.op.clone(),
            self.input.clone(),
            self.store.clone(),
            self.layout.clone(),
            self.if_match.clone(),
        )?;
        plan.returning = true;
        plan.chosen = self.chosen;
        plan.ordering = self
            .ordering
            .clone()
            .or_else(|| self.input.properties().output_ordering().cloned());
        plan.properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(self.layout.schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(plan)
    }

    /// The PartitionKeys its last run wrote.
    pub fn written_span(&self) -> WrittenSpan {
        self.span
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Whether the input reads the table this writes.
    fn reads_itself(&self) -> bool {
        let mut found = false;
        let mut todo = vec![self.input.clone()];
        while let Some(plan) = todo.pop() {
            if let Some(scan) = plan.downcast_ref::<PartitionScanExec>() {
                found |= *scan.table() == self.layout.table;
            }
            todo.extend(plan.children().into_iter().cloned());
        }
        found
    }

    /// Whether an UPDATE may give rows new RowKeys: then the scan is read to
    /// the end before the first write, or rows moved ahead of the scan would
    /// be met (and updated) twice.
    fn moves_rows(&self) -> bool {
        if self.chosen {
            return true;
        }
        let assignments = match &self.op {
            DmlOp::Insert | DmlOp::Upsert(_) => return self.reads_itself(),
            DmlOp::Update { assignments } => assignments,
            DmlOp::Delete => return false,
        };
        assignments.iter().any(|(i, _)| {
            matches!(
                self.layout.columns.get(*i),
                Some((Source::PartitionField(_) | Source::RowField(_), _))
            )
        })
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "DmlExec: op={} table={}",
            self.op.name(),
            self.layout.table
        )?;
        if let DmlOp::Update { assignments } = &self.op {
            let names: Vec<&str> = assignments
                .iter()
                .map(|(i, _)| self.layout.schema.field(*i).name().as_str())
                .collect();
            write!(f, " set=[{}]", names.join(", "))?;
        }
        match &self.if_match {
            Some(etag) => write!(f, " if_match={etag}")?,
            None if matches!(self.op, DmlOp::Insert | DmlOp::Upsert(_)) => {}
            None => write!(f, " if_match=read")?,
        }
        if self.moves_rows() {
            write!(f, " input=read_first")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        "DmlExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    // With RETURNING its rows come in its input's order (`Returned`'s
    // place), so an ORDER BY below it must stay.
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![self.returning]
    }

    fn required_input_ordering(
        &self,
    ) -> Vec<Option<datafusion::physical_expr::OrderingRequirements>> {
        vec![self.ordering.clone().map(Into::into)]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let exprs: Vec<&Arc<dyn PhysicalExpr>> = match &self.op {
            DmlOp::Update { assignments } => assignments.iter().map(|(_, e)| e).collect(),
            DmlOp::Upsert(OnExisting::Update {
                assignments,
                filter,
                ..
            }) => assignments.iter().map(|(_, e)| e).chain(filter).collect(),
            _ => Vec::new(),
        };
        for e in exprs {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = match (children.pop(), children.is_empty()) {
            (Some(input), true) => input,
            _ => {
                return Err(DataFusionError::Internal("DmlExec has one child".into()));
            }
        };
        let mut plan = DmlExec::new(
            self.op.clone(),
            input,
            self.store.clone(),
            self.layout.clone(),
            self.if_match.clone(),
        )?;
        plan.chosen = self.chosen;
        plan.ordering = self.ordering.clone();
        Ok(Arc::new(if self.returning {
            plan.returning()?
        } else {
            plan
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "DmlExec has one partition, not {partition}"
            )));
        }
        let input = self.input.execute(0, context)?;
        let mut writer = Writer {
            def: mapped(&self.layout)?.clone(),
            op: self.op.clone(),
            // Its reads and writes (index rows among them), billed here.
            store: self.bill.billed(self.store.clone()),
            layout: self.layout.clone(),
            if_match: self.if_match.clone(),
            materialize: self.moves_rows(),
            pending: BTreeMap::new(),
            pending_rows: 0,
            written: 0,
            unsure: None,
            unsure_keys: HashSet::new(),
            shared: self.rows_written.clone(),
            span: self.span.clone(),
            keys: HashSet::new(),
            claims: BTreeMap::new(),
            returned: self.returning.then(Vec::new),
            seq: 0,
            seen: self.chosen.then(HashSet::new),
        };
        if let Ok(mut span) = self.span.lock() {
            *span = WrittenSpan::default();
        }
        let schema = self.schema();
        let out = schema.clone();
        let retries = self.retries.clone();
        let layout = self.layout.clone();
        let run = async move {
            let store = writer.store.clone();
            let (result, n) =
                crate::storage::retries::counted_by(store.as_ref(), writer.run(input)).await;
            retries.add(n.retries as usize);
            let rows = match result {
                Ok(()) => match writer.unsure.take() {
                    Some((unsure, source)) => {
                        return Err(ExecError::AnswersLost {
                            written: writer.written,
                            unsure,
                            source,
                        }
                        .into());
                    }
                    None => writer.written,
                },
                Err(e) if writer.written > 0 || writer.unsure.is_some() => {
                    return Err(ExecError::PartlyWritten {
                        rows: writer.written,
                        unsure: writer.unsure.as_ref().map_or(0, |(n, _)| *n),
                        source: Box::new(e),
                    }
                    .into());
                }
                Err(e) => return Err(e),
            };
            if let Some(mut returned) = writer.returned.take() {
                returned.sort_by_key(|(seq, _)| *seq);
                let rows: Vec<StoredEntity> = returned.into_iter().map(|(_, e)| e).collect();
                let all: Vec<usize> = (0..layout.columns.len()).collect();
                let (batch, _) = decode(&layout, &all, &out, &rows)?;
                return Ok(batch);
            }
            let count: ArrayRef = Arc::new(UInt64Array::from(vec![rows]));
            Ok(RecordBatch::try_new(out, vec![count])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(run),
        )))
    }
}

/// One SQL row's operations: they go in one transaction.
struct Group {
    ops: Vec<WriteOp>,
    /// Global indexes' puts, sent before the base row's transaction, and
    /// their deletes, sent after it (`catalog::GlobalIndexDef`), by the
    /// index's position; a delete with the base row's keys it was of.
    before: Vec<(usize, WriteOp)>,
    after: Vec<(usize, WriteOp, (PartitionKey, RowKey))>,
    bytes: usize,
    /// A DELETE's row as it was read, for RETURNING.
    removed: Option<StoredEntity>,
    /// The primary key an upsert's new row took in this statement.
    claimed: Option<(PartitionKey, String)>,
    /// Its row's place in the statement's input: RETURNING answers in
    /// that order, as PostgreSQL does (an ORM matches new keys to its
    /// objects by it), though transactions go partition by partition.
    seq: usize,
}

/// The row a group returns (RETURNING): its base entity as written, whose
/// ETag the transaction gives, or a removed row as it was; with its place
/// in the input.
enum Returned {
    Written(usize, crate::storage::Entity),
    Removed(usize, StoredEntity),
}

struct Writer {
    def: Arc<TableDef>,
    op: DmlOp,
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    if_match: Option<ETag>,
    materialize: bool,
    pending: BTreeMap<PartitionKey, Vec<Group>>,
    pending_rows: usize,
    written: u64,
    /// Rows of transactions whose outcome a lost answer left unknown, with
    /// the first such failure: the statement fails with them at its end.
    unsure: Option<(u64, StorageError)>,
    /// The keys those transactions wrote: their rows' global index
    /// entities are not deleted.
    unsure_keys: HashSet<(PartitionKey, RowKey)>,
    /// The plan's `rows_written`, raised as each transaction commits.
    shared: ExactCount,
    span: Arc<std::sync::Mutex<WrittenSpan>>,
    /// The primary key prefixes this statement writes, to catch one key twice.
    keys: HashSet<(PartitionKey, String)>,
    /// The new keys of pending INSERT rows, checked against the store per
    /// partition before they are sent: (prefix, the key's values as shown).
    claims: BTreeMap<PartitionKey, Vec<(String, String)>>,
    /// The rows written so far with their place in the input, when the
    /// statement returns them.
    returned: Option<Vec<(usize, StoredEntity)>>,
    /// Input rows taken so far.
    seq: usize,
    /// The keys of the rows written, where a query chose them and may
    /// yield one twice.
    seen: Option<HashSet<(PartitionKey, RowKey)>>,
}

impl Writer {
    async fn run(&mut self, mut input: SendableRecordBatchStream) -> Result<()> {
        let mut held = Vec::new();
        while let Some(batch) = input.next().await {
            let batch = batch?;
            if self.materialize {
                held.push(batch);
            } else {
                self.take(&batch).await?;
            }
        }
        for batch in held {
            self.take(&batch).await?;
        }
        self.flush().await
    }

    /// Turns a batch of rows into pending groups, flushing when enough wait.
    async fn take(&mut self, batch: &RecordBatch) -> Result<()> {
        let old = Columns::new(&self.layout, batch)?;
        let mut new = old.clone();
        if let DmlOp::Update { assignments } = &self.op {
            for (i, expr) in assignments {
                let values = expr.evaluate(batch)?.into_array(batch.num_rows())?;
                let t =
                    self.layout.columns.get(*i).map(|c| c.1).ok_or_else(|| {
                        DataFusionError::Internal(format!("no column {i} to assign"))
                    })?;
                new.set(*i, values, t)?;
            }
        }
        for row in 0..batch.num_rows() {
            if matches!(self.op, DmlOp::Delete | DmlOp::Update { .. })
                && !self.first_time(&old, row)?
            {
                continue;
            }
            let (partition, group) = match &self.op {
                DmlOp::Insert => {
                    new.refuse_system(&self.layout, row)?;
                    self.insert(&new.values(&self.layout, row)?).await?
                }
                DmlOp::Delete => self.delete(&old, row)?,
                DmlOp::Update { .. } => self.update(&old, &new, row).await?,
                DmlOp::Upsert(on_existing) => {
                    let on_existing = on_existing.clone();
                    match self.upsert(&on_existing, &new, row).await? {
                        Some(written) => written,
                        None => continue,
                    }
                }
            };
            let mut group = group;
            group.seq = self.seq;
            self.seq += 1;
            self.pending.entry(partition).or_default().push(group);
            self.pending_rows += 1;
            if self.pending_rows >= FLUSH_ROWS {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn insert(&mut self, values: &[Option<EdmValue>]) -> Result<(PartitionKey, Group)> {
        let row = entities(&self.def, values)?;
        let partition = row.base.partition_key.clone();
        self.defer_claim(&partition, values)?;
        // The base row must be new; an index row there already (an orphan
        // of an application's write) is replaced by the right one.
        let ops = std::iter::once(WriteOp::Insert(row.base))
            .chain(row.index.into_iter().map(WriteOp::InsertOrReplace))
            .collect();
        let mut group = Group::of(ops);
        self.global_sides(&mut group, None, Some(values))?;
        Ok((partition, group))
    }

    /// Adds the global indexes' writes for a row going from `old` to `new`
    /// values (`None`: no row) to its group.
    pub(super) fn global_sides(
        &self,
        group: &mut Group,
        old: Option<&[Option<EdmValue>]>,
        new: Option<&[Option<EdmValue>]>,
    ) -> Result<()> {
        let base = old.map(|v| super::encode::keys(&self.def, v)).transpose()?;
        for (i, g) in self.def.global_indexes.iter().enumerate() {
            let (put, delete) = super::global::sides(&self.def, g, old, new)?;
            group.before.extend(put.map(|p| (i, p)));
            if let (Some(d), Some(base)) = (delete, &base) {
                group.after.push((i, d, base.clone()));
            }
        }
        Ok(())
    }

    /// Whether the row is met for the first time (always, unless a query
    /// chose the rows: `seen`).
    fn first_time(&mut self, old: &Columns, row: usize) -> Result<bool> {
        if self.seen.is_none() {
            return Ok(true);
        }
        let (pk, rk, _) = self.keys(old, row)?;
        Ok(self.seen.as_mut().is_none_or(|seen| seen.insert((pk, rk))))
    }

    /// The scanned row's keys and the ETag its writes must match.
    fn keys(&self, old: &Columns, row: usize) -> Result<(PartitionKey, RowKey, IfMatch)> {
        let text = |source: Source| -> Result<&str> {
            let i = self
                .layout
                .columns
                .iter()
                .position(|(s, _)| *s == source)
                .ok_or_else(|| DataFusionError::Internal(format!("no {source:?} column")))?;
            old.text(i, row)
                .ok_or_else(|| DataFusionError::Internal(format!("{source:?} is NULL")))
        };
        let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
        let pk = PartitionKey::new(text(Source::PartitionKey)?).map_err(invalid)?;
        let rk = RowKey::new(text(Source::RowKey)?).map_err(invalid)?;
        let etag = match &self.if_match {
            Some(e) => e.clone(),
            None => ETag::from_wire(text(Source::ETag)?),
        };
        Ok((pk, rk, IfMatch::ETag(etag)))
    }

    fn delete(&self, old: &Columns, row: usize) -> Result<(PartitionKey, Group)> {
        let (pk, rk, if_match) = self.keys(old, row)?;
        let values = old.values(&self.layout, row)?;
        let removed = match (&self.returned, &if_match) {
            (Some(_), IfMatch::ETag(etag)) => Some(self.as_read(old, row, &values, etag)?),
            _ => None,
        };
        let mut ops = vec![WriteOp::Delete {
            partition_key: pk.clone(),
            row_key: rk,
            if_match,
        }];
        for ix in &self.def.indexes {
            ops.push(WriteOp::Delete {
                partition_key: pk.clone(),
                row_key: self.row_key(&ix.row_key, &values)?,
                if_match: IfMatch::Any,
            });
        }
        let mut group = Group::of(ops);
        group.removed = removed;
        self.global_sides(&mut group, Some(&values), None)?;
        Ok((pk, group))
    }

    /// A scanned row as the entity it was read from (its mapped properties,
    /// its keys, Timestamp and ETag): what a DELETE returns.
    fn as_read(
        &self,
        old: &Columns,
        row: usize,
        values: &[Option<EdmValue>],
        etag: &ETag,
    ) -> Result<StoredEntity> {
        let (pk, rk, _) = self.keys(old, row)?;
        let mut entity = entities(&self.def, values)?.base;
        entity.partition_key = pk;
        entity.row_key = rk;
        let timestamp = self
            .layout
            .columns
            .iter()
            .position(|(s, _)| *s == Source::Timestamp)
            .and_then(|i| old.timestamp(i, row))
            .or_else(|| etag.timestamp())
            .unwrap_or_else(chrono::Utc::now);
        Ok(StoredEntity {
            entity,
            timestamp,
            etag: etag.clone(),
        })
    }

    async fn update(
        &mut self,
        old: &Columns,
        new: &Columns,
        row: usize,
    ) -> Result<(PartitionKey, Group)> {
        let (pk, rk, if_match) = self.keys(old, row)?;
        let old_values = old.values(&self.layout, row)?;
        let new_values = new.values(&self.layout, row)?;
        let mut next = entities(&self.def, &new_values)?;
        if next.base.partition_key != pk {
            // A `{#N}` PartitionKey moves with the RowKey's columns.
            let moved = match self.def.partition_key.row_buckets() {
                Some(_) => self.def.row_key.columns().collect::<Vec<_>>(),
                None => self.def.partition_key.columns().collect(),
            };
            return Err(ExecError::PartitionMove {
                table: self.def.name.clone(),
                columns: moved.join(", "),
            }
            .into());
        }
        if primary_prefix(&self.def, &new_values)? != primary_prefix(&self.def, &old_values)? {
            self.claim_key(&pk, &new_values).await?;
        }
        // Properties the mapping does not declare (written by applications)
        // are kept: the stored entity is read, and checked against the ETag.
        let stored = self
            .store
            .get(&self.layout.table, &pk, &rk)
            .await
            .map_err(ExecError::from)?;
        let conflict = || {
            ExecError::Storage(StorageError::PreconditionFailed {
                partition_key: pk.as_str().to_owned(),
                row_key: rk.as_str().to_owned(),
            })
        };
        let stored = stored.ok_or_else(conflict)?;
        if IfMatch::ETag(stored.etag.clone()) != if_match {
            return Err(conflict().into());
        }
        let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
        // A column the statement left as it was is written back as stored:
        // its EDM type (an application's Int32 under a BIGINT column) and
        // precision (a DateTime's 100-ns ticks, read as microseconds) are
        // the writer's, and other clients read them.
        let unchanged: Vec<&str> = self
            .def
            .columns
            .iter()
            .zip(old_values.iter().zip(&new_values))
            .filter(|(_, (was, is))| was == is)
            .map(|(c, _)| c.property_name())
            .collect();
        // Keys-only index rows carry none.
        let carries = std::iter::once(true).chain(self.def.indexes.iter().map(|i| i.covering));
        for (i, (e, carries)) in std::iter::once(&mut next.base)
            .chain(next.index.iter_mut())
            .zip(carries)
            .enumerate()
        {
            if !carries {
                e.validate().map_err(invalid)?;
                continue;
            }
            for name in &unchanged {
                match stored.entity.properties.get(*name) {
                    Some(as_stored) => {
                        e.properties.insert((*name).to_owned(), as_stored.clone());
                    }
                    // A key column the application never wrote as a
                    // property stays out of its entity (it is read from
                    // the keys); an index row carries it to rebuild the row.
                    None if i == 0 => {
                        e.properties.remove(*name);
                    }
                    None => {}
                }
            }
            for (name, value) in &stored.entity.properties {
                if !self.def.declares_property(name) {
                    e.properties
                        .entry(name.clone())
                        .or_insert_with(|| value.clone());
                }
            }
            e.validate().map_err(invalid)?;
        }
        let mut ops = Vec::new();
        if next.base.row_key == rk {
            ops.push(WriteOp::Update(next.base, if_match));
        } else {
            ops.push(WriteOp::Delete {
                partition_key: pk.clone(),
                row_key: rk,
                if_match,
            });
            ops.push(WriteOp::Insert(next.base));
        }
        for (ix, entity) in self.def.indexes.iter().zip(next.index) {
            let was = self.row_key(&ix.row_key, &old_values)?;
            if was == entity.row_key {
                ops.push(WriteOp::InsertOrReplace(entity));
            } else {
                ops.push(WriteOp::Delete {
                    partition_key: pk.clone(),
                    row_key: was,
                    if_match: IfMatch::Any,
                });
                ops.push(WriteOp::InsertOrReplace(entity));
            }
        }
        let mut group = Group::of(ops);
        self.global_sides(&mut group, Some(&old_values), Some(&new_values))?;
        Ok((pk, group))
    }

    /// Takes a new primary key for this statement: refused if an earlier
    /// row of the statement has it, or if the store holds a row under its
    /// RowKey prefix. (An UPDATE calls it only when the key changes, so the
    /// row's own entity is under another prefix.)
    async fn claim_key(
        &mut self,
        partition: &PartitionKey,
        values: &[Option<EdmValue>],
    ) -> Result<()> {
        let Some(prefix) = primary_prefix(&self.def, values)? else {
            return Ok(());
        };
        if !self.keys.insert((partition.clone(), prefix.clone())) {
            return Err(self.duplicate(&self.shown_key(values)));
        }
        if self.first_under(partition, &prefix, false).await?.is_some() {
            return Err(self.duplicate(&self.shown_key(values)));
        }
        Ok(())
    }

    /// An INSERT's new key: one the statement already has is refused now;
    /// the store is asked at `flush`, one range read per partition
    /// (`check_claims`) rather than a query per row.
    fn defer_claim(&mut self, partition: &PartitionKey, values: &[Option<EdmValue>]) -> Result<()> {
        let Some(prefix) = primary_prefix(&self.def, values)? else {
            return Ok(());
        };
        if !self.keys.insert((partition.clone(), prefix.clone())) {
            return Err(self.duplicate(&self.shown_key(values)));
        }
        let shown = self.shown_key(values);
        self.claims
            .entry(partition.clone())
            .or_default()
            .push((prefix, shown));
        Ok(())
    }

    /// Refuses the pending rows if the store holds any of their keys. A
    /// partition with a few keys asks per key; more are checked by walking
    /// the range they span a page at a time (`check_partition`).
    async fn check_claims(&mut self) -> Result<()> {
        let claims = std::mem::take(&mut self.claims);
        for (partition, keys) in claims {
            if keys.len() <= FEW_CLAIMS {
                for (prefix, shown) in &keys {
                    if self.first_under(&partition, prefix, false).await?.is_some() {
                        return Err(self.duplicate(shown));
                    }
                }
            } else {
                self.check_partition(&partition, keys).await?;
            }
        }
        Ok(())
    }

    /// One partition's new keys against the store: in key order, each page
    /// read starts at the first key not yet settled and settles every key
    /// up to the page's last, so no request settles fewer keys than one
    /// query per key would, and a sparse range is never read whole. A store
    /// whose pages come in no key order is read whole instead
    /// (`check_partition_unordered`).
    async fn check_partition(
        &self,
        partition: &PartitionKey,
        mut keys: Vec<(String, String)>,
    ) -> Result<()> {
        keys.sort_by(|a, b| cmp_utf16(&a.0, &b.0));
        let end = match keys.last().and_then(|k| crate::keys::successor(&k.0)) {
            // A bound, not a key to store: it may hold what keys may not.
            Some(s) => Bound::Excluded(RowKey::from_stored(s)),
            None => Bound::Unbounded,
        };
        if !self.store.key_ordered() {
            return self.check_partition_unordered(partition, &keys, end).await;
        }
        let mut next = 0;
        while let Some((start, _)) = keys.get(next) {
            let mut query = Query::partition(partition.clone())
                .select(Vec::<String>::new())
                .top(CLAIM_PAGE);
            query.rows = KeyRange {
                start: Bound::Included(RowKey::from_stored(start.clone())),
                end: end.clone(),
            };
            // A page may come back empty with a continuation token (the
            // store's scan budget): follow it until keys come.
            let mut token = None;
            let page = loop {
                let page = self
                    .store
                    .query(&self.layout.table, &query, token.as_ref())
                    .await
                    .map_err(ExecError::from)?;
                match page.continuation {
                    Some(t) if page.entities.is_empty() => token = Some(t),
                    _ => break page,
                }
            };
            let Some(last) = page
                .entities
                .last()
                .map(|e| e.row_key().as_str().to_owned())
            else {
                // Nothing from here to the end: the rest are new.
                return Ok(());
            };
            let mut existing: Vec<&str> =
                page.entities.iter().map(|e| e.row_key().as_str()).collect();
            existing.sort_unstable();
            // A key at or before the page's last has all its rows in the
            // page: a row under it sorts between it and the last.
            while let Some((prefix, shown)) = keys.get(next)
                && cmp_utf16(prefix, &last) != std::cmp::Ordering::Greater
            {
                let at = existing.partition_point(|k| *k < prefix.as_str());
                if existing
                    .get(at)
                    .is_some_and(|k| k.starts_with(prefix.as_str()))
                {
                    return Err(self.duplicate(shown));
                }
                next += 1;
            }
        }
        Ok(())
    }

    /// `check_partition` on a store whose pages come in no key
    /// order (`TableStore::key_ordered` false, Cosmos DB's Table API): a
    /// page is no prefix of the range, so a key missing from it may still
    /// be stored. The whole range from the first new key (`keys`, sorted)
    /// to `end` is read, following every continuation token, and each new
    /// key is checked against all of it.
    async fn check_partition_unordered(
        &self,
        partition: &PartitionKey,
        keys: &[(String, String)],
        end: Bound<RowKey>,
    ) -> Result<()> {
        let Some((first, _)) = keys.first() else {
            return Ok(());
        };
        let mut query = Query::partition(partition.clone()).select(Vec::<String>::new());
        query.rows = KeyRange {
            start: Bound::Included(RowKey::from_stored(first.clone())),
            end,
        };
        let mut existing: Vec<String> = self
            .store
            .query_all(&self.layout.table, &query)
            .await
            .map_err(ExecError::from)?
            .iter()
            .map(|e| e.row_key().as_str().to_owned())
            .collect();
        // Sorted as the lookup compares: the keys under a prefix follow
        // one another from the first at or after it.
        existing.sort_unstable();
        for (prefix, shown) in keys {
            let at = existing.partition_point(|k| k.as_str() < prefix.as_str());
            if existing
                .get(at)
                .is_some_and(|k| k.starts_with(prefix.as_str()))
            {
                return Err(self.duplicate(shown));
            }
        }
        Ok(())
    }

    /// A row's primary key values, as a duplicate-key error shows them.
    fn shown_key(&self, values: &[Option<EdmValue>]) -> String {
        self.def
            .primary_key
            .iter()
            .map(|c| {
                self.def
                    .columns
                    .iter()
                    .position(|d| &d.name == c)
                    .and_then(|i| values.get(i)?.as_ref())
                    .map_or_else(|| "NULL".to_owned(), ToString::to_string)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn duplicate(&self, shown: &str) -> DataFusionError {
        DataFusionError::from(ExecError::DuplicateKey {
            table: self.def.name.clone(),
            columns: self.def.primary_key.join(", "),
            values: shown.to_owned(),
        })
    }

    /// The first entity under a RowKey prefix in a partition (its keys only
    /// unless `whole`), if there is one.
    async fn first_under(
        &self,
        partition: &PartitionKey,
        prefix: &str,
        whole: bool,
    ) -> Result<Option<StoredEntity>> {
        let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
        let mut query = Query::partition(partition.clone()).top(1);
        if !whole {
            query = query.select(Vec::<String>::new());
        }
        query.rows = KeyRange {
            start: Bound::Included(RowKey::new(prefix.to_owned()).map_err(invalid)?),
            end: match crate::keys::successor(prefix) {
                // A bound, not a key to store: it may hold what keys may not.
                Some(s) => Bound::Excluded(RowKey::from_stored(s)),
                None => Bound::Unbounded,
            },
        };
        // A page may come back empty with a continuation token (the store's
        // scan budget): follow it to the end of the range.
        let mut token = None;
        loop {
            let page = self
                .store
                .query(&self.layout.table, &query, token.as_ref())
                .await
                .map_err(ExecError::from)?;
            if let Some(found) = page
                .entities
                .into_iter()
                .find(|e| e.row_key().as_str().starts_with(prefix))
            {
                return Ok(Some(found));
            }
            match page.continuation {
                Some(next) => token = Some(next),
                None => return Ok(None),
            }
        }
    }

    fn row_key(
        &self,
        template: &crate::keys::KeyTemplate,
        values: &[Option<EdmValue>],
    ) -> Result<RowKey> {
        let key = compose(&self.def, template, values)?;
        Ok(RowKey::new(key).map_err(|e| ExecError::Storage(StorageError::Invalid(e)))?)
    }

    /// Sends every pending group, partition by partition, packed into
    /// transactions; `written` counts the rows of each one that commits.
    async fn flush(&mut self) -> Result<()> {
        self.check_claims().await?;
        let mut pending = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let returning = self.returned.is_some();
        // Global indexes (`dml/globals.rs`): the new entities first, the
        // old ones' deletes last.
        let globals = self.put_globals(&mut pending).await?;
        for key in &globals.released {
            self.keys.remove(key);
        }
        let made = &globals.made;
        let mut after = Vec::new();
        for g in pending.values_mut().flatten() {
            after.append(&mut g.after);
        }
        let after = match self.pin_global(after).await {
            Ok(after) => after,
            Err(e) => {
                self.give_back(made.iter().collect()).await;
                return Err(e);
            }
        };
        // The rows sent (or being sent): a unique value one took stays
        // its, whatever the answer; the others' are given back on failure.
        let mut sent: HashSet<usize> = HashSet::new();
        for (_, groups) in pending {
            let mut ops: Vec<WriteOp> = Vec::new();
            let mut rows: Vec<Returned> = Vec::new();
            let mut seqs: Vec<usize> = Vec::new();
            let (mut count, mut bytes) = (0u64, 0usize);
            for g in groups {
                let full =
                    ops.len() + g.ops.len() > MAX_BATCH_OPERATIONS || bytes + g.bytes > BATCH_BYTES;
                if full && !ops.is_empty() {
                    self.late(&globals, &sent).await?;
                    sent.extend(seqs.drain(..));
                    let batch = std::mem::take(&mut ops);
                    if let Err(e) = self.send(batch, count, std::mem::take(&mut rows)).await {
                        return Err(self.unsent(made, &sent, e).await);
                    }
                    (count, bytes) = (0, 0);
                }
                if returning && let Some(r) = g.returned() {
                    rows.push(r);
                }
                seqs.push(g.seq);
                ops.extend(g.ops);
                count += 1;
                bytes += g.bytes;
            }
            if !ops.is_empty() {
                self.late(&globals, &sent).await?;
                sent.extend(seqs.drain(..));
                if let Err(e) = self.send(ops, count, rows).await {
                    return Err(self.unsent(made, &sent, e).await);
                }
            }
        }
        self.delete_global(after, &self.unsure_keys).await?;
        Ok(())
    }

    /// Runs one transaction. An index row it deletes that is not there
    /// (an application never wrote it, or removed it) is already as the
    /// write wants it: the transaction, refused whole, runs again without
    /// that delete, so a missing index row never blocks its base row. Only
    /// index rows are deleted with `IfMatch::Any`; base rows carry the ETag
    /// their statement read.
    async fn send(
        &mut self,
        mut ops: Vec<WriteOp>,
        rows: u64,
        returned: Vec<Returned>,
    ) -> Result<()> {
        let outcomes = loop {
            match self
                .store
                .execute_batch(&self.layout.table, ops.clone())
                .await
            {
                Ok(outcomes) => break outcomes,
                Err(StorageError::Batch { index, source })
                    if matches!(*source, StorageError::EntityNotFound { .. })
                        && matches!(
                            ops.get(index),
                            Some(WriteOp::Delete {
                                if_match: IfMatch::Any,
                                ..
                            })
                        ) =>
                {
                    ops.remove(index);
                    if ops.is_empty() {
                        break Vec::new();
                    }
                }
                Err(e @ StorageError::AmbiguousRetry { .. }) => {
                    let (unsure, _) = self.unsure.get_or_insert((0, e));
                    *unsure += rows;
                    let keys = ops.iter().map(|op| op.keys());
                    let keys = keys.map(|(pk, rk)| (pk.clone(), rk.clone()));
                    self.unsure_keys.extend(keys);
                    return Ok(());
                }
                Err(e) => return Err(DataFusionError::from(ExecError::from(e))),
            }
        };
        if let Some(out) = &mut self.returned {
            // One operation per entity in a transaction: a RowKey names its
            // outcome.
            let etags: std::collections::HashMap<&RowKey, &ETag> = ops
                .iter()
                .zip(&outcomes)
                .filter_map(|(op, o)| Some((op.keys().1, o.etag.as_ref()?)))
                .collect();
            for r in returned {
                out.push(match r {
                    Returned::Removed(seq, stored) => (seq, stored),
                    Returned::Written(seq, entity) => {
                        let etag = etags
                            .get(&entity.row_key)
                            .map(|e| (*e).clone())
                            .ok_or_else(|| {
                                DataFusionError::Internal("a written row without its ETag".into())
                            })?;
                        let timestamp = etag.timestamp().unwrap_or_else(chrono::Utc::now);
                        let stored = StoredEntity {
                            entity,
                            timestamp,
                            etag,
                        };
                        (seq, stored)
                    }
                });
            }
        }
        self.written += rows;
        self.shared.add(usize::try_from(rows).unwrap_or(usize::MAX));
        if let (Some(op), Ok(mut span)) = (ops.first(), self.span.lock()) {
            span.add(op.keys().0.as_str(), ops.len() as u64);
        }
        Ok(())
    }
}

impl Group {
    fn of(ops: Vec<WriteOp>) -> Self {
        let bytes = ops.iter().map(WriteOp::stored_size).sum();
        Self {
            ops,
            before: Vec::new(),
            after: Vec::new(),
            bytes,
            removed: None,
            claimed: None,
            seq: 0,
        }
    }

    /// The row it returns: the removed one, or the first entity it puts
    /// (the base row comes before its index rows; a moved row's delete
    /// before its insert).
    fn returned(&self) -> Option<Returned> {
        if let Some(removed) = &self.removed {
            return Some(Returned::Removed(self.seq, removed.clone()));
        }
        self.ops
            .iter()
            .find_map(|op| Some(Returned::Written(self.seq, op.entity()?.clone())))
    }
}
