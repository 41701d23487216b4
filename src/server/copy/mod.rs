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
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::TableReference;
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
use super::cancel::Guard;
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

/// Reads a COPY statement: its direction, table or query, columns and
/// format. `guard` is the statement's cancel and timeout, which a COPY FROM
/// keeps for the writes of its data.
pub async fn plan(
    engine: &Engine,
    ctx: &SessionContext,
    statement: &Statement,
    guard: Guard,
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
    if !matches!(
        (target, *to),
        (CopyTarget::Stdout, true) | (CopyTarget::Stdin, false)
    ) {
        return Err(error(
            FEATURE_NOT_SUPPORTED,
            "COPY reads from STDIN and writes to STDOUT only (psql's \\copy reads and writes files on the client)",
        ));
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
        .table_provider(TableReference::bare(table.name.as_str()))
        .await
        .map_err(|e| datafusion_error(&e))?;
    let state = CopyIn::new(table.name.clone(), provider.schema(), chosen, format, guard)?;
    Ok(Copy::In(Box::new(state)))
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
    if !out && table.insertable.is_empty() {
        return Err(error(
            FEATURE_NOT_SUPPORTED,
            format!(
                "COPY FROM needs a mapped table; {} is read-only through SQL (a raw table has no key templates)",
                table.name
            ),
        ));
    }
    if let Some(twice) = listed
        .iter()
        .enumerate()
        .find(|(i, c)| listed.get(..*i).is_some_and(|before| before.contains(c)))
    {
        return Err(error(
            "42701",
            format!("column \"{}\" specified more than once", twice.1),
        ));
    }
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
    let header = Arc::new(std::sync::Mutex::new(header));
    let header_left = header.clone();
    let rows = batches.flat_map(move |batch| {
        let lines = batch.and_then(|b| encode(&b, &format));
        let lines: Vec<PgWireResult<CopyData>> = match lines {
            Ok(lines) => lines
                .into_iter()
                .map(|mut line| {
                    // The header goes with the first row: pgwire counts
                    // one row per CopyData in the command tag.
                    if let Some(h) = header.lock().ok().and_then(|mut h| h.take()) {
                        line.insert_str(0, &h);
                    }
                    Ok(CopyData::new(Bytes::from(line)))
                })
                .collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(lines)
    });
    // An empty result still has its header (counted as a row in the tag:
    // pgwire counts CopyData messages).
    let rows = rows.chain(futures::stream::iter(std::iter::from_fn(move || {
        header_left
            .lock()
            .ok()
            .and_then(|mut h| h.take())
            .map(|h| Ok(CopyData::new(Bytes::from(h))))
    })));
    CopyResponse::new(0, columns, rows)
}

fn encode(batch: &RecordBatch, format: &CopyFormat) -> PgWireResult<Vec<String>> {
    let options = FormatOptions::default();
    let internal = |e: datafusion::arrow::error::ArrowError| {
        error(super::sqlstate::INTERNAL_ERROR, e.to_string())
    };
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    // `logical_nulls`: a NullArray's values are NULL though it has no mask.
    let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
    let mut lines = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let mut texts: Vec<Option<String>> = Vec::with_capacity(batch.num_columns());
        for ((column, f), nulls) in batch.columns().iter().zip(&formatters).zip(&nulls) {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                texts.push(None);
            } else if let Some(bytes) = binary_value(column, row) {
                texts.push(Some(bytea_text(bytes)));
            } else {
                texts.push(Some(f.value(row).to_string()));
            }
        }
        let values: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
        let mut line = String::new();
        format.write_row(&values, &mut line);
        lines.push(line);
    }
    Ok(lines)
}

