//! psql's backslash commands: what they are, and the catalog listings
//! (`\dt`, `\d TABLE`) they print.

use std::path::PathBuf;

use super::render::table;
use crate::engine::{ColumnInfo, Engine, EngineError, Session, StoredAs};

/// One meta-command.
#[derive(Debug, Clone, PartialEq)]
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
    /// `\di [PATTERN]`: index rows.
    ListIndexes(Option<String>),
    /// `\ds [PATTERN]`: sequences.
    ListSequences(Option<String>),
    /// `\dv [PATTERN]`: views.
    ListViews(Option<String>),
    /// `\df [PATTERN]`: functions (tablesql's own without a pattern).
    ListFunctions(Option<String>),
    /// `\conninfo`: what the shell is connected to.
    ConnInfo,
    /// `\e [FILE]`: edit the last query (or FILE) in `$EDITOR`, then run it.
    Edit(Option<PathBuf>),
    /// `\watch [i=SEC] [c=COUNT] [SEC]`: run the last query again and again.
    Watch {
        /// Seconds between runs (psql's default, 2).
        interval: f64,
        /// Runs before it stops; `None` until Ctrl-C or an error.
        count: Option<u64>,
    },
    /// `\pset NAME [VALUE]`: an output option (`pager`, `format`, `expanded`).
    Pset(String, Option<String>),
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
  \\e [FILE]       edit the last query (or FILE) in $PSQL_EDITOR, $EDITOR or
                  $VISUAL, then run what ends with ';'
  \\watch [i=SEC] [c=N] [SEC]  run the last query every SEC seconds (2), N times
  \\pset pager on|off|always   page long results through $PSQL_PAGER or $PAGER
  \\pset format table|csv|tsv|json|ndjson   the output format
Input/Output
  \\copy TABLE [(COLS)] from FILE [with (...)]   load a file's rows (text or csv)
  \\copy TABLE | (QUERY) to FILE [with (...)]    write rows to a file (or stdout)
Variables
  \\set ON_ERROR_STOP on|off   a script stops at its first error (on, the default)
  \\set VERBOSITY verbose       errors show their SQLSTATE
  \\set FETCH_COUNT N            rows per printed table (1000); results stream
Catalog
  \\dt             list tables
  \\d TABLE        describe a table: columns, types, key templates, index rows
  \\di [PATTERN]   list index rows        \\dv [PATTERN]   list views
  \\ds [PATTERN]   list sequences         \\df [PATTERN]   list functions
  \\conninfo       the store this shell runs on
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
        "di" | "di+" => Meta::ListIndexes(arg.map(str::to_owned)),
        "ds" | "ds+" => Meta::ListSequences(arg.map(str::to_owned)),
        "dv" | "dv+" => Meta::ListViews(arg.map(str::to_owned)),
        "df" | "df+" => Meta::ListFunctions(arg.map(str::to_owned)),
        "conninfo" => Meta::ConnInfo,
        "e" | "edit" => Meta::Edit(arg.map(PathBuf::from)),
        "watch" => watch(std::iter::once(arg).flatten().chain(words))?,
        "pset" => match arg {
            Some(name) => Meta::Pset(name.to_owned(), words.next().map(str::to_owned)),
            None => return Err("\\pset: an option name is missing".to_owned()),
        },
        "q" | "quit" => Meta::Quit,
        "?" | "h" | "help" => Meta::Help,
        other => {
            return Err(format!("invalid command \\{other}. Try \\? for help."));
        }
    };
    Ok(meta)
}

/// psql 16's `\watch` arguments: `i[nterval]=SEC`, `c[ount]=N`, or a bare
/// number of seconds.
fn watch<'a>(args: impl Iterator<Item = &'a str>) -> Result<Meta, String> {
    let (mut interval, mut count) = (2.0, None);
    for a in args {
        let seconds = |v: &str| match v.parse::<f64>() {
            // At most a day: a longer wait is a typo, and sleeping needs a
            // Duration that fits.
            Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(s),
            _ => Err(format!("\\watch: incorrect interval value \"{v}\"")),
        };
        match a.split_once('=') {
            Some(("i" | "interval", v)) => interval = seconds(v)?,
            Some(("c" | "count", v)) => match v.parse::<u64>() {
                Ok(n) if n > 0 => count = Some(n),
                _ => return Err(format!("\\watch: incorrect repetition count \"{v}\"")),
            },
            Some((other, _)) => return Err(format!("\\watch: unrecognized parameter \"{other}\"")),
            None => interval = seconds(a)?,
        }
    }
    Ok(Meta::Watch { interval, count })
}

