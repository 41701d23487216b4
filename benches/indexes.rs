//! Secondary lookups through the demo's AGE: index rows, on 1,000,000
//! registrations (2,000,000 entities with the index rows) in an embedded
//! store on disk, each query beside itself with index use off
//! (`SET tablesql.use_indexes = off`, which reads the base rows):
//! - `age = 55` in one event and distance: the AGE:055 prefix of one
//!   partition beside a scan of the partition's base rows;
//! - `age = 55` alone: the AGE:055 range in every partition beside a scan
//!   of every base row;
//! - `age = 99` in one partition (no such row): the fixed cost of a
//!   statement from text, which bounds the ratio.
//!
//! Before timing, it prints each query's scan counters (entities scanned
//! and returned, store requests, partitions) with and without the index.
//! Run with `cargo bench --bench indexes`; the load takes about a minute.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::{Bencher, black_box};
use tablesql::datafusion::physical_plan::{ExecutionPlan, collect};
use tablesql::demo;
use tablesql::storage::{EmbeddedStore, TableStore};
use tablesql::{Engine, EngineOptions, Session};
use tokio::runtime::Runtime;

const ROWS: u64 = 1_000_000;

const IN_PARTITION: &str = "SELECT bib, name, age, finish FROM registrations \
     WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND age = 55";
/// The same plan with no row to return: the fixed cost of a statement from
/// text (parsing, planning, one request), which bounds how much faster
/// any path can be.
const NO_ROWS: &str = "SELECT bib, name, age, finish FROM registrations \
     WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND age = 99";
const EVERYWHERE: &str = "SELECT event, distance, bib, name FROM registrations WHERE age = 55";

struct Fixture {
    rt: Runtime,
    on: Session,
    off: Session,
    dir: tempfile::TempDir,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::open(dir.path()).expect("store"));
    let (on, off) = rt.block_on(async {
        demo::load(store.as_ref(), ROWS, |_, _| {})
            .await
            .expect("demo");
        let on = Engine::with_store(store.clone(), EngineOptions::default())
            .await
            .expect("engine")
            .session();
        let off = Engine::with_store(store.clone(), EngineOptions::default())
            .await
            .expect("engine")
            .session();
        off.collect("SET tablesql.use_indexes = off")
            .await
            .expect("set");
        (on, off)
    });
    Fixture { rt, on, off, dir }
});

/// Runs `sql` and sums the scan's counters over the plan.
async fn counters(engine: &Session, sql: &str) -> String {
    let df = engine.sql(sql).await.expect("plan");
    let task = Arc::new(df.task_ctx());
    let plan = df.create_physical_plan().await.expect("physical plan");
    let rows: usize = collect(plan.clone(), task)
        .await
        .expect("run")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    let mut shown = format!("rows={rows}");
    for name in [
        "entities_scanned",
        "entities_returned",
        "requests",
        "listing_requests",
        "partitions",
        "index_lookups",
    ] {
        shown.push_str(&format!(" {name}={}", sum(plan.as_ref(), name)));
    }
    shown
}

/// The counter `name` summed over the plan's nodes (the scan's counters
/// print their exact values).
fn sum(plan: &dyn ExecutionPlan, name: &str) -> usize {
    let own: usize = plan.metrics().map_or(0, |m| {
        m.iter()
            .filter(|m| m.value().name() == name)
            .filter_map(|m| m.value().to_string().parse::<usize>().ok())
            .sum()
    });
    own + plan
        .children()
        .into_iter()
        .map(|c| sum(c.as_ref(), name))
        .sum::<usize>()
}

fn main() {
    let f = &*FIXTURE;
    for (what, sql) in [
        ("age = 55 in one partition", IN_PARTITION),
        ("age = 55 everywhere", EVERYWHERE),
    ] {
        for (mode, engine) in [("index", &f.on), ("base rows", &f.off)] {
            println!("{what}, {mode}: {}", f.rt.block_on(counters(engine, sql)));
        }
    }
    divan::main();
    // A static is never dropped: its store would stay in the temp
    // directory after every run.
    let _ = std::fs::remove_dir_all(f.dir.path());
}

fn run(engine: &Session, sql: &str) -> usize {
    let f = &*FIXTURE;
    let rows = f.rt.block_on(engine.collect(sql)).expect("query");
    rows.iter().map(|b| b.num_rows()).sum()
}

#[divan::bench]
fn age_in_partition_index(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| black_box(run(&f.on, IN_PARTITION)));
}

#[divan::bench]
fn no_rows_index(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| black_box(run(&f.on, NO_ROWS)));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn age_in_partition_base_rows(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| black_box(run(&f.off, IN_PARTITION)));
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn age_everywhere_index(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| black_box(run(&f.on, EVERYWHERE)));
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn age_everywhere_base_rows(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| black_box(run(&f.off, EVERYWHERE)));
}
