//! The engine alone, as an embedder builds it: `tablesql = { version = "0.1",
//! default-features = false }` (no wire server, shell, Azure client or CLI).
//! One use each: write, query, prepare, and page with a token. The example
//! checks its own answers; run it that way with
//! `cargo run --no-default-features --example embedded`. CI runs it in the
//! full build and checks that the engine compiles without default features.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tablesql::datafusion::arrow::array::{AsArray, RecordBatch};
use tablesql::datafusion::arrow::datatypes::{Int32Type, UInt64Type};
use tablesql::datafusion::scalar::ScalarValue;
use tablesql::storage::{EmbeddedStore, TableStore};
use tablesql::{Engine, EngineOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A file-backed store would be `EmbeddedStore::open(dir)`.
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    let engine = Engine::with_store(store, EngineOptions::default()).await?;
    // What every session shares is the engine's; statements run in a session.
    let session = engine.session();

    // A mapping: race is the PartitionKey, the bib number the RowKey.
    session
        .collect(
            "CREATE TABLE runners (race TEXT NOT NULL, bib INT NOT NULL, name TEXT, age INT) \
             WITH (storage_table = 'Runners', partition_key = '{race}', row_key = 'BIB:{bib:05}')",
        )
        .await?;

    // Write: one INSERT is one entity group transaction per partition.
    let written = session
        .collect(
            "INSERT INTO runners VALUES \
             ('Boston', 1, 'Ann', 34), ('Boston', 2, 'Bo', 51), ('Boston', 3, 'Cy', 27), \
             ('Boston', 4, 'Di', 45), ('Boston', 5, 'Ed', 62)",
        )
        .await?;
    assert_eq!(count(&written), 5);

    // Query: both keys fixed is a point read of one entity.
    let rows = session
        .collect("SELECT name FROM runners WHERE race = 'Boston' AND bib = 2")
        .await?;
    assert_eq!(rows[0].column(0).as_string::<i32>().value(0), "Bo");

    // Prepare once, run with parameters many times.
    let older = session
        .prepare("SELECT bib FROM runners WHERE race = $1 AND age > $2")
        .await?;
    let params = |age: i32| {
        vec![
            ScalarValue::Utf8(Some("Boston".into())),
            ScalarValue::Int32(Some(age)),
        ]
    };
    assert_eq!(bibs(&older.query(params(40)).await?), [2, 4, 5]);
    assert_eq!(bibs(&older.query(params(60)).await?), [5]);

    // Page: two rows at a time; the token resumes in any engine over the store.
    let sql = "SELECT bib FROM runners WHERE race = 'Boston'";
    let mut token = None;
    let mut pages = Vec::new();
    loop {
        let page = session.query_page(sql, 2, token.as_deref()).await?;
        pages.push(bibs(&page.batches));
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, [vec![1, 2], vec![3, 4], vec![5]]);

    // Write again: an UPDATE by key, then read it back.
    let updated = session
        .collect("UPDATE runners SET age = age + 1 WHERE race = 'Boston' AND bib = 5")
        .await?;
    assert_eq!(count(&updated), 1);
    let rows = session
        .collect("SELECT age FROM runners WHERE race = 'Boston' AND bib = 5")
        .await?;
    assert_eq!(rows[0].column(0).as_primitive::<Int32Type>().value(0), 63);

    println!("embedded: write, query, prepare, page and update all answered as expected");
    Ok(())
}

/// The row count a write reports.
fn count(batches: &[RecordBatch]) -> u64 {
    batches[0].column(0).as_primitive::<UInt64Type>().value(0)
}

/// The `bib` column of every row, in order.
fn bibs(batches: &[RecordBatch]) -> Vec<i32> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column(0).as_primitive::<Int32Type>();
            (0..column.len())
                .map(|i| column.value(i))
                .collect::<Vec<_>>()
        })
        .collect()
}
