//! Lookup joins against hash joins, side by side in one run (issue 38).
//!
//! 1. Over a store that adds 10 ms to every request (`common/delayed.rs`, a
//!    stand-in for Azure's round trip, reading up to 12 RowKeys of one
//!    partition per request as the Azure store does): the 1,000
//!    registrations of one event joined to 1,000,000 people by the
//!    people's primary key, `(country, id)` (a partition per country), with
//!    `tablesql.enable_lookup_join` off (a hash join over every page of
//!    people) and on (reads by key, a batch at a time). Both tables are
//!    analyzed, as the planner's estimates need. The requests each run
//!    took and its wall time are printed with their ratios.
//! 2. The demo's join of 100,000 registrations with the events, on the
//!    embedded store without delay, with lookup joins off and on: the
//!    planner must keep it a hash join (the outer side is big), so the
//!    times match.
//!
//! Run with `cargo bench --bench lookup_join` (BENCHMARKS.md);
//! `TABLESQL_BENCH_IN_FLIGHT=n` sets the requests in flight. Loading the
//! million people takes most of the run.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};

#[path = "common/delayed.rs"]
mod delayed;
use delayed::{DELAY, Delayed};

/// People in the table (`TABLESQL_BENCH_PEOPLE` for a quicker run).
fn people() -> u64 {
    std::env::var("TABLESQL_BENCH_PEOPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The joining engine's options: the scan's requests in flight from
/// `TABLESQL_BENCH_IN_FLIGHT` (the engine's default, 8, without it), the
/// bound a lookup join's reads run under too.
fn options() -> EngineOptions {
    let default = EngineOptions::default();
    match std::env::var("TABLESQL_BENCH_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => {
            let scan = default.scan.with_max_in_flight(n);
            default.with_scan(scan)
        }
        None => default,
    }
}
const COUNTRIES: u64 = 8;
const REGISTRATIONS: u64 = 1000;
const RUNS: usize = 5;
const DEMO_ROWS: u64 = 100_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(people_join());
    rt.block_on(demo_join());
}

/// A person's country, from their id.
fn country(id: u64) -> String {
    format!("C{}", id % COUNTRIES)
}

