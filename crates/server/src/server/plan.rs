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

use arrow_pg::datatypes::arrow_schema_to_pg_fields;
use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::Statement;
use futures::StreamExt;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::{ClientInfo, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;

use super::cancel::{Guard, guarded};
use super::params;
use super::row::{Descriptions, data_row};
use super::sqlstate::{
    CONNECTION_FAILURE, QUERY_CANCELED, SYNTAX_ERROR, datafusion_error, engine_error, error,
    parser_error,
};
use super::vectors;
use crate::engine::{EngineError, PreparedStatement, Session, StatementKind, Write, returns_rows};

/// A statement as Parse left it.
#[derive(Debug)]
pub struct Prepared {
    pub sql: String,
    /// Whether it reads the system catalogs (see `vectors::is_oid_list`).
    pub catalog: bool,
    pub kind: Kind,
}

/// The statement type of the extended protocol.
pub type Stmt = Arc<Prepared>;

/// What a prepared statement is. One per statement, held behind an `Arc`:
/// not worth a box.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Kind {
    /// A query (SELECT, VALUES, EXPLAIN) or a write (INSERT, UPDATE,
    /// DELETE; `write` is its kind): the engine's prepared statement, and
    /// its placeholders' types as the client is told them.
    Query {
        /// Planned once, and again after a catalog change, by the engine.
        prepared: PreparedStatement,
        params: Vec<Option<DataType>>,
        param_types: Vec<Type>,
        /// The kind of a statement that writes rows.
        write: Option<StatementKind>,
        /// Its row descriptions, made once per plan and format.
        descriptions: Descriptions,
    },
    /// Any other statement (SET, SHOW, BEGIN, DECLARE, FETCH, DDL): it runs
    /// at Execute, like a simple query.
    Command(Box<Statement>),
}

/// Runs one connection's statements through its engine session, which
/// parses, prepares, plans and runs them; what is the wire's own is binding
/// a portal's values, the statement's guard (cancel, timeout), and
/// encoding rows for the client.
pub struct Runner {
    /// The connection's engine session.
    pub session: Session,
}

impl Runner {
    /// A runner for an engine session.
    pub fn new(session: Session) -> Self {
        Self { session }
    }

    /// Splits and parses a query string.
    pub fn parse(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        self.session.parse(sql).map_err(|e| parser_error(&e))
    }

    /// What Parse keeps of one statement.
    pub async fn prepare(&self, sql: &str, statement: Statement) -> PgWireResult<Prepared> {
        // In a failed block PostgreSQL refuses a Parse as it refuses a
        // query: only the block's end is let through.
        self.session
            .admit(&statement)
            .map_err(|e| engine_error(&e))?;
        let write = write_kind(&statement);
        let oids = params::oid_placeholders(&statement);
        let catalog = self.session.reads_system_catalog(&statement);
        if !is_query(&statement) && write.is_none() {
            return Ok(Prepared {
                sql: sql.to_owned(),
                catalog,
                kind: Kind::Command(Box::new(statement)),
            });
        }
        let prepared = self
            .session
            .prepare_statement(statement)
            .await
            .map_err(|e| engine_error(&e))?;
        let params = prepared.parameter_types();
        let param_types = params
            .iter()
            .enumerate()
            .map(|(i, t)| params::told_type(i + 1, t.as_ref(), &oids))
            .collect::<PgWireResult<Vec<_>>>()?;
        Ok(Prepared {
            sql: sql.to_owned(),
            catalog,
            kind: Kind::Query {
                prepared,
                params,
                param_types,
                write,
                descriptions: Descriptions::default(),
            },
        })
    }

    /// A query's rows as Arrow batches, for COPY TO, errors mapped to
    /// SQLSTATEs; planning and the start run under the guard.
    pub async fn batches(
        &self,
        statement: Statement,
        mut guard: Guard,
    ) -> PgWireResult<(
        datafusion::arrow::datatypes::SchemaRef,
        impl futures::Stream<Item = PgWireResult<datafusion::arrow::array::RecordBatch>> + Send + use<>,
    )> {
        // All the rows: an export is never one page.
        let stream = guard
            .run(engine(self.session.query_whole(statement)))
            .await?;
        Ok((stream.schema(), guarded(stream, guard)))
    }

    /// Starts a query from its text (the simple protocol).
    pub async fn query(
        &self,
        statement: Statement,
        mut guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let catalog = self.session.reads_system_catalog(&statement);
        let tag = returning_tag(&statement);
        let stream = guard.run(engine(self.session.query(statement))).await?;
        let schema = stream.schema();
        let fields = Arc::new(result_fields(&schema, &Format::UnifiedText, catalog)?);
        let vectors = vectors::vector_columns(&schema);
        let mut response = respond(fields, stream, vectors, guard).await?;
        if let Some(tag) = tag {
            response.set_command_tag(tag);
        }
        Ok(response)
    }

