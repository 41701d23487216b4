//! How results are printed: aligned tables sized to the terminal, psql's
//! expanded records (`\x`), CSV, TSV, JSON and JSON lines for scripts. Rows are printed as they
//! arrive, a page or a chunk at a time, so a result is never held whole; on a
//! terminal the pager waits for a key between pages, and stopping there drops
//! the statement's stream (its scans stop).

use std::io::Write;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{LineDelimited, WriterBuilder};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use super::term::{self, More};
use crate::load::format::CopyFormat;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned tables for people.
    #[default]
    Table,
    /// CSV with a header row, written as PostgreSQL's `COPY ... CSV`
    /// (and psql's `--csv`): NULL is an unquoted empty field, the empty
    /// string `""`, so that `tablesql load` reads both back.
    Csv,
    /// PostgreSQL's COPY text format with a header row: tab-separated,
    /// NULL as `\N`, tabs, newlines and backslashes escaped.
    Tsv,
    /// A JSON array of objects, one per line, written by arrow's JSON
    /// writer: numbers and booleans typed, lists and structs as JSON
    /// arrays and objects, NULL as null.
    Json,
    /// JSON lines: one object per row, as `Json`'s.
    Ndjson,
}

/// A failure while printing rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The statement failed while its rows streamed.
    #[error(transparent)]
    Query(#[from] DataFusionError),
    /// A value could not be formatted.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Io(#[from] std::io::Error),
}

/// Where and how rows are printed.
pub struct Printer<'a> {
    /// The output.
    pub out: &'a mut dyn Write,
    /// The format.
    pub format: Format,
    /// One record per block (`\x`) instead of a row per line.
    pub expanded: bool,
    /// Columns to fit tables into; `None` lets them grow.
    pub width: Option<u16>,
    /// Rows per page on a terminal, with a key awaited between pages; `None`
    /// prints without stopping, a table per `chunk` rows.
    pub page: Option<usize>,
    /// Rows per table when not paging.
    pub chunk: usize,
}

/// What was printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Printed {
    /// Rows printed.
    pub rows: usize,
    /// Whether the reader stopped the result at the pager.
    pub stopped: bool,
}

/// Formats every value of a batch column as text; NULL as `null_text`.
fn column_text(
    batch: &RecordBatch,
    column: usize,
    null_text: &str,
) -> Result<Vec<String>, ArrowError> {
    let options = crate::load::copy::text_options().with_null(null_text);
    let formatter = crate::load::pg_text::formatter(batch.column(column).as_ref(), &options)?;
    Ok((0..batch.num_rows())
        .map(|row| formatter.value(row).to_string())
        .collect())
}

/// The rows of a batch as text, NULL as `null_text`.
pub fn rows_text(batch: &RecordBatch, null_text: &str) -> Result<Vec<Vec<String>>, ArrowError> {
    let columns = (0..batch.num_columns())
        .map(|c| column_text(batch, c, null_text))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|r| columns.iter().map(|c| c[r].clone()).collect())
        .collect())
}

/// An aligned table of `rows`, fitted into `width` columns if given.
pub fn table(header: &[String], rows: &[Vec<String>], width: Option<u16>) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    if let Some(w) = width {
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(w);
    }
    for row in rows {
        t.add_row(row);
    }
    t.to_string()
}

/// psql's expanded form: one block per record, numbered from `first + 1`.
pub fn expanded(header: &[String], rows: &[Vec<String>], first: usize) -> String {
    let label = header.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let title = format!("-[ RECORD {} ]", first + i + 1);
        let rule = "-".repeat((label + 3).saturating_sub(title.chars().count()).max(1));
        out.push_str(&format!("{title}{rule}\n"));
        for (h, v) in header.iter().zip(row) {
            out.push_str(&format!("{h:<label$} | {v}\n"));
        }
    }
    out
}

