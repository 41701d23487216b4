//! How the command line prints tables and statements' rows: a table for
//! people, CSV, TSV, JSON and JSON lines for programs.

use std::io::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use futures::StreamExt;
use tablesql::datafusion::execution::SendableRecordBatchStream;
use tablesql::shell::render::Printer;
use tablesql::storage::TableName;

/// An output format of `scan`, `query` and `shell`.
pub use tablesql::shell::render::Format;

/// Prints tables with their entity counts.
pub fn print_tables(rows: &[(TableName, u64)]) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["table", "entities"]);
    for (name, count) in rows {
        t.add_row([name.to_string(), count.to_string()]);
    }
    println!("{t}");
}

/// Prints the rows of a statement as they arrive (a table waits for all of
/// them, to size its columns).
pub async fn print_stream(stream: SendableRecordBatchStream, format: Format) -> anyhow::Result<()> {
    let empty = stream.schema().fields().is_empty();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut printer = Printer {
        out: &mut out,
        format,
        expanded: false,
        width: None,
        page: None,
        chunk: usize::MAX,
    };
    if empty && matches!(format, Format::Table) {
        let mut stream = stream;
        while let Some(batch) = stream.next().await {
            batch?;
        }
        writeln!(out, "OK")?;
        return Ok(());
    }
    let printed = printer.print(stream).await?;
    if matches!(format, Format::Table) {
        let s = if printed.rows == 1 { "" } else { "s" };
        writeln!(out, "({} row{s})", printed.rows)?;
    }
    Ok(())
}
