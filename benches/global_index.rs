//! An equality lookup on a column that does not fix the partition, through
//! a global index against a local one, on a table of 1,000 partitions (two
//! rows each) over a store that adds 10 ms to every request (a stand-in for
//! a remote service's round trip). Both tables hold the same rows; one has
//! `CREATE INDEX ... (email)`, the other the same `WITH (global = true)`.
//! Each lookup is run `RUNS` times; the requests the store served and the
//! wall time per lookup are printed side by side, with their ratio.
//!
//! Run with `cargo bench --bench global_index` (BENCHMARKS.md).

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use tablesql::storage::*;
use tablesql::{Engine, EngineOptions};

#[path = "common/delayed.rs"]
mod delayed;
use delayed::{DELAY, Delayed};

const PARTITIONS: usize = 1000;
const ROWS_PER_PARTITION: usize = 2;
const RUNS: u32 = 5;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let inner = Arc::new(EmbeddedStore::in_memory().expect("store"));
    // Loaded without the delay.
    let loader = Engine::with_store(inner.clone(), EngineOptions::default())
        .await
        .expect("engine")
        .session();
    for (table, with) in [("people_l", ""), ("people_g", " WITH (global = true)")] {
        loader
            .collect(&format!(
                "CREATE TABLE {table} (tenant INT NOT NULL, id INT NOT NULL, email TEXT, PRIMARY KEY (tenant, id))"
            ))
            .await
            .expect("create");
        let mut values = Vec::new();
        for p in 0..PARTITIONS {
            for r in 0..ROWS_PER_PARTITION {
                values.push(format!("({p}, {r}, 'u{p}.{r}@example.org')"));
            }
        }
        for chunk in values.chunks(500) {
            loader
                .collect(&format!("INSERT INTO {table} VALUES {}", chunk.join(", ")))
                .await
                .expect("insert");
        }
        loader
            .collect(&format!(
                "CREATE INDEX {table}_email ON {table} (email){with}"
            ))
            .await
            .expect("index");
    }
    let delayed = Arc::new(Delayed::new(inner));
    let engine = Engine::with_store(delayed.clone(), EngineOptions::default())
        .await
        .expect("engine")
        .session();
    println!(
        "equality lookup on email, {PARTITIONS} partitions x {ROWS_PER_PARTITION} rows, {} ms per request, {RUNS} runs",
        DELAY.as_millis()
    );
    let mut results = Vec::new();
    for table in ["people_g", "people_l"] {
        let sql = format!("SELECT id, tenant FROM {table} WHERE email = 'u500.1@example.org'");
        let plan = engine
            .collect(&format!("EXPLAIN {sql}"))
            .await
            .expect("explain");
        let shown = tablesql::datafusion::arrow::util::pretty::pretty_format_batches(&plan)
            .expect("plan")
            .to_string();
        let access = shown
            .split_whitespace()
            .find(|w| w.starts_with("access="))
            .unwrap_or("?")
            .to_owned();
        let before = delayed.requests();
        let started = Instant::now();
        for _ in 0..RUNS {
            let rows = engine.collect(&sql).await.expect("lookup");
            let n: usize = rows.iter().map(|b| b.num_rows()).sum();
            assert_eq!(n, 1, "one row has that email");
        }
        let wall = started.elapsed() / RUNS;
        let requests = (delayed.requests() - before) / u64::from(RUNS);
        println!(
            "{table:>6} index: {access:<40} {requests:>5} requests, {:>8.1} ms per lookup",
            wall.as_secs_f64() * 1000.0
        );
        results.push((requests, wall));
    }
    let (g, l) = (results[0], results[1]);
    println!(
        "global/local: {:.4} of the requests, {:.4} of the wall time",
        g.0 as f64 / l.0 as f64,
        g.1.as_secs_f64() / l.1.as_secs_f64()
    );
    assert!(g.0 <= 3, "a global lookup took {} requests", g.0);
    assert!(
        l.0 >= PARTITIONS as u64,
        "a local lookup took {} requests",
        l.0
    );
}
