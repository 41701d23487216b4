//! Full-scan aggregates over 1,000,000 registrations (2,000,000 entities with
//! the `AGE:` index rows) in an embedded store on disk, each beside its peers
//! in the same run:
//! - SQLite (rusqlite, bundled, in memory, `WITHOUT ROWID`, primary key
//!   `(event, distance, bib)`) holding the same rows;
//! - a raw redb iteration over the same entities: a copy of the store's file
//!   opened with redb directly, reading the base rows' keys and values
//!   partition by partition (the ranges the SQL scan reads), counting them
//!   and summing their value lengths, one thread.
//!
//! Beside them, a point get and a 1,000-row range of one partition, the
//! reads a new store format must not slow.
//!
//! A scan asked again is served from the store's derived cache (decoded
//! pages kept until a write lands in their partitions); the `_after_write`
//! benches write into every partition before each run (not timed), so they
//! measure the scan that reads the store.
//!
//! Run with `cargo bench --bench scan` (release; the load takes about half a
//! minute). The file builds against format 1's code too (the raw iteration
//! picks its key encoding by `embedded::FORMAT_VERSION`), for a base run.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock, Mutex};

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::arrow::datatypes::Int64Type;
use tablesql::datafusion::arrow::record_batch::RecordBatch;
use tablesql::demo;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};
use tokio::runtime::Runtime;

/// Registrations loaded: 1,000,000, or `TABLESQL_SCAN_ROWS` (a smaller
/// fixture, for instruction counts under callgrind; at least 24,000, so
/// that the one-partition range holds its 1,000 rows).
static ROWS_LOADED: LazyLock<u64> = LazyLock::new(|| {
    std::env::var("TABLESQL_SCAN_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
});

#[path = "common/sqlite.rs"]
mod sqlite;

fn main() {
    // Loaded before timing starts, not in the first sample.
    LazyLock::force(&FIXTURE);
    divan::main();
    // A static is never dropped: its directories (a store, and here a
    // copy of it) would stay in the temp directory after every run.
    for dir in &FIXTURE.dirs {
        let _ = std::fs::remove_dir_all(dir.path());
    }
}

struct Fixture {
    rt: Runtime,
    store: Arc<dyn TableStore>,
    engine: Session,
    sqlite: Mutex<rusqlite::Connection>,
    /// The copy of the store's file, and the base rows' key range of each
    /// partition in the store's key encoding.
    raw: redb::Database,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    dirs: [tempfile::TempDir; 2],
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::open(dir.path()).expect("store"));
    let table = TableName::new(demo::TABLE).expect("name");
    let (engine, partitions) = rt.block_on(async {
        // The demo load's time, for a comparison of store formats (printed,
        // not a divan figure: it runs once).
        let started = std::time::Instant::now();
        demo::load(store.as_ref(), *ROWS_LOADED, |_, _| {})
            .await
            .expect("demo");
        eprintln!(
            "demo load of {} registrations: {:.2} s",
            *ROWS_LOADED,
            started.elapsed().as_secs_f64()
        );
        let engine = Engine::with_store(store.clone(), EngineOptions::default())
            .await
            .expect("engine")
            .session();
        let partitions = store
            .partitions(&table, &KeyRange::all(), None)
            .await
            .expect("partitions")
            .partitions;
        (engine, partitions)
    });
    // Every commit is durable, so the file can be copied as it stands.
    let copy = tempfile::tempdir().expect("temp dir");
    let file = copy.path().join("copy.redb");
    std::fs::copy(dir.path().join(embedded::FILE_NAME), &file).expect("copy");
    let raw = redb::Database::open(&file).expect("redb");
    // Format 2 keys: the PartitionKey, a zero byte, the RowKey (these are
    // ASCII, whose CESU-8 is their own bytes).
    // Format 1 keys (this file also builds against the code before format
    // 2, for a base run): UTF-16BE, two zero bytes.
    let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_be_bytes).collect() };
    let ranges = partitions
        .iter()
        .map(|pk| {
            if embedded::FORMAT_VERSION == 1 {
                let mut start = utf16(pk.as_str());
                start.extend_from_slice(&[0, 0]);
                let mut end = start.clone();
                start.extend(utf16("BIB:"));
                end.extend(utf16("BIB;"));
                return (start, end);
            }
            let mut start = pk.as_str().as_bytes().to_vec();
            start.push(0);
            let mut end = start.clone();
            start.extend_from_slice(b"BIB:");
            end.extend_from_slice(b"BIB;");
            (start, end)
        })
        .collect();
    Fixture {
        rt,
        store,
        engine,
        sqlite: Mutex::new(sqlite::copy(*ROWS_LOADED)),
        raw,
        ranges,
        dirs: [dir, copy],
    }
});

