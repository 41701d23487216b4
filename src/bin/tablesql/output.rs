//! How the command line prints tables and entities: a table for people, CSV and
//! JSON for programs.

use std::io::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use futures::StreamExt;
use tablesql::datafusion::execution::SendableRecordBatchStream;
use tablesql::shell::render::Printer;
use tablesql::storage::odata::entity_to_json;
use tablesql::storage::value::format_datetime;
use tablesql::storage::{StoredEntity, TableName};

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

/// The columns of a scan: the system properties, then every custom property
/// any of the entities has, in name order.
fn columns(entities: &[StoredEntity]) -> Vec<String> {
    let mut names: Vec<&String> = entities
        .iter()
        .flat_map(|e| e.entity.properties.keys())
        .collect();
    names.sort();
    names.dedup();
    ["PartitionKey", "RowKey", "Timestamp"]
        .into_iter()
        .map(str::to_owned)
        .chain(names.into_iter().cloned())
        .collect()
}

fn cells(e: &StoredEntity, columns: &[String]) -> Vec<String> {
    let mut out = vec![
        e.partition_key().to_string(),
        e.row_key().to_string(),
        format_datetime(&e.timestamp),
    ];
    out.extend(
        columns[3..]
            .iter()
            .map(|c| e.get(c).map(|v| v.to_string()).unwrap_or_default()),
    );
    out
}

/// Prints entities in the chosen format.
pub fn print_entities(entities: &[StoredEntity], format: Format) -> anyhow::Result<()> {
    let columns = columns(entities);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        Format::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED).set_header(&columns);
            for e in entities {
                t.add_row(cells(e, &columns));
            }
            writeln!(out, "{t}")?;
            writeln!(out, "({} entities)", entities.len())?;
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(&columns)?;
            for e in entities {
                w.write_record(cells(e, &columns))?;
            }
            w.flush()?;
        }
        Format::Json => {
            let all: Vec<_> = entities.iter().map(entity_to_json).collect();
            serde_json::to_writer_pretty(&mut out, &all)?;
            writeln!(out)?;
        }
    }
    Ok(())
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
