//! Loading rows of text into a mapped table, chunk by chunk: what the wire
//! server's `COPY ... FROM STDIN` and `tablesql load` share. Rows arrive as
//! fields of text with their line numbers; every `CHUNK_ROWS` they are
//! converted to the table's types (a bad value is refused with its line)
//! and written as one INSERT through the engine's own write path
//! (`DmlExec`: a row and its index rows in one entity group transaction,
//! a partition's rows packed together) — or as an upsert, when a load run
//! again must not fail on the rows already written.
//!
//! - `format`: COPY's two text formats, `text` and `csv`, as PostgreSQL writes
//!   and reads them; pure.
//! - `pg_text`: timestamps as PostgreSQL writes them as text, fast.
//! - `binary`: COPY's binary format, rows in and out as arrays of the
//!   columns' types, with no text between.
//! - `copy`: what a COPY statement asks for and its data in and out, for the
//!   server and the shell alike.

pub mod binary;
pub mod copy;
pub mod format;
pub mod pg_text;

use std::sync::Arc;

use crate::engine::Session;
use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, RecordBatch, StringArray, new_null_array,
};
use datafusion::arrow::compute::{CastOptions, cast, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::Column;
use datafusion::common::TableReference;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder};
use datafusion::prelude::{SessionContext, col};
use datafusion::sql::sqlparser::ast::{
    Assignment, AssignmentTarget, ConflictTarget, DoUpdate, Expr as SqlExpr, Ident, ObjectName,
    OnConflict, OnConflictAction,
};

/// Rows converted and written per INSERT.
pub const CHUNK_ROWS: usize = 5_000;

/// What a load does with a row whose primary key exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadMode {
    /// Refuses it (23505): a plain INSERT.
    #[default]
    Insert,
    /// Replaces its columns with the loaded ones (`ON CONFLICT DO UPDATE`
    /// of every column).
    Upsert,
    /// Leaves it (`ON CONFLICT DO NOTHING`).
    Skip,
}

/// Why a load stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A line that cannot be a row of the table.
    #[error("{reason} (line {line})")]
    Line {
        /// The line's number.
        line: u64,
        /// What kind of fault it is (the wire server names it by SQLSTATE).
        fault: LineFault,
        /// What is wrong with it.
        reason: String,
    },
    /// The write of the rows of lines `first` to `last` failed.
    #[error("{source} (in the rows of lines {first} to {last})")]
    Write {
        /// The first line of the rows.
        first: u64,
        /// The last line of the rows.
        last: u64,
        /// The write's failure.
        source: Box<DataFusionError>,
    },
    /// Finding the table, building a batch of its rows or planning their write failed.
    #[error(transparent)]
    Plan(#[from] DataFusionError),
}

impl LoadError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        match self {
            LoadError::Line { fault, .. } => fault.sqlstate(),
            LoadError::Write { source, .. } => crate::engine::datafusion_sqlstate(source),
            LoadError::Plan(d) => crate::engine::datafusion_sqlstate(d),
        }
    }

    /// The line it names, for a loader that sets bad lines aside.
    pub fn line(&self) -> Option<u64> {
        match self {
            LoadError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// What is wrong with a line, as a kind: each front end names it in its
/// own terms (the wire server by its SQLSTATE, as PostgreSQL's COPY does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineFault {
    /// The data names a column the table does not have.
    UnknownColumn,
    /// A NOT NULL column (or a key) gets no value.
    MissingValue,
    /// A value that is not text of its column's type.
    BadValue,
    /// A binary value that is not its column type's send form.
    BadBinary,
    /// Too many or too few fields, or a record that cannot be split.
    BadRecord,
    /// Bytes that are not UTF-8.
    NotUtf8,
}

impl LineFault {
    /// The SQLSTATE PostgreSQL's COPY reports for the fault.
    pub fn sqlstate(self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            LineFault::UnknownColumn => code::UNDEFINED_COLUMN,
            LineFault::MissingValue => code::NOT_NULL_VIOLATION,
            LineFault::BadValue => code::INVALID_TEXT_REPRESENTATION,
            LineFault::BadBinary => code::INVALID_BINARY_REPRESENTATION,
            LineFault::BadRecord => code::BAD_COPY_FILE_FORMAT,
            LineFault::NotUtf8 => code::CHARACTER_NOT_IN_REPERTOIRE,
        }
    }
}

