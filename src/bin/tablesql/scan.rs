//! `tablesql scan`: raw entities in key order, printed a page at a time as
//! the store answers, so a table of any size goes through in flat memory.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use tablesql::load::format::CopyFormat;
use tablesql::storage::odata::entity_to_json;
use tablesql::storage::value::format_datetime;
use tablesql::storage::{ContinuationToken, Page, Query, StoredEntity, TableName, TableStore};

use crate::output::Format;

/// The system properties every entity has, first in every format.
const SYSTEM: [&str; 3] = ["PartitionKey", "RowKey", "Timestamp"];

/// The entities' custom property names, in name order.
fn names(entities: &[StoredEntity], into: &mut BTreeSet<String>) {
    for e in entities {
        into.extend(e.entity.properties.keys().cloned());
    }
}

fn columns(names: &BTreeSet<String>) -> Vec<String> {
    SYSTEM
        .into_iter()
        .map(str::to_owned)
        .chain(names.iter().cloned())
        .collect()
}

/// One entity's cells; `None` for a property it does not have.
fn cells(e: &StoredEntity, columns: &[String]) -> Vec<Option<String>> {
    let mut out = vec![
        Some(e.partition_key().to_string()),
        Some(e.row_key().to_string()),
        Some(format_datetime(&e.timestamp)),
    ];
    out.extend(columns[3..].iter().map(|c| e.get(c).map(|v| v.to_string())));
    out
}

async fn page(
    store: &dyn TableStore,
    table: &TableName,
    query: &Query,
    token: Option<&ContinuationToken>,
) -> anyhow::Result<Page> {
    Ok(store.query(table, query, token).await?)
}

/// Prints the entities `query` selects, at most `limit`, page by page.
pub async fn scan(
    store: &dyn TableStore,
    table: &TableName,
    query: &Query,
    limit: Option<usize>,
    format: Format,
) -> anyhow::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut first = page(store, table, query, None).await?;
    // CSV and TSV name every column in their header: when the entities do
    // not fit one page, a first pass reads the property names (only them
    // are kept), and the second prints.
    let mut header = BTreeSet::new();
    names(&first.entities, &mut header);
    if matches!(format, Format::Csv | Format::Tsv) && first.continuation.is_some() {
        let mut seen = first.entities.len();
        let mut token = first.continuation.clone();
        while let Some(t) = token {
            if limit.is_some_and(|l| seen >= l) {
                break;
            }
            let next = page(store, table, query, Some(&t)).await?;
            seen += next.entities.len();
            names(&next.entities, &mut header);
            token = next.continuation;
        }
    }
    let copy = match format {
        Format::Tsv => CopyFormat::text(),
        _ => CopyFormat::csv(),
    };
    let mut printed = 0usize;
    match format {
        Format::Csv | Format::Tsv => {
            let columns = columns(&header);
            let mut line = Vec::new();
            let names: Vec<Option<&str>> = columns.iter().map(|c| Some(c.as_str())).collect();
            copy.write_row(&names, &mut line);
            out.write_all(&line)?;
        }
        Format::Json => out.write_all(b"[\n")?,
        _ => {}
    }
    loop {
        let room = limit.map_or(usize::MAX, |l| l.saturating_sub(printed));
        let entities = &first.entities[..first.entities.len().min(room)];
        match format {
            Format::Table => {
                // A table per page, with the columns of its entities.
                if !entities.is_empty() || printed == 0 {
                    let mut own = BTreeSet::new();
                    names(entities, &mut own);
                    let columns = columns(&own);
                    let mut t = Table::new();
                    t.load_preset(UTF8_FULL_CONDENSED).set_header(&columns);
                    for e in entities {
                        t.add_row(
                            cells(e, &columns)
                                .into_iter()
                                .map(Option::unwrap_or_default),
                        );
                    }
                    writeln!(out, "{t}")?;
                }
            }
            Format::Csv | Format::Tsv => {
                let columns = columns(&header);
                let mut line = Vec::new();
                for e in entities {
                    let cells = cells(e, &columns);
                    let values: Vec<Option<&str>> = cells.iter().map(|c| c.as_deref()).collect();
                    line.clear();
                    copy.write_row(&values, &mut line);
                    out.write_all(&line)?;
                }
            }
            Format::Json | Format::Ndjson => {
                for (i, e) in entities.iter().enumerate() {
                    let object = serde_json::to_string(&entity_to_json(e))?;
                    if format == Format::Json {
                        let sep = if printed + i == 0 { "  " } else { ",\n  " };
                        write!(out, "{sep}{object}")?;
                    } else {
                        writeln!(out, "{object}")?;
                    }
                }
            }
        }
        printed += entities.len();
        out.flush()?;
        let done = limit.is_some_and(|l| printed >= l);
        match first.continuation.take() {
            Some(t) if !done => first = page(store, table, query, Some(&t)).await?,
            _ => break,
        }
    }
    match format {
        Format::Table => writeln!(out, "({printed} entities)")?,
        Format::Json => writeln!(out, "{}]", if printed == 0 { "" } else { "\n" })?,
        _ => {}
    }
    out.flush()?;
    Ok(())
}
