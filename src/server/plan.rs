//! Statements of one connection ([`Runner`]): the engine session parses,
//! prepares and re-plans them; here a portal's values are bound and a
//! query runs into a lazily encoded row stream.
//!
//! A prepared query is parsed, analyzed and optimized once, at Parse, with its
//! placeholders. Each Execute binds the values into that optimized plan and
//! runs only the physical planner, where the scan's pushdown sees the bound
//! keys. The logical work is what a point query's planning spends most on
//! (BENCHMARKS.md, "Wire server").

use std::sync::Arc;

use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use async_trait::async_trait;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, collect, execute_stream};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use futures::StreamExt;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::{ClientInfo, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;

use super::cancel::{Guard, guarded};
use super::params;
use super::sqlstate::{
    CONNECTION_FAILURE, QUERY_CANCELED, SYNTAX_ERROR, datafusion_error, engine_error, error,
    parser_error,
};
use super::vectors;
use crate::engine::{
    Engine, Planned, PreparedStatement, Session, Snapshot, StatementKind, parameter_types,
    reads_system_catalog, rows_written, start_direct, statement_label,
};

/// A statement as Parse left it.
#[derive(Debug)]
pub struct Prepared {
    pub sql: String,
    /// The statement as parsed and printed again: what a page token names.
    pub text: String,
    /// Whether it reads the system catalogs (see `vectors::is_oid_list`).
    pub catalog: bool,
    /// The statement normalized: what its runs are recorded under.
    pub label: String,
    pub kind: Kind,
}

impl Kind {
    /// A query's or a write's plan as last planned.
    fn planned(&self) -> Option<Arc<Planned>> {
        match self {
            Kind::Query { prepared, .. } => Some(prepared.current()),
            Kind::Command(_) => None,
        }
    }
}

/// The statement type of the extended protocol.
pub type Stmt = Arc<Prepared>;

#[derive(Debug)]
pub enum Kind {
    /// A query (SELECT, VALUES, EXPLAIN) or a write (INSERT, UPDATE,
    /// DELETE; `write` is its command tag): the engine's prepared
    /// statement, and its placeholders' types as the client is told them.
    Query {
        /// Planned once, and again after a catalog change, by the engine.
        prepared: PreparedStatement,
        params: Vec<Option<DataType>>,
        param_types: Vec<Type>,
        /// The kind of a statement that writes rows.
        write: Option<StatementKind>,
    },
    /// Any other statement (SET, SHOW, BEGIN, DECLARE, FETCH, DDL): it runs
    /// at Execute, like a simple query.
    Command(Box<Statement>),
}

/// Runs one connection's statements: parsing, preparing and re-planning
/// are its engine session's; what is its own is the wire's part (binding a
/// portal's values, the direct path, encoding rows for the client).
pub struct Runner {
    /// The connection's engine session: transaction control and DDL run
    /// there.
    pub session: Session,
    /// The session's engine (its context is the session's).
    pub engine: Engine,
    /// The session's DataFusion context.
    pub ctx: SessionContext,
    /// For the direct path; retaken when the session's configuration changes.
    snapshot: std::sync::RwLock<Snapshot>,
}

impl Runner {
    /// A runner for an engine session.
    pub fn new(session: Session) -> Self {
        let engine = session.engine().clone();
        let ctx = session.context().clone();
        let snapshot = std::sync::RwLock::new(Snapshot::of(&ctx));
        Self {
            session,
            engine,
            ctx,
            snapshot,
        }
    }

    /// After `SET datafusion.*`, or a UDF registered on the session.
    pub fn configuration_changed(&self) {
        if let Ok(mut s) = self.snapshot.write() {
            *s = Snapshot::of(&self.ctx);
        }
    }

    fn snapshot(&self) -> Snapshot {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(_) => Snapshot::of(&self.ctx),
        }
    }

    /// Catches up with catalog changes made by other servers and
    /// processes (`Engine::follow_catalog`): called as each statement starts.
    pub async fn follow_catalog(&self) {
        self.engine.follow_catalog().await;
    }

    /// Splits and parses a query string.
    pub fn parse(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        self.engine.parse(sql).map_err(|e| parser_error(&e))
    }

    /// What Parse keeps of one statement.
    pub async fn prepare(&self, sql: &str, statement: Statement) -> PgWireResult<Prepared> {
        self.follow_catalog().await;
        let write = write_kind(&statement);
        let text = statement.to_string();
        let label = statement_label(&statement);
        let oids = params::oid_placeholders(&statement);
        let catalog = reads_system_catalog(&statement);
        if !is_query(&statement) && write.is_none() {
            return Ok(Prepared {
                sql: sql.to_owned(),
                text,
                catalog,
                label,
                kind: Kind::Command(Box::new(statement)),
            });
        }
        let state = self.snapshot().state;
        let prepared = self
            .engine
            .prepare_in(&state, statement)
            .await
            .map_err(|e| engine_error(&e))?;
        let planned = prepared.current();
        let plan = &planned.plan;
        let mut types = parameter_types(plan).map_err(|e| datafusion_error(&e))?;
        for (id, t) in params::cast_placeholder_types(plan).map_err(|e| datafusion_error(&e))? {
            if let Some(slot @ None) = types.get_mut(&id) {
                *slot = Some(t);
            }
        }
        // Placeholders are $1..$n; their types in that order.
        let mut numbered: Vec<(usize, Option<DataType>)> = types
            .into_iter()
            .filter_map(|(id, t)| id.trim_start_matches('$').parse().ok().map(|n| (n, t)))
            .collect();
        numbered.sort_by_key(|(n, _)| *n);
        let param_types = numbered
            .iter()
            .map(|(n, t)| params::told_type(*n, t.as_ref(), &oids))
            .collect::<PgWireResult<Vec<_>>>()?;
        let params: Vec<Option<DataType>> = numbered.into_iter().map(|(_, t)| t).collect();
        Ok(Prepared {
            sql: sql.to_owned(),
            text,
            catalog,
            label,
            kind: Kind::Query {
                prepared,
                params,
                param_types,
                write,
            },
        })
    }

    /// A prepared statement's plan under the current catalog (the
    /// engine's `PreparedStatement::planned`).
    async fn current(&self, prepared: &Prepared) -> PgWireResult<Arc<Planned>> {
        let Kind::Query { prepared, .. } = &prepared.kind else {
            return Err(internal("not a query or a write"));
        };
        prepared.planned().await.map_err(|e| engine_error(&e))
    }

    /// A query's rows as Arrow batches, for COPY TO: planned as any query
    /// of the session, errors mapped to SQLSTATEs. The first batch is
    /// awaited here, so that an error comes before the copy starts (a
    /// server cannot fail a COPY TO midway but by breaking it off).
    pub async fn batches(
        &self,
        statement: Statement,
        mut guard: Guard,
    ) -> PgWireResult<(
        datafusion::arrow::datatypes::SchemaRef,
        impl futures::Stream<Item = PgWireResult<datafusion::arrow::array::RecordBatch>> + Send + use<>,
    )> {
        let plan = self.logical(statement).await?;
        let snapshot = self.snapshot();
        let physical = physical_plan(&snapshot, &plan, &mut guard).await?;
        let schema = physical.schema();
        let stream =
            execute_stream(physical, snapshot.task.clone()).map_err(|e| datafusion_error(&e))?;
        Ok((schema, guarded(stream, guard)))
    }

    /// Plans a query from its text and starts it (the simple protocol).
    pub async fn query(&self, statement: Statement, guard: Guard) -> PgWireResult<QueryResponse> {
        let text = statement.to_string();
        let label = statement_label(&statement);
        let catalog = reads_system_catalog(&statement);
        let plan = self.logical(statement).await?;
        self.run(
            &plan,
            Some(&text),
            label,
            catalog,
            &Format::UnifiedText,
            guard,
        )
        .await
    }

    /// The analyzed and optimized logical plan of a query.
    async fn logical(&self, statement: Statement) -> PgWireResult<LogicalPlan> {
        let state = self.snapshot().state;
        self.engine
            .plan_statement(&state, statement)
            .await
            .map_err(|e| datafusion_error(&e))
    }

    /// Plans a write from its text and runs it (the simple protocol).
    pub async fn write_statement(
        &self,
        statement: Statement,
        guard: Guard,
    ) -> PgWireResult<Response> {
        let kind = write_kind(&statement).ok_or_else(|| internal("not a write"))?;
        let label = statement_label(&statement);
        let plan = self.logical(statement).await?;
        self.write(&plan, kind, label, guard).await
    }

    /// Binds a portal's values into its prepared write and runs it.
    pub async fn execute_write(
        &self,
        portal: &Portal<Stmt>,
        guard: Guard,
    ) -> PgWireResult<Response> {
        let prepared = &portal.statement.statement;
        let Kind::Query {
            params,
            write: Some(kind),
            ..
        } = &prepared.kind
        else {
            return Err(internal("not a write"));
        };
        let values = self.values(portal)?;
        let current = self.current(prepared).await?;
        let plan = bind(&current.plan, params, &values)?;
        self.write(&plan, *kind, prepared.label.clone(), guard)
            .await
    }

    /// Runs a write's plan to the end: its one row is the count of rows
    /// written, which becomes the command tag (`INSERT 0 n`, `UPDATE n`).
    async fn write(
        &self,
        plan: &LogicalPlan,
        kind: StatementKind,
        label: String,
        mut guard: Guard,
    ) -> PgWireResult<Response> {
        let snapshot = self.snapshot();
        let physical = physical_plan(&snapshot, plan, &mut guard).await?;
        let started = std::time::Instant::now();

        let run = collect(physical.clone(), snapshot.task.clone());
        let refused = |e: datafusion::error::DataFusionError| {
            self.engine.record_failure(&label, &e);
            datafusion_error(&e)
        };
        let batches = match guard.run(async { run.await.map_err(refused) }).await {
            Ok(b) => b,
            // Stopped midway (cancel, timeout, the client gone): say what the
            // transactions sent before had committed.
            Err(PgWireError::UserError(info))
                if [QUERY_CANCELED, CONNECTION_FAILURE].contains(&info.code.as_str()) =>
            {
                let n = rows_written(physical.as_ref()).unwrap_or(0);
                let note = if n > 0 {
                    format!(
                        " (at least {n} rows of this statement were written before it stopped: each partition's rows commit together)"
                    )
                } else {
                    String::new()
                };
                return Err(error(&info.code, format!("{}{note}", info.message)));
            }
            Err(e) => return Err(e),
        };
        let mut rows = 0usize;
        for b in &batches {
            let counts = b
                .column(0)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(|| internal("a write answered without a count"))?;
            rows += counts.iter().flatten().sum::<u64>() as usize;
        }
        self.engine
            .record_write(&label, started, rows as u64, &physical);
        Ok(Response::Execution(write_tag(kind, rows)?))
    }

    /// The values a portal binds to its statement's placeholders.
    fn values(&self, portal: &Portal<Stmt>) -> PgWireResult<ParamValues> {
        let prepared = &portal.statement.statement;
        Ok(match &prepared.kind {
            Kind::Query {
                params,
                param_types,
                ..
            } if !params.is_empty() => {
                let inferred: Vec<Option<&DataType>> = params.iter().map(Option::as_ref).collect();
                let server: Vec<Option<&Type>> = param_types
                    .iter()
                    .map(|t| Some(params::decoded_as(t)))
                    .collect();
                match params::oid_lists_as_int4(portal) {
                    Some(p) => deserialize_parameters_with_server_types(&p, &inferred, &server)?,
                    None => deserialize_parameters_with_server_types(portal, &inferred, &server)?,
                }
            }
            _ => ParamValues::List(Vec::new()),
        })
    }

    /// Binds a portal's values into its prepared plan and starts it.
    pub async fn execute(
        &self,
        portal: &Portal<Stmt>,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        self.execute_portal(portal, true, guard).await
    }

    /// A cursor's query: all its rows, for FETCH to take in its own
    /// steps, never one page of them (`tablesql.page_size`).
    pub async fn execute_cursor(
        &self,
        portal: &Portal<Stmt>,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        self.execute_portal(portal, false, guard).await
    }

    async fn execute_portal(
        &self,
        portal: &Portal<Stmt>,
        paged: bool,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let values = self.values(portal)?;
        self.bound(
            &portal.statement.statement,
            &values,
            &portal.result_column_format,
            paged,
            guard,
        )
        .await
    }

    /// Binds values into a prepared query and starts it: no parsing, no
    /// logical optimization, only physical planning (where the keys are
    /// pushed down) and execution.
    pub async fn execute_values(
        &self,
        prepared: &Prepared,
        values: &ParamValues,
        format: &Format,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        self.bound(prepared, values, format, true, guard).await
    }

    /// As `execute_values`; `paged` false for a cursor's query.
    async fn bound(
        &self,
        prepared: &Prepared,
        values: &ParamValues,
        format: &Format,
        paged: bool,
        mut guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let Kind::Query {
            params,
            write: None,
            ..
        } = &prepared.kind
        else {
            return Err(error(SYNTAX_ERROR, "not a query"));
        };
        let current = self.current(prepared).await?;
        let plan = &current.plan;
        if let Some(point) = &current.point
            && !self.session.pages()
        {
            let read = guard
                .run(async {
                    point
                        .run(&self.engine, &self.ctx, &prepared.label, values)
                        .await
                        .map_err(|e| datafusion_error(&e))
                })
                .await?;
            if let Some(batch) = read {
                let fields = Arc::new(result_fields(
                    plan.schema().as_arrow(),
                    format,
                    prepared.catalog,
                )?);
                let vectors = vectors::vector_columns(plan.schema().as_arrow());
                let schema = batch.schema();
                let stream: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::iter([Ok(batch)]),
                ));
                return respond(fields, stream, vectors, guard).await;
            }
        }
        let plan = bind(plan, params, values)?;
        // A page token names the statement with its values.
        let text = format!("{}\n{values:?}", prepared.text);
        let statement = paged.then_some(text.as_str());
        let label = prepared.label.clone();
        self.run(&plan, statement, label, prepared.catalog, format, guard)
            .await
    }

    /// Physical planning (or the direct path, `direct.rs`) and execution of
    /// an optimized plan (`statement` names it for page tokens; `None` for a
    /// cursor's, which is never paged). The first batch
    /// is awaited here, so that errors and aggregates (whose one row comes
    /// after the whole scan) are reported before any row description, and
    /// cancel and timeout cover them.
    async fn run(
        &self,
        plan: &LogicalPlan,
        statement: Option<&str>,
        label: String,
        catalog: bool,
        format: &Format,
        mut guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let vectors = vectors::vector_columns(plan.schema().as_arrow());
        let fields = Arc::new(result_fields(plan.schema().as_arrow(), format, catalog)?);
        // Under `tablesql.page_size`, a query of one table is one page.
        let paged = match statement {
            Some(statement) => {
                guard
                    .run(async {
                        self.engine
                            .session_page(&self.ctx, plan, statement)
                            .await
                            .map_err(|e| engine_error(&e))
                    })
                    .await?
            }
            None => None,
        };
        if let Some(page) = paged {
            let batches = futures::stream::iter(page.batches.into_iter().map(Ok));
            let stream: SendableRecordBatchStream =
                Box::pin(RecordBatchStreamAdapter::new(page.schema, batches));
            return respond(fields, stream, vectors, guard).await;
        }
        let snapshot = self.snapshot();
        let direct = guard
            .run(async {
                start_direct(&snapshot, plan)
                    .await
                    .map_err(|e| datafusion_error(&e))
            })
            .await?;
        let (stream, physical) = match direct {
            Some(started) => started,
            None => {
                let physical = physical_plan(&snapshot, plan, &mut guard).await?;
                let stream = execute_stream(physical.clone(), snapshot.task.clone())
                    .map_err(|e| datafusion_error(&e))?;
                (stream, physical)
            }
        };
        let stream = self.engine.recorded(label, Some(physical), stream);
        respond(fields, stream, vectors, guard).await
    }
}