const COUNT: &str = "SELECT count(*) FROM registrations";
const AVG_AGE: &str = "SELECT avg(age) FROM registrations";
const BY_GENDER: &str = "SELECT gender, count(*), avg(age) FROM registrations GROUP BY gender";
/// 1,000 registrations of one partition (bibs there run from 1 up).
const RANGE: &str = "SELECT name, age FROM registrations WHERE event = '2012 Boston Marathon' \
                     AND distance = 'Full' AND bib BETWEEN 1000 AND 1999";

fn sql(query: &str) -> Vec<RecordBatch> {
    let f = &*FIXTURE;
    f.rt.block_on(f.engine.collect(query)).expect("query")
}

#[divan::bench(sample_count = 10)]
fn count_sql(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let rows = sql(COUNT);
            assert_eq!(
                rows[0].column(0).as_primitive::<Int64Type>().value(0),
                *ROWS_LOADED as i64
            );
            black_box(rows)
        });
}

#[divan::bench(sample_count = 10)]
fn count_sqlite(bencher: Bencher) {
    let db = FIXTURE.sqlite.lock().expect("sqlite");
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let n: i64 = db.query_row(COUNT, [], |r| r.get(0)).expect("row");
            assert_eq!(n, *ROWS_LOADED as i64);
            black_box(n)
        });
}

#[divan::bench(sample_count = 10)]
fn avg_age_sql(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| black_box(sql(AVG_AGE)));
}

/// Rewrites registration `i`'s base row as it is, for each of the first
/// 12 (one per partition): a write in every partition, which the derived
/// cache must not outlive, changing no answer.
fn touch_every_partition() {
    touch_partitions(12);
}

/// A write into the first of the twelve partitions, as a workload that
/// writes between its reads makes: the scan reads that partition again
/// and the other eleven from the derived cache.
fn touch_one_partition() {
    touch_partitions(1);
}

/// Rewrites one registration in each of the first `n` partitions
/// (registration `i` is in partition `i % 12`).
fn touch_partitions(n: u64) {
    let f = &*FIXTURE;
    let table = TableName::new(demo::TABLE).expect("name");
    f.rt.block_on(async {
        for i in 0..n {
            let [base, _] = demo::registration(i).entities().expect("entities");
            f.store
                .execute_batch(&table, vec![WriteOp::InsertOrReplace(base)])
                .await
                .expect("write");
        }
    });
}

/// The writes alone that the `_after_write` benches make before each run:
/// their cost, to take out of those benches' instruction counts.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn touch_only(bencher: Bencher) {
    bencher.bench_local(touch_every_partition);
}

/// `avg_age_sql` as the first read after a write in every partition: what
/// the scan costs where the derived cache holds nothing (and filling it).
#[divan::bench(sample_count = 10, sample_size = 1)]
fn avg_age_sql_after_write(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .with_inputs(touch_every_partition)
        .bench_local_values(|()| black_box(sql(AVG_AGE)));
}

/// `avg_age_sql` after a write into one partition.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn avg_age_sql_after_one_write(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .with_inputs(touch_one_partition)
        .bench_local_values(|()| black_box(sql(AVG_AGE)));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn by_gender_sql_after_write(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .with_inputs(touch_every_partition)
        .bench_local_values(|()| black_box(sql(BY_GENDER)));
}

