//! `COPY ... TO STDOUT` and `COPY ... FROM STDIN` in the text and CSV
//! formats, so that psql's `\copy` works both ways.
//!
//! - Out: `COPY table [(cols)] TO STDOUT` exports a mapped table's declared
//!   columns (the system columns are made by the keys and the store, and an
//!   import could not write them), `COPY (query) TO STDOUT` any query; rows
//!   are encoded as the query yields them, one CopyData each.
//! - In: rows are parsed as they arrive and written `CHUNK_ROWS` at a time
//!   through the same INSERT as SQL's (`DmlExec`: a row and its index rows
//!   in one entity group transaction, rows of a partition packed together),
//!   so memory stays flat whatever the size. A bad row (a value that does
//!   not convert, NULL in a NOT NULL column, a wrong field count) stops the
//!   copy with its line number; the rows of earlier chunks are written, and
//!   the error says how many. As in PostgreSQL, the rest of the data is read
//!   and dropped, and the error answers the client's end of data.

pub mod format;

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::LogicalPlanBuilder;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Statement};
use futures::{Stream, StreamExt};
use pgwire::api::results::CopyResponse;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;

use self::format::CopyFormat;
use super::sqlstate::{
    FEATURE_NOT_SUPPORTED, INVALID_TEXT_REPRESENTATION, NOT_NULL_VIOLATION, UNDEFINED_COLUMN,
    datafusion_error, error,
};
use crate::engine::{Engine, TableInfo};

/// Rows written per INSERT of a COPY FROM.
pub const CHUNK_ROWS: usize = 5_000;

/// `22P04`: a line with too many or too few fields.
const BAD_COPY_FILE_FORMAT: &str = "22P04";

/// What a COPY statement asks for.
pub enum Copy {
    /// Rows of this query, in this format.
    Out { query: String, format: CopyFormat },
    /// Rows for a table, read from the client.
    In(Box<CopyIn>),
}

/// Reads a COPY statement: its direction, table or query, columns and format.
pub async fn plan(
    engine: &Engine,
    ctx: &SessionContext,
    statement: &Statement,
) -> PgWireResult<Copy> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Err(error(FEATURE_NOT_SUPPORTED, "not a COPY"));
    };
    let format =
        CopyFormat::of(options, legacy_options).map_err(|m| error(FEATURE_NOT_SUPPORTED, m))?;
    match (target, *to) {
        (CopyTarget::Stdout, true) | (CopyTarget::Stdin, false) => {}
        _ => {
            return Err(error(
                FEATURE_NOT_SUPPORTED,
                "COPY reads from STDIN and writes to STDOUT only (psql's \\copy reads and writes files on the client)",
            ));
        }
    }
    let (table_name, columns) = match source {
        CopySource::Query(query) if *to => {
            return Ok(Copy::Out {
                query: query.to_string(),
                format,
            });
        }
        CopySource::Query(_) => {
            return Err(error(
                FEATURE_NOT_SUPPORTED,
                "COPY (query) FROM is not valid",
            ));
        }
        CopySource::Table {
            table_name,
            columns,
        } => (table_name, columns),
    };
    let table = table_of(engine, table_name).await?;
    let listed: Vec<String> = columns
        .iter()
        .map(crate::catalog::normalize_ident)
        .collect();
    let chosen = chosen_columns(&table, listed, *to)?;
    if *to {
        let list: Vec<String> = chosen.iter().map(|c| quote(c)).collect();
        return Ok(Copy::Out {
            query: format!("SELECT {} FROM {}", list.join(", "), quote(&table.name)),
            format,
        });
    }
    let provider = ctx
        .table_provider(table.name.as_str())
        .await
        .map_err(|e| datafusion_error(&e))?;
    Ok(Copy::In(Box::new(CopyIn::new(
        table.name.clone(),
        provider.schema(),
        chosen,
        format,
    )?)))
}

/// The table of `public` a COPY names.
async fn table_of(
    engine: &Engine,
    name: &datafusion::sql::sqlparser::ast::ObjectName,
) -> PgWireResult<TableInfo> {
    let name = crate::catalog::normalize_ident(
        name.0
            .last()
            .and_then(|p| p.as_ident())
            .ok_or_else(|| error(FEATURE_NOT_SUPPORTED, "COPY of an unnamed table"))?,
    );
    let tables = engine
        .describe_tables()
        .await
        .map_err(|e| super::sqlstate::engine_error(&e))?;
    tables
        .into_iter()
        .find(|t| t.schema == "public" && t.name == name)
        .ok_or_else(|| {
            error(
                super::sqlstate::UNDEFINED_TABLE,
                format!("relation \"{name}\" does not exist"),
            )
        })
}