/// A binary column's value, which COPY writes as PostgreSQL's bytea.
fn binary_value(column: &ArrayRef, row: usize) -> Option<&[u8]> {
    use datafusion::arrow::array::AsArray;
    match column.data_type() {
        DataType::Binary => Some(column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => Some(column.as_binary::<i64>().value(row)),
        DataType::BinaryView => Some(column.as_binary_view().value(row)),
        _ => None,
    }
}

/// bytea's hex form, `\x0102`.
fn bytea_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("\\x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// bytea from its hex form (`\x0102`); other text is its own bytes, as
/// PostgreSQL's escape form reads plain characters.
fn bytea_bytes(text: &str) -> Result<Vec<u8>, String> {
    let Some(hex) = text.strip_prefix("\\x") else {
        return Ok(text.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return Err(format!(
            "invalid hexadecimal data: odd number of digits in \"{text}\""
        ));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("invalid hexadecimal digit in \"{text}\""))
        })
        .collect()
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
    /// How far the record at the buffer's start has been scanned.
    scan: format::Scan,
    /// The statement's cancel and timeout, over every chunk's write.
    guard: Guard,
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
        guard: Guard,
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
            scan: format::Scan::default(),
            guard,
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
    /// `CHUNK_ROWS` at a time. After an error the data is dropped.
    pub async fn take(&mut self, ctx: &SessionContext, data: &[u8]) {
        if self.failed.is_some() || self.ended {
            return;
        }
        self.buffer.extend_from_slice(data);
        if let Err(e) = self.parse_and_write(ctx, false).await {
            self.failed = Some(e);
        }
    }

    /// The client's end of data: the rest is parsed and written; the
    /// number of rows written, or the error that stopped the copy.
    pub async fn finish(&mut self, ctx: &SessionContext) -> PgWireResult<u64> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.parse_and_write(ctx, true).await?;
        self.write(ctx).await?;
        Ok(self.written)
    }

    /// Parses what the buffer holds, writing each time `CHUNK_ROWS` rows
    /// wait, so that one large message is never held whole as rows.
    async fn parse_and_write(&mut self, ctx: &SessionContext, at_end: bool) -> PgWireResult<()> {
        loop {
            let more = self.parse_records(at_end)?;
            if self.rows.len() >= CHUNK_ROWS {
                self.write(ctx).await?;
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Parses records until `CHUNK_ROWS` rows wait; whether it stopped for
    /// that (more records may follow).
    fn parse_records(&mut self, at_end: bool) -> PgWireResult<bool> {
        let mut start = 0;
        let mut more = false;
        while !self.ended {
            if self.rows.len() >= CHUNK_ROWS {
                more = true;
                break;
            }
            let rest = &self.buffer[start..];
            let end = match self.format.record_end(rest, &mut self.scan) {
                Some(end) => end,
                None if at_end && !rest.is_empty() => {
                    self.scan = format::Scan::default();
                    rest.len()
                }
                None => break,
            };
            let record = std::str::from_utf8(&rest[..end]).map_err(|_| {
                error(
                    "22021",
                    self.context("invalid byte sequence for encoding \"UTF8\"", self.line + 1),
                )
            })?;
            let record = record.to_owned();
            start += end;
            self.line += 1;
            self.read_record(&record)?;
        }
        self.buffer.drain(..start);
        Ok(more)
    }

    /// One record: the end marker, the header, or a row.
    fn read_record(&mut self, record: &str) -> PgWireResult<()> {
        if record.trim_end_matches(['\n', '\r']) == "\\." {
            self.ended = true;
            return Ok(());
        }
        if self.format.header && self.line == 1 {
            return Ok(());
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
        let table_name = TableReference::bare(self.table.as_str());
        let insert = async {
            let table = ctx.table_provider(table_name.clone()).await?;
            let source = provider_as_source(Arc::new(MemTable::try_new(
                self.schema.clone(),
                vec![vec![batch]],
            )?));
            let input = LogicalPlanBuilder::scan("copy_rows", source, None)?.build()?;
            let plan = LogicalPlanBuilder::insert_into(
                input,
                table_name.clone(),
                provider_as_source(table),
                InsertOp::Append,
            )?
            .build()?;
            ctx.execute_logical_plan(plan).await?.collect().await
        };
        let done = self
            .guard
            .run(async { insert.await.map_err(|e| datafusion_error(&e)) })
            .await;
        match done {
            Ok(_) => {
                self.written += rows.len() as u64;
                Ok(())
            }
            Err(inner) => {
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
            let cast = self.convert(&text, field.data_type(), rows)?;
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

    /// Text to a column's type; a value that does not convert is NULL (and
    /// refused by the caller, which knows its line). bytea reads
    /// PostgreSQL's hex form.
    fn convert(
        &self,
        text: &StringArray,
        to: &DataType,
        rows: &[(u64, Vec<Option<String>>)],
    ) -> PgWireResult<ArrayRef> {
        if matches!(
            to,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        ) {
            let mut bytes = Vec::with_capacity(text.len());
            for (i, v) in text.iter().enumerate() {
                let line = rows.get(i).map_or(0, |r| r.0);
                bytes.push(
                    v.map(bytea_bytes).transpose().map_err(|why| {
                        error(INVALID_TEXT_REPRESENTATION, self.context(&why, line))
                    })?,
                );
            }
            let array = datafusion::arrow::array::BinaryArray::from_iter(bytes);
            return datafusion::arrow::compute::cast(&array, to)
                .map_err(|e| error(super::sqlstate::INTERNAL_ERROR, e.to_string()));
        }
        let safe = CastOptions {
            safe: true,
            ..Default::default()
        };
        cast_with_options(text, to, &safe)
            .map_err(|e| error(INVALID_TEXT_REPRESENTATION, e.to_string()))
    }
}