/// Rows on their way into one table.
#[derive(Debug)]
pub struct Loader {
    table: String,
    /// The table's schema, every column nullable: the insert's input.
    schema: SchemaRef,
    /// Whether each column of `schema` is NOT NULL (key columns, and those
    /// the mapping declares so).
    not_null: Vec<bool>,
    /// The positions in `schema` of the loaded columns, in the data's order.
    columns: Vec<usize>,
    /// The table, as the INSERT's target.
    provider: Arc<dyn TableProvider>,
    /// The primary key, for upserts.
    key: Vec<String>,
    mode: LoadMode,
    rows: Vec<(u64, Vec<Option<String>>)>,
    written: u64,
}

impl Loader {
    /// A loader of `columns` (in the data's order) into `table`, a mapped
    /// table of the session's `public` schema with primary key `key`; its
    /// chunks are written in that session (its transaction block, its
    /// statistics).
    pub async fn new(
        session: &Session,
        table: &str,
        columns: &[String],
        key: Vec<String>,
        mode: LoadMode,
    ) -> Result<Self, LoadError> {
        let ctx = session.context();
        let provider = ctx.table_provider(TableReference::bare(table)).await?;
        let declared = provider.schema();
        let def = crate::engine::bulk::mapping(provider.as_ref());
        let not_null: Vec<bool> = declared
            .fields()
            .iter()
            .map(|f| {
                !f.is_nullable()
                    || def
                        .as_ref()
                        .is_some_and(|d| d.column(f.name()).is_some_and(|c| c.not_null))
            })
            .collect();
        let positions = columns
            .iter()
            .map(|c| {
                declared.index_of(c).map_err(|_| LoadError::Line {
                    line: 0,
                    fault: LineFault::UnknownColumn,
                    reason: format!("column \"{c}\" of relation \"{table}\" does not exist"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A NOT NULL column the data does not carry (and that has no
        // DEFAULT to fill it) would fail every row.
        let loaded: Vec<&str> = columns.iter().map(String::as_str).collect();
        let missing = def.iter().find_map(|d| {
            d.columns.iter().find(|c| {
                (c.not_null || d.is_key_column(&c.name))
                    && c.default.is_none()
                    && !loaded.contains(&c.name.as_str())
            })
        });
        if let Some(c) = missing {
            return Err(LoadError::Line {
                line: 0,
                fault: LineFault::MissingValue,
                reason: format!(
                    "column \"{}\" of relation \"{table}\" is NOT NULL (or a key) and the data does not carry it",
                    c.name
                ),
            });
        }
        let nullable: Vec<Field> = declared
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Ok(Self {
            table: table.to_owned(),
            schema: Arc::new(Schema::new(nullable)),
            not_null,
            columns: positions,
            provider,
            key,
            mode,
            rows: Vec::new(),
            written: 0,
        })
    }

    /// The number of fields a row carries.
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// The loaded columns' names and types, in the data's order.
    pub fn loaded_types(&self) -> Vec<(String, DataType)> {
        self.columns
            .iter()
            .map(|&i| {
                let f = self.schema.field(i);
                (f.name().clone(), f.data_type().clone())
            })
            .collect()
    }

    /// Rows written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Rows waiting to be written.
    pub fn pending(&self) -> usize {
        self.rows.len()
    }

    /// Takes one row, checked for its number of fields.
    pub fn push(&mut self, line: u64, fields: Vec<Option<String>>) -> Result<(), LoadError> {
        if fields.len() != self.columns.len() {
            let reason = if fields.len() > self.columns.len() {
                "extra data after last expected column"
            } else {
                "missing data for a column"
            };
            return Err(LoadError::Line {
                line,
                fault: LineFault::BadRecord,
                reason: reason.into(),
            });
        }
        self.rows.push((line, fields));
        Ok(())
    }

    /// Drops the waiting row of `line` (a loader that sets bad rows aside).
    pub fn drop_line(&mut self, line: u64) {
        self.rows.retain(|(l, _)| *l != line);
    }

    /// Converts the waiting rows and writes them as one statement; the
    /// rows written (a skipped row is not). A bad value writes nothing of
    /// the chunk.
    pub async fn write(&mut self, session: &Session) -> Result<u64, LoadError> {
        if self.rows.is_empty() {
            return Ok(0);
        }
        let lines: Vec<u64> = self.rows.iter().map(|r| r.0).collect();
        let loaded = self.converted()?;
        let n = self.write_arrays(session, &lines, loaded).await?;
        self.rows.clear();
        Ok(n)
    }

    /// Writes rows already of the loaded columns' types (binary COPY's):
    /// `loaded` holds an array per loaded column, in the data's order, and
    /// `lines` each row's line. A NULL in a NOT NULL column writes nothing
    /// of them.
    pub async fn write_arrays(
        &mut self,
        session: &Session,
        lines: &[u64],
        loaded: Vec<ArrayRef>,
    ) -> Result<u64, LoadError> {
        let ctx = session.context();
        let batch = self.batch(lines, loaded)?;
        let (first, last) = (
            lines.first().copied().unwrap_or(0),
            lines.last().copied().unwrap_or(0),
        );
        let plan = self.plan(ctx, batch).await?;
        let counts = match async { ctx.execute_logical_plan(plan).await?.collect().await }.await {
            Ok(counts) => counts,
            Err(e) => {
                // Partitions that committed before the failure are written.
                if let Some(rows) = crate::engine::bulk::written_before_failure(&e) {
                    self.written += rows;
                }
                return Err(LoadError::Write {
                    first,
                    last,
                    source: Box::new(e),
                });
            }
        };
        // The statement's one row: how many it wrote.
        let n = crate::engine::bulk::rows_counted(&counts)?;
        self.written += n;
        Ok(n)
    }

    /// The INSERT (or upsert) of a batch of the table's rows.
    async fn plan(
        &self,
        ctx: &SessionContext,
        batch: RecordBatch,
    ) -> Result<datafusion::logical_expr::LogicalPlan, LoadError> {
        let name = TableReference::bare(self.table.as_str());
        let table = self.provider.clone();
        let rows = MemTable::try_new(self.schema.clone(), vec![vec![batch]])?;
        // Columns the data does not carry get their DEFAULT, as in COPY.
        let filled: Vec<Expr> = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let column = col(Column::from_name(f.name()));
                match self.provider.get_column_default(f.name()) {
                    Some(default) if !self.columns.contains(&i) => {
                        datafusion::logical_expr::cast(default.clone(), f.data_type().clone())
                            .alias(f.name())
                    }
                    _ => column,
                }
            })
            .collect();
        let mut input =
            LogicalPlanBuilder::scan("loaded_rows", provider_as_source(Arc::new(rows)), None)?;
        // Only where a default fills a column: the usual load plans no
        // projection.
        if filled.iter().any(|e| !matches!(e, Expr::Column(_))) {
            input = input.project(filled)?;
        }
        let input = input.build()?;
        let insert = LogicalPlanBuilder::insert_into(
            input,
            name,
            provider_as_source(table),
            InsertOp::Append,
        )?
        .build()?;
        let values: Vec<String> = self
            .columns
            .iter()
            .map(|&i| self.schema.field(i).name().clone())
            .filter(|c| !self.key.contains(c))
            .collect();
        let action = match self.mode {
            LoadMode::Insert => return Ok(insert),
            // Only key columns: nothing to overwrite.
            LoadMode::Skip => OnConflictAction::DoNothing,
            LoadMode::Upsert if values.is_empty() => OnConflictAction::DoNothing,
            LoadMode::Upsert => OnConflictAction::DoUpdate(DoUpdate {
                assignments: values
                    .into_iter()
                    .map(|c| Assignment {
                        target: AssignmentTarget::ColumnName(ObjectName::from(vec![
                            Ident::with_quote('"', c.clone()),
                        ])),
                        value: SqlExpr::CompoundIdentifier(vec![
                            Ident::new(crate::engine::bulk::EXCLUDED),
                            Ident::with_quote('"', c),
                        ]),
                    })
                    .collect(),
                selection: None,
            }),
        };
        let on_conflict = OnConflict {
            conflict_target: Some(ConflictTarget::Columns(
                self.key
                    .iter()
                    .map(|k| Ident::with_quote('"', k.clone()))
                    .collect(),
            )),
            action,
        };
        Ok(crate::engine::bulk::upsert_plan(
            &ctx.state(),
            insert,
            on_conflict,
        )?)
    }

    /// The waiting rows' loaded columns converted from text, in the data's
    /// order. A value that does not convert, or a NULL in a NOT NULL
    /// column, is refused with its line.
    fn converted(&self) -> Result<Vec<ArrayRef>, LoadError> {
        let rows = &self.rows;
        let line = |i: usize| rows.get(i).map_or(0, |r| r.0);
        let mut loaded = Vec::with_capacity(self.columns.len());
        for (k, &at) in self.columns.iter().enumerate() {
            let field = self.schema.field(at);
            let text: StringArray = rows
                .iter()
                .map(|(_, r)| r.get(k).cloned().flatten())
                .collect();
            // Before the conversion, as before it PostgreSQL refuses a
            // NULL in a NOT NULL column at its line.
            if self.not_null.get(at).copied().unwrap_or(false)
                && let Some(i) = (0..text.len()).find(|i| text.is_null(*i))
            {
                return Err(LoadError::Line {
                    line: line(i),
                    fault: LineFault::MissingValue,
                    reason: format!(
                        "null value in column \"{}\" violates not-null constraint",
                        field.name()
                    ),
                });
            }
            let converted = convert(&text, field.data_type(), &line)?;
            if let Some(i) = (0..text.len()).find(|i| text.is_valid(*i) && converted.is_null(*i)) {
                return Err(LoadError::Line {
                    line: line(i),
                    fault: LineFault::BadValue,
                    reason: format!(
                        "invalid input for column \"{}\" of type {}: \"{}\"",
                        field.name(),
                        field.data_type(),
                        text.value(i)
                    ),
                });
            }
            loaded.push(converted);
        }
        Ok(loaded)
    }

    /// Loaded columns (in the data's order) as a batch of the table's
    /// schema, the columns not loaded NULL; a NULL in a NOT NULL column is
    /// refused with its line.
    fn batch(&self, lines: &[u64], loaded: Vec<ArrayRef>) -> Result<RecordBatch, LoadError> {
        let mut columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), lines.len()))
            .collect();
        for (array, &at) in loaded.into_iter().zip(&self.columns) {
            if self.not_null.get(at).copied().unwrap_or(false)
                && array.null_count() > 0
                && let Some(i) = (0..array.len()).find(|i| array.is_null(*i))
            {
                return Err(LoadError::Line {
                    line: lines.get(i).copied().unwrap_or(0),
                    fault: LineFault::MissingValue,
                    reason: format!(
                        "null value in column \"{}\" violates not-null constraint",
                        self.schema.field(at).name()
                    ),
                });
            }
            if let Some(slot) = columns.get_mut(at) {
                *slot = array;
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns).map_err(DataFusionError::from)?)
    }
}

/// Text to a column's type; a value that does not convert is NULL (and
/// refused by the caller, which knows its line). bytea reads PostgreSQL's
/// hex form.
fn convert(
    text: &StringArray,
    to: &DataType,
    line: &dyn Fn(usize) -> u64,
) -> Result<ArrayRef, LoadError> {
    if matches!(
        to,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    ) {
        let mut bytes = Vec::with_capacity(text.len());
        for (i, v) in text.iter().enumerate() {
            bytes.push(
                v.map(bytea_bytes)
                    .transpose()
                    .map_err(|reason| LoadError::Line {
                        line: line(i),
                        fault: LineFault::BadValue,
                        reason,
                    })?,
            );
        }
        return Ok(cast(&BinaryArray::from_iter(bytes), to).map_err(DataFusionError::from)?);
    }
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    Ok(cast_with_options(text, to, &safe).map_err(DataFusionError::from)?)
}

/// bytea's hex form, `\x0102`.
pub fn bytea_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    push_bytea(bytes, &mut out);
    out
}

/// Appends bytea's hex form of `bytes` to `out`.
pub fn push_bytea(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\x");
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

/// bytea from its hex form (`\x0102`); other text is its own bytes, as
/// PostgreSQL's escape form reads plain characters.
pub fn bytea_bytes(text: &str) -> Result<Vec<u8>, String> {
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
                .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("invalid hexadecimal digit in \"{text}\""))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytea_hex_round_trips() {
        let bytes = [0u8, 255, 92, 10];
        assert_eq!(bytea_text(&bytes), "\\x00ff5c0a");
        assert_eq!(bytea_bytes("\\x00ff5c0a").as_deref(), Ok(&bytes[..]));
        assert_eq!(bytea_bytes("ab").as_deref(), Ok(&b"ab"[..]));
        assert!(bytea_bytes("\\x0").is_err());
        assert!(bytea_bytes("\\xzz").is_err());
        assert!(bytea_bytes("\\x+f").is_err());
    }
}
