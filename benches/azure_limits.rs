//! tablesql at Azure Storage's scale and limits, on the local Table service
//! (`tablesql::tableservice`, profile `storage` at its default targets:
//! 2,000 entities/s per range server, 20,000 per account, 100 partitions
//! per range server, a 1 s backlog before 503 ServerBusy, 5 s per query
//! page): a million entities over 10,000 partitions.
//!
//! - A full aggregate (`count(*)`, `sum(v)` of the raw table): its rate
//!   against the account's 20,000 entities/s.
//! - A one-partition scan of 20,000 entities: its rate against a range
//!   server's 2,000/s.
//! - The full aggregate again with the capacity halved a third of the way
//!   in: slower, and still right.
//! - The full aggregate with a range server per partition: the client's
//!   rate where the account alone bounds it.
//!
//! Each with the service's counters (requests, throttled answers, entities
//! scanned) and the client's (retries, busy answers, time waiting, the
//! window of requests in flight). The entities are written straight into
//! the service's store (loading them through it would take the account's
//! rate too, 50 s). `cargo bench --bench azure_limits`; `AZURE_LIMITS_ROWS`
//! scales the table down (entities per partition, default 100).

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tablesql::datafusion::arrow::array::{Array, Int64Array};
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{
    AzureStore, EdmValue, EmbeddedStore, Entity, PartitionKey, RowKey, TableName, TableStore,
    WriteOp,
};
use tablesql::tableservice::{Account, Limits, Profile, Service, Snapshot};
use tablesql::{Engine, EngineOptions, ScanOptions, ScanPolicy, Session};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const PARTITIONS: usize = 10_000;
const BIG_PARTITION: usize = 20_000;

async fn load(store: &EmbeddedStore, per_partition: usize) -> Result {
    let t = TableName::new("Big")?;
    store.create_table(&t).await?;
    for p in 0..PARTITIONS {
        let pk = PartitionKey::new(format!("p{p:05}"))?;
        let ops: Vec<WriteOp> = (0..per_partition)
            .map(|r| {
                let e = Entity::new(pk.clone(), RowKey::new(format!("{r:05}")).unwrap())
                    .with("v", EdmValue::Int32(r as i32));
                WriteOp::Insert(e)
            })
            .collect();
        for chunk in ops.chunks(100) {
            store.execute_batch(&t, chunk.to_vec()).await?;
        }
    }
    let one = TableName::new("One")?;
    store.create_table(&one).await?;
    let pk = PartitionKey::new("only")?;
    let ops: Vec<WriteOp> = (0..BIG_PARTITION)
        .map(|r| {
            let e = Entity::new(pk.clone(), RowKey::new(format!("{r:06}")).unwrap())
                .with("v", EdmValue::Int32(1));
            WriteOp::Insert(e)
        })
        .collect();
    for chunk in ops.chunks(100) {
        store.execute_batch(&one, chunk.to_vec()).await?;
    }
    Ok(())
}

fn ints(batches: &[tablesql::datafusion::arrow::array::RecordBatch]) -> Vec<i64> {
    let b = &batches[0];
    (0..b.num_columns())
        .map(|i| {
            let c = b.column(i);
            c.as_any()
                .downcast_ref::<Int64Array>()
                .map(|a| a.value(0))
                .unwrap_or_else(|| panic!("column {i} is {:?}", c.data_type()))
        })
        .collect()
}

/// What a measurement runs on.
struct Bench<'a> {
    session: &'a Session,
    store: &'a AzureStore,
    service: &'a Service,
}

