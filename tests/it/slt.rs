//! The sqllogictest files in `tests/slt/`, run against an engine over the demo
//! registrations (1,200 registrations: 100 per event and distance, bibs 1 to
//! 100) in an in-memory embedded store. `TABLESQL_SLT_COMPLETE=1` rewrites the
//! files with the engine's answers (sqllogictest's `--complete` mode).

use std::path::PathBuf;

use async_trait::async_trait;
use sqllogictest::{DBOutput, DefaultColumnType};
use tablesql::datafusion::arrow::datatypes::DataType;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tablesql::{Engine, EngineError};

use super::sql::demo_engine;

/// Registrations the slt files are written against.
pub const SLT_ROWS: u64 = 1200;

struct Db(Engine);

fn column_type(t: &DataType) -> DefaultColumnType {
    match t {
        t if t.is_integer() => DefaultColumnType::Integer,
        t if t.is_floating() => DefaultColumnType::FloatingPoint,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for Db {
    type Error = EngineError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, EngineError> {
        let df = self.0.sql(sql).await?;
        let schema = df.schema().as_arrow().clone();
        let batches = df.collect().await?;
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| EngineError::DataFusion(e.into()))?;
            for r in 0..batch.num_rows() {
                let cells: Vec<String> = formatters
                    .iter()
                    .map(|f| match f.value(r).to_string() {
                        s if s.is_empty() => "(empty)".to_owned(),
                        s => s,
                    })
                    .collect();
                // A multi-line cell (an EXPLAIN plan) becomes one row per line.
                let lines: Vec<Vec<&str>> = cells.iter().map(|c| c.lines().collect()).collect();
                let height = lines.iter().map(Vec::len).max().unwrap_or(1);
                for i in 0..height {
                    rows.push(
                        lines
                            .iter()
                            .map(|l| l.get(i).map_or("", |s| s.trim_end()).to_owned())
                            .collect(),
                    );
                }
            }
        }
        let types = schema
            .fields()
            .iter()
            .map(|f| column_type(f.data_type()))
            .collect();
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "tablesql"
    }
}

/// Compares rows as whole lines, whitespace-normalized, so that an EXPLAIN
/// row with an empty first cell matches its indented line in the file.
fn validator(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    let actual: Vec<String> = actual
        .iter()
        .map(|row| normalizer(&row.join(" ")))
        .collect();
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    actual == expected
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/slt")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_files() {
    let complete = std::env::var_os("TABLESQL_SLT_COMPLETE").is_some();
    let files = slt_files();
    assert!(files.len() >= 3, "the slt files are missing");
    for file in files {
        // Each file gets its own store, so DDL in one cannot leak into another.
        let engine = demo_engine(SLT_ROWS).await;
        let mut runner = sqllogictest::Runner::new(move || {
            let engine = engine.clone();
            async move { Ok::<_, EngineError>(Db(engine)) }
        });
        runner.with_validator(validator);
        if complete {
            runner
                .update_test_file(
                    &file,
                    " ",
                    validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::default_column_validator,
                )
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        } else {
            runner
                .run_file_async(&file)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}
