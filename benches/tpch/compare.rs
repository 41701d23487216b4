//! Answers as text rows, their comparison, and a one-line summary of a
//! tablesql plan.
//!
//! Both systems' values are compared as text: PostgreSQL's in its text
//! format (the simple query protocol), tablesql's as Arrow prints them.
//! Numbers compare as numbers: equal within 1e-9 of their size, or within
//! one unit in the last decimal place of the less precise of the two where
//! both have decimals (PostgreSQL's `avg` of a NUMERIC prints 16 decimals,
//! DataFusion's Decimal128 keeps 6; a division rounds differently).

use tablesql::datafusion::arrow::array::RecordBatch;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tokio_postgres::{Client, SimpleQueryMessage};

/// A row of values as text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// tablesql's answer as text rows.
pub fn batch_rows(batches: &[RecordBatch]) -> Vec<Row> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(c, f)| {
                        let null = c.logical_nulls().is_some_and(|n| n.is_null(r));
                        (!null).then(|| f.value(r).to_string())
                    })
                    .collect(),
            );
        }
    }
    rows
}

/// PostgreSQL's answer as text rows, or its error.
pub async fn postgres_rows(client: &Client, sql: &str) -> Result<Vec<Row>, String> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        })?;
    Ok(messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// How tablesql's answer stands against PostgreSQL's.
pub enum Verdict {
    /// Same rows, same order.
    Agrees,
    /// Same rows in another order (where the ORDER BY leaves ties).
    OtherOrder,
    /// The first difference, described.
    Differs(String),
}

/// Compares `actual` (tablesql) with `expected` (PostgreSQL).
pub fn verdict(expected: &[Row], actual: &[Row]) -> Verdict {
    if expected.len() != actual.len() {
        return Verdict::Differs(format!(
            "{} rows, PostgreSQL {}{}",
            actual.len(),
            expected.len(),
            first_difference(expected, actual)
                .map(|d| format!("; {d}"))
                .unwrap_or_default()
        ));
    }
    let Some(difference) = first_difference(expected, actual) else {
        return Verdict::Agrees;
    };
    let sorted = |rows: &[Row]| {
        let mut rows = rows.to_vec();
        rows.sort();
        rows
    };
    match first_difference(&sorted(expected), &sorted(actual)) {
        None => Verdict::OtherOrder,
        Some(_) => Verdict::Differs(difference),
    }
}

fn first_difference(expected: &[Row], actual: &[Row]) -> Option<String> {
    expected
        .iter()
        .zip(actual)
        .enumerate()
        .find(|(_, (e, a))| !same_row(e, a))
        .map(|(i, (e, a))| {
            format!(
                "row {}: {} against PostgreSQL's {}",
                i + 1,
                show(a),
                show(e)
            )
        })
}

fn show(row: &Row) -> String {
    let values: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("NULL")).collect();
    format!("({})", values.join(", "))
}

fn same_row(e: &Row, a: &Row) -> bool {
    e.len() == a.len()
        && e.iter().zip(a).all(|(e, a)| match (e, a) {
            (None, None) => true,
            (Some(e), Some(a)) => same_value(e, a),
            _ => false,
        })
}

/// Text equal, or numbers equal within the tolerance of the module doc.
pub fn same_value(e: &str, a: &str) -> bool {
    if e == a {
        return true;
    }
    let (Ok(x), Ok(y)) = (e.parse::<f64>(), a.parse::<f64>()) else {
        return false;
    };
    let decimals = |s: &str| s.split_once('.').map(|(_, d)| d.len() as i32);
    let last_place = match (decimals(e), decimals(a)) {
        (Some(d), Some(f)) => 10f64.powi(-d.min(f)),
        _ => 0.0,
    };
    // A hair over one unit: the decimal texts are themselves rounded to f64.
    (x - y).abs() <= (1e-9 * x.abs().max(y.abs())).max(last_place * (1.0 + 1e-9))
}

/// The physical plan's joins and scans, in plan order: `HashJoin(Inner)`,
/// `LookupJoin`, `lineitem:full_scan`, ... (a join's or scan's repeats
/// counted as `×N`).
pub fn plan_summary(physical: &str) -> String {
    let mut items: Vec<(String, usize)> = Vec::new();
    for line in physical.lines() {
        let line = line.trim();
        let Some((op, rest)) = line.split_once(':') else {
            continue;
        };
        let item = if op == "PartitionScanExec" {
            let table = field(rest, "table=").unwrap_or("?");
            let access = field(rest, "access=").unwrap_or("?");
            let mut s = format!("{table}:{access}");
            if rest.contains("lookup=base_rows") {
                s.push_str("+lookup");
            }
            s
        } else if op.contains("Join") || op.ends_with("CrossJoinExec") {
            let name = op.trim_end_matches("Exec");
            // A lookup join says what it reads by key (`lookup=`).
            let args: Vec<&str> = [field(rest, "join_type="), field(rest, "lookup=")]
                .into_iter()
                .flatten()
                .map(|v| v.trim_end_matches(','))
                .collect();
            if args.is_empty() {
                name.to_owned()
            } else {
                format!("{name}({})", args.join(", "))
            }
        } else {
            continue;
        };
        match items.iter_mut().find(|(i, _)| *i == item) {
            Some((_, n)) => *n += 1,
            None => items.push((item, 1)),
        }
    }
    let parts: Vec<String> = items
        .into_iter()
        .map(|(i, n)| if n > 1 { format!("{i}×{n}") } else { i })
        .collect();
    parts.join(", ")
}

/// The value of `key` in a plan line's `key=value` list (up to a space).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    let rest = &line[at..];
    Some(rest.split_whitespace().next().unwrap_or(""))
}
