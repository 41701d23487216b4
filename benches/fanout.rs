//! Fan-out over a slow store: `SELECT count(*)` of 64 partitions, of 1,000
//! rows each (one full page) and of 100, over a store wrapper that adds 10 ms
//! to every request (a stand-in for a remote service's round trip), at 1 and
//! at 16 requests in flight, and with fan-out off (one chain of pages through
//! the whole table, as before it); and the same over a copy of each table
//! that `ANALYZE` has seen, whose fan-out is planned from its statistics
//! (no listing request).
//!
//! Run with `cargo bench --bench fanout`.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::Bencher;
use tablesql::ScanOptions;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};
use tokio::runtime::Runtime;

#[path = "common/delayed.rs"]
mod delayed;
use delayed::Delayed;

const PARTITIONS: usize = 64;
/// Rows per partition of the two tables.
const SIZES: [usize; 2] = [1000, 100];

fn main() {
    divan::main();
}

struct Fixture {
    rt: Runtime,
    store: Arc<dyn TableStore>,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let inner = EmbeddedStore::in_memory().expect("store");
    rt.block_on(async {
        for (prefix, size) in SIZES
            .iter()
            .flat_map(|s| [("Readings", *s), ("Analyzed", *s)])
        {
            let t = TableName::new(format!("{prefix}{size}")).expect("name");
            inner.create_table(&t).await.expect("create");
            for p in 0..PARTITIONS {
                let rows: Vec<WriteOp> = (0..size)
                    .map(|r| {
                        let e = Entity::new(
                            PartitionKey::new(format!("site{p:02}")).expect("pk"),
                            RowKey::new(format!("{r:06}")).expect("rk"),
                        )
                        .with("v", EdmValue::Int32(r as i32));
                        WriteOp::Insert(e)
                    })
                    .collect();
                for chunk in rows.chunks(100) {
                    inner.execute_batch(&t, chunk.to_vec()).await.expect("load");
                }
            }
        }
    });
    let store: Arc<dyn TableStore> = Arc::new(Delayed::new(Arc::new(inner)));
    rt.block_on(async {
        let engine = Engine::with_store(store.clone(), EngineOptions::default())
            .await
            .expect("engine")
            .session();
        for (prefix, size) in SIZES
            .iter()
            .flat_map(|s| [("Readings", *s), ("Analyzed", *s)])
        {
            let name = prefix.to_lowercase();
            let ddl = format!(
                "CREATE TABLE {name}{size} (site TEXT NOT NULL, seq INT NOT NULL, v INT, \
                 PRIMARY KEY (site, seq)) WITH (storage_table = '{prefix}{size}', \
                 partition_key = '{{site}}', row_key = '{{seq:06}}')"
            );
            engine.collect(&ddl).await.expect("create table");
        }
        // Guideposts every 1,000 entities: no partition is split, so the
        // analyzed plans differ from the listed ones only in the listing.
        for size in SIZES {
            engine
                .analyze(&format!("analyzed{size}"), 1000)
                .await
                .expect("analyze");
        }
    });
    Fixture { rt, store }
});

fn engine(max_in_flight: usize, fan_out: bool) -> Session {
    let options = EngineOptions::default()
        .with_scan(
            ScanOptions::default()
                .with_max_in_flight(max_in_flight)
                .with_fan_out(fan_out),
        )
        .with_scan_policy(tablesql::ScanPolicy::Allow);
    FIXTURE
        .rt
        .block_on(Engine::with_store(FIXTURE.store.clone(), options))
        .expect("engine")
        .session()
}

fn count(bencher: Bencher, engine: Session, size: usize) {
    count_of(bencher, engine, "readings", size);
}

fn count_of(bencher: Bencher, engine: Session, table: &str, size: usize) {
    let sql = format!("SELECT count(*) FROM {table}{size}");
    bencher.bench_local(|| {
        FIXTURE.rt.block_on(async {
            let batches = engine.collect(&sql).await.expect("count");
            let n = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<tablesql::datafusion::arrow::array::Int64Array>()
                .expect("bigint")
                .value(0);
            assert_eq!(n as usize, PARTITIONS * size);
        })
    });
}

/// Fan-out off: one chain of 64 pages, one request after another.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn count_sequential_chain(bencher: Bencher, size: usize) {
    count(bencher, engine(1, false), size);
}

/// One request per partition, one at a time.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn count_fanout_in_flight_1(bencher: Bencher, size: usize) {
    count(bencher, engine(1, true), size);
}

/// One request per partition, 16 at a time.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn count_fanout_in_flight_16(bencher: Bencher, size: usize) {
    count(bencher, engine(16, true), size);
}

/// Planned from statistics: one request per partition, one at a time.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn count_analyzed_in_flight_1(bencher: Bencher, size: usize) {
    count_of(bencher, engine(1, true), "analyzed", size);
}

/// Planned from statistics: one request per partition, 16 at a time.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn count_analyzed_in_flight_16(bencher: Bencher, size: usize) {
    count_of(bencher, engine(16, true), "analyzed", size);
}
