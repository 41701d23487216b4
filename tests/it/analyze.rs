//! `ANALYZE`'s requests: a table of many small partitions is read as
//! ranges of pages, not partition by partition, on a store that lists one
//! partition per request (Table Storage's way, which the Azure store
//! takes); and the statistics are the same as a store that lists
//! partitions cheaply gives, whichever way the reading was split.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tablesql::catalog::stats::{PRIMARY_PATH, TableStats};
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Partitions of one row each.
const PARTITIONS: u64 = 2_500;

/// The memory store, counting queries per table, listing partitions as
/// Table Storage must: the trait's default, one keys-only query per
/// partition.
#[derive(Debug, Default)]
struct Unlisted {
    inner: Arc<MemoryStore>,
    queries: Mutex<HashMap<String, u64>>,
}

impl Unlisted {
    fn queries(&self, t: &TableName) -> u64 {
        self.queries
            .lock()
            .map(|m| m.get(t.as_str()).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl layer::StoreLayer for Unlisted {
    const DERIVED: layer::Derived = layer::Derived::Here;

    fn below(&self) -> &dyn TableStore {
        self.inner.as_ref()
    }

    async fn query(&self, t: &TableName, q: &Query, c: Option<&ContinuationToken>) -> Result<Page> {
        if let Ok(mut m) = self.queries.lock() {
            *m.entry(t.as_str().to_owned()).or_default() += 1;
        }
        self.inner.query(t, q, c).await
    }
}

/// `PARTITIONS` people, one per partition (the first key column is the
/// PartitionKey), and an index on their age.
async fn load(engine: &Session) -> TestResult {
    engine
        .collect(
            "CREATE TABLE people (id BIGINT NOT NULL, n INT NOT NULL, age INT, \
             PRIMARY KEY (id, n))",
        )
        .await?;
    engine
        .collect(&format!(
            "INSERT INTO people SELECT value, 0, value % 90 FROM generate_series(1, {PARTITIONS}) AS t(value)"
        ))
        .await?;
    Ok(())
}

/// `table`'s statistics as stored.
async fn stored(
    store: &dyn TableStore,
    table: &TableName,
) -> Result<TableStats, Box<dyn std::error::Error>> {
    Ok(tablesql::catalog::stats::load_all(store)
        .await?
        .into_iter()
        .find(|(t, _)| t == table)
        .map(|(_, s)| s)
        .ok_or("analyzed")?)
}

/// The statistics without their times, which each store stamps its own.
fn counts(stats: &TableStats) -> Vec<(String, u64, usize, Vec<u64>)> {
    stats
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition.as_str().to_owned(),
                p.entities,
                p.guideposts.len(),
                p.prefixes.0.get(PRIMARY_PATH).cloned().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analyze_reads_small_partitions_as_ranges_of_pages() -> TestResult {
    let store = Arc::new(Unlisted::default());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    load(&engine).await?;
    let table = engine.table_def("people").await?.storage_table;

    // The first ANALYZE: one query finds that listing costs a request a
    // partition, then the table is one chain of 1,000-entity pages.
    // Partition by partition it would be 2,500 listings and 2,500 reads.
    let before = store.queries(&table);
    let first = engine.analyze("people", 100).await?;
    let requests = store.queries(&table) - before;
    assert_eq!(first.partitions.len(), PARTITIONS as usize);
    assert_eq!(first.entities(), PARTITIONS);
    assert!(
        requests <= 1 + PARTITIONS.div_ceil(1_000),
        "{requests} requests"
    );

    // Again: the last statistics split the table into ranges read side by
    // side, a chain each, about as many requests in all.
    let before = store.queries(&table);
    let second = engine.analyze("people", 100).await?;
    let requests = store.queries(&table) - before;
    assert_eq!(counts(&second), counts(&first));
    let ranges = EngineOptions::default().scan.max_in_flight as u64;
    assert!(
        requests <= ranges + PARTITIONS.div_ceil(1_000),
        "{requests} requests"
    );

    // The memory store lists partitions cheaply, so its first ANALYZE
    // splits by their number: the same statistics.
    let listed = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default())
        .await?
        .session();
    load(&listed).await?;
    let cheap = listed.analyze("people", 100).await?;
    assert_eq!(counts(&cheap), counts(&first));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_index_table_is_analyzed_by_its_keys_alone() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    load(&engine).await?;
    engine
        .collect("CREATE INDEX people_age ON people (age) WITH (global = true)")
        .await?;
    engine.collect("ANALYZE people").await?;
    let def = engine.table_def("people").await?;
    let all = tablesql::catalog::stats::load_all(store.as_ref()).await?;
    let of = |table: &TableName| {
        all.iter()
            .find(|(t, _)| t == table)
            .map(|(_, s)| s.clone())
            .ok_or("analyzed")
    };
    // One partition per age; no sizes measured.
    let index = of(&def.global_indexes[0].table)?;
    assert_eq!(index.partitions.len(), 90);
    assert_eq!(index.entities(), PARTITIONS);
    assert!(
        index
            .partitions
            .iter()
            .all(|p| p.bytes == 0 && p.widest == 0)
    );
    let base = of(&def.storage_table)?;
    assert!(base.partitions.iter().all(|p| p.bytes > 0));
    Ok(())
}

/// Events of `PER_EVENT` runners each, ids spaced 4 apart, so that a
/// later load can put new runners between them all along each partition.
const EVENTS: u64 = 4;
const PER_EVENT: u64 = 2_500;

/// A sampled `ANALYZE` of a table analyzed before costs requests in
/// proportion to the sample, not the table: its runs are placed by the
/// last statistics, and the partitions they read in part are estimated
/// from the density of what they read against the old guideposts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_analyze_reads_in_proportion_to_its_sample() -> TestResult {
    let store = Arc::new(Unlisted::default());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE runners (event TEXT NOT NULL, id BIGINT NOT NULL, age INT, \
             PRIMARY KEY (event, id))",
        )
        .await?;
    // Per event `n` runners, ids `spacing` apart from `offset`.
    let insert = |offset: u64, spacing: u64, n: u64| {
        format!(
            "INSERT INTO runners SELECT 'e' || (value % {EVENTS}), \
             (value / {EVENTS}) * {spacing} + {offset}, 30 \
             FROM generate_series(0, {}) AS t(value)",
            EVENTS * n - 1
        )
    };
    engine.collect(&insert(0, 4, PER_EVENT)).await?;
    let table = engine.table_def("runners").await?.storage_table;
    engine.collect("SET tablesql.guidepost_every = 50").await?;
    engine.collect("ANALYZE runners").await?;

    // Half as many again, evenly between the old ones (ids 2, 10, 18, ...).
    engine.collect(&insert(2, 8, PER_EVENT / 2)).await?;
    let truth = EVENTS * PER_EVENT * 3 / 2;

    // 4,000 of 15,000 entities: four runs of a page each, one per event.
    engine.collect("SET tablesql.analyze_sample = 4000").await?;
    let start = store.queries(&table);
    engine.collect("ANALYZE runners").await?;
    let requests = store.queries(&table) - start;
    assert!(requests <= 4, "{requests} requests");
    let notices: Vec<String> = engine.take_notices().into_iter().map(|n| n.text).collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("sampled 4000 entities in 4 requests")),
        "{notices:?}"
    );
    let stats = stored(store.as_ref(), &table).await?;
    // Each event estimated within a tenth of its 3,750 runners.
    for p in &stats.partitions {
        let off = p.entities.abs_diff(PER_EVENT * 3 / 2) as f64 / (PER_EVENT * 3 / 2) as f64;
        assert!(
            off < 0.1,
            "{} estimated at {}",
            p.partition.as_str(),
            p.entities
        );
    }
    let total = stats.entities();
    assert!(total.abs_diff(truth) * 10 < truth, "{total} of {truth}");
    // The key prefixes grew with the entities (ids are unique).
    let ids = stats.distinct(PRIMARY_PATH, 1).ok_or("counted")?;
    assert!(ids.abs_diff(truth) * 10 < truth, "{ids} ids of {truth}");

    // A sample as big as the table reads it whole.
    engine
        .collect("SET tablesql.analyze_sample = 50000")
        .await?;
    engine.collect("ANALYZE runners").await?;
    let whole = engine.take_notices();
    assert!(
        whole.iter().all(|n| !n.text.contains("sampled")),
        "{whole:?}"
    );
    let exact = engine.analyze("runners", 100).await?;
    assert_eq!(exact.entities(), truth);
    Ok(())
}