/// The columns a COPY moves: those listed, else the declared ones (every
/// column of a table tablesql does not write, for export).
fn chosen_columns(table: &TableInfo, listed: Vec<String>, out: bool) -> PgWireResult<Vec<String>> {
    let all = if table.insertable.is_empty() && out {
        &table.columns
    } else {
        &table.insertable
    };
    if listed.is_empty() {
        return Ok(all.clone());
    }
    for c in &listed {
        if !table.columns.contains(c) {
            return Err(error(
                UNDEFINED_COLUMN,
                format!(
                    "column \"{c}\" of relation \"{}\" does not exist",
                    table.name
                ),
            ));
        }
    }
    Ok(listed)
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The rows of a query as COPY data: a CSV header first when asked, then a
/// CopyData per row.
pub fn copy_out(
    schema: SchemaRef,
    batches: impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static,
    format: CopyFormat,
) -> CopyResponse {
    let columns = schema.fields().len();
    let header = format.header.then(|| {
        let names: Vec<Option<&str>> = schema
            .fields()
            .iter()
            .map(|f| Some(f.name().as_str()))
            .collect();
        let mut line = String::new();
        format.write_row(&names, &mut line);
        line
    });
    let mut header = header;
    let rows = batches.flat_map(move |batch| {
        let lines = batch.and_then(|b| encode(&b, &format));
        let lines: Vec<PgWireResult<CopyData>> = match lines {
            Ok(lines) => lines
                .into_iter()
                .map(|mut line| {
                    // The header goes with the first row: pgwire counts
                    // one row per CopyData in the command tag.
                    if let Some(h) = header.take() {
                        line.insert_str(0, &h);
                    }
                    Ok(CopyData::new(Bytes::from(line)))
                })
                .collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(lines)
    });
    CopyResponse::new(0, columns, rows)
}

fn encode(batch: &RecordBatch, format: &CopyFormat) -> PgWireResult<Vec<String>> {
    let options = FormatOptions::default();
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(super::sqlstate::INTERNAL_ERROR, e.to_string()))?;
    let mut lines = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let texts: Vec<Option<String>> = batch
            .columns()
            .iter()
            .zip(&formatters)
            .map(|(c, f)| c.is_valid(row).then(|| f.value(row).to_string()))
            .collect();
        let values: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
        let mut line = String::new();
        format.write_row(&values, &mut line);
        lines.push(line);
    }
    Ok(lines)
}

/// A COPY FROM in progress.
pub struct CopyIn {
    table: String,
    /// The table's schema, every column nullable: the insert's input.
    schema: SchemaRef,
    /// The table's own schema, for NOT NULL.
    declared: SchemaRef,
    /// The positions in `schema` of the copied columns, in the data's order.
    columns: Vec<usize>,
    format: CopyFormat,
    /// Bytes received and not yet a whole record.
    buffer: Vec<u8>,
    /// Lines read so far.
    line: u64,
    /// Parsed rows not yet written, with their line numbers.
    rows: Vec<(u64, Vec<Option<String>>)>,
    written: u64,
    failed: Option<PgWireError>,
    /// The end-of-data marker `\.` was read.
    ended: bool,
}

impl CopyIn {
    fn new(
        table: String,
        declared: SchemaRef,
        columns: Vec<String>,
        format: CopyFormat,
    ) -> PgWireResult<Self> {
        let positions = columns
            .iter()
            .map(|c| {
                declared.index_of(c).map_err(|_| {
                    error(
                        UNDEFINED_COLUMN,
                        format!("column \"{c}\" of relation \"{table}\" does not exist"),
                    )
                })
            })
            .collect::<PgWireResult<Vec<_>>>()?;
        let nullable: Vec<Field> = declared
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Ok(Self {
            table,
            schema: Arc::new(Schema::new(nullable)),
            declared,
            columns: positions,
            format,
            buffer: Vec::new(),
            line: 0,
            rows: Vec::new(),
            written: 0,
            failed: None,
            ended: false,
        })
    }

    /// The number of columns the data carries.
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// Rows written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Takes a CopyData message: its whole records are parsed, and written
    /// once `CHUNK_ROWS` wait. After an error the data is dropped.
    pub async fn take(&mut self, ctx: &SessionContext, data: &[u8]) {
        if self.failed.is_some() || self.ended {
            return;
        }
        self.buffer.extend_from_slice(data);
        if let Err(e) = self.parse_records(false) {
            self.failed = Some(e);
            return;
        }
        if self.rows.len() >= CHUNK_ROWS
            && let Err(e) = self.write(ctx).await
        {
            self.failed = Some(e);
        }
    }

