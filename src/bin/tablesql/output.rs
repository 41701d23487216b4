//! How the command line prints tables and entities: a table for people, CSV and
//! JSON for programs.

use std::io::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use futures::StreamExt;
use tablesql::datafusion::arrow::datatypes::DataType;
use tablesql::datafusion::arrow::record_batch::RecordBatch;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tablesql::datafusion::execution::SendableRecordBatchStream;
use tablesql::storage::odata::entity_to_json;
use tablesql::storage::value::format_datetime;
use tablesql::storage::{StoredEntity, TableName};

/// An output format of `scan` and `query`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// A table for the terminal.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of entities in the service's JSON form.
    Json,
}

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

/// Formats every value of a batch column as text; NULL as `null_text`.
fn column_text(batch: &RecordBatch, column: usize, null_text: &str) -> anyhow::Result<Vec<String>> {
    let options = FormatOptions::default().with_null(null_text);
    let formatter = ArrayFormatter::try_new(batch.column(column).as_ref(), &options)?;
    Ok((0..batch.num_rows())
        .map(|row| formatter.value(row).to_string())
        .collect())
}

fn rows_text(batch: &RecordBatch, null_text: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let columns = (0..batch.num_columns())
        .map(|c| column_text(batch, c, null_text))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((0..batch.num_rows())
        .map(|r| columns.iter().map(|c| c[r].clone()).collect())
        .collect())
}

/// A JSON value for one cell: numbers and booleans typed, NULL as null.
fn json_cell(data_type: &DataType, text: Option<String>) -> serde_json::Value {
    let Some(text) = text else {
        return serde_json::Value::Null;
    };
    let typed = match data_type {
        t if t.is_numeric() => serde_json::from_str::<serde_json::Number>(&text)
            .ok()
            .map(serde_json::Value::Number),
        DataType::Boolean => text.parse().ok().map(serde_json::Value::Bool),
        _ => None,
    };
    typed.unwrap_or(serde_json::Value::String(text))
}

/// Prints the rows of a statement as they arrive (a table waits for all of
/// them, to size its columns).
pub async fn print_stream(
    mut stream: SendableRecordBatchStream,
    format: Format,
) -> anyhow::Result<()> {
    let schema = stream.schema();
    let header: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        Format::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED).set_header(&header);
            let mut n = 0;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                n += batch.num_rows();
                for row in rows_text(&batch, "NULL")? {
                    t.add_row(row);
                }
            }
            if header.is_empty() {
                writeln!(out, "OK")?;
            } else {
                writeln!(out, "{t}")?;
                writeln!(out, "({n} rows)")?;
            }
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(&header)?;
            while let Some(batch) = stream.next().await {
                for row in rows_text(&batch?, "")? {
                    w.write_record(row)?;
                }
            }
            w.flush()?;
        }
        Format::Json => {
            writeln!(out, "[")?;
            let mut first = true;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                let texts = (0..batch.num_columns())
                    .map(|c| {
                        let nulls = batch.column(c).logical_nulls();
                        let text = column_text(&batch, c, "")?;
                        Ok(text
                            .into_iter()
                            .enumerate()
                            .map(|(r, s)| {
                                (!nulls.as_ref().is_some_and(|n| n.is_null(r))).then_some(s)
                            })
                            .collect::<Vec<_>>())
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                for r in 0..batch.num_rows() {
                    let row: serde_json::Map<String, serde_json::Value> = schema
                        .fields()
                        .iter()
                        .zip(&texts)
                        .map(|(f, col)| {
                            (f.name().clone(), json_cell(f.data_type(), col[r].clone()))
                        })
                        .collect();
                    let sep = if first { "" } else { ",\n" };
                    first = false;
                    write!(out, "{sep}  {}", serde_json::Value::Object(row))?;
                }
            }
            writeln!(out, "{}]", if first { "" } else { "\n" })?;
        }
    }
    Ok(())
}
