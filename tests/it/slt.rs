//! The sqllogictest files in `tests/slt/`, run against an engine over the demo
//! registrations (1,200 registrations: 100 per event and distance, bibs 1 to
//! 100) in an in-memory embedded store. `TABLESQL_SLT_COMPLETE=1` rewrites the
//! files with the engine's answers (sqllogictest's `--complete` mode).

use std::path::PathBuf;

use async_trait::async_trait;
use sqllogictest::{DBOutput, DefaultColumnType};
use tablesql::datafusion::arrow::datatypes::DataType;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tablesql::{EngineError, Session};

use super::sql::demo_engine;

/// Registrations the slt files are written against.
pub const SLT_ROWS: u64 = 1200;

struct Db(Session);

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
        // The one door every front end runs statements through.
        let stream = self.0.execute_stream(sql).await?;
        let schema = stream.schema();
        let batches = tablesql::datafusion::physical_plan::common::collect(stream).await?;
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
/// row with an empty first cell matches its indented line in the file; the
/// time statistics were taken at, which EXPLAIN shows, is `<when>`.
fn validator(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    let actual: Vec<String> = actual
        .iter()
        .map(|row| when(&normalizer(&row.join(" "))))
        .collect();
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    actual == expected
}

/// `line` with each `analyzed=<time>` written `analyzed=<when>`.
fn when(line: &str) -> String {
    const MARK: &str = "analyzed=";
    const TIME: usize = "2026-01-01T00:00:00Z".len();
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        out.push_str(&rest[..at + MARK.len()]);
        match after.get(..TIME) {
            Some(t) if t.ends_with('Z') && t.starts_with(|c: char| c.is_ascii_digit()) => {
                out.push_str("<when>");
                rest = &after[TIME..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

fn slt_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt")
}

/// Runs one file against an engine of its own, so that DDL in one file
/// cannot leak into another; `TABLESQL_SLT_COMPLETE` rewrites it instead.
async fn run_file(name: &str) {
    let file = slt_dir().join(name);
    let engine = demo_engine(SLT_ROWS).await;
    let mut runner = sqllogictest::Runner::new(move || {
        // A session of its own for each connection a file names
        // (`connection other`), over one engine's tables.
        let session = engine.engine().session();
        async move { Ok::<_, EngineError>(Db(session)) }
    });
    runner.with_validator(validator);
    if std::env::var_os("TABLESQL_SLT_COMPLETE").is_some() {
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

/// Runs a file's statements as the server runs them: on threads with the
/// stack every thread that runs statements needs (`THREAD_STACK`: an
/// expression nested as deep as PostgreSQL takes it is cloned, normalized
/// and printed by recursion), not on the test harness's 2 MiB thread.
fn on_statement_stacks(run: impl std::future::Future<Output = ()> + Send + 'static) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(tablesql::THREAD_STACK)
        .enable_all()
        .build()
        .expect("a runtime");
    // Spawned, so that it runs on a worker, not on this thread.
    if let Err(e) = runtime.block_on(runtime.spawn(run)) {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// One test per file, so that one failing file does not hide another's
/// result; `every_file_has_its_test` keeps the list whole.
macro_rules! slt_files {
    ($($test:ident),* $(,)?) => {
        const FILES: &[&str] = &[$(concat!(stringify!($test), ".slt")),*];
        $(
            #[test]
            fn $test() {
                on_statement_stacks(run_file(concat!(stringify!($test), ".slt")));
            }
        )*
    };
}

slt_files!(
    ddl,
    dml_queries,
    indexes,
    locking,
    lookup_joins,
    paging,
    pg_spellings,
    plain_tables,
    points,
    postgres_semantics,
    ranges,
    returning,
    scan_policy,
    scans,
    sequences,
    subqueries,
    transactions,
    transactional_ddl,
    typed_indexes,
    upserts,
    writes,
);

#[test]
fn every_file_has_its_test() -> std::io::Result<()> {
    let mut on_disk: Vec<String> = std::fs::read_dir(slt_dir())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".slt"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = FILES.iter().map(|f| (*f).to_owned()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "each tests/slt file needs its line in slt_files!"
    );
    Ok(())
}