/// The response of rows the engine session answered with (`SHOW`), in
/// text.
pub async fn respond_stream(stream: SendableRecordBatchStream) -> PgWireResult<QueryResponse> {
    let schema = stream.schema();
    let fields = Arc::new(result_fields(&schema, &Format::UnifiedText, false)?);
    let vectors = vectors::vector_columns(&schema);
    respond(fields, stream, vectors, Guard::unbounded()).await
}

/// The response of a started query: its first batch awaited (see `run`), the
/// rest encoded as the client reads.
async fn respond(
    fields: Arc<Vec<FieldInfo>>,
    stream: SendableRecordBatchStream,
    vectors: Vec<usize>,
    guard: Guard,
) -> PgWireResult<QueryResponse> {
    // Fused: the first poll may already have ended it.
    let mut batches = Box::pin(guarded(stream, guard).fuse());
    let first = batches.next().await.transpose()?;
    let rest = futures::stream::iter(first.map(Ok)).chain(batches);
    let encode_fields = fields.clone();
    let rows = rest
        .map(
            move |batch| -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send> {
                match batch.and_then(|b| {
                    vectors::wire_batch(b, &vectors).map_err(|e| datafusion_error(&e))
                }) {
                    Ok(b) => encode_recordbatch(encode_fields.clone(), b),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            },
        )
        .flat_map(futures::stream::iter);
    Ok(QueryResponse::new(fields, rows))
}

/// DataFusion's physical planning of an optimized plan, under the
/// statement's guard.
async fn physical_plan(
    snapshot: &Snapshot,
    plan: &LogicalPlan,
    guard: &mut Guard,
) -> PgWireResult<Arc<dyn ExecutionPlan>> {
    let state = &snapshot.state;
    guard
        .run(async {
            state
                .query_planner()
                .create_physical_plan(plan, state.as_ref())
                .await
                .map_err(|e| datafusion_error(&e))
        })
        .await
}

/// A prepared plan with values in place of its placeholders.
fn bind(
    plan: &LogicalPlan,
    params: &[Option<DataType>],
    values: &ParamValues,
) -> PgWireResult<LogicalPlan> {
    crate::engine::bind(plan, params, values).map_err(|e| datafusion_error(&e))
}

/// A write's command tag: `INSERT 0 n`, `UPDATE n`, `DELETE n`.
pub fn write_tag(kind: StatementKind, rows: usize) -> PgWireResult<Tag> {
    let name = kind
        .tag()
        .ok_or_else(|| internal("a write without a tag"))?;
    Ok(match kind {
        // PostgreSQL's INSERT tag carries an OID, always 0 now.
        StatementKind::Insert => Tag::new(name).with_oid(0).with_rows(rows),
        _ => Tag::new(name).with_rows(rows),
    })
}

/// Whether a statement writes when it runs: a write, or EXPLAIN ANALYZE of one.
pub fn writes(statement: &Statement) -> bool {
    match statement {
        Statement::Explain {
            analyze: true,
            statement,
            ..
        } => write_kind(statement).is_some(),
        other => write_kind(other).is_some(),
    }
}

/// The kind of a statement that writes rows, `None` for the rest.
pub fn write_kind(statement: &Statement) -> Option<StatementKind> {
    Some(StatementKind::of(statement)).filter(|k| k.writes_rows())
}

/// The row description of a result (its vector columns as text; in a
/// query over the system catalogs, lists of int4 as `oid[]`).
pub fn result_fields(
    schema: &Schema,
    format: &Format,
    catalog: bool,
) -> PgWireResult<Vec<FieldInfo>> {
    let wire = vectors::wire_schema(schema, &vectors::vector_columns(schema));
    let fields = arrow_schema_to_pg_fields(&wire, format, None)?;
    Ok(fields
        .into_iter()
        .zip(wire.fields())
        .map(|(info, field)| {
            if catalog && vectors::is_oid_list(field) {
                FieldInfo::new(
                    info.name().to_owned(),
                    info.table_id(),
                    info.column_id(),
                    Type::OID_ARRAY,
                    info.format(),
                )
            } else {
                info
            }
        })
        .collect())
}

/// Statements planned as queries; the rest are commands.
pub fn is_query(statement: &Statement) -> bool {
    matches!(statement, Statement::Query(_) | Statement::Explain { .. })
}

#[async_trait]
impl QueryParser for Runner {
    type Statement = Stmt;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Stmt>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.parse(sql)?;
        match statements.len() {
            0 => Ok(None),
            1 => Ok(Some(Arc::new(
                self.prepare(sql, statements.remove(0)).await?,
            ))),
            _ => Err(error(
                SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            )),
        }
    }

    fn get_parameter_types(&self, stmt: &Stmt) -> PgWireResult<Vec<Type>> {
        Ok(match &stmt.kind {
            Kind::Query { param_types, .. } => param_types.clone(),
            Kind::Command(_) => Vec::new(),
        })
    }

    fn get_result_schema(
        &self,
        stmt: &Stmt,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match &stmt.kind {
            // A write answers with its tag alone (NoData).
            Kind::Query { write: Some(_), .. } => Ok(Vec::new()),
            Kind::Query { .. } => result_fields(
                stmt.kind
                    .planned()
                    .ok_or_else(|| internal("a query without a plan"))?
                    .plan
                    .schema()
                    .as_arrow(),
                format.unwrap_or(&Format::UnifiedText),
                stmt.catalog,
            ),
            Kind::Command(statement) => super::command::result_fields(statement),
        }
    }
}

/// Used where pgwire wants an error type from a plain message.
pub fn internal(message: impl Into<String>) -> PgWireError {
    error(super::sqlstate::INTERNAL_ERROR, message)
}
