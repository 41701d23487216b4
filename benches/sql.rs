//! SQL benchmarks over the demo registrations (100,000 registrations, 200,000
//! entities with the index rows) in an embedded store on disk, each beside its
//! peer on the same rows:
//! - a point query through SQL beside a direct store get of the same entity;
//! - a full-scan aggregate through SQL beside a raw store iteration doing the
//!   same sum, and beside SQLite (rusqlite, bundled) over the same rows;
//! - a bib range in one partition: the pushed row range beside the same query
//!   with pushdown off (a full scan plus filter);
//! - a correlated subquery evaluated per outer value beside SQLite.
//!
//! Run with `cargo bench --bench sql`.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::arrow::datatypes::Int64Type;
use tablesql::demo::{self, registration};
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};
use tokio::runtime::Runtime;

const ROWS: u64 = 100_000;

#[path = "common/sqlite.rs"]
mod sqlite;

fn main() {
    // Loaded before timing starts, not in the first sample.
    LazyLock::force(&FIXTURE);
    divan::main();
    // A static is never dropped: its store would stay in the temp
    // directory after every run.
    let _ = std::fs::remove_dir_all(FIXTURE.dir.path());
}

struct Fixture {
    rt: Runtime,
    store: Arc<dyn TableStore>,
    pushed: Session,
    unpushed: Session,
    /// As `pushed`, without workload statistics: what they cost.
    unobserved: Session,
    sqlite: std::sync::Mutex<rusqlite::Connection>,
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
    let (pushed, unpushed, unobserved) = rt.block_on(async {
        demo::load(store.as_ref(), ROWS, |_, _| {})
            .await
            .expect("demo");
        let pushed = Engine::with_store(store.clone(), EngineOptions::default())
            .await
            .expect("engine")
            .session();
        let off = EngineOptions::default().with_pushdown(false);
        let unpushed = Engine::with_store(store.clone(), off)
            .await
            .expect("engine")
            .session();
        let no_statistics = EngineOptions::default().with_statistics(false);
        let unobserved = Engine::with_store(store.clone(), no_statistics)
            .await
            .expect("engine")
            .session();
        (pushed, unpushed, unobserved)
    });
    let sqlite = std::sync::Mutex::new(sqlite::copy(ROWS));
    Fixture {
        rt,
        store,
        pushed,
        unpushed,
        unobserved,
        sqlite,
        dir,
    }
});

/// Registration `i`'s point query.
fn point_sql(i: u64) -> String {
    let r = registration(i);
    format!(
        "SELECT name, age, finish FROM registrations WHERE event = '{}' AND distance = '{}' AND bib = {}",
        r.event, r.distance, r.bib
    )
}

fn single_i64(batches: &[tablesql::datafusion::arrow::record_batch::RecordBatch]) -> i64 {
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

#[divan::bench]
fn point_query_sql(bencher: Bencher) {
    let f = &*FIXTURE;
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let rows =
            f.rt.block_on(f.pushed.collect(&point_sql(i)))
                .expect("query");
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        black_box(rows)
    });
}

/// What the wire server does per Execute of a prepared point query: the plan
/// was parsed and optimized once with its placeholders; each run binds the
/// values and plans physically (where the keys are pushed) and executes.
#[divan::bench]
fn point_query_prepared(bencher: Bencher) {
    prepared_execute(bencher, &FIXTURE.pushed);
}

/// `point_query_prepared` on an engine without workload statistics.
#[divan::bench]
fn point_query_prepared_no_statistics(bencher: Bencher) {
    prepared_execute(bencher, &FIXTURE.unobserved);
}

fn prepared_execute(bencher: Bencher, engine: &Session) {
    use futures::StreamExt;
    use tablesql::__bench::Guard;
    use tablesql::__bench::Runner;
    use tablesql::datafusion::common::ParamValues;
    use tablesql::datafusion::scalar::ScalarValue;
    let f = &*FIXTURE;
    let runner = Runner::new(engine.session());
    let sql = "SELECT name, age, finish FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3";
    let prepared = f.rt.block_on(async {
        let statement = runner.parse(sql).expect("parse").remove(0);
        runner.prepare(sql, statement).await.expect("prepare")
    });
    let format = pgwire::api::portal::Format::UnifiedBinary;
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let r = registration(i);
        let values = ParamValues::List(vec![
            ScalarValue::from(r.event).into(),
            ScalarValue::from(r.distance).into(),
            ScalarValue::Int32(Some(r.bib)).into(),
        ]);
        f.rt.block_on(async {
            let mut response = runner
                .execute_values(&prepared, &values, &format, Guard::unbounded())
                .await
                .expect("execute");
            let mut rows = 0;
            while let Some(row) = response.data_rows().next().await {
                black_box(row.expect("row"));
                rows += 1;
            }
            assert_eq!(rows, 1);
        })
    });
}