async fn people_join() {
    let people = people();
    let inner: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory().expect("store"));
    // Loaded without the delay.
    let loader = Engine::with_store(inner.clone(), EngineOptions::default())
        .await
        .expect("engine")
        .session();
    let started = Instant::now();
    for ddl in [
        "CREATE TABLE people (country TEXT NOT NULL, id BIGINT NOT NULL, name TEXT NOT NULL, \
         born INT NOT NULL, PRIMARY KEY (country, id))",
        "CREATE TABLE registrations (event TEXT NOT NULL, bib INT NOT NULL, country TEXT NOT NULL, \
         person BIGINT NOT NULL, PRIMARY KEY (event, bib))",
    ] {
        loader.collect(ddl).await.expect("create");
    }
    let step = 100_000.min(people);
    for from in (0..people).step_by(step as usize) {
        loader
            .collect(&format!(
                "INSERT INTO people SELECT 'C' || (value % {COUNTRIES}), value, 'person ' || value, \
                 CAST(1940 + value % 60 AS INT) FROM generate_series({from}, {}) AS t(value)",
                from + step - 1
            ))
            .await
            .expect("people");
    }
    // Registrations of two events, each naming a person spread over the
    // ids (a multiplicative step, so the keys are not one range).
    let mut values = Vec::new();
    for event in ["E1", "E2"] {
        for bib in 0..REGISTRATIONS {
            let person = (bib * 7919 + u64::from(event == "E2") * 104_729) % people;
            values.push(format!(
                "('{event}', {bib}, '{}', {person})",
                country(person)
            ));
        }
    }
    loader
        .collect(&format!(
            "INSERT INTO registrations VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("registrations");
    loader.collect("ANALYZE people").await.expect("analyze");
    loader
        .collect("ANALYZE registrations")
        .await
        .expect("analyze");
    println!(
        "loaded {people} people and {} registrations in {:.1} s",
        2 * REGISTRATIONS,
        started.elapsed().as_secs_f64()
    );
    let delayed = Arc::new(Delayed::new(inner));
    let options = options();
    let in_flight = options.scan.max_in_flight;
    let engine = Engine::with_store(delayed.clone(), options)
        .await
        .expect("engine")
        .session();
    let sql = "SELECT count(*) AS n, sum(p.born) AS born FROM registrations r \
               JOIN people p ON p.country = r.country AND p.id = r.person WHERE r.event = 'E1'";
    println!(
        "{REGISTRATIONS} registrations of one event joined to {people} people by primary key, \
         {} ms per request, {in_flight} requests in flight, median of {RUNS} runs",
        DELAY.as_millis()
    );
    let mut results = Vec::new();
    for setting in ["off", "on"] {
        engine
            .collect(&format!("SET tablesql.enable_lookup_join = {setting}"))
            .await
            .expect("set");
        let join = join_of(&engine, sql).await;
        let mut walls = Vec::new();
        let mut requests = 0;
        let mut answer = String::new();
        for _ in 0..RUNS {
            let before = delayed.requests();
            let started = Instant::now();
            let rows = engine.collect(sql).await.expect("join");
            walls.push(started.elapsed());
            requests = delayed.requests() - before;
            answer = pretty_format_batches(&rows).expect("rows").to_string();
        }
        let wall = median(walls);
        println!(
            "lookup joins {setting:>3}: {:>9.1} ms {requests:>6} requests  {join}",
            wall.as_secs_f64() * 1000.0
        );
        results.push((wall, requests, answer));
    }
    let (hash, lookup) = (&results[0], &results[1]);
    assert_eq!(hash.2, lookup.2, "both joins answer the same");
    println!(
        "hash/lookup: {:.1}x the wall time, {:.1}x the requests",
        hash.0.as_secs_f64() / lookup.0.as_secs_f64(),
        hash.1 as f64 / lookup.1.max(1) as f64
    );
}

async fn demo_join() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::open(dir.path()).expect("store"));
    tablesql::demo::load(store.as_ref(), DEMO_ROWS, |_, _| {})
        .await
        .expect("demo");
    let engine = Engine::with_store(store, EngineOptions::default())
        .await
        .expect("engine")
        .session();
    let sql = "SELECT e.city, r.distance, count(*) AS runners, round(avg(r.finish) / 60) AS avg_minutes \
               FROM registrations r JOIN events e ON r.event = e.event AND r.distance = e.distance \
               GROUP BY e.city, r.distance ORDER BY e.city, r.distance";
    println!("the demo's events join over {DEMO_ROWS} registrations, median of {RUNS} runs");
    let mut walls = Vec::new();
    for setting in ["off", "on"] {
        engine
            .collect(&format!("SET tablesql.enable_lookup_join = {setting}"))
            .await
            .expect("set");
        let join = join_of(&engine, sql).await;
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            let started = Instant::now();
            engine.collect(sql).await.expect("join");
            runs.push(started.elapsed());
        }
        let wall = median(runs);
        println!(
            "lookup joins {setting:>3}: {:>9.1} ms  {join}",
            wall.as_secs_f64() * 1000.0
        );
        walls.push(wall);
    }
    println!(
        "on/off: {:.3} of the wall time",
        walls[1].as_secs_f64() / walls[0].as_secs_f64()
    );
}

/// The join operator of `sql`'s plan, as EXPLAIN shows it.
async fn join_of(engine: &Session, sql: &str) -> String {
    let plan = engine
        .collect(&format!("EXPLAIN {sql}"))
        .await
        .expect("explain");
    let shown = pretty_format_batches(&plan).expect("plan").to_string();
    shown
        .lines()
        .find_map(|l| {
            ["LookupJoinExec", "HashJoinExec"].iter().find_map(|op| {
                l.find(op)
                    .map(|at| l[at..].trim_end_matches(['|', ' ']).to_owned())
            })
        })
        .unwrap_or_else(|| "no join".into())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