    /// The client's end of data: the rest is parsed and written; the
    /// number of rows written, or the error that stopped the copy.
    pub async fn finish(&mut self, ctx: &SessionContext) -> PgWireResult<u64> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if !self.ended {
            self.parse_records(true)?;
        }
        self.write(ctx).await?;
        Ok(self.written)
    }

    fn parse_records(&mut self, at_end: bool) -> PgWireResult<()> {
        let mut start = 0;
        loop {
            let rest = &self.buffer[start..];
            let end = match self.format.record_end(rest) {
                Some(end) => end,
                None if at_end && !rest.is_empty() => rest.len(),
                None => break,
            };
            let record = std::str::from_utf8(&rest[..end]).map_err(|_| {
                error(
                    "22021",
                    format!("COPY {}, line {}: invalid UTF-8", self.table, self.line + 1),
                )
            })?;
            start += end;
            self.line += 1;
            if record.trim_end_matches(['\n', '\r']) == "\\." {
                self.ended = true;
                break;
            }
            if self.format.header && self.line == 1 {
                continue;
            }
            let fields = self
                .format
                .read_row(record)
                .map_err(|why| self.bad_line(&why))?;
            if fields.len() != self.columns.len() {
                let why = if fields.len() > self.columns.len() {
                    "extra data after last expected column"
                } else {
                    "missing data for a column"
                };
                return Err(error(BAD_COPY_FILE_FORMAT, self.context(why, self.line)));
            }
            self.rows.push((self.line, fields));
        }
        self.buffer.drain(..start);
        Ok(())
    }

    fn bad_line(&self, why: &str) -> PgWireError {
        error(BAD_COPY_FILE_FORMAT, self.context(why, self.line))
    }

    /// A message with where it happened and what is already written.
    fn context(&self, why: &str, line: u64) -> String {
        format!(
            "{why} (COPY {}, line {line}; {} rows were written before it)",
            self.table, self.written
        )
    }

    /// Writes the parsed rows as one INSERT.
    async fn write(&mut self, ctx: &SessionContext) -> PgWireResult<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let batch = self.batch(&rows)?;
        let (first, last) = (
            rows.first().map_or(0, |r| r.0),
            rows.last().map_or(0, |r| r.0),
        );
        let insert = async {
            let table = ctx.table_provider(self.table.as_str()).await?;
            let source = provider_as_source(Arc::new(MemTable::try_new(
                self.schema.clone(),
                vec![vec![batch]],
            )?));
            let input = LogicalPlanBuilder::scan("copy_rows", source, None)?.build()?;
            let plan = LogicalPlanBuilder::insert_into(
                input,
                self.table.as_str(),
                provider_as_source(table),
                InsertOp::Append,
            )?
            .build()?;
            ctx.execute_logical_plan(plan).await?.collect().await
        };
        match insert.await {
            Ok(_) => {
                self.written += rows.len() as u64;
                Ok(())
            }
            Err(e) => {
                let inner = datafusion_error(&e);
                let (code, message) = match &inner {
                    PgWireError::UserError(info) => (info.code.clone(), info.message.clone()),
                    other => (
                        super::sqlstate::INTERNAL_ERROR.to_owned(),
                        other.to_string(),
                    ),
                };
                Err(error(
                    &code,
                    format!(
                        "{message} (COPY {}, in lines {first} to {last}; {} rows were written before them)",
                        self.table, self.written
                    ),
                ))
            }
        }
    }

    /// The rows as a batch of the table's schema: copied columns converted
    /// from text, the others NULL. A value that does not convert, or a NULL
    /// in a NOT NULL column, is refused with its line.
    fn batch(&self, rows: &[(u64, Vec<Option<String>>)]) -> PgWireResult<RecordBatch> {
        let mut columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows.len()))
            .collect();
        for (k, &at) in self.columns.iter().enumerate() {
            let field = self.schema.field(at);
            let text: StringArray = rows
                .iter()
                .map(|(_, r)| r.get(k).cloned().flatten())
                .collect();
            if !self.declared.field(at).is_nullable()
                && let Some(i) = (0..text.len()).find(|i| text.is_null(*i))
            {
                return Err(error(
                    NOT_NULL_VIOLATION,
                    self.context(
                        &format!(
                            "null value in column \"{}\" violates not-null constraint",
                            field.name()
                        ),
                        rows.get(i).map_or(0, |r| r.0),
                    ),
                ));
            }
            let safe = CastOptions {
                safe: true,
                ..Default::default()
            };
            let cast = cast_with_options(&text, field.data_type(), &safe)
                .map_err(|e| error(INVALID_TEXT_REPRESENTATION, e.to_string()))?;
            if let Some(i) = (0..text.len()).find(|i| text.is_valid(*i) && cast.is_null(*i)) {
                return Err(error(
                    INVALID_TEXT_REPRESENTATION,
                    self.context(
                        &format!(
                            "invalid input for column \"{}\" of type {}: \"{}\"",
                            field.name(),
                            field.data_type(),
                            text.value(i)
                        ),
                        rows.get(i).map_or(0, |r| r.0),
                    ),
                ));
            }
            if let Some(slot) = columns.get_mut(at) {
                *slot = cast;
            }
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| error(super::sqlstate::INTERNAL_ERROR, e.to_string()))
    }
}