/// Whether `name` matches a psql pattern: `*` any text, `?` one character,
/// letters folded to lower case unless the pattern is double-quoted.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (pattern, name) = match pattern.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
        Some(quoted) => (quoted.to_owned(), name.to_owned()),
        None => (pattern.to_lowercase(), name.to_lowercase()),
    };
    fn at(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|i| at(rest, &n[i..])),
            Some(('?', rest)) => !n.is_empty() && at(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && at(rest, &n[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    at(&p, &n)
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

fn listing(title: &str, names: &[&str], rows: &[Vec<String>], width: Option<u16>) -> String {
    let n = rows.len();
    let s = if n == 1 { "" } else { "s" };
    format!(
        "{title}\n{}\n({n} row{s})\n",
        table(&header(names), rows, width)
    )
}

/// `\di`: every declared index, with its table, key fields and kind.
pub async fn list_indexes(
    engine: &Engine,
    pattern: Option<&str>,
    width: Option<u16>,
) -> Result<String, EngineError> {
    let mut rows = Vec::new();
    for t in engine.describe_tables().await? {
        for ix in &t.indexes {
            if pattern.is_some_and(|p| !matches(p, &ix.name)) {
                continue;
            }
            let mut kind = vec![if ix.global { "global" } else { "local" }];
            if ix.unique {
                kind.push("unique");
            }
            if ix.building {
                kind.push("building");
            }
            rows.push(vec![
                t.schema.clone(),
                ix.name.clone(),
                t.name.clone(),
                ix.columns.join(", "),
                kind.join(", "),
            ]);
        }
    }
    rows.sort();
    Ok(listing(
        "List of index rows",
        &["schema", "index", "table", "key fields", "kind"],
        &rows,
        width,
    ))
}

/// `\ds`: the sequences with their options and last value.
pub async fn list_sequences(
    engine: &Engine,
    pattern: Option<&str>,
    width: Option<u16>,
) -> Result<String, EngineError> {
    let mut rows = Vec::new();
    let listed = crate::catalog::sequence::list(engine.store().as_ref())
        .await
        .map_err(EngineError::from)?;
    for (def, last) in listed {
        if pattern.is_some_and(|p| !matches(p, &def.name)) {
            continue;
        }
        rows.push(vec![
            def.name,
            def.start.to_string(),
            def.increment.to_string(),
            def.min.to_string(),
            def.max.to_string(),
            def.cache.to_string(),
            if def.cycle { "yes" } else { "no" }.to_owned(),
            last.to_string(),
        ]);
    }
    Ok(listing(
        "List of sequences",
        &[
            "sequence",
            "start",
            "increment",
            "min",
            "max",
            "cache",
            "cycles",
            "last value",
        ],
        &rows,
        width,
    ))
}

/// Rows of a catalog query, as text.
async fn catalog_rows(session: &Session, sql: &str) -> Result<Vec<Vec<String>>, EngineError> {
    let mut rows = Vec::new();
    for batch in session.collect(sql).await? {
        rows.extend(
            super::render::rows_text(&batch, "")
                .map_err(|e| EngineError::from(datafusion::error::DataFusionError::from(e)))?,
        );
    }
    Ok(rows)
}

/// `\dv`: the views, with their definitions.
pub async fn list_views(
    session: &Session,
    pattern: Option<&str>,
    width: Option<u16>,
) -> Result<String, EngineError> {
    let rows: Vec<Vec<String>> = catalog_rows(
        session,
        "SELECT table_schema, table_name, definition FROM information_schema.views \
         WHERE table_schema NOT IN ('information_schema', 'pg_catalog') ORDER BY 1, 2",
    )
    .await?
    .into_iter()
    .filter(|r| pattern.is_none_or(|p| matches(p, &r[1])))
    .collect();
    Ok(listing(
        "List of views",
        &["schema", "view", "definition"],
        &rows,
        width,
    ))
}

/// `\df`: functions, with their return type and kind: tablesql's own
/// without a pattern (as psql lists the user's, not the system's), every
/// one whose name matches with one.
pub async fn list_functions(
    session: &Session,
    pattern: Option<&str>,
    width: Option<u16>,
) -> Result<String, EngineError> {
    let mut rows: Vec<Vec<String>> = catalog_rows(
        session,
        "SELECT DISTINCT routine_name, data_type, function_type \
         FROM information_schema.routines ORDER BY 1, 2, 3",
    )
    .await?
    .into_iter()
    .filter(|r| match pattern {
        Some(p) => matches(p, &r[0]),
        None => r[0].starts_with("tablesql_"),
    })
    .collect();
    rows.dedup();
    Ok(listing(
        "List of functions",
        &["function", "result type", "kind"],
        &rows,
        width,
    ))
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
        assert_eq!(
            parse("watch c=3 i=0.5"),
            Ok(Meta::Watch {
                interval: 0.5,
                count: Some(3)
            })
        );
        assert_eq!(
            parse("watch 5"),
            Ok(Meta::Watch {
                interval: 5.0,
                count: None
            })
        );
        assert!(parse("watch c=0").is_err());
        assert!(parse("watch x=1").is_err());
        assert_eq!(parse("di ix*"), Ok(Meta::ListIndexes(Some("ix*".into()))));
        assert_eq!(parse("e"), Ok(Meta::Edit(None)));
        assert!(matches("reg*", "Registrations"));
        assert!(matches("t?", "t1"));
        assert!(!matches("\"T1\"", "t1"));
    }
}
