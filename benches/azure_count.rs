//! `SELECT count(*)` of the 100,000-registration demo table (200,000 entities
//! with the index rows, 12 partitions) on Azurite: fanned out (one request per
//! partition, 8 in flight) beside the sequential chain of pages it replaced,
//! interleaved, `ROUNDS` times.
//!
//! Needs Azurite on 127.0.0.1:10002: `./scripts/azurite start`, then
//! `cargo bench --bench azure_count`. Not a divan bench: each figure is one
//! timed query of hundreds of HTTP requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tablesql::exec::ScanOptions;
use tablesql::planner::policy::ScanPolicy;
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{AzureStore, TableStore};
use tablesql::{Engine, EngineOptions, demo};

const ROWS: u64 = 100_000;
const ROUNDS: usize = 3;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

async fn count(engine: &Engine) -> Result<Duration> {
    let started = Instant::now();
    let batches = engine.collect("SELECT count(*) FROM registrations").await?;
    let elapsed = started.elapsed();
    let n = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<tablesql::datafusion::arrow::array::Int64Array>()
        .ok_or("count is not a bigint")?
        .value(0);
    assert_eq!(n as u64, ROWS);
    Ok(elapsed)
}

async fn engine(store: &Arc<dyn TableStore>, fan_out: bool) -> Result<Engine> {
    let options = EngineOptions {
        scan: ScanOptions {
            fan_out,
            ..ScanOptions::default()
        },
        scan_policy: ScanPolicy::Allow,
        ..EngineOptions::default()
    };
    Ok(Engine::with_store(store.clone(), options).await?)
}

#[tokio::main]
async fn main() -> Result {
    let config = AzureConfig::parse("UseDevelopmentStorage=true")?;
    let store: Arc<dyn TableStore> = Arc::new(AzureStore::new(config)?);
    let loaded = Instant::now();
    demo::load(store.as_ref(), ROWS, |_, _| {}).await?;
    println!("loaded {ROWS} registrations in {:.1?}", loaded.elapsed());
    let (fanned, sequential) = (engine(&store, true).await?, engine(&store, false).await?);
    for round in 1..=ROUNDS {
        let s = count(&sequential).await?;
        let f = count(&fanned).await?;
        println!(
            "round {round}: sequential {s:.2?}, fanned out {f:.2?}: {:.1}x",
            s.as_secs_f64() / f.as_secs_f64()
        );
    }
    Ok(())
}