/// Runs `sql`, checks its answer, and prints its rate against `target`
/// entities/s and the counters.
async fn measure(
    on: &Bench<'_>,
    label: &str,
    sql: &str,
    want: &[i64],
    entities: usize,
    target: f64,
) -> Result<f64> {
    let Bench {
        session,
        store,
        service,
    } = on;
    let before = (service.counters(), store.stats());
    let started = Instant::now();
    let got = ints(&session.collect(sql).await?);
    let took = started.elapsed();
    assert_eq!(got, want, "{label}: wrong answer");
    let (counters, client) = (service.counters(), store.stats());
    let rate = entities as f64 / took.as_secs_f64();
    let d = |f: fn(&Snapshot) -> u64| f(&counters) - f(&before.0);
    println!(
        "{label}: {entities} entities in {took:.2?}: {rate:.0} entities/s, {:.1}% of {target:.0}/s; \
         service: {} requests, {} throttled, {} scanned; client: {} retries, {} busy, {:.2?} waiting, window {:.1}",
        100.0 * rate / target,
        d(|s| s.account.requests),
        d(|s| s.account.throttled),
        d(|s| s.account.scanned),
        client.retries - before.1.retries,
        client.busy - before.1.busy,
        client.waited.saturating_sub(before.1.waited),
        client.window,
    );
    Ok(rate)
}

#[tokio::main]
async fn main() -> Result {
    let per_partition: usize = std::env::var("AZURE_LIMITS_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let total = PARTITIONS * per_partition;
    let dir = tempfile::tempdir()?;
    let embedded = Arc::new(EmbeddedStore::open(dir.path())?);
    let loaded = Instant::now();
    load(&embedded, per_partition).await?;
    println!(
        "loaded {total} entities in {PARTITIONS} partitions and {BIG_PARTITION} in one, in {:.1?}",
        loaded.elapsed()
    );
    let limits = Limits::new(Profile::Storage);
    let service = Arc::new(Service::new(embedded, limits.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let account = Account::new(
        tablesql::storage::azure::config::DEV_ACCOUNT,
        tablesql::storage::azure::config::DEV_ACCOUNT_KEY,
    )?;
    let running = tablesql::tableservice::serve(listener, service.clone(), account)?;
    let config = AzureConfig::parse(&running.connection_string())?;
    let store = Arc::new(AzureStore::new(config)?);
    let shared: Arc<dyn TableStore> = store.clone();
    // As many scan requests in flight as the client's window allows at
    // most (MaxConnections, 32): the window, not the scan, is the bound.
    let options = EngineOptions::default()
        .with_scan(ScanOptions::default().with_max_in_flight(32))
        .with_scan_policy(ScanPolicy::Allow);
    let session = Engine::with_store(shared, options).await?.session();
    let sum: i64 = (0..per_partition as i64).sum::<i64>() * PARTITIONS as i64;
    let on = Bench {
        session: &session,
        store: &store,
        service: &service,
    };
    let full = "SELECT count(*), sum(v) FROM raw.big";
    measure(
        &on,
        "full aggregate",
        full,
        &[total as i64, sum],
        total,
        limits.account_rate,
    )
    .await?;
    measure(
        &on,
        "one partition",
        "SELECT count(*), sum(v) FROM raw.one",
        &[BIG_PARTITION as i64, BIG_PARTITION as i64],
        BIG_PARTITION,
        limits.partition_rate,
    )
    .await?;
    // Halve every rate a third of the way into the full aggregate.
    let expected = Duration::from_secs_f64(total as f64 / limits.account_rate);
    let halver = service.clone();
    let halving = tokio::spawn(async move {
        tokio::time::sleep(expected / 3).await;
        halver.set_limits(|l| {
            l.account_rate /= 2.0;
            l.partition_rate /= 2.0;
        });
        println!("capacity halved after {:.1?}", expected / 3);
    });
    // A third at the full rate, two thirds at half: 5/3 of the time.
    let blended = limits.account_rate * 3.0 / 5.0;
    measure(
        &on,
        "full aggregate, capacity halved",
        full,
        &[total as i64, sum],
        total,
        blended,
    )
    .await?;
    halving.await?;
    // The same with every partition on a range server of its own: what the
    // client sustains where the account, not a range, is the bound.
    service.set_limits(|l| {
        *l = limits.clone();
        l.partitions_per_server = 1;
    });
    measure(
        &on,
        "full aggregate, a range server per partition",
        full,
        &[total as i64, sum],
        total,
        limits.account_rate,
    )
    .await?;
    Ok(())
}
