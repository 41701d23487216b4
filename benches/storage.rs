//! Storage benchmarks: the embedded store beside the memory store on the same
//! work. Run with `cargo bench --bench storage`.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use tablesql::storage::*;
use tokio::runtime::Runtime;

/// Entities in the table the read benchmarks use.
const ROWS: usize = 100_000;
const PARTITIONS: usize = 10;

fn main() {
    divan::main();
}

/// A backend under test, kept alive with whatever it needs (a temp directory).
struct Fixture {
    store: Arc<dyn TableStore>,
    table: TableName,
    _dir: Option<tempfile::TempDir>,
}

trait Backend {
    fn open() -> Fixture;
}

impl Backend for MemoryStore {
    fn open() -> Fixture {
        Fixture {
            store: Arc::new(MemoryStore::new()),
            table: name(),
            _dir: None,
        }
    }
}

impl Backend for EmbeddedStore {
    fn open() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = EmbeddedStore::open(dir.path()).expect("open");
        Fixture {
            store: Arc::new(store),
            table: name(),
            _dir: Some(dir),
        }
    }
}

fn name() -> TableName {
    TableName::new("Bench").expect("name")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn entity(i: usize) -> Entity {
    let pk = PartitionKey::new(format!("partition{:02}", i % PARTITIONS)).expect("key");
    let rk = RowKey::new(format!("row{i:08}")).expect("key");
    Entity::new(pk, rk)
        .with("name", EdmValue::String(format!("runner {i}")))
        .with("age", EdmValue::Int32((i % 80) as i32))
        .with("finish", EdmValue::Int64(i as i64 * 7))
        .with("club", EdmValue::String("Road Runners".into()))
        .with("fast", EdmValue::Boolean(i.is_multiple_of(3)))
}

/// Inserts entities `from..to` in transactions of 100 (one partition each).
async fn load(f: &Fixture, from: usize, to: usize) {
    let mut ops: Vec<Vec<WriteOp>> = vec![Vec::new(); PARTITIONS];
    for i in from..to {
        let p = i % PARTITIONS;
        ops[p].push(WriteOp::Insert(entity(i)));
        if ops[p].len() == 100 {
            f.store
                .execute_batch(&f.table, std::mem::take(&mut ops[p]))
                .await
                .expect("batch");
        }
    }
    for rest in ops.into_iter().filter(|o| !o.is_empty()) {
        f.store.execute_batch(&f.table, rest).await.expect("batch");
    }
}

fn loaded<B: Backend>(rt: &Runtime) -> Fixture {
    let f = B::open();
    rt.block_on(async {
        f.store.create_table(&f.table).await.expect("create");
        load(&f, 0, ROWS).await;
    });
    f
}

#[divan::bench(types = [MemoryStore, EmbeddedStore])]
fn point_get<B: Backend>(bencher: Bencher) {
    let rt = runtime();
    let f = loaded::<B>(&rt);
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let e = entity(i);
        rt.block_on(f.store.get(&f.table, &e.partition_key, &e.row_key))
            .expect("get")
            .expect("found")
    });
}

#[divan::bench(types = [MemoryStore, EmbeddedStore])]
fn page_of_1000<B: Backend>(bencher: Bencher) {
    let rt = runtime();
    let f = loaded::<B>(&rt);
    let query = Query::partition(PartitionKey::new("partition03").expect("key"));
    bencher.counter(ItemsCount::new(1000usize)).bench_local(|| {
        let page = rt
            .block_on(f.store.query(&f.table, &query, None))
            .expect("page");
        assert_eq!(page.entities.len(), 1000);
        black_box(page)
    });
}

#[divan::bench(types = [MemoryStore, EmbeddedStore], sample_count = 10)]
fn full_scan<B: Backend>(bencher: Bencher) {
    let rt = runtime();
    let f = loaded::<B>(&rt);
    bencher.counter(ItemsCount::new(ROWS)).bench_local(|| {
        let all = rt
            .block_on(f.store.query_all(&f.table, &Query::all()))
            .expect("scan");
        assert_eq!(all.len(), ROWS);
        black_box(all)
    });
}

/// A full scan whose filter on a non-key property matches 1 in 80 entities and
/// returns one property: what "entities scanned" means in the service's targets.
#[divan::bench(types = [MemoryStore, EmbeddedStore], sample_count = 10)]
fn filtered_scan<B: Backend>(bencher: Bencher) {
    let rt = runtime();
    let f = loaded::<B>(&rt);
    let query = Query::all()
        .filter(Filter::property("age", CmpOp::Eq, EdmValue::Int32(7)))
        .select(["name"]);
    bencher.counter(ItemsCount::new(ROWS)).bench_local(|| {
        let hits = rt
            .block_on(f.store.query_all(&f.table, &query))
            .expect("scan");
        assert_eq!(hits.len(), ROWS / 80);
        black_box(hits)
    });
}

/// Entity group transactions of 100 inserts, 10 in flight at once, as a loader runs them.
#[divan::bench(types = [MemoryStore, EmbeddedStore], sample_count = 10)]
fn egt_inserts<B: Backend>(bencher: Bencher) {
    const PER_SAMPLE: usize = 10_000;
    let rt = runtime();
    let f = B::open();
    rt.block_on(f.store.create_table(&f.table)).expect("create");
    let mut next = 0;
    bencher
        .counter(ItemsCount::new(PER_SAMPLE))
        .bench_local(|| {
            let from = next;
            next += PER_SAMPLE;
            rt.block_on(async {
                use futures::StreamExt;
                let batches: Vec<Vec<WriteOp>> = (0..PER_SAMPLE / 100)
                    .map(|b| {
                        (0..100)
                            .map(|j| WriteOp::Insert(entity((from + b * 100 + j) * PARTITIONS)))
                            .collect()
                    })
                    .collect();
                let results: Vec<_> = futures::stream::iter(batches)
                    .map(|ops| f.store.execute_batch(&f.table, ops))
                    .buffer_unordered(10)
                    .collect()
                    .await;
                results.into_iter().for_each(|r| {
                    r.expect("batch");
                });
            })
        });
}