impl Printer<'_> {
    /// Prints a statement's rows as they arrive.
    pub async fn print(
        &mut self,
        mut stream: SendableRecordBatchStream,
    ) -> Result<Printed, RenderError> {
        let schema = stream.schema();
        let header: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        match self.format {
            Format::Table => self.tables(&header, &mut stream).await,
            Format::Csv | Format::Tsv => {
                let copy = if self.format == Format::Csv {
                    CopyFormat::csv()
                } else {
                    CopyFormat::text()
                };
                // The header is written as a row of the format, so a name
                // with a comma or tab reads back as one field.
                let names: Vec<Option<&str>> = header.iter().map(|h| Some(h.as_str())).collect();
                let mut line = Vec::new();
                copy.write_row(&names, &mut line);
                self.out.write_all(&line)?;
                let mut rows = 0;
                let (mut text, mut ends) = (Vec::new(), Vec::new());
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    // A batch at a time: written as it arrives, never held.
                    text.clear();
                    crate::load::copy::encode_into(&batch, &copy, &mut text, &mut ends)?;
                    self.out.write_all(&text)?;
                    rows += batch.num_rows();
                }
                self.out.flush()?;
                Ok(Printed {
                    rows,
                    stopped: false,
                })
            }
            Format::Json | Format::Ndjson => {
                let array = self.format == Format::Json;
                if array {
                    writeln!(self.out, "[")?;
                }
                let mut rows = 0;
                let mut buffer = Vec::new();
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    buffer.clear();
                    {
                        let mut w = WriterBuilder::new()
                            .with_explicit_nulls(true)
                            .build::<_, LineDelimited>(&mut buffer);
                        w.write(&batch)?;
                        w.finish()?;
                    }
                    // One object per line (JSON escapes a newline inside a
                    // string), framed here as an array when asked.
                    for object in buffer.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                        if array {
                            let sep: &[u8] = if rows == 0 { b"  " } else { b",\n  " };
                            self.out.write_all(sep)?;
                            self.out.write_all(object)?;
                        } else {
                            self.out.write_all(object)?;
                            self.out.write_all(b"\n")?;
                        }
                        rows += 1;
                    }
                    self.out.flush()?;
                }
                if array {
                    writeln!(self.out, "{}]", if rows == 0 { "" } else { "\n" })?;
                }
                Ok(Printed {
                    rows,
                    stopped: false,
                })
            }
        }
    }

    async fn tables(
        &mut self,
        header: &[String],
        stream: &mut SendableRecordBatchStream,
    ) -> Result<Printed, RenderError> {
        let per_page = self.page.unwrap_or(self.chunk).max(1);
        let mut buf: Vec<Vec<String>> = Vec::new();
        let mut printed = 0;
        while let Some(batch) = stream.next().await {
            for row in rows_text(&batch?, "NULL")? {
                if buf.len() == per_page {
                    self.emit(header, &buf, printed)?;
                    printed += buf.len();
                    buf.clear();
                    // Another row waits: ask before the next page.
                    if self.page.is_some() && self.ask().await? == More::Quit {
                        return Ok(Printed {
                            rows: printed,
                            stopped: true,
                        });
                    }
                }
                buf.push(row);
            }
        }
        if !buf.is_empty() || printed == 0 {
            self.emit(header, &buf, printed)?;
            printed += buf.len();
        }
        Ok(Printed {
            rows: printed,
            stopped: false,
        })
    }

    fn emit(
        &mut self,
        header: &[String],
        rows: &[Vec<String>],
        first: usize,
    ) -> std::io::Result<()> {
        if self.expanded {
            if rows.is_empty() {
                writeln!(self.out, "(no records)")?;
            }
            write!(self.out, "{}", expanded(header, rows, first))?;
        } else {
            writeln!(self.out, "{}", table(header, rows, self.width))?;
        }
        self.out.flush()
    }

    async fn ask(&mut self) -> std::io::Result<More> {
        self.out.flush()?;
        let answer = tokio::task::spawn_blocking(|| {
            term::more("-- more: Enter or Space for the next page, q to stop --")
        })
        .await
        .map_err(std::io::Error::other)??;
        write!(self.out, "\r\x1b[K")?;
        self.out.flush()?;
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expanded_records_are_numbered_blocks() {
        let header = vec!["bib".to_owned(), "name".to_owned()];
        let rows = vec![vec!["1".into(), "Ana".into()], vec!["2".into(), "".into()]];
        assert_eq!(
            expanded(&header, &rows, 10),
            "-[ RECORD 11 ]-\nbib  | 1\nname | Ana\n-[ RECORD 12 ]-\nbib  | 2\nname | \n"
        );
    }

    #[test]
    fn tables_fit_the_width() {
        let header = vec!["note".to_owned()];
        let rows = vec![vec!["word ".repeat(40)]];
        let t = table(&header, &rows, Some(40));
        assert!(t.lines().all(|l| l.chars().count() <= 40), "{t}");
    }
}
