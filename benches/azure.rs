//! The Azure backend against Azurite: entities/s loaded through entity group
//! transactions beside single inserts, and pages/s of a full scan.
//!
//! Needs Azurite on 127.0.0.1:10002 (`scripts/bench-azure` starts it and runs
//! this with `cargo bench --bench azure`). Not a divan bench: each figure is one
//! timed pass over thousands of HTTP requests, repeated `ROUNDS` times.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{
    AzureStore, EdmValue, Entity, PartitionKey, Query, RowKey, TableName, TableStore, WriteOp,
};

/// Entities per load; the scan reads the table the EGT load wrote.
const ENTITIES: usize = 20_000;
/// Requests in flight during the loads.
const IN_FLIGHT: usize = 8;
const ROUNDS: usize = 3;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn entity(i: usize) -> Result<Entity> {
    Ok(Entity::new(
        PartitionKey::new(format!("p{:02}", i / 1000))?,
        RowKey::new(format!("{i:08}"))?,
    )
    .with("Name", EdmValue::String(format!("runner {i}")))
    .with("Age", EdmValue::Int32((i % 80) as i32))
    .with("Bib", EdmValue::Int64(i as i64))
    .with("Paid", EdmValue::Boolean(i.is_multiple_of(2))))
}

async fn fresh_table(store: &AzureStore, name: &str) -> Result<TableName> {
    let t = TableName::new(name)?;
    if store.list_tables().await?.contains(&t) {
        store.delete_table(&t).await?;
    }
    store.create_table(&t).await?;
    Ok(t)
}

/// Loads `ENTITIES` through batches of 100 (one partition each).
async fn load_egt(store: &Arc<AzureStore>, t: &TableName) -> Result<Duration> {
    let batches: Vec<Vec<WriteOp>> = (0..ENTITIES)
        .map(|i| entity(i).map(WriteOp::Insert))
        .collect::<Result<Vec<_>>>()?
        .chunks(100)
        .map(<[WriteOp]>::to_vec)
        .collect();
    timed_in_flight(batches.into_iter().map(|ops| store.execute_batch(t, ops))).await
}

/// Loads `ENTITIES` one insert per request.
async fn load_single(store: &Arc<AzureStore>, t: &TableName) -> Result<Duration> {
    let ops = (0..ENTITIES)
        .map(|i| entity(i).map(WriteOp::Insert))
        .collect::<Result<Vec<_>>>()?;
    timed_in_flight(ops.into_iter().map(|op| store.execute(t, op))).await
}

/// Runs requests `IN_FLIGHT` at a time; returns the time they took.
async fn timed_in_flight<T, E, F>(requests: impl Iterator<Item = F>) -> Result<Duration>
where
    F: std::future::Future<Output = std::result::Result<T, E>>,
    E: std::error::Error + 'static,
{
    let started = Instant::now();
    let mut results = futures::stream::iter(requests).buffer_unordered(IN_FLIGHT);
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(started.elapsed())
}

/// Reads the whole table page by page; returns the time and the page count.
async fn scan(store: &AzureStore, t: &TableName) -> Result<(Duration, usize, usize)> {
    let started = Instant::now();
    let (mut pages, mut entities, mut token) = (0, 0, None);
    loop {
        let page = store.query(t, &Query::all(), token.as_ref()).await?;
        pages += 1;
        entities += page.entities.len();
        match page.continuation {
            Some(next) => token = Some(next),
            None => return Ok((started.elapsed(), pages, entities)),
        }
    }
}

#[tokio::main]
async fn main() -> Result {
    // `cargo bench` passes `--bench`; nothing to parse.
    let config = AzureConfig::parse("UseDevelopmentStorage=true")?;
    let store = Arc::new(AzureStore::new(config)?);
    let per_s = |d: Duration| ENTITIES as f64 / d.as_secs_f64();
    println!("{ENTITIES} entities, {IN_FLIGHT} requests in flight, {ROUNDS} rounds");
    for round in 1..=ROUNDS {
        let t = fresh_table(&store, "BenchEgt").await?;
        let egt = load_egt(&store, &t).await?;
        let (scan_time, pages, seen) = scan(&store, &t).await?;
        assert_eq!(seen, ENTITIES);
        let t = fresh_table(&store, "BenchSingle").await?;
        let single = load_single(&store, &t).await?;
        println!(
            "round {round}: EGT load {:.0} entities/s ({egt:.2?}); single inserts {:.0} entities/s ({single:.2?}); EGT/single {:.1}x; full scan {} pages in {scan_time:.2?} = {:.1} pages/s, {:.0} entities/s",
            per_s(egt),
            per_s(single),
            single.as_secs_f64() / egt.as_secs_f64(),
            pages,
            pages as f64 / scan_time.as_secs_f64(),
            seen as f64 / scan_time.as_secs_f64(),
        );
    }
    println!("requests: {}", store.stats().requests);
    Ok(())
}
