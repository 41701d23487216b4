//! `SELECT count(*)` of the 100,000-registration demo table (200,000 entities
//! with the index rows, 12 partitions) on Azurite: fanned out (one request per
//! partition, 8 in flight) beside the sequential chain of pages it replaced,
//! interleaved, `ROUNDS` times; then after `ANALYZE`, fanned out by the
//! statistics (no listing requests). Each figure also gives the CPU time
//! Azurite's process spent on the query (from `/proc`, with the pid in
//! `.tools/azurite/azurite.pid`), which says whether the emulator is the
//! bound.
//!
//! Needs Azurite on 127.0.0.1:10002: `./scripts/azurite start`, then
//! `cargo bench --bench azure_count`. Not a divan bench: each figure is one
//! timed query of hundreds of HTTP requests.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tablesql::ScanOptions;
use tablesql::ScanPolicy;
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{AzureStore, TableStore};
use tablesql::{Engine, EngineOptions, Session, demo};

const ROWS: u64 = 100_000;
const ROUNDS: usize = 3;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Azurite's CPU time so far (user + system), if its pid is known.
fn azurite_cpu() -> Option<Duration> {
    let pid = std::fs::read_to_string(".tools/azurite/azurite.pid").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
    // Fields after the command's closing parenthesis; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel's clock ticks per second (USER_HZ), 100 on Linux.
    Some(Duration::from_millis(ticks * 10))
}

/// One count: its wall time, and Azurite's CPU time during it.
async fn count(engine: &Session) -> Result<(Duration, Option<Duration>)> {
    let cpu = azurite_cpu();
    let started = Instant::now();
    let batches = engine.collect("SELECT count(*) FROM registrations").await?;
    let elapsed = started.elapsed();
    let cpu = cpu.zip(azurite_cpu()).map(|(a, b)| b.saturating_sub(a));
    let n = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<tablesql::datafusion::arrow::array::Int64Array>()
        .ok_or("count is not a bigint")?
        .value(0);
    assert_eq!(n as u64, ROWS);
    Ok((elapsed, cpu))
}

fn show((wall, cpu): (Duration, Option<Duration>)) -> String {
    match cpu {
        Some(c) => format!("{wall:.2?} (Azurite CPU {c:.2?})"),
        None => format!("{wall:.2?}"),
    }
}

async fn engine(store: &Arc<dyn TableStore>, fan_out: bool) -> Result<Session> {
    let options = EngineOptions::default()
        .with_scan(ScanOptions::default().with_fan_out(fan_out))
        .with_scan_policy(ScanPolicy::Allow);
    Ok(Engine::with_store(store.clone(), options).await?.session())
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
            "round {round}: sequential {}, fanned out {}: {:.1}x",
            show(s),
            show(f),
            s.0.as_secs_f64() / f.0.as_secs_f64()
        );
    }
    let analyzed = Instant::now();
    fanned.analyze("registrations", 1000).await?;
    println!("ANALYZE in {:.1?}", analyzed.elapsed());
    let by_stats = engine(&store, true).await?;
    for round in 1..=ROUNDS {
        let s = count(&sequential).await?;
        let a = count(&by_stats).await?;
        println!(
            "round {round}: sequential {}, fanned out by statistics {}: {:.1}x",
            show(s),
            show(a),
            s.0.as_secs_f64() / a.0.as_secs_f64()
        );
    }
    Ok(())
}
