//! `ANALYZE`'s requests: a table of many small partitions is read as
//! ranges of pages, not partition by partition, on a store that lists one
//! partition per request (Table Storage's way, which the Azure store
//! takes); and the statistics are the same as a store that lists
//! partitions cheaply gives, whichever way the reading was split.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tablesql::catalog::stats::{PRIMARY_PATH, TableStats};
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Partitions of one row each.
const PARTITIONS: u64 = 2_500;

/// The memory store, counting queries per table, listing partitions as
/// Table Storage must: the trait's default, one keys-only query per
/// partition.
#[derive(Debug, Default)]
struct Unlisted {
    inner: MemoryStore,
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
impl TableStore for Unlisted {
    async fn create_table(&self, t: &TableName) -> Result<()> {
        self.inner.create_table(t).await
    }
    async fn delete_table(&self, t: &TableName) -> Result<()> {
        self.inner.delete_table(t).await
    }
    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.inner.list_tables().await
    }
    async fn get(
        &self,
        t: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.inner.get(t, pk, rk).await
    }
    async fn query(&self, t: &TableName, q: &Query, c: Option<&ContinuationToken>) -> Result<Page> {
        if let Ok(mut m) = self.queries.lock() {
            *m.entry(t.as_str().to_owned()).or_default() += 1;
        }
        self.inner.query(t, q, c).await
    }
    async fn execute_batch(&self, t: &TableName, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        self.inner.execute_batch(t, ops).await
    }
}

/// `PARTITIONS` people, one per partition (the first key column is the
/// PartitionKey), and an index on their age.
async fn load(engine: &Engine) -> TestResult {
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
    let engine = Engine::with_store(store.clone(), EngineOptions::default()).await?;
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
    let listed = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default()).await?;
    load(&listed).await?;
    let cheap = listed.analyze("people", 100).await?;
    assert_eq!(counts(&cheap), counts(&first));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_index_table_is_analyzed_by_its_keys_alone() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store.clone(), EngineOptions::default()).await?;
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