#[divan::bench(sample_count = 50, sample_size = 1)]
fn partition_range_sql_after_write(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(1000u64))
        .with_inputs(touch_every_partition)
        .bench_local_values(|()| {
            let rows = sql(RANGE);
            assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 1000);
            black_box(rows)
        });
}

#[divan::bench(sample_count = 10)]
fn avg_age_sqlite(bencher: Bencher) {
    let db = FIXTURE.sqlite.lock().expect("sqlite");
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let avg: f64 = db.query_row(AVG_AGE, [], |r| r.get(0)).expect("row");
            black_box(avg)
        });
}

#[divan::bench(sample_count = 10)]
fn by_gender_sql(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let rows = sql(BY_GENDER);
            assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
            black_box(rows)
        });
}

#[divan::bench(sample_count = 10)]
fn by_gender_sqlite(bencher: Bencher) {
    let db = FIXTURE.sqlite.lock().expect("sqlite");
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let mut stmt = db.prepare_cached(BY_GENDER).expect("prepare");
            let groups: Vec<(String, i64)> = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows");
            assert_eq!(groups.len(), 2);
            black_box(groups)
        });
}

#[divan::bench(sample_count = 10)]
fn raw_redb_iteration(bencher: Bencher) {
    use redb::{ReadableDatabase, TableDefinition};
    let f = &*FIXTURE;
    let name = format!("entities_{}", demo::TABLE.to_ascii_lowercase());
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            let txn = f.raw.begin_read().expect("read");
            let rows = txn.open_table(def).expect("table");
            let (mut n, mut bytes) = (0u64, 0usize);
            for (start, end) in &f.ranges {
                for item in rows
                    .range::<&[u8]>(start.as_slice()..end.as_slice())
                    .expect("range")
                {
                    let (key, value) = item.expect("entry");
                    n += 1;
                    bytes += key.value().len() + value.value().len();
                }
            }
            assert_eq!(n, *ROWS_LOADED);
            black_box(bytes)
        });
}

#[divan::bench(sample_count = 10)]
fn by_gender_rows_sql(bencher: Bencher) {
    // (`by_gender_sql` above is the query, with avg(age).)
    bencher
        .counter(ItemsCount::new(*ROWS_LOADED))
        .bench_local(|| {
            black_box(sql(
                "SELECT gender, count(*) FROM registrations GROUP BY gender",
            ))
        });
}

/// One registration by its keys, from the store (the middle one loaded).
#[divan::bench]
fn point_get_store(bencher: Bencher) {
    let f = &*FIXTURE;
    let r = demo::registration(*ROWS_LOADED / 2);
    let table = TableName::new(demo::TABLE).expect("name");
    let pk = PartitionKey::new(format!("{}__{}", r.event, r.distance)).expect("key");
    let rk = RowKey::new(format!(
        "BIB:{:05}__{}__{}__{}",
        r.bib, r.name, r.gender, r.age
    ))
    .expect("key");
    bencher.bench_local(|| {
        let e = f.rt.block_on(f.store.get(&table, &pk, &rk)).expect("get");
        assert!(e.is_some());
        black_box(e)
    });
}

/// 1,000 registrations of one partition by a bib range (a row range).
#[divan::bench(sample_count = 50)]
fn partition_range_sql(bencher: Bencher) {
    bencher.counter(ItemsCount::new(1000u64)).bench_local(|| {
        let rows = sql(RANGE);
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 1000);
        black_box(rows)
    });
}

#[divan::bench(sample_count = 50)]
fn partition_range_sqlite(bencher: Bencher) {
    let db = FIXTURE.sqlite.lock().expect("sqlite");
    bencher.counter(ItemsCount::new(1000u64)).bench_local(|| {
        let mut stmt = db.prepare_cached(RANGE).expect("prepare");
        let rows: Vec<(String, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows.len(), 1000);
        black_box(rows)
    });
}
