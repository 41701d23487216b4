//! Embedding tablesql: load the demo registrations into an in-memory embedded
//! store, open an engine on it, and query it with SQL. The example checks its
//! own answers, and CI runs it (`cargo run --example demo_query`).

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use futures::StreamExt;
use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::arrow::datatypes::{Int32Type, Int64Type};
use tablesql::storage::{EmbeddedStore, TableStore};
use tablesql::{Engine, EngineOptions, demo};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    demo::load(store.as_ref(), 6_000, |_, _| {}).await?;
    let engine = Engine::with_store(store, EngineOptions::default()).await?;
    // What every session shares is the engine's; statements run in a session.
    let session = engine.session();

    // Index rows (AGE:) are not rows of the table.
    let batches = session
        .collect("SELECT count(*) FROM registrations")
        .await?;
    let count = batches[0].column(0).as_primitive::<Int64Type>().value(0);
    assert_eq!(count, 6_000);
    println!("registrations: {count}");

    // A point query: the plan reads one entity.
    let point = "SELECT bib, name, age FROM registrations \
                 WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 123";
    let plan = session.collect(&format!("EXPLAIN {point}")).await?;
    let plan_text =
        tablesql::datafusion::arrow::util::pretty::pretty_format_batches(&plan)?.to_string();
    assert!(plan_text.contains("access=point"), "{plan_text}");
    let rows = session.collect(point).await?;
    let bib = rows[0].column(0).as_primitive::<Int32Type>().value(0);
    assert_eq!(bib, 123);
    println!(
        "{}",
        tablesql::datafusion::arrow::util::pretty::pretty_format_batches(&rows)?
    );

    // Streaming: batches arrive as the scan pages through the store.
    let mut stream = session
        .execute_stream("SELECT event, distance, bib FROM registrations WHERE bib <= 10")
        .await?;
    let mut streamed = 0;
    while let Some(batch) = stream.next().await {
        streamed += batch?.num_rows();
    }
    assert_eq!(streamed, 12 * 10);
    println!("bibs 1 to 10 of every race: {streamed} rows");
    Ok(())
}