/// The library's prepared statement (`Session::prepare`): planned once,
/// each run binds the keys and reads the entity on the calling task.
#[divan::bench]
fn point_query_library_prepared(bencher: Bencher) {
    library_prepared(bencher, &FIXTURE.pushed);
}

/// `point_query_library_prepared` on an engine without workload statistics.
#[divan::bench]
fn point_query_library_prepared_no_statistics(bencher: Bencher) {
    library_prepared(bencher, &FIXTURE.unobserved);
}

fn library_prepared(bencher: Bencher, engine: &Session) {
    use tablesql::datafusion::scalar::ScalarValue;
    let f = &*FIXTURE;
    let prepared = f
        .rt
        .block_on(engine.prepare(
            "SELECT name, age, finish FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3",
        ))
        .expect("prepare");
    assert!(prepared.is_point_read());
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let r = registration(i);
        let params = vec![
            ScalarValue::from(r.event),
            ScalarValue::from(r.distance),
            ScalarValue::Int32(Some(r.bib)),
        ];
        let rows = f.rt.block_on(prepared.query(params)).expect("query");
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        black_box(rows)
    });
}

#[divan::bench]
fn point_get_store(bencher: Bencher) {
    let f = &*FIXTURE;
    let table = TableName::new(demo::TABLE).expect("name");
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let [base, _] = registration(i).entities().expect("entities");
        f.rt.block_on(f.store.get(&table, &base.partition_key, &base.row_key))
            .expect("get")
            .expect("found")
    });
}

#[divan::bench]
fn point_query_sqlite(bencher: Bencher) {
    let f = &*FIXTURE;
    let db = f.sqlite.lock().expect("sqlite");
    let mut stmt = db
        .prepare("SELECT name, age, finish FROM registrations WHERE event = ?1 AND distance = ?2 AND bib = ?3")
        .expect("prepare");
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 7919) % ROWS;
        let r = registration(i);
        let name: String = stmt
            .query_row(rusqlite::params![r.event, r.distance, r.bib], |row| {
                row.get(0)
            })
            .expect("row");
        black_box(name)
    });
}

const AGGREGATE: &str = "SELECT count(*), sum(finish) FROM registrations";

#[divan::bench(sample_count = 10)]
fn full_scan_aggregate_sql(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.counter(ItemsCount::new(ROWS)).bench_local(|| {
        let rows = f.rt.block_on(f.pushed.collect(AGGREGATE)).expect("query");
        assert_eq!(single_i64(&rows), ROWS as i64);
        black_box(rows)
    });
}

#[divan::bench(sample_count = 10)]
fn full_scan_aggregate_store(bencher: Bencher) {
    let f = &*FIXTURE;
    let table = TableName::new(demo::TABLE).expect("name");
    // The base rows' RowKey range, the one property summed.
    let query = Query::all()
        .rows(KeyRange {
            start: std::ops::Bound::Included(RowKey::new("BIB:").expect("key")),
            end: std::ops::Bound::Excluded(RowKey::new("BIB;").expect("key")),
        })
        .select(["finish"]);
    bencher.counter(ItemsCount::new(ROWS)).bench_local(|| {
        f.rt.block_on(async {
            let (mut n, mut sum, mut token) = (0u64, 0i64, None);
            loop {
                let page = f
                    .store
                    .query(&table, &query, token.as_ref())
                    .await
                    .expect("page");
                for e in &page.entities {
                    n += 1;
                    if let Some(EdmValue::Int64(v)) = e.get("finish") {
                        sum += v;
                    }
                }
                match page.continuation {
                    Some(t) => token = Some(t),
                    None => break,
                }
            }
            assert_eq!(n, ROWS);
            black_box(sum)
        })
    });
}

#[divan::bench(sample_count = 10)]
fn full_scan_aggregate_sqlite(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.counter(ItemsCount::new(ROWS)).bench_local(|| {
        let (n, sum): (i64, i64) = f
            .sqlite
            .lock()
            .expect("sqlite")
            .query_row(AGGREGATE, [], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("row");
        assert_eq!(n, ROWS as i64);
        black_box(sum)
    });
}

const RANGE: &str = "SELECT count(*) FROM registrations \
                     WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib BETWEEN 1000 AND 2999";

#[divan::bench(sample_count = 20)]
fn row_range_pushed(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| {
        let rows = f.rt.block_on(f.pushed.collect(RANGE)).expect("query");
        assert_eq!(single_i64(&rows), 2000);
        black_box(rows)
    });
}

#[divan::bench(sample_count = 10)]
fn row_range_as_full_scan(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| {
        let rows = f.rt.block_on(f.unpushed.collect(RANGE)).expect("query");
        assert_eq!(single_i64(&rows), 2000);
        black_box(rows)
    });
}

