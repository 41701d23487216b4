//! How a session starts what it runs: a query to a stream of rows, a write
//! to a [`Write`] that runs it to its end.
//!
//! The wire's simple and extended protocols, the shell, `tablesql query`
//! and the library's prepared statements each started a statement their
//! own way, so a query was paged, read by its key or planned without
//! DataFusion's physical planner in one front end and not in another.
//! Every [`Session`] starts its queries and writes here (the DataFrame API
//! of `Session::sql` is DataFusion's own): a prepared point query reads its entity
//! without planning; under `tablesql.page_size` a query of one table is one
//! page; a plan the scan answers exactly skips the physical planner
//! (`direct`); the rest is DataFusion's. Each run is recorded in the
//! workload statistics, and a failure fails the session's open block.
//!
//! Planning takes the session's [`Snapshot`], taken once and again after
//! a `SET`: a copy of a session state per statement cost more than the
//! point read itself.

use std::sync::Arc;
use std::time::Instant;

use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::Statement;

use super::direct::{self, ConfigGeneration, Snapshot};
use super::prepared::{Planned, bind};
use super::session::FailsBlock;
use super::{Engine, EngineError, PreparedStatement, Session, StatementKind, run};
use crate::exec::read::row::Row;
use crate::exec::write::locks::Locking;
use crate::exec::write::transaction::{LockingGuard, Transaction};

/// A write planned and ready to run ([`Session::write`]).
pub struct Write {
    /// Whether it has run (a write runs once).
    ran: std::sync::atomic::AtomicBool,
    kind: StatementKind,
    label: String,
    engine: Engine,
    physical: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
    tx: Option<Arc<Transaction>>,
}

impl std::fmt::Debug for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Write").field("kind", &self.kind).finish()
    }
}

impl Write {
    /// `Insert`, `Update` or `Delete`.
    pub fn kind(&self) -> StatementKind {
        self.kind
    }

    /// Runs the write to its end: the rows written. A failure fails the
    /// session's open block. A write runs once: a second call is refused.
    pub async fn run(&self) -> Result<u64, EngineError> {
        if self.ran.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Err(EngineError::NotSupported("a write runs once".into()));
        }
        let started = Instant::now();
        let done = datafusion::physical_plan::collect(self.physical.clone(), self.task.clone())
            .await
            .map_err(|e| {
                // A refusal of a key taken is counted against the statement.
                self.engine.record_failure(&self.label, &e);
                EngineError::from(e)
            })
            .and_then(|batches| Ok(super::bulk::rows_counted(&batches)?));
        match done {
            Ok(rows) => {
                self.engine
                    .record_write(&self.label, started, rows, &self.physical);
                Ok(rows)
            }
            Err(e) => {
                if let Some(tx) = &self.tx {
                    tx.fail();
                }
                Err(e)
            }
        }
    }

    /// The rows the write had committed when it stopped, for one whose
    /// [`Self::run`] was dropped midway (a cancel, a timeout): each
    /// partition's rows commit together, so some may be.
    pub fn committed(&self) -> u64 {
        crate::exec::rows_written(self.physical.as_ref()).unwrap_or(0)
    }
}

impl Session {
    /// After the session's context changed outside a `SET` (a function an
    /// embedder registered on it): the next statement plans with the
    /// change.
    pub fn configuration_changed(&self) {
        ConfigGeneration::raise(self.context());
    }

