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

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Statement};
use futures::{Stream, StreamExt};
use pgwire::api::results::CopyResponse;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;

use super::cancel::Guard;
use super::sqlstate::{
    FEATURE_NOT_SUPPORTED, UNDEFINED_COLUMN, datafusion_error, error, line_fault_code,
};
use crate::engine::{Engine, Session, TableInfo};
use crate::load::format::{CopyFormat, Scan};
use crate::load::{CHUNK_ROWS, LineFault, LoadError, LoadMode, Loader, bytea_text};

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
pub async fn plan(session: &Session, statement: &Statement, guard: Guard) -> PgWireResult<Copy> {
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
    let table = table_of(session.engine(), table_name).await?;
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
    let state = CopyIn::new(session, &table, chosen, format, guard).await?;
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

/// A COPY FROM in progress: the client's bytes cut into records, the
/// records into rows for the [`Loader`].
pub struct CopyIn {
    table: String,
    format: CopyFormat,
    loader: Loader,
    /// Bytes received and not yet a whole record.
    buffer: Vec<u8>,
    /// How far the record at the buffer's start has been scanned.
    scan: Scan,
    /// The statement's cancel and timeout, over every chunk's write.
    guard: Guard,
    /// Lines read so far.
    line: u64,
    failed: Option<PgWireError>,
    /// The end-of-data marker `\.` was read.
    ended: bool,
}

impl CopyIn {
    async fn new(
        session: &Session,
        table: &TableInfo,
        columns: Vec<String>,
        format: CopyFormat,
        guard: Guard,
    ) -> PgWireResult<Self> {
        let key = table.primary_key.clone();
        let loader = Loader::new(session, &table.name, &columns, key, LoadMode::Insert)
            .await
            .map_err(|e| load_error(&table.name, 0, e))?;
        Ok(Self {
            table: table.name.clone(),
            format,
            loader,
            buffer: Vec::new(),
            scan: Scan::default(),
            guard,
            line: 0,
            failed: None,
            ended: false,
        })
    }

    /// The number of columns the data carries.
    pub fn width(&self) -> usize {
        self.loader.width()
    }

    /// Rows written so far.
    pub fn written(&self) -> u64 {
        self.loader.written()
    }

    /// Takes a CopyData message: its whole records are parsed, and written
    /// `CHUNK_ROWS` at a time. After an error the data is dropped.
    pub async fn take(&mut self, session: &Session, data: &[u8]) {
        if self.failed.is_some() || self.ended {
            return;
        }
        self.buffer.extend_from_slice(data);
        if let Err(e) = self.parse_and_write(session, false).await {
            self.failed = Some(e);
        }
    }

    /// The client's end of data: the rest is parsed and written; the
    /// number of rows written, or the error that stopped the copy.
    pub async fn finish(&mut self, session: &Session) -> PgWireResult<u64> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.parse_and_write(session, true).await?;
        self.write(session).await?;
        Ok(self.loader.written())
    }

    /// Parses what the buffer holds, writing each time `CHUNK_ROWS` rows
    /// wait, so that one large message is never held whole as rows.
    async fn parse_and_write(&mut self, session: &Session, at_end: bool) -> PgWireResult<()> {
        loop {
            let more = self.parse_records(at_end)?;
            if self.loader.pending() >= CHUNK_ROWS {
                self.write(session).await?;
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
            if self.loader.pending() >= CHUNK_ROWS {
                more = true;
                break;
            }
            let rest = &self.buffer[start..];
            let end = match self.format.record_end(rest, &mut self.scan) {
                Some(end) => end,
                None if at_end && !rest.is_empty() => {
                    self.scan = Scan::default();
                    rest.len()
                }
                None => break,
            };
            let Ok(record) = std::str::from_utf8(&rest[..end]).map(str::to_owned) else {
                let e = LoadError::Line {
                    line: self.line + 1,
                    fault: LineFault::NotUtf8,
                    reason: "invalid byte sequence for encoding \"UTF8\"".into(),
                };
                return Err(load_error(&self.table, self.loader.written(), e));
            };
            start += end;
            self.line += 1;
            self.read_record(&record)
                .map_err(|e| load_error(&self.table, self.loader.written(), e))?;
        }
        self.buffer.drain(..start);
        Ok(more)
    }

    /// One record: the end marker, the header, or a row.
    fn read_record(&mut self, record: &str) -> Result<(), LoadError> {
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
            .map_err(|reason| LoadError::Line {
                line: self.line,
                fault: LineFault::BadRecord,
                reason,
            })?;
        self.loader.push(self.line, fields)
    }

    /// Writes the parsed rows, under the statement's cancel and timeout.
    async fn write(&mut self, session: &Session) -> PgWireResult<()> {
        let (table, written) = (self.table.clone(), self.loader.written());
        let loader = &mut self.loader;
        self.guard
            .run(async {
                loader
                    .write(session)
                    .await
                    .map_err(|e| load_error(&table, written, e))
            })
            .await
            .map(|_| ())
    }
}

/// A load's error as the wire says it: its SQLSTATE, where, and what was
/// written before.
fn load_error(table: &str, written: u64, e: LoadError) -> PgWireError {
    match e {
        LoadError::Line {
            line: 0,
            fault,
            reason,
        } => error(line_fault_code(fault), format!("{reason} (COPY {table})")),
        LoadError::Line {
            line,
            fault,
            reason,
        } => error(
            line_fault_code(fault),
            format!("{reason} (COPY {table}, line {line}; {written} rows were written before it)"),
        ),
        LoadError::Write {
            first,
            last,
            source,
        } => {
            let (code, message) = match datafusion_error(&source) {
                PgWireError::UserError(info) => (info.code.clone(), info.message.clone()),
                other => (
                    super::sqlstate::INTERNAL_ERROR.to_owned(),
                    other.to_string(),
                ),
            };
            error(
                &code,
                format!(
                    "{message} (COPY {table}, in lines {first} to {last}; {written} rows were written before them)"
                ),
            )
        }
        LoadError::Plan(e) => datafusion_error(&e),
    }
}