    /// Plans a write from its text and runs it (the simple protocol).
    pub async fn write_statement(
        &self,
        statement: Statement,
        mut guard: Guard,
    ) -> PgWireResult<Response> {
        let write = guard.run(engine(self.session.write(statement))).await?;
        finish(&write, guard).await
    }

    /// Binds a portal's values into its prepared write and runs it.
    pub async fn execute_write(
        &self,
        portal: &Portal<Stmt>,
        mut guard: Guard,
    ) -> PgWireResult<Response> {
        let Kind::Query { prepared, .. } = &portal.statement.statement.kind else {
            return Err(internal("not a write"));
        };
        let values = self.values(portal)?;
        let write = guard
            .run(engine(self.session.write_prepared(prepared, &values)))
            .await?;
        finish(&write, guard).await
    }

    /// The values a portal binds to its statement's placeholders.
    fn values(&self, portal: &Portal<Stmt>) -> PgWireResult<ParamValues> {
        // In a failed block the run is refused before its values are read
        // (a bad value there is not the error to report).
        self.session
            .refuse_in_failed_block()
            .map_err(|e| engine_error(&e))?;
        let prepared = &portal.statement.statement;
        Ok(match &prepared.kind {
            Kind::Query {
                params,
                param_types,
                ..
            } if !params.is_empty() => {
                if let Some(values) = params::simple_values(portal, params, param_types) {
                    return values;
                }
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

    /// Binds a portal's values into its prepared query and starts it.
    pub async fn execute(
        &self,
        portal: &Portal<Stmt>,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let values = self.values(portal)?;
        let format = &portal.result_column_format;
        self.bound(&portal.statement.statement, &values, format, true, guard)
            .await
    }

    /// A cursor's query: all its rows, for FETCH to take in its own
    /// steps, never one page of them (`tablesql.page_size`).
    pub async fn execute_cursor(
        &self,
        portal: &Portal<Stmt>,
        guard: Guard,
    ) -> PgWireResult<QueryResponse> {
        let values = self.values(portal)?;
        let format = &portal.result_column_format;
        self.bound(&portal.statement.statement, &values, format, false, guard)
            .await
    }

    /// Binds values into a prepared query and starts it: no parsing, no
    /// logical optimization (see `Session::query_prepared`).
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
            prepared: statement,
            write: None,
            descriptions,
            ..
        } = &prepared.kind
        else {
            return Err(error(SYNTAX_ERROR, "not a query"));
        };
        // A point read's row goes straight to the wire (`server::row`).
        // (`is_point_read` first: any other query skips the engine's
        // checks, which its own start makes again.)
        if statement.is_point_read()
            && let Some(found) = guard
                .run(engine(self.session.point_row(statement, values)))
                .await?
        {
            let fields = descriptions.of(&statement.schema(), format, prepared.catalog)?;
            let row = found.map(|row| data_row(&row, &fields)).transpose()?;
            return Ok(QueryResponse::new(
                fields,
                futures::stream::iter(row.map(Ok)),
            ));
        }
        // The general path's future (planning, the stream's start) is many
        // times a point read's: boxed, a point read's state is not moved
        // in and out of a box that size at every Execute.
        Box::pin(async move {
            let started = if paged {
                guard
                    .run(engine(self.session.query_prepared(statement, values)))
                    .await?
            } else {
                guard
                    .run(engine(self.session.query_prepared_whole(statement, values)))
                    .await?
            };
            let schema = statement.schema();
            let fields = descriptions.of(&schema, format, prepared.catalog)?;
            let vectors = vectors::vector_columns(&schema);
            let mut response = respond(fields, started, vectors, guard).await?;
            if statement.returns_rows()
                && let Some(tag) = tag_of_rows(statement.kind())
            {
                response.set_command_tag(tag);
            }
            Ok(response)
        })
        .await
    }
}

/// An engine call's error as the wire's.
///
/// A plain function returning a combinator, not an `async fn`, which would
/// hold its argument twice (see `Guard::run`).
fn engine<T>(
    call: impl Future<Output = Result<T, EngineError>>,
) -> impl Future<Output = PgWireResult<T>> {
    futures::TryFutureExt::map_err(call, |e| engine_error(&e))
}

/// Runs a write to the end under its guard: its count becomes the command
/// tag (`INSERT 0 n`, `UPDATE n`). Stopped midway (cancel, timeout, the
/// client gone), the error says what the transactions sent before had
/// committed.
async fn finish(write: &Write, mut guard: Guard) -> PgWireResult<Response> {
    match guard.run(engine(write.run())).await {
        Ok(rows) => {
            let rows = usize::try_from(rows).unwrap_or(usize::MAX);
            Ok(Response::Execution(write_tag(write.kind(), rows)?))
        }
        Err(PgWireError::UserError(info))
            if [QUERY_CANCELED, CONNECTION_FAILURE].contains(&info.code.as_str()) =>
        {
            let n = write.committed();
            let note = if n > 0 {
                format!(
                    " (at least {n} rows of this statement were written before it stopped: each partition's rows commit together)"
                )
            } else {
                String::new()
            };
            Err(error(&info.code, format!("{}{note}", info.message)))
        }
        Err(e) => Err(e),
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

/// The response of a started query: its first batch awaited, so that errors
/// and aggregates (whose one row comes after the whole scan) are reported
/// before any row description and under the statement's guard; the rest
/// encoded as the client reads.
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
                    Ok(b) => super::batch::data_rows(encode_fields.clone(), b),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            },
        )
        .flat_map(futures::stream::iter);
    Ok(QueryResponse::new(fields, rows))
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

/// Whether a statement writes when it runs: a write (RETURNING or not), or
/// EXPLAIN ANALYZE of one.
pub fn writes(statement: &Statement) -> bool {
    match statement {
        Statement::Explain {
            analyze: true,
            statement,
            ..
        } => StatementKind::of(statement).writes_rows(),
        other => StatementKind::of(other).writes_rows(),
    }
}

/// The kind of a statement that writes rows and answers with their count,
/// `None` for the rest (a write with RETURNING answers as a query).
pub fn write_kind(statement: &Statement) -> Option<StatementKind> {
    Some(StatementKind::of(statement)).filter(|k| k.writes_rows() && !returns_rows(statement))
}

/// The command tag of a write with RETURNING, whose rows are counted after
/// it as a SELECT's are (`INSERT 0 3`); `None` for any other statement.
fn returning_tag(statement: &Statement) -> Option<&'static str> {
    returns_rows(statement)
        .then(|| tag_of_rows(StatementKind::of(statement)))
        .flatten()
}

/// The tag a write's rows are counted under: pgwire appends the count.
fn tag_of_rows(kind: StatementKind) -> Option<&'static str> {
    match kind {
        // PostgreSQL's INSERT tag carries an OID, always 0 now.
        StatementKind::Insert => Some("INSERT 0"),
        StatementKind::Update => Some("UPDATE"),
        StatementKind::Delete => Some("DELETE"),
        _ => None,
    }
}