/// A correlated subquery DataFusion cannot decorrelate (`<` on age): each
/// of 50 registrations with how many in its race are younger. tablesql
/// evaluates the subquery once per distinct (event, distance, age), each a
/// scan of the race's partition with the age filter pushed; SQLite runs it
/// per row over its primary key.
const CORRELATED: &str = "SELECT r.bib, (SELECT count(*) FROM registrations r2 \
     WHERE r2.event = r.event AND r2.distance = r.distance AND r2.age < r.age) AS younger \
     FROM registrations r WHERE r.event = '2012 Boston Marathon' AND r.distance = 'Full' AND r.bib < 50";

#[divan::bench(sample_count = 10)]
fn correlated_subquery_sql(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| {
        let rows = f.rt.block_on(f.pushed.collect(CORRELATED)).expect("query");
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 49);
        black_box(rows)
    });
}

#[divan::bench(sample_count = 10)]
fn correlated_subquery_sqlite(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher.bench_local(|| {
        let db = f.sqlite.lock().expect("sqlite");
        let mut stmt = db.prepare_cached(CORRELATED).expect("prepare");
        let n = stmt
            .query_map([], |row| row.get::<_, i64>(1))
            .expect("query")
            .count();
        assert_eq!(n, 49);
        black_box(n)
    });
}

/// A fresh mapped table of the registrations' shape (base rows and `AGE:`
/// index rows), named `copy_{n}`.
fn fresh_copy(f: &Fixture, n: usize) -> String {
    let name = format!("copy_{n}");
    let ddl = format!(
        "CREATE TABLE {name} (event TEXT NOT NULL, distance TEXT NOT NULL, bib INT NOT NULL, \
         name TEXT NOT NULL, gender TEXT NOT NULL, age INT NOT NULL, finish BIGINT, \
         registered TIMESTAMP, club TEXT, PRIMARY KEY (event, distance, bib)) WITH (\
         storage_table = 'Copy{n}', partition_key = '{{event}}__{{distance}}', \
         row_key = 'BIB:{{bib:05}}__{{name}}__{{gender}}__{{age}}', \
         index_age = 'AGE:{{age:03}}__{{bib}}__{{name}}__{{gender}}')"
    );
    f.rt.block_on(f.pushed.collect(&ddl)).expect("create");
    name
}

static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `INSERT ... SELECT` of all 100,000 registrations into an empty table:
/// 200,000 entities written with their index rows.
#[divan::bench(sample_count = 3)]
fn bulk_insert_select(bencher: Bencher) {
    let f = &*FIXTURE;
    bencher
        .counter(ItemsCount::new(2 * ROWS))
        .with_inputs(|| fresh_copy(f, COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
        .bench_local_values(|name| {
            let sql = format!(
                "INSERT INTO {name} (event, distance, bib, name, gender, age, finish, registered, \
                 club) SELECT event, distance, bib, name, gender, age, finish, registered, club \
                 FROM registrations"
            );
            let rows = f.rt.block_on(f.pushed.collect(&sql)).expect("insert");
            let count = rows[0]
                .column(0)
                .as_primitive::<tablesql::datafusion::arrow::datatypes::UInt64Type>()
                .value(0);
            assert_eq!(count, ROWS);
        });
}

/// Multi-row `VALUES`: the same 100,000 registrations as 100 statements of
/// 1,000 rows each (the statements' text built beforehand).
#[divan::bench(sample_count = 3)]
fn bulk_insert_values(bencher: Bencher) {
    let f = &*FIXTURE;
    let statements = |name: &str| -> Vec<String> {
        (0..ROWS)
            .collect::<Vec<_>>()
            .chunks(1000)
            .map(|chunk| {
                let rows: Vec<String> = chunk
                    .iter()
                    .map(|&i| {
                        let r = registration(i);
                        format!(
                            "('{}', '{}', {}, '{}', '{}', {}, {}, '{}', {})",
                            r.event,
                            r.distance,
                            r.bib,
                            r.name.replace('\'', "''"),
                            r.gender,
                            r.age,
                            r.finish_seconds,
                            r.registered.format("%Y-%m-%d %H:%M:%S"),
                            r.club.map_or("NULL".into(), |c| format!("'{}'", c.replace('\'', "''"))),
                        )
                    })
                    .collect();
                format!(
                    "INSERT INTO {name} (event, distance, bib, name, gender, age, finish, registered, club) VALUES {}",
                    rows.join(", ")
                )
            })
            .collect()
    };
    bencher
        .counter(ItemsCount::new(2 * ROWS))
        .with_inputs(|| {
            let name = fresh_copy(f, COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            statements(&name)
        })
        .bench_local_values(|statements| {
            for sql in statements {
                f.rt.block_on(f.pushed.collect(&sql)).expect("insert");
            }
        });
}