/// Over many small partitions a sampled run reads whole partitions: those
/// it read are exact, partitions gone from its span are dropped, and the
/// rest keep their last statistics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_run_over_small_partitions_measures_them_and_drops_the_gone() -> TestResult {
    let store = Arc::new(Unlisted::default());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    load(&engine).await?;
    let table = engine.table_def("people").await?.storage_table;
    let old = engine.analyze("people", 100).await?;
    // Every tenth person leaves; each of the others gains a second row
    // (by key, beside the counting store).
    let writer = Engine::with_store(store.inner.clone(), EngineOptions::default())
        .await?
        .session();
    let leaving: Vec<String> = (1..=PARTITIONS / 10)
        .map(|i| (i * 10).to_string())
        .collect();
    writer
        .collect(&format!(
            "DELETE FROM people WHERE n = 0 AND id IN ({})",
            leaving.join(", ")
        ))
        .await?;
    writer
        .collect(&format!(
            "INSERT INTO people SELECT value, 1, 0 FROM generate_series(1, {PARTITIONS}) AS t(value) \
             WHERE value % 10 <> 0"
        ))
        .await?;
    engine.collect("SET tablesql.analyze_sample = 1000").await?;
    let start = store.queries(&table);
    engine.collect("ANALYZE people").await?;
    assert_eq!(store.queries(&table) - start, 1);
    let notices = engine.take_notices();
    let sampled = &notices
        .iter()
        .find(|n| n.text.starts_with("analyzed people"))
        .ok_or("a notice")?
        .text;
    // The statistics the sample left, as stored.
    let stats = stored(store.as_ref(), &table).await?;
    let truth = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session()
        .analyze("people", 100)
        .await?;
    let now: HashMap<&str, u64> = truth
        .partitions
        .iter()
        .map(|p| (p.partition.as_str(), p.entities))
        .collect();
    let was: HashMap<&str, u64> = old
        .partitions
        .iter()
        .map(|p| (p.partition.as_str(), p.entities))
        .collect();
    let (mut exact, mut stale) = (0, 0);
    for p in &stats.partitions {
        let key = p.partition.as_str();
        if now.get(key) == Some(&p.entities) {
            exact += 1;
        } else {
            // Not read: as last analyzed (a person now gone, or one row).
            assert_eq!(was.get(key), Some(&p.entities), "{key}: {sampled}");
            stale += 1;
        }
    }
    // A run of 1,000 entities is 500 people of two rows (the last of them
    // may be read in part, then its old count), or fewer where it starts
    // (at a random place) less than 500 people from the table's end.
    let last = stats.partitions.last().ok_or("partitions")?;
    let last_exact = now.get(last.partition.as_str()) == Some(&last.entities);
    assert!(
        exact >= 499 || last_exact,
        "{exact} exact, {stale} stale: {sampled}"
    );
    // Gone partitions in the run's span were dropped: one for every nine
    // people left in it.
    let dropped = old.partitions.len() - stats.partitions.len();
    assert!(
        dropped.abs_diff(exact / 9) <= 3,
        "{dropped} dropped, {exact} exact: {sampled}"
    );
    assert!(sampled.contains(&format!("{dropped} gone")), "{sampled}");
    Ok(())
}
