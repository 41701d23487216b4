//! `COPY` apart from any protocol: what a statement asks for, and the data
//! of a `COPY ... FROM` on its way into a table. The wire server moves the
//! bytes in CopyData messages, the shell's `\copy` reads and writes files;
//! both read the statement and the data here, so a COPY answers alike.
//!
//! - Out: `COPY table [(cols)] TO` exports a mapped table's declared
//!   columns (the system columns are made by the keys and the store, and an
//!   import could not write them), `COPY (query) TO` any query; rows are
//!   encoded as the query yields them ([`encode_into`]), as text, CSV or
//!   PostgreSQL's binary format (`binary.rs`).
//! - In: bytes are cut into records as they arrive and written
//!   `CHUNK_ROWS` rows at a time through the same INSERT as SQL's (the
//!   [`Loader`]; binary rows are decoded straight into arrays of the
//!   columns' types), so memory stays flat whatever the size. A bad row (a
//!   value that does not convert, NULL in a NOT NULL column, a wrong field
//!   count) stops the copy with its line number; the rows of earlier chunks
//!   are written, and the error says how many.
//! - A COPY FROM inside a transaction block writes into the block, as an
//!   INSERT there does: its rows wait for COMMIT (and count against the
//!   block's limit of writes).

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::FormatOptions;
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, ObjectName, Statement};

use super::binary::{self, Reader};
use super::format::{CopyFormat, Scan};
use super::{CHUNK_ROWS, LineFault, LoadError, LoadMode, Loader};
use crate::engine::{EngineError, Session, TableInfo};

/// Why a COPY cannot run, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// A form of COPY tablesql does not run.
    #[error("{0}")]
    NotSupported(String),
    /// The table it names does not exist.
    #[error("relation \"{0}\" does not exist")]
    UnknownTable(String),
    /// A listed column the table does not have.
    #[error("column \"{column}\" of relation \"{table}\" does not exist")]
    UnknownColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A column listed twice.
    #[error("column \"{0}\" specified more than once")]
    DuplicateColumn(String),
    /// Finding the table or planning the query failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The data stopped the copy: `written` rows of `table` were written
    /// before it.
    #[error("{}", load_message(table, *written, source))]
    Load {
        /// The table.
        table: String,
        /// Rows written before the failure.
        written: u64,
        /// What failed.
        source: LoadError,
    },
}

impl CopyError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            CopyError::NotSupported(_) => code::FEATURE_NOT_SUPPORTED,
            CopyError::UnknownTable(_) => code::UNDEFINED_TABLE,
            CopyError::UnknownColumn { .. } => code::UNDEFINED_COLUMN,
            CopyError::DuplicateColumn(_) => code::DUPLICATE_COLUMN,
            CopyError::Engine(e) => e.sqlstate(),
            CopyError::Load { source, .. } => source.sqlstate(),
        }
    }
}

/// A load's failure as COPY says it: where, and what was written before.
fn load_message(table: &str, written: u64, e: &LoadError) -> String {
    match e {
        LoadError::Line {
            line: 0, reason, ..
        } => format!("{reason} (COPY {table})"),
        LoadError::Line { line, reason, .. } => {
            format!("{reason} (COPY {table}, line {line}; {written} rows were written before it)")
        }
        LoadError::Write {
            first,
            last,
            source,
        } => format!(
            "{source} (COPY {table}, in lines {first} to {last}; {written} rows were written before them)"
        ),
        LoadError::Plan(e) => e.to_string(),
    }
}

/// What a COPY statement asks for. One per statement: not worth a box.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Copy {
    /// The rows of this query, in this format.
    Out {
        /// The query (a table's columns, or the statement's own query).
        query: Statement,
        /// How the rows are written.
        format: CopyFormat,
    },
    /// Rows for a table, read from the client.
    In(Box<CopyIn>),
}

