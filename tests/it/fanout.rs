//! The fan-out property: for random mapped tables, data and predicates, a
//! scan that runs one request per partition (at a random width, over a store
//! that cuts pages short so every request follows continuation tokens)
//! returns exactly the rows of the sequential scan, in the same order where
//! the query orders, on the memory, embedded and Azure (Azurite) stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tablesql::ScanOptions;
use tablesql::ScanPolicy;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions};

use crate::pushdown::{Row, SHAPES, answer, atom, entities, literal, row};

pub(crate) fn options(fan_out: bool, max_in_flight: usize) -> EngineOptions {
    EngineOptions::default()
        .with_scan(
            ScanOptions::default()
                .with_max_in_flight(max_in_flight)
                .with_fan_out(fan_out),
        )
        .with_scan_policy(ScanPolicy::Allow)
}

/// The lines of a result table, sorted: for queries without an order.
pub(crate) fn sorted(table: &str) -> Vec<String> {
    let mut lines: Vec<String> = table.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Maps `storage_table` (SQL name: its lowercase) with a shape's templates
/// and writes the rows; returns the SQL name.
pub(crate) async fn setup(
    store: &Arc<dyn TableStore>,
    storage_table: &str,
    shape: usize,
    rows: &[Row],
) -> String {
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
    let engine = Engine::with_store(store.clone(), options(false, 1))
        .await
        .unwrap()
        .session();
    engine.collect(&ddl).await.unwrap();
    insert(store, storage_table, shape, rows).await;
    name
}

/// Writes rows (a primary key written before stays as it was).
async fn insert(store: &Arc<dyn TableStore>, storage_table: &str, shape: usize, rows: &[Row]) {
    let table = TableName::new(storage_table).unwrap();
    for e in entities(shape, rows) {
        let _ = store.execute(&table, WriteOp::Insert(e)).await;
    }
}

async fn check(
    store: Arc<dyn TableStore>,
    storage_table: &str,
    shape: usize,
    rows: &[Row],
    pred: &str,
    width: usize,
) -> Result<(), TestCaseError> {
    let name = setup(&store, storage_table, shape, rows).await;
    compare(store, &name, pred, width).await
}

/// As `check`, with the fan-out planned from statistics (`ANALYZE` with a
/// guidepost every `every` entities) taken when half the rows were written:
/// the partitions and rows written since are read all the same.
async fn check_analyzed(
    store: Arc<dyn TableStore>,
    storage_table: &str,
    shape: usize,
    rows: &[Row],
    pred: &str,
    width: usize,
    every: u64,
) -> Result<(), TestCaseError> {
    let half = rows.len() / 2;
    let name = setup(&store, storage_table, shape, &rows[..half]).await;
    let engine = Engine::with_store(store.clone(), options(true, width))
        .await
        .unwrap()
        .session();
    engine.analyze(&name, every).await.unwrap();
    insert(&store, storage_table, shape, &rows[half..]).await;
    // A new engine plans with the statistics in the store.
    let fresh = Engine::with_store(store.clone(), options(true, width))
        .await
        .unwrap()
        .session();
    let plan = answer(&fresh, &format!("EXPLAIN SELECT count(b) FROM {name}")).await;
    prop_assert!(plan.contains(" estimate=[partitions="), "{}", plan);
    compare(store, &name, pred, width).await
}

async fn compare(
    store: Arc<dyn TableStore>,
    name: &str,
    pred: &str,
    width: usize,
) -> Result<(), TestCaseError> {
    let fanned = Engine::with_store(store.clone(), options(true, width))
        .await
        .unwrap()
        .session();
    let sequential = Engine::with_store(store, options(false, 1))
        .await
        .unwrap()
        .session();
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

pub(crate) fn case() -> impl Strategy<Value = (usize, Vec<Row>, String, usize, usize)> {
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

/// A store on an Azurite account the property tests share, and a table
/// name no other case has used.
pub(crate) fn azurite_case(
    prefix: &str,
    budget: usize,
) -> Result<(Arc<dyn TableStore>, String), TestCaseError> {
    static ACCOUNT: std::sync::OnceLock<Result<AzureConfig, String>> = std::sync::OnceLock::new();
    static TABLE: AtomicUsize = AtomicUsize::new(0);
    let config = ACCOUNT
        .get_or_init(crate::azurite::fresh_account)
        .clone()
        .map_err(TestCaseError::fail)?;
    let store: Arc<dyn TableStore> =
        Arc::new(AzureStore::new(config).unwrap().with_scan_budget(budget));
    Ok((
        store,
        format!("{prefix}{}", TABLE.fetch_add(1, Ordering::Relaxed)),
    ))
}

pub(crate) fn run(
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

/// A row-value comparison on a shape's primary key (its PartitionKey fields,
/// then 0 to 2 RowKey fields): keyset paging, where the fan-out passes
/// partitions by. Its values are often a row's own, as a page's last row's
/// are, so that rows tie with the bound on its leading fields.
fn keyset(shape: usize, rows: &[Row]) -> impl Strategy<Value = String> + use<> {
    const KEYS: [(&[&str], &[&str]); 4] = [
        (&["a"], &["b", "d"]),
        (&["a", "c"], &["b", "d"]),
        (&["c"], &["d", "b"]),
        (&["a"], &["d"]),
    ];
    let (pk, rk) = KEYS[shape];
    let rows = rows.to_vec();
    (
        0..=rk.len(),
        0usize..4,
        prop::collection::vec(0usize..1000, 4),
        0usize..1000,
    )
        .prop_map(move |(n, op, picks, from)| {
            let columns: Vec<&str> = pk.iter().chain(&rk[..n]).copied().collect();
            let own = (!rows.is_empty() && from % 4 != 0).then(|| &rows[from % rows.len()]);
            let values: Vec<String> = columns
                .iter()
                .zip(&picks)
                .map(|(c, p)| own.map_or_else(|| literal(c, *p), |r| r.literal(c)))
                .collect();
            let op = [">", ">=", "<", "<="][op];
            format!("({}) {op} ({})", columns.join(", "), values.join(", "))
        })
}

fn keyset_case() -> impl Strategy<Value = (usize, Vec<Row>, String, usize, usize)> {
    (0..SHAPES.len())
        .prop_flat_map(|s| {
            (
                Just(s),
                prop::collection::vec(row(s).prop_map(Row::crowded), 0..40),
            )
        })
        .prop_flat_map(|(s, rows)| {
            let keyset = keyset(s, &rows);
            (
                Just(s),
                Just(rows),
                keyset,
                prop::option::of(atom()),
                1usize..6,
                1usize..5,
            )
        })
        .prop_map(|(s, rows, keyset, other, width, budget)| {
            let pred = match other {
                Some(o) => format!("{keyset} AND {o}"),
                None => keyset,
            };
            (s, rows, pred, width, budget)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn analyzed_scans_return_the_sequential_rows_memory(
        (shape, rows, pred, width, budget) in case(), every in 1u64..6
    ) {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new().with_scan_budget(budget));
        run(check_analyzed(store, "Things", shape, &rows, &pred, width, every))?;
    }

    #[test]
    fn analyzed_scans_return_the_sequential_rows_embedded(
        (shape, rows, pred, width, budget) in case(), every in 1u64..6
    ) {
        let store: Arc<dyn TableStore> =
            Arc::new(EmbeddedStore::in_memory().unwrap().with_scan_budget(budget));
        run(check_analyzed(store, "Things", shape, &rows, &pred, width, every))?;
    }

    #[test]
    fn analyzed_keyset_bounds_return_the_sequential_rows_memory(
        (shape, rows, pred, width, budget) in keyset_case(), every in 1u64..6
    ) {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new().with_scan_budget(budget));
        run(check_analyzed(store, "Things", shape, &rows, &pred, width, every))?;
    }
}

proptest! {
    // Cheap cases, and the bound's edges (a tie on the leading fields, a
    // strict comparison) need many to meet.
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn keyset_bounds_return_the_sequential_rows_memory((shape, rows, pred, width, budget) in keyset_case()) {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new().with_scan_budget(budget));
        run(check(store, "Things", shape, &rows, &pred, width))?;
    }

    #[test]
    fn keyset_bounds_return_the_sequential_rows_embedded((shape, rows, pred, width, budget) in keyset_case()) {
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
        let (store, name) = azurite_case("Things", budget)?;
        run(check(store, &name, shape, &rows, &pred, width))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn analyzed_scans_return_the_sequential_rows_azurite(
        (shape, rows, pred, width, budget) in case(), every in 1u64..6
    ) {
        let (store, name) = azurite_case("Analyzed", budget)?;
        run(check_analyzed(store, &name, shape, &rows, &pred, width, every))?;
    }

    #[test]
    fn keyset_bounds_return_the_sequential_rows_azurite((shape, rows, pred, width, budget) in keyset_case()) {
        let (store, name) = azurite_case("Keyset", budget)?;
        run(check(store, &name, shape, &rows, &pred, width))?;
    }
}