    /// The session's state and task context, taken when first needed and
    /// again after its configuration changed.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let generation = ConfigGeneration::of(self.context());
        if let Ok(s) = self.snapshot.read()
            && let Some(s) = s.as_ref()
            && s.generation == generation
        {
            return s.clone();
        }
        let fresh = Snapshot::of(self.context());
        if let Ok(mut s) = self.snapshot.write() {
            *s = Some(fresh.clone());
        }
        fresh
    }

    /// Plans a parsed query or write for running many times under this
    /// session's settings (see [`Session::prepare`]).
    pub async fn prepare_statement(
        &self,
        statement: Statement,
    ) -> Result<PreparedStatement, EngineError> {
        let statement = self.local_names(statement)?;
        let state = self.snapshot().state;
        PreparedStatement::new(self.clone(), &state, statement).await
    }

    /// Starts a query (`SELECT`, `VALUES`, `EXPLAIN`): its rows as they
    /// come. Under `tablesql.page_size` a query of one table is one page.
    pub async fn query(
        &self,
        statement: Statement,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        // Boxed: planning's futures are large (and deep in a debug build).
        let started = Box::pin(self.start_query(statement, true)).await;
        self.failed_if(started)
    }

    /// As [`Self::query`], never paged: all the rows (COPY's export).
    pub async fn query_whole(
        &self,
        statement: Statement,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let started = Box::pin(self.start_query(statement, false)).await;
        self.failed_if(started)
    }

    async fn start_query(
        &self,
        statement: Statement,
        paged: bool,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        self.refuse_in_failed_block()?;
        let statement = self.local_names(statement)?;
        let guard = self.lock_reads(super::block::locking(&statement)?);
        let returning = super::returns_rows(&statement);
        if StatementKind::of(&statement).writes_rows() && !returning {
            return Err(EngineError::NotSupported(format!(
                "not a query: {statement} (a write runs through Session::write)"
            )));
        }
        self.follow().await;
        let label = run::statement_label(&statement);
        // What a page token names (only paging needs it); a write's rows
        // are never a page: a token could not run it again.
        let text = (paged && !returning && self.pages()).then(|| statement.to_string());
        let snapshot = self.snapshot();
        let plan = self
            .engine()
            .plan_statement(&snapshot.for_statement(), statement)
            .await?;
        let stream = self
            .start_plan(&snapshot, &plan, text.as_deref(), label)
            .await?;
        Ok(holding(stream, guard))
    }

    /// The guard under which a statement's reads lock what they return.
    fn lock_reads(&self, locking: Option<Locking>) -> Option<LockingGuard> {
        // `locking` first: a plain query pays nothing here.
        let locking = locking?;
        Some(self.transaction()?.locking(locking))
    }

    /// Plans a write (`INSERT`, `UPDATE`, `DELETE`) for [`Write::run`].
    pub async fn write(&self, statement: Statement) -> Result<Write, EngineError> {
        let planned = Box::pin(self.plan_write(statement)).await;
        self.failed_if(planned)
    }

    async fn plan_write(&self, statement: Statement) -> Result<Write, EngineError> {
        self.refuse_in_failed_block()?;
        let statement = self.local_names(statement)?;
        // A write takes no row lock of its own; one in its query is refused.
        super::block::locking(&statement)?;
        let kind = StatementKind::of(&statement);
        if !kind.writes_rows() {
            return Err(EngineError::NotSupported(format!(
                "not a write: {statement}"
            )));
        }
        self.follow().await;
        let label = run::statement_label(&statement);
        let snapshot = self.snapshot();
        let plan = self
            .engine()
            .plan_statement(&snapshot.for_statement(), statement)
            .await?;
        self.write_plan(&snapshot, &plan, kind, label).await
    }

    /// Runs a prepared query with `values` (`$1` first): a point query
    /// reads its entity without planning; the rest binds the values into
    /// the optimized plan and starts it as [`Self::query`] does, paged
    /// under `tablesql.page_size` (the statement with its values names
    /// the page).
    pub async fn query_prepared(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let started = self.start_prepared(prepared, values, true).await;
        self.failed_if(started)
    }

    /// As [`Self::query_prepared`], never paged: all the rows (a cursor's,
    /// or the library's [`PreparedStatement::stream`]).
    pub async fn query_prepared_whole(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let started = self.start_prepared(prepared, values, false).await;
        self.failed_if(started)
    }

    /// Runs a prepared point query with `values` into one row, for a front
    /// end that sends it as it is (the wire's DataRow): no batch is built.
    /// `Ok(None)` where this run is no point read (the statement is not
    /// one, a value is no key, or the session pages its results): run it
    /// with [`Self::query_prepared`], which answers as this would.
    /// `Ok(Some(None))`: no entity has the key.
    pub async fn point_row(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
    ) -> Result<Option<Option<Row>>, EngineError> {
        // Awaited where it is made: a future kept in a variable and then
        // awaited is held twice in this one's state.
        let read = async {
            self.refuse_in_failed_block()?;
            let _locks = self.lock_reads(prepared.locking());
            self.follow().await;
            let planned = prepared.planned().await?;
            // As `start_prepared`: a paged run answers with a page and its
            // token.
            if self.pages() && !prepared.returns_rows() {
                return Ok(None);
            }
            let Some(point) = &planned.point else {
                return Ok(None);
            };
            Ok(point
                .run_row(self.engine(), self.context(), prepared.label(), values)
                .await?)
        }
        .await;
        self.failed_if(read)
    }

    async fn start_prepared(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
        paged: bool,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        self.refuse_in_failed_block()?;
        let guard = self.lock_reads(prepared.locking());
        self.follow().await;
        let planned = prepared.planned().await?;
        let paged = paged && !prepared.returns_rows() && self.pages();
        if let Some(point) = &planned.point
            && !paged
            && let Some(batch) = point
                .run(self.engine(), self.context(), prepared.label(), values)
                .await?
        {
            let schema = batch.schema();
            // As a scan streams: no batch for no rows.
            let rows = (batch.num_rows() > 0).then_some(Ok(batch));
            let once = futures::stream::iter(rows);
            return Ok(shown(Box::pin(RecordBatchStreamAdapter::new(schema, once))));
        }
        // Boxed: planning's futures are large, and a point read's future
        // should not carry them.
        let stream = Box::pin(self.start_bound(prepared, &planned, values, paged)).await?;
        Ok(holding(stream, guard))
    }

    async fn start_bound(
        &self,
        prepared: &PreparedStatement,
        planned: &Planned,
        values: &ParamValues,
        paged: bool,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let plan = bind(&planned.plan, &planned.params, values)?;
        let text = paged.then(|| format!("{}\n{values:?}", prepared.text()));
        let snapshot = self.snapshot();
        self.start_plan(
            &snapshot,
            &plan,
            text.as_deref(),
            prepared.label().to_owned(),
        )
        .await
    }

    /// Binds `values` into a prepared write for [`Write::run`].
    pub async fn write_prepared(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
    ) -> Result<Write, EngineError> {
        let planned = Box::pin(self.plan_prepared_write(prepared, values)).await;
        self.failed_if(planned)
    }

    async fn plan_prepared_write(
        &self,
        prepared: &PreparedStatement,
        values: &ParamValues,
    ) -> Result<Write, EngineError> {
        self.refuse_in_failed_block()?;
        self.follow().await;
        let kind = prepared.kind();
        if !kind.writes_rows() {
            return Err(EngineError::NotSupported(format!(
                "not a write: {}",
                prepared.text()
            )));
        }
        let planned = prepared.planned().await?;
        let plan = bind(&planned.plan, &planned.params, values)?;
        let snapshot = self.snapshot();
        self.write_plan(&snapshot, &plan, kind, prepared.label().to_owned())
            .await
    }

    /// Starts an optimized, bound plan: one page when `page` names the
    /// statement and the plan pages, else the direct path or DataFusion's
    /// physical planner. Recorded under `label` when its stream ends.
    async fn start_plan(
        &self,
        snapshot: &Snapshot,
        plan: &LogicalPlan,
        page: Option<&str>,
        label: String,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        if let Some(statement) = page
            && let Some(page) = self
                .engine()
                .session_page(self.context(), plan, statement)
                .await?
        {
            let batches = futures::stream::iter(page.batches.into_iter().map(Ok));
            return Ok(shown(Box::pin(RecordBatchStreamAdapter::new(
                page.schema,
                batches,
            ))));
        }
        let (stream, physical) = match direct::start(snapshot, plan).await? {
            Some(started) => started,
            None => {
                let physical = physical_plan(snapshot, plan).await?;
                let stream = datafusion::physical_plan::execute_stream(
                    physical.clone(),
                    snapshot.task.clone(),
                )?;
                (stream, physical)
            }
        };
        let stream = billed(snapshot, plan, &physical, stream).await?;
        let stream = self.engine().recorded(label, Some(physical), stream);
        Ok(shown(Box::pin(FailsBlock::new(stream, self.transaction()))))
    }

    async fn write_plan(
        &self,
        snapshot: &Snapshot,
        plan: &LogicalPlan,
        kind: StatementKind,
        label: String,
    ) -> Result<Write, EngineError> {
        let physical = physical_plan(snapshot, plan).await?;
        Ok(Write {
            ran: std::sync::atomic::AtomicBool::new(false),
            kind,
            label,
            engine: self.engine().clone(),
            physical,
            task: snapshot.task.clone(),
            tx: self.transaction(),
        })
    }

    /// `done`, having failed the session's open block if it is an error.
    fn failed_if<T>(&self, done: Result<T, EngineError>) -> Result<T, EngineError> {
        if done.is_err() {
            self.statement_failed();
        }
        done
    }

    /// Nothing runs in a failed transaction block but its end: the error a
    /// prepared statement's run gets there, for a front end that checks
    /// before it decodes the run's values (as PostgreSQL refuses a Bind).
    pub fn refuse_in_failed_block(&self) -> Result<(), EngineError> {
        if self.transaction().is_some_and(|t| t.is_aborted()) {
            return Err(EngineError::InFailedTransaction);
        }
        Ok(())
    }
}