/// Reads a COPY statement: its direction, table or query, columns and
/// format. The data goes to and comes from the client (`STDOUT`, `STDIN`:
/// the server's copy protocol, or the shell's `\copy` and its files).
pub async fn plan(session: &Session, statement: &Statement) -> Result<Copy, CopyError> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Err(CopyError::NotSupported("not a COPY".into()));
    };
    let format = CopyFormat::of(options, legacy_options).map_err(CopyError::NotSupported)?;
    if !matches!(
        (target, *to),
        (CopyTarget::Stdout, true) | (CopyTarget::Stdin, false)
    ) {
        return Err(CopyError::NotSupported(
            "COPY reads from STDIN and writes to STDOUT only (psql's \\copy reads and writes files on the client)".into(),
        ));
    }
    let (table_name, columns) = match source {
        CopySource::Query(query) if *to => {
            return Ok(Copy::Out {
                query: Statement::Query(query.clone()),
                format,
            });
        }
        CopySource::Query(_) => {
            return Err(CopyError::NotSupported(
                "COPY (query) FROM is not valid".into(),
            ));
        }
        CopySource::Table {
            table_name,
            columns,
        } => (table_name, columns),
    };
    // In a transaction block its rows wait in the block's buffer, as an
    // INSERT's do (the session's writes go through the block's store),
    // and are written at COMMIT: ADBC's `adbc_ingest` sends CREATE TABLE
    // and COPY in one block.
    // Tables made or dropped elsewhere since.
    session.follow().await;
    let table = table_of(session, table_name).await?;
    let listed: Vec<String> = columns
        .iter()
        .map(crate::catalog::normalize_ident)
        .collect();
    let chosen = chosen_columns(&table, listed, *to)?;
    if *to {
        let list: Vec<String> = chosen.iter().map(|c| quote(c)).collect();
        let text = format!("SELECT {} FROM {}", list.join(", "), quote(&table.name));
        let query = session
            .parse(&text)
            .map_err(|e| CopyError::NotSupported(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| CopyError::NotSupported("COPY of an empty query".into()))?;
        return Ok(Copy::Out { query, format });
    }
    let state = CopyIn::new(session, &table, chosen, format).await?;
    Ok(Copy::In(Box::new(state)))
}

/// The table of `public` a COPY names.
async fn table_of(session: &Session, name: &ObjectName) -> Result<TableInfo, CopyError> {
    let name = crate::catalog::normalize_ident(
        name.0
            .last()
            .and_then(|p| p.as_ident())
            .ok_or_else(|| CopyError::NotSupported("COPY of an unnamed table".into()))?,
    );
    let tables = session.describe_tables().await?;
    tables
        .into_iter()
        .find(|t| t.schema == "public" && t.name == name)
        .ok_or(CopyError::UnknownTable(name))
}