/// The row description of a result (its vector columns as text, typed as
/// vectors where sent as text; in a query over the system catalogs, lists
/// of int4 as `oid[]`).
pub fn result_fields(
    schema: &Schema,
    format: &Format,
    catalog: bool,
) -> PgWireResult<Vec<FieldInfo>> {
    let wire = vectors::wire_schema(schema, &vectors::vector_columns(schema));
    let fields = arrow_schema_to_pg_fields(&wire, format, None)?;
    Ok(fields
        .into_iter()
        .zip(wire.fields().iter().zip(schema.fields()))
        .map(|(info, (field, own))| {
            let described = if catalog && vectors::is_oid_list(field) {
                Some(Type::OID_ARRAY)
            } else if info.format() == FieldFormat::Text {
                vectors::text_type(own)
            } else {
                None
            };
            match described {
                Some(t) => FieldInfo::new(
                    info.name().to_owned(),
                    info.table_id(),
                    info.column_id(),
                    t,
                    info.format(),
                ),
                None => info,
            }
        })
        .collect())
}

/// Statements planned as queries (a write with RETURNING among them); the
/// rest are commands.
pub fn is_query(statement: &Statement) -> bool {
    matches!(statement, Statement::Query(_) | Statement::Explain { .. }) || returns_rows(statement)
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
            Kind::Query {
                prepared,
                descriptions,
                ..
            } => {
                let fields = descriptions.of(
                    &prepared.schema(),
                    format.unwrap_or(&Format::UnifiedText),
                    stmt.catalog,
                )?;
                let mut fields = fields.as_ref().clone();
                // A statement's Describe comes before its results' format
                // is chosen: a vector stays `text`, as binary sends it.
                // Told `int2vector`, asyncpg would ask for a binary array.
                if format.is_none() {
                    fields = fields.into_iter().map(vectors::described_as_text).collect();
                }
                Ok(fields)
            }
            Kind::Command(statement) => super::command::result_fields(statement),
        }
    }
}

/// Used where pgwire wants an error type from a plain message.
pub fn internal(message: impl Into<String>) -> PgWireError {
    error(super::sqlstate::INTERNAL_ERROR, message)
}