/// DataFusion's physical planning of an optimized plan.
async fn physical_plan(
    snapshot: &Snapshot,
    plan: &LogicalPlan,
) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
    let state = &snapshot.state;
    state
        .query_planner()
        .create_physical_plan(plan, state.as_ref())
        .await
}

/// An EXPLAIN's rows, then its `bill` row (`exec::bill`): estimated
/// from the explained statement's physical plan (planned again here: the
/// EXPLAIN keeps only its text), or, after an EXPLAIN ANALYZE has run,
/// counted from `physical`'s metrics. Any other stream as it is.
async fn billed(
    snapshot: &Snapshot,
    plan: &LogicalPlan,
    physical: &Arc<dyn ExecutionPlan>,
    stream: SendableRecordBatchStream,
) -> Result<SendableRecordBatchStream, DataFusionError> {
    use datafusion::common::format::ExplainFormat;
    let bill: Box<dyn FnOnce() -> String + Send> = match plan {
        LogicalPlan::Explain(e) if matches!(e.explain_format, ExplainFormat::Indent) => {
            // A plan DataFusion could not plan physically is shown as its
            // error; so is its bill, and the EXPLAIN still answers.
            match physical_plan(snapshot, &e.plan).await {
                Ok(explained) => Box::new(move || crate::exec::bill::estimated(explained.as_ref())),
                Err(error) => Box::new(move || format!("estimated: not known: {error}")),
            }
        }
        LogicalPlan::Analyze(_) => {
            let ran = physical.clone();
            Box::new(move || crate::exec::bill::actual(ran.as_ref()))
        }
        _ => return Ok(stream),
    };
    let schema = stream.schema();
    let out = schema.clone();
    let last = futures::stream::once(async move {
        Ok::<_, DataFusionError>(crate::exec::bill::row(&schema, bill()))
    });
    let rows = futures::StreamExt::chain(
        stream,
        futures::TryStreamExt::try_filter_map(last, |row| async move { Ok(row) }),
    );
    Ok(Box::pin(RecordBatchStreamAdapter::new(out, rows)))
}

/// `stream`, holding `guard` until it ends or is dropped: a locking query's
/// rows are read as the stream is polled, and its locks (outside a block)
/// last as long as it does.
fn holding(
    stream: SendableRecordBatchStream,
    guard: Option<LockingGuard>,
) -> SendableRecordBatchStream {
    let Some(guard) = guard else {
        return stream;
    };
    let schema = stream.schema();
    // The closure owns the guard, so it goes when the stream does.
    let held = futures::StreamExt::map(stream, move |batch| {
        let _ = &guard;
        batch
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, held))
}

/// `stream` with its columns named as clients see them
/// (`planner::output_names`: a repeated name's mark taken off).
fn shown(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let named = crate::planner::output_names::shown(&schema);
    if Arc::ptr_eq(&named, &schema) {
        return stream;
    }
    let out = named.clone();
    let renamed = futures::StreamExt::map(stream, move |batch| {
        batch.and_then(|b| {
            let options = datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(b.num_rows()));
            Ok(
                datafusion::arrow::record_batch::RecordBatch::try_new_with_options(
                    named.clone(),
                    b.columns().to_vec(),
                    &options,
                )?,
            )
        })
    });
    Box::pin(RecordBatchStreamAdapter::new(out, renamed))
}
