//! The fan-out property: for random mapped tables, data and predicates, a
//! scan that runs one request per partition (at a random width, over a store
//! that cuts pages short so every request follows continuation tokens)
//! returns exactly the rows of the sequential scan, in the same order where
//! the query orders, on the memory, embedded and Azure (Azurite) stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tablesql::exec::ScanOptions;
use tablesql::planner::policy::ScanPolicy;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions};

use crate::pushdown::{Row, SHAPES, answer, atom, entities, row};

fn options(fan_out: bool, max_in_flight: usize) -> EngineOptions {
    EngineOptions {
        scan: ScanOptions {
            max_in_flight,
            fan_out,
            ..ScanOptions::default()
        },
        scan_policy: ScanPolicy::Allow,
        ..EngineOptions::default()
    }
}

/// The lines of a result table, sorted: for queries without an order.
fn sorted(table: &str) -> Vec<String> {
    let mut lines: Vec<String> = table.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

async fn check(
    store: Arc<dyn TableStore>,
    storage_table: &str,
    shape: usize,
    rows: &[Row],
    pred: &str,
    width: usize,
) -> Result<(), TestCaseError> {
    let (pk, rk, ix) = SHAPES[shape];
    // The SQL name too is the case's own: the catalog lives in the store.
    let name = storage_table.to_lowercase();
    let index = ix
        .map(|ix| format!(", index_x = '{ix}'"))
        .unwrap_or_default();
    let ddl = format!(
        "CREATE TABLE {name} (a TEXT NOT NULL, b INT NOT NULL, c INT NOT NULL, d TEXT NOT NULL, v INT, w TEXT) \
         WITH (storage_table = '{storage_table}', partition_key = '{pk}', row_key = '{rk}'{index})"
    );
    let fanned = Engine::with_store(store.clone(), options(true, width))
        .await
        .unwrap();
    fanned.collect(&ddl).await.unwrap();
    let table = TableName::new(storage_table).unwrap();
    for e in entities(shape, rows) {
        let _ = store.execute(&table, WriteOp::Insert(e)).await;
    }
    let sequential = Engine::with_store(store, options(false, 1)).await.unwrap();
    let ordered = [
        format!("SELECT a, b, c, d, v, w FROM {name} WHERE {pred} ORDER BY a, b, c, d"),
        format!("SELECT count(*), sum(b), min(d) FROM {name} WHERE {pred}"),
        format!("SELECT b, d FROM {name} WHERE {pred} ORDER BY a, b, c, d LIMIT 3"),
        format!("SELECT count(*) FROM {name}"),
    ];
    for sql in &ordered {
        let (got, want) = (answer(&fanned, sql).await, answer(&sequential, sql).await);
        let plan = answer(&fanned, &format!("EXPLAIN {sql}")).await;
        prop_assert_eq!(got, want, "{}\n{}", sql, plan);
    }
    // Without ORDER BY the rows may come in another order, never other rows.
    let sql = format!("SELECT a, b, c, d, v, w FROM {name} WHERE {pred}");
    let (got, want) = (answer(&fanned, &sql).await, answer(&sequential, &sql).await);
    prop_assert_eq!(sorted(&got), sorted(&want), "{}", sql);
    Ok(())
}

fn case() -> impl Strategy<Value = (usize, Vec<Row>, String, usize, usize)> {
    (0..SHAPES.len())
        .prop_flat_map(|s| (Just(s), prop::collection::vec(row(s), 0..40)))
        .prop_flat_map(|(s, rows)| {
            (
                Just(s),
                Just(rows),
                prop::collection::vec(atom(), 0..3),
                1usize..6,
                1usize..5,
            )
        })
        .prop_map(|(s, rows, atoms, width, budget)| {
            let pred = if atoms.is_empty() {
                "true".to_owned()
            } else {
                atoms.join(" AND ")
            };
            (s, rows, pred, width, budget)
        })
}

fn run(
    f: impl std::future::Future<Output = Result<(), TestCaseError>>,
) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn fanned_out_scans_return_the_sequential_rows_memory((shape, rows, pred, width, budget) in case()) {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new().with_scan_budget(budget));
        run(check(store, "Things", shape, &rows, &pred, width))?;
    }

    #[test]
    fn fanned_out_scans_return_the_sequential_rows_embedded((shape, rows, pred, width, budget) in case()) {
        let store: Arc<dyn TableStore> =
            Arc::new(EmbeddedStore::in_memory().unwrap().with_scan_budget(budget));
        run(check(store, "Things", shape, &rows, &pred, width))?;
    }
}

proptest! {
    // Each case is a few dozen requests to Azurite; one account, a table per case.
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn fanned_out_scans_return_the_sequential_rows_azurite((shape, rows, pred, width, budget) in case()) {
        static ACCOUNT: std::sync::OnceLock<Result<AzureConfig, String>> = std::sync::OnceLock::new();
        static TABLE: AtomicUsize = AtomicUsize::new(0);
        let config = ACCOUNT
            .get_or_init(crate::azurite::fresh_account)
            .clone()
            .map_err(TestCaseError::fail)?;
        let store: Arc<dyn TableStore> =
            Arc::new(AzureStore::new(config).unwrap().with_scan_budget(budget));
        let name = format!("Things{}", TABLE.fetch_add(1, Ordering::Relaxed));
        run(check(store, &name, shape, &rows, &pred, width))?;
    }
}