/// The columns a COPY moves: those listed, else the declared ones (every
/// column of a table tablesql does not write, for export).
fn chosen_columns(
    table: &TableInfo,
    listed: Vec<String>,
    out: bool,
) -> Result<Vec<String>, CopyError> {
    if !out && table.insertable.is_empty() {
        return Err(CopyError::NotSupported(format!(
            "COPY FROM needs a mapped table; {} is read-only through SQL (a raw table has no key templates)",
            table.name
        )));
    }
    if let Some(twice) = listed
        .iter()
        .enumerate()
        .find(|(i, c)| listed.get(..*i).is_some_and(|before| before.contains(c)))
    {
        return Err(CopyError::DuplicateColumn(twice.1.clone()));
    }
    let all = if table.insertable.is_empty() && out {
        &table.columns
    } else {
        &table.insertable
    };
    if listed.is_empty() {
        return Ok(all.clone());
    }
    if let Some(c) = listed.iter().find(|c| !table.columns.contains(c)) {
        return Err(CopyError::UnknownColumn {
            table: table.name.clone(),
            column: c.clone(),
        });
    }
    Ok(listed)
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What a COPY TO writes before its rows: the header line (CSV with
/// `HEADER`) or binary's signature; `None` for nothing.
pub fn header(schema: &Schema, format: &CopyFormat) -> Option<Vec<u8>> {
    if format.binary {
        return Some(binary::HEADER.to_vec());
    }
    format.header.then(|| {
        let names: Vec<Option<&str>> = schema
            .fields()
            .iter()
            .map(|f| Some(f.name().as_str()))
            .collect();
        let mut line = Vec::new();
        format.write_row(&names, &mut line);
        line
    })
}

/// Whether a COPY TO of rows of `schema` can be written in `format`:
/// binary has no form for some types (lists, intervals, structs).
pub fn check_out(schema: &Schema, format: &CopyFormat) -> Result<(), CopyError> {
    if !format.binary {
        return Ok(());
    }
    for f in schema.fields() {
        binary::check_type(f.name(), f.data_type()).map_err(CopyError::NotSupported)?;
    }
    Ok(())
}

/// What a COPY TO writes after its rows: binary's trailer, else nothing.
pub fn trailer(format: &CopyFormat) -> &'static [u8] {
    if format.binary { &binary::TRAILER } else { &[] }
}

/// How values are written as text where PostgreSQL writes them (COPY, the
/// shell's and `tablesql query`'s rows): Arrow's forms, but for timestamps,
/// which PostgreSQL writes `2011-04-20 15:40:00+00` where Arrow writes
/// `2011-04-20T15:40:00Z` (a CSV reader that expects PostgreSQL's form,
/// connectorx's, fails on Arrow's). Microsecond timestamps, every stored
/// one, are written by `pg_text` (its formatter takes these options for
/// the rest); the format strings here cover other units, whose fractions
/// of a second come in 3, 6 or 9 digits where PostgreSQL drops trailing
/// zeros.
pub fn text_options<'a>() -> FormatOptions<'a> {
    FormatOptions::default()
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:::z"))
}

/// A batch's rows as COPY writes them (lines, each with its line end, or
/// binary rows), appended to `out`; `ends` gets where each row ends in it.
/// One buffer for the batch and one for a value's text, both reused: no
/// allocation per value or row (a wire COPY sends each row as a slice of
/// the batch's buffer).
pub fn encode_into(
    batch: &RecordBatch,
    format: &CopyFormat,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ArrowError> {
    use std::fmt::Write as _;
    if format.binary {
        return binary::encode_into(batch, out, ends);
    }
    let options = text_options();
    let formatters = batch
        .columns()
        .iter()
        .map(|c| super::pg_text::formatter(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    // `logical_nulls`: a NullArray's values are NULL though it has no mask.
    let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
    let mut text = String::new();
    for row in 0..batch.num_rows() {
        let columns = batch.columns().iter().zip(&formatters).zip(&nulls);
        for (i, ((column, f), nulls)) in columns.enumerate() {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                format.write_field(i, None, out);
                continue;
            }
            text.clear();
            match binary_value(column, row) {
                Some(bytes) => super::push_bytea(bytes, &mut text),
                None => write!(text, "{}", f.value(row))
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?,
            }
            format.write_field(i, Some(&text), out);
        }
        out.push(b'\n');
        ends.push(out.len());
    }
    Ok(())
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
#[derive(Debug)]
pub struct CopyIn {
    table: String,
    format: CopyFormat,
    loader: Loader,
    /// Bytes received and not yet a whole record.
    buffer: Vec<u8>,
    /// How far the record at the buffer's start has been scanned.
    scan: Scan,
    /// Lines read so far.
    line: u64,
    /// The end-of-data marker `\.` was read.
    ended: bool,
    /// Binary rows' reader, in place of the text records' scan.
    binary: Option<Reader>,
}

impl CopyIn {
    async fn new(
        session: &Session,
        table: &TableInfo,
        columns: Vec<String>,
        format: CopyFormat,
    ) -> Result<Self, CopyError> {
        let key = table.primary_key.clone();
        let loader = Loader::new(session, &table.name, &columns, key, LoadMode::Insert)
            .await
            .map_err(|source| CopyError::Load {
                table: table.name.clone(),
                written: 0,
                source,
            })?;
        let binary = if format.binary {
            Some(Reader::new(loader.loaded_types()).map_err(CopyError::NotSupported)?)
        } else {
            None
        };
        Ok(Self {
            table: table.name.clone(),
            format,
            loader,
            buffer: Vec::new(),
            scan: Scan::default(),
            line: 0,
            ended: false,
            binary,
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

    /// Whether the data comes in binary COPY's format.
    pub fn binary(&self) -> bool {
        self.binary.is_some()
    }

    /// Takes a piece of the data: its whole records are parsed, and
    /// written `CHUNK_ROWS` rows at a time. After an error the caller
    /// drops the rest of the data (as PostgreSQL reads and drops it).
    pub async fn take(&mut self, session: &Session, data: &[u8]) -> Result<(), CopyError> {
        // Binary data after its trailer is an error, which the reader says.
        if self.ended {
            return Ok(());
        }
        self.buffer.extend_from_slice(data);
        self.parse_and_write(session, false).await
    }

    /// The end of the data: the rest is parsed and written; the number of
    /// rows written.
    pub async fn finish(&mut self, session: &Session) -> Result<u64, CopyError> {
        self.parse_and_write(session, true).await?;
        self.write(session).await?;
        Ok(self.loader.written())
    }

    /// Parses what the buffer holds, writing each time `CHUNK_ROWS` rows
    /// wait, so that one large piece is never held whole as rows.
    async fn parse_and_write(&mut self, session: &Session, at_end: bool) -> Result<(), CopyError> {
        loop {
            let more = match self.binary.is_some() {
                true => self.read_binary(at_end),
                false => self.parse_records(at_end),
            };
            let more = more.map_err(|e| self.failed(e))?;
            if self.pending() >= CHUNK_ROWS {
                self.write(session).await?;
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Rows parsed and not yet written.
    fn pending(&self) -> usize {
        self.loader.pending() + self.binary.as_ref().map_or(0, Reader::held)
    }

    /// Reads binary rows until `CHUNK_ROWS` wait; whether it stopped for
    /// that (more rows may follow).
    fn read_binary(&mut self, at_end: bool) -> Result<bool, LoadError> {
        let Some(reader) = self.binary.as_mut() else {
            return Ok(false);
        };
        let used = reader.read(&self.buffer, CHUNK_ROWS)?;
        self.buffer.drain(..used);
        if reader.held() >= CHUNK_ROWS {
            return Ok(true);
        }
        if at_end {
            reader.finish(&self.buffer)?;
        }
        Ok(false)
    }

    /// Parses records until `CHUNK_ROWS` rows wait; whether it stopped for
    /// that (more records may follow).
    fn parse_records(&mut self, at_end: bool) -> Result<bool, LoadError> {
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
                return Err(LoadError::Line {
                    line: self.line + 1,
                    fault: LineFault::NotUtf8,
                    reason: "invalid byte sequence for encoding \"UTF8\"".into(),
                });
            };
            start += end;
            self.line += 1;
            self.read_record(&record)?;
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

    /// Writes the parsed rows in the session.
    async fn write(&mut self, session: &Session) -> Result<(), CopyError> {
        // What was written before these rows: the error names their lines.
        let before = self.loader.written();
        let written = match self.binary.as_mut() {
            Some(reader) if reader.held() > 0 => match reader.take() {
                Ok((lines, arrays)) => self.loader.write_arrays(session, &lines, arrays).await,
                Err(e) => Err(LoadError::Plan(e.into())),
            },
            Some(_) => Ok(0),
            None => self.loader.write(session).await,
        };
        match written {
            Ok(_) => Ok(()),
            Err(source) => Err(CopyError::Load {
                table: self.table.clone(),
                written: before,
                source,
            }),
        }
    }

    fn failed(&self, source: LoadError) -> CopyError {
        CopyError::Load {
            table: self.table.clone(),
            written: self.loader.written(),
            source,
        }
    }
}
