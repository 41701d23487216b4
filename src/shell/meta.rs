//! psql's backslash commands: what they are, and the catalog listings
//! (`\dt`, `\d TABLE`) they print.

use std::path::PathBuf;

use super::render::table;
use crate::engine::{ColumnInfo, Engine, EngineError, StoredAs};

/// One meta-command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meta {
    /// `\dt` (or `\d` alone): the tables.
    ListTables,
    /// `\d NAME`: a table's columns, keys and index rows.
    Describe(String),
    /// `\timing [on|off]`.
    Timing(Option<bool>),
    /// `\x [on|off]`.
    Expanded(Option<bool>),
    /// `\o [FILE]`: results into a file, or back to the terminal.
    Output(Option<PathBuf>),
    /// `\i FILE`: run a file's statements.
    Include(PathBuf),
    /// `\set NAME VALUE`: one of psql's variables the shell reads
    /// (`ON_ERROR_STOP`, `VERBOSITY`); others are kept and mean nothing.
    Set(String, String),
    /// `\echo TEXT`: prints the text.
    Echo(String),
    /// `\copy ...`: a COPY whose data is a file on this side (`shell::copy`).
    Copy(String),
    /// `\q`.
    Quit,
    /// `\?`.
    Help,
}

/// The help `\?` prints.
pub const HELP: &str = "\
General
  \\q              quit (or Ctrl-D)
  \\?              this help
Query buffer and output
  \\i FILE         run the statements of FILE
  \\o [FILE]       send results to FILE, or back to the terminal
  \\timing [on|off] show how long each statement took
  \\x [on|off]     expanded output: one block per record
  \\echo TEXT      print TEXT
Input/Output
  \\copy TABLE [(COLS)] from FILE [with (...)]   load a file's rows (text or csv)
  \\copy TABLE | (QUERY) to FILE [with (...)]    write rows to a file (or stdout)
Variables
  \\set ON_ERROR_STOP on|off   a script stops at its first error (on, the default)
  \\set VERBOSITY verbose       errors show their SQLSTATE
Catalog
  \\dt             list tables
  \\d TABLE        describe a table: columns, types, key templates, index rows
Keys
  Enter sends a statement once it ends with ';'. Tab completes keywords,
  tables and columns. Ctrl-C cancels the running statement, or clears the line.
";

fn switch(arg: Option<&str>, what: &str) -> Result<Option<bool>, String> {
    match arg.map(str::to_lowercase).as_deref() {
        None => Ok(None),
        Some("on") => Ok(Some(true)),
        Some("off") => Ok(Some(false)),
        Some(other) => Err(format!(
            "\\{what}: unrecognized value \"{other}\": on or off"
        )),
    }
}

/// Parses a meta-command line (without its backslash).
pub fn parse(line: &str) -> Result<Meta, String> {
    let mut words = line.split_whitespace();
    let command = words.next().unwrap_or_default();
    let arg = words.next();
    let meta = match command {
        "dt" | "dt+" => Meta::ListTables,
        "d" | "d+" => match arg {
            // As SQL reads names: lower case unless quoted.
            Some(name) if name.starts_with('"') => {
                Meta::Describe(name.trim_matches('"').to_owned())
            }
            Some(name) => Meta::Describe(name.to_lowercase()),
            None => Meta::ListTables,
        },
        "timing" => Meta::Timing(switch(arg, "timing")?),
        "x" => Meta::Expanded(switch(arg, "x")?),
        "o" | "out" => Meta::Output(arg.map(PathBuf::from)),
        "i" | "include" => Meta::Include(
            arg.map(PathBuf::from)
                .ok_or_else(|| "\\i: missing required argument (a file)".to_owned())?,
        ),
        "set" => match arg {
            Some(name) => Meta::Set(name.to_owned(), words.collect::<Vec<_>>().join(" ")),
            None => return Err("\\set: a variable name is missing".to_owned()),
        },
        "echo" => Meta::Echo(
            line.trim_start()
                .strip_prefix("echo")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        "copy" => Meta::Copy(line.trim_start()[command.len()..].trim().to_owned()),
        "q" | "quit" => Meta::Quit,
        "?" | "h" | "help" => Meta::Help,
        other => {
            return Err(format!("invalid command \\{other}. Try \\? for help."));
        }
    };
    Ok(meta)
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// `\dt`: mapped tables with their storage table and keys, then the
/// storage tables that have no mapping (read raw).
pub async fn list_tables(engine: &Engine, width: Option<u16>) -> Result<String, EngineError> {
    let (mut rows, mut raw): (Vec<Vec<String>>, Vec<Vec<String>>) = (Vec::new(), Vec::new());
    for t in engine.store_tables().await? {
        match &t.mapping {
            Some(m) => rows.push(vec![
                t.name,
                "mapped".to_owned(),
                t.storage_table,
                format!("{} / {}", m.partition_key, m.row_key),
            ]),
            None => raw.push(vec![
                t.name,
                "raw".to_owned(),
                t.storage_table,
                "PartitionKey / RowKey".to_owned(),
            ]),
        }
    }
    rows.sort();
    raw.sort();
    rows.extend(raw);
    let n = rows.len();
    Ok(format!(
        "{}\n({n} tables)",
        table(
            &header(&["table", "kind", "storage table", "keys"]),
            &rows,
            width
        )
    ))
}

/// `\d NAME`: the columns (type, nullability, where each is stored) and,
/// for a mapped table, its key templates, primary key and index rows.
pub async fn describe(engine: &Engine, name: &str, width: Option<u16>) -> Result<String, String> {
    let found = engine
        .describe_table(name)
        .await
        .map_err(|e| e.to_string())?;
    let Some(t) = found else {
        return Err(format!("Did not find any relation named \"{name}\"."));
    };
    let nullable = |c: &ColumnInfo| if c.nullable { "" } else { "not null" }.to_owned();
    let Some(mapping) = &t.mapping else {
        let rows: Vec<Vec<String>> = t
            .columns
            .iter()
            .map(|c| vec![c.name.clone(), c.sql_type.clone(), nullable(c)])
            .collect();
        return Ok(format!(
            "Raw table \"{name}\" (storage table {}, no mapping: columns inferred from a sample)\n{}",
            t.storage_table,
            table(&header(&["column", "type", "nullable"]), &rows, width)
        ));
    };
    let rows: Vec<Vec<String>> = t
        .columns
        .iter()
        .map(|c| {
            let stored = match c.stored_as {
                StoredAs::PartitionKeyField(i) => format!("PartitionKey field {}", i + 1),
                StoredAs::RowKeyField(i) => format!("RowKey field {}", i + 1),
                StoredAs::Property => "property".into(),
                _ => "system".into(),
            };
            vec![c.name.clone(), c.sql_type.clone(), nullable(c), stored]
        })
        .collect();
    let mut out = format!(
        "Table \"{}\" (storage table {})\n{}\n",
        t.name,
        t.storage_table,
        table(
            &header(&["column", "type", "nullable", "stored as"]),
            &rows,
            width
        )
    );
    out.push_str(&format!("PartitionKey: {}\n", mapping.partition_key));
    out.push_str(&format!("RowKey:       {}\n", mapping.row_key));
    out.push_str(&format!(
        "Primary key:  ({})\n",
        mapping.primary_key.join(", ")
    ));
    if mapping.indexes.is_empty() {
        out.push_str("Index rows:   none\n");
    } else {
        out.push_str("Index rows:\n");
        for ix in &mapping.indexes {
            let unique = if ix.unique { "unique, " } else { "" };
            match &ix.global {
                Some((table, partition_key)) => out.push_str(&format!(
                    "    {}: global, {unique}table {table}, PartitionKey {partition_key}, RowKey {}\n",
                    ix.name, ix.row_key
                )),
                None => {
                    let carries = if ix.covering {
                        "every column"
                    } else {
                        "its keys"
                    };
                    out.push_str(&format!(
                        "    {}: {} (carries {carries})\n",
                        ix.name, ix.row_key
                    ));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_commands_parse_like_psql() {
        assert_eq!(parse("dt"), Ok(Meta::ListTables));
        assert_eq!(parse("d"), Ok(Meta::ListTables));
        assert_eq!(
            parse("d registrations"),
            Ok(Meta::Describe("registrations".into()))
        );
        assert_eq!(parse("timing off"), Ok(Meta::Timing(Some(false))));
        assert_eq!(parse("x"), Ok(Meta::Expanded(None)));
        assert_eq!(parse("o out.txt"), Ok(Meta::Output(Some("out.txt".into()))));
        assert_eq!(parse("o"), Ok(Meta::Output(None)));
        assert_eq!(parse("q"), Ok(Meta::Quit));
        assert_eq!(
            parse("copy t from 'a b.csv' csv"),
            Ok(Meta::Copy("t from 'a b.csv' csv".into()))
        );
        assert!(parse("i").is_err());
        assert!(parse("zz").unwrap_err().contains("invalid command \\zz"));
        assert!(parse("x maybe").is_err());
    }
}
