//! The workload statistics: statements normalized with their density and
//! access path (`tablesql_stat_statements`), what they read and wrote per
//! partition (`tablesql_stat_partitions`), the reset, and both in psql.

use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::arrow::datatypes::Int64Type;
use tablesql::storage::{TableName, WriteOp};

use crate::server::serve;
use crate::sql::demo_engine;

/// The demo without the store's derived cache: the advisor counts what the
/// store serves, and the cache would serve the scans these tests repeat
/// (the hot-partition and wide-read findings are about reads that reach
/// the store).
async fn uncached_demo_engine(rows: u64) -> tablesql::Session {
    let store = tablesql::storage::EmbeddedStore::in_memory()
        .expect("store")
        .with_derived_cache(0);
    let store: std::sync::Arc<dyn tablesql::storage::TableStore> = std::sync::Arc::new(store);
    tablesql::demo::load(store.as_ref(), rows, |_, _| {})
        .await
        .expect("demo load");
    tablesql::Engine::with_store(store, tablesql::EngineOptions::default())
        .await
        .expect("engine")
        .session()
}

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `(table, partition, read, written, requests, conflicts, peak read/s)`
/// of every row of the view.
async fn partitions(
    engine: &tablesql::Session,
) -> Result<Vec<(String, String, [i64; 5])>, Box<dyn std::error::Error>> {
    let batches = engine
        .collect(
            "SELECT table_name, partition_key, entities_read, entities_written, requests, \
             conflicts, peak_read_per_s FROM tablesql_stat_partitions",
        )
        .await?;
    let mut rows = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let n = |c: usize| b.column(c).as_primitive::<Int64Type>().value(i);
            rows.push((
                b.column(0).as_string::<i32>().value(i).to_owned(),
                b.column(1).as_string::<i32>().value(i).to_owned(),
                [n(2), n(3), n(4), n(5), n(6)],
            ));
        }
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_statistics_count_reads_writes_and_conflicts() -> TestResult {
    let engine = demo_engine(120).await;
    let table = TableName::new(tablesql::demo::TABLE)?;
    // A registration that exists, and its stored entities.
    let [base, _] = tablesql::demo::registration(7).entities()?;
    let point = format!(
        "SELECT name FROM registrations WHERE event = '{}' AND distance = '{}' AND bib = {}",
        tablesql::demo::registration(7).event,
        tablesql::demo::registration(7).distance,
        tablesql::demo::registration(7).bib
    );
    engine.collect("SELECT tablesql_stat_reset()").await?;
    assert!(
        partitions(&engine).await?.is_empty(),
        "reset empties the view"
    );

    for _ in 0..5 {
        assert_eq!(engine.collect(&point).await?[0].num_rows(), 1);
    }
    let rows = partitions(&engine).await?;
    let pk = base.partition_key.as_str();
    let ours: Vec<_> = rows.iter().filter(|r| r.0 == table.as_str()).collect();
    assert_eq!(ours.len(), 1, "one partition touched: {rows:?}");
    assert_eq!(ours[0].1, pk);
    let [read, written, requests, conflicts, peak] = ours[0].2;
    assert_eq!(
        (read, written, requests, conflicts),
        (5, 0, 5, 0),
        "{rows:?}"
    );
    assert!(
        (1..=5).contains(&peak),
        "peak within one second's reads: {peak}"
    );

    // A batch the store refuses for a conflict: the entity exists.
    let refused = engine
        .store()
        .execute_batch(&table, vec![WriteOp::Insert(base.clone())])
        .await;
    assert!(refused.is_err());
    // A batch that writes: the base row replaced.
    engine
        .store()
        .execute_batch(&table, vec![WriteOp::InsertOrReplace(base.clone())])
        .await?;
    let rows = partitions(&engine).await?;
    let ours = rows
        .iter()
        .find(|r| r.0 == table.as_str() && r.1 == pk)
        .ok_or("the partition's row")?;
    let [read, written, requests, conflicts, _] = ours.2;
    assert_eq!(
        (read, written, requests, conflicts),
        (5, 1, 7, 1),
        "{rows:?}"
    );

    // A full scan reads every partition, each entity once.
    engine.collect("SELECT tablesql_stat_reset()").await?;
    engine.collect("SET tablesql.scan_policy = allow").await?;
    let counted = engine
        .collect("SELECT count(name) FROM registrations")
        .await?;
    let n = counted[0].column(0).as_primitive::<Int64Type>().value(0);
    let rows = partitions(&engine).await?;
    let read: i64 = rows
        .iter()
        .filter(|r| r.0 == table.as_str())
        .map(|r| r.2[0])
        .sum();
    // The scan reads each partition's range of base rows, not its index rows.
    assert_eq!(read, n, "{rows:?}");
    assert_eq!(rows.iter().filter(|r| r.0 == table.as_str()).count(), 12);
    Ok(())
}

/// The view and the reset from psql.
#[test]
fn workload_statistics_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let r = tablesql::demo::registration(0);
    let point = format!(
        "SELECT name FROM registrations WHERE event = '{}' AND distance = '{}' AND bib = {}",
        r.event, r.distance, r.bib
    );
    let out = server.psql(
        "",
        &[
            "-A",
            "-t",
            "-c",
            "SELECT tablesql_stat_reset() IS NOT NULL",
            "-c",
            &point,
            "-c",
            "SELECT count(*), sum(entities_read), sum(requests) FROM tablesql_stat_partitions WHERE table_name = 'Registrations'",
            "-c",
            &point.replace(&format!("bib = {}", r.bib), "bib = 999999"),
            "-c",
            "SELECT calls, rows, access_path FROM tablesql_stat_statements WHERE query LIKE 'SELECT name FROM registrations%'",
        ],
    )?;
    let shown =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shown}");
    assert!(shown.lines().any(|l| l == "1|1|1"), "{shown}");
    // Two runs of one statement, normalized; one found its row.
    assert!(shown.lines().any(|l| l == "2|1|point"), "{shown}");

    // A write refused for its key, through the server's write path.
    let insert = "INSERT INTO stock (shop, item) VALUES ('north', 1)";
    let setup = server.psql(
        "",
        &[
            "-c",
            "CREATE TABLE stock (shop TEXT NOT NULL, item INT NOT NULL, PRIMARY KEY (shop, item)) \
             WITH (partition_key = '{shop}', row_key = '{item:05}')",
            "-c",
            insert,
        ],
    )?;
    assert!(setup.status.success(), "{setup:?}");
    let refused = server.psql("", &["-c", insert])?;
    assert!(!refused.status.success(), "{refused:?}");
    let counted = server.psql(
        "",
        &[
            "-A",
            "-t",
            "-c",
            "SELECT calls, conflicts FROM tablesql_stat_statements WHERE query LIKE 'INSERT INTO stock%'",
        ],
    )?;
    let counted = String::from_utf8_lossy(&counted.stdout);
    assert_eq!(counted.trim(), "1|1");
    Ok(())
}

/// `(query, calls, rows, scanned, returned, density, requests, path)`.
type StatementRow = (String, i64, i64, i64, i64, Option<f64>, i64, String);

async fn statements(
    engine: &tablesql::Session,
) -> Result<Vec<StatementRow>, Box<dyn std::error::Error>> {
    use tablesql::datafusion::arrow::array::Array;
    use tablesql::datafusion::arrow::datatypes::Float64Type;
    let batches = engine
        .collect(
            "SELECT query, calls, rows, entities_scanned, entities_returned, density, requests, \
             access_path FROM tablesql_stat_statements",
        )
        .await?;
    let mut rows = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let n = |c: usize| b.column(c).as_primitive::<Int64Type>().value(i);
            let density = b.column(5).as_primitive::<Float64Type>();
            rows.push((
                b.column(0).as_string::<i32>().value(i).to_owned(),
                n(1),
                n(2),
                n(3),
                n(4),
                (!density.is_null(i)).then(|| density.value(i)),
                n(6),
                b.column(7).as_string::<i32>().value(i).to_owned(),
            ));
        }
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_statistics_normalize_and_measure_density() -> TestResult {
    use tablesql::datafusion::scalar::ScalarValue;
    let engine = demo_engine(120).await;
    engine.collect("SET tablesql.scan_policy = allow").await?;
    let by_bib = engine
        .prepare("SELECT name FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3")
        .await?;
    engine.collect("SELECT tablesql_stat_reset()").await?;
    for i in 0..10 {
        let r = tablesql::demo::registration(i);
        let rows = by_bib
            .query(vec![
                ScalarValue::from(r.event),
                ScalarValue::from(r.distance),
                ScalarValue::Int32(Some(r.bib)),
            ])
            .await?;
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    }
    // Two runs that differ in a literal: one statement. Nothing matches
    // the filter, so the scans return none of what they examine.
    for limit in [1_000_000_000, 2_000_000_000] {
        engine
            .collect(&format!(
                "SELECT count(*) FROM registrations WHERE finish > {limit}"
            ))
            .await?;
    }
    let rows = statements(&engine).await?;
    let point = rows
        .iter()
        .find(|r| r.0.starts_with("SELECT name FROM registrations"))
        .ok_or("the point query's row")?;
    assert_eq!(
        (
            point.1,
            point.2,
            point.3,
            point.4,
            point.5,
            point.6,
            point.7.as_str()
        ),
        (10, 10, 10, 10, Some(1.0), 10, "point"),
        "{rows:?}"
    );
    let scan = rows
        .iter()
        .find(|r| r.0 == "SELECT count(*) FROM registrations WHERE finish > $1")
        .ok_or_else(|| format!("the scan's row, normalized: {rows:?}"))?;
    assert_eq!(scan.1, 2, "{rows:?}");
    assert_eq!(
        scan.3, 240,
        "each run examines the 120 registrations: {rows:?}"
    );
    assert_eq!((scan.4, scan.5), (0, Some(0.0)), "{rows:?}");
    assert_eq!(scan.7, "full_scan");
    Ok(())
}

/// `(table, finding, evidence)` of `tablesql_advise()`.
async fn advice(
    engine: &tablesql::Session,
) -> Result<Vec<(String, String, String)>, Box<dyn std::error::Error>> {
    let batches = engine
        .collect("SELECT table_name, finding, evidence FROM tablesql_advise()")
        .await?;
    let mut rows = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let t = |c: usize| b.column(c).as_string::<i32>().value(i).to_owned();
            rows.push((t(0), t(1), t(2)));
        }
    }
    Ok(rows)
}

/// The advisor over real data: the demo's registrations with point queries
/// are healthy; a table under one PartitionKey is flagged; a workload of
/// filtered full scans is flagged with its density.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisor_flags_one_partition_and_sparse_scans_not_the_demo() -> TestResult {
    use tablesql::datafusion::scalar::ScalarValue;
    let engine = uncached_demo_engine(1200).await;
    engine.collect("ANALYZE registrations").await?;
    let by_bib = engine
        .prepare("SELECT name FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3")
        .await?;
    engine.collect("SELECT tablesql_stat_reset()").await?;
    for i in 0..40 {
        let r = tablesql::demo::registration(i * 7);
        by_bib
            .query(vec![
                ScalarValue::from(r.event),
                ScalarValue::from(r.distance),
                ScalarValue::Int32(Some(r.bib)),
            ])
            .await?;
    }
    let found = advice(&engine).await?;
    assert!(
        found.is_empty(),
        "the demo with point queries is healthy: {found:?}"
    );

    // One PartitionKey for every row.
    engine
        .collect(
            "CREATE TABLE logs (id INT NOT NULL, msg TEXT NOT NULL, PRIMARY KEY (id)) \
             WITH (storage_table = 'Logs', partition_key = 'all', row_key = '{id:06}')",
        )
        .await?;
    let values: Vec<String> = (0..300).map(|i| format!("({i}, 'line {i}')")).collect();
    engine
        .collect(&format!(
            "INSERT INTO logs (id, msg) VALUES {}",
            values.join(", ")
        ))
        .await?;
    engine.collect("ANALYZE logs").await?;
    let found = advice(&engine).await?;
    let one = found
        .iter()
        .find(|f| f.0 == "Logs")
        .ok_or_else(|| format!("Logs flagged: {found:?}"))?;
    assert_eq!(one.1, "one_partition");
    assert!(
        one.2.contains("all 300 entities are in one partition"),
        "{}",
        one.2
    );
    assert!(!found.iter().any(|f| f.0 == "Registrations"), "{found:?}");

    // Full scans that return almost nothing of what they read.
    engine.collect("SET tablesql.scan_policy = allow").await?;

    // Logs read whole, again and again: 7,200 entities from its one
    // partition within a few seconds.
    for _ in 0..24 {
        engine.collect("SELECT msg FROM logs").await?;
    }
    let found = advice(&engine).await?;
    let few = found
        .iter()
        .find(|f| f.0 == "Logs" && f.1 == "too_few_partitions")
        .ok_or_else(|| format!("Logs' peak flagged: {found:?}"))?;
    assert!(few.2.contains("entities over 1 partitions"), "{}", few.2);
    assert!(
        found
            .iter()
            .any(|f| f.0 == "Logs" && f.1 == "hot_partition"),
        "{found:?}"
    );
    for limit in [1_000_000_000, 1_500_000_000, 2_000_000_000] {
        engine
            .collect(&format!(
                "SELECT name FROM registrations WHERE finish > {limit}"
            ))
            .await?;
    }
    let found = advice(&engine).await?;
    let sparse = found
        .iter()
        .find(|f| f.1 == "low_density")
        .ok_or_else(|| format!("the scans flagged: {found:?}"))?;
    assert!(
        sparse.2.contains(
            "examined 3600 entities and returned 0 in 3 calls (density 0.000, full_scan)"
        ),
        "{}",
        sparse.2
    );
    Ok(())
}

/// Writes observed statement by statement: ascending timestamps as
/// PartitionKey are append-only, an inverted counter (newest first) is
/// prepend-only, and keys written in no order are neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisor_flags_append_only_and_prepend_only_keys() -> TestResult {
    let engine = demo_engine(0).await;
    let tables = [
        ("readings", "{at}", "{seq:08}"),
        ("newest", "{seq:~08}", "{at}"),
        ("spread", "{seq:08}", "{at}"),
    ];
    for (name, pk, rk) in tables {
        engine
            .collect(&format!(
                "CREATE TABLE {name} (at TEXT NOT NULL, seq INT NOT NULL, v DOUBLE, \
                 PRIMARY KEY (at, seq)) WITH (partition_key = '{pk}', row_key = '{rk}')"
            ))
            .await?;
    }
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-23T10:00:00Z")?;
    for i in 0..60i64 {
        let at = (start + chrono::Duration::seconds(17 * i)).format("%Y-%m-%dT%H:%M:%S");
        // One statement per reading, as a collector writes them.
        for (table, seq) in [("readings", i), ("newest", i), ("spread", (i * 37) % 60)] {
            engine
                .collect(&format!(
                    "INSERT INTO {table} (at, seq, v) VALUES ('{at}', {seq}, {i}.5)"
                ))
                .await?;
        }
    }
    let found = advice(&engine).await?;
    let kinds: Vec<(&str, &str)> = found.iter().map(|f| (f.0.as_str(), f.1.as_str())).collect();
    assert_eq!(
        kinds,
        [("newest", "prepend_only"), ("readings", "append_only")],
        "{found:?}"
    );
    assert!(
        found[1]
            .2
            .starts_with("59 of 59 entities written went to the last PartitionKey"),
        "{}",
        found[1].2
    );
    assert!(
        found[1].2.ends_with("(now \"2026-11-23T10:16:43\")"),
        "{}",
        found[1].2
    );
    Ok(())
}

/// Reads of every column of wide entities without a filter are flagged,
/// a projection is not; an entity near 1 MiB is flagged from `ANALYZE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisor_flags_wide_reads_and_entities_near_the_limits() -> TestResult {
    let engine = uncached_demo_engine(0).await;
    engine
        .collect(
            "CREATE TABLE notes (shelf INT NOT NULL, id INT NOT NULL, body TEXT, \
             PRIMARY KEY (shelf, id)) \
             WITH (storage_table = 'Notes', partition_key = '{shelf:02}', row_key = '{id:05}')",
        )
        .await?;
    engine
        .collect(
            "INSERT INTO notes (shelf, id, body) \
             SELECT value % 4, value, repeat('note ', 400) FROM generate_series(1, 600)",
        )
        .await?;
    engine.collect("ANALYZE notes").await?;
    engine.collect("SET tablesql.scan_policy = allow").await?;
    for _ in 0..2 {
        engine.collect("SELECT * FROM notes").await?;
        engine.collect("SELECT id FROM notes").await?;
    }
    let found = advice(&engine).await?;
    let wide: Vec<_> = found.iter().filter(|f| f.1 == "wide_reads").collect();
    assert_eq!(wide.len(), 1, "{found:?}");
    assert!(
        wide[0]
            .2
            .starts_with("\"SELECT * FROM notes\" read 1200 whole entities in 2 calls"),
        "{}",
        wide[0].2
    );
    assert!(
        !found.iter().any(|f| f.1 == "near_entity_limits"),
        "{found:?}"
    );

    // Fifteen values of 30,000 characters: 900,000 bytes as the service
    // counts them (a string holds at most 64 KiB).
    let columns: Vec<String> = (1..=15).map(|i| format!("c{i}")).collect();
    engine
        .collect(&format!(
            "CREATE TABLE blobs (id INT NOT NULL, {}, PRIMARY KEY (id)) \
             WITH (storage_table = 'Blobs', partition_key = 'b', row_key = '{{id}}')",
            columns
                .iter()
                .map(|c| format!("{c} TEXT"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .await?;
    engine
        .collect(&format!(
            "INSERT INTO blobs (id, {}) VALUES (1, {})",
            columns.join(", "),
            vec!["repeat('x', 30000)"; 15].join(", ")
        ))
        .await?;
    engine.collect("ANALYZE blobs").await?;
    let found = advice(&engine).await?;
    let near = found
        .iter()
        .find(|f| f.1 == "near_entity_limits")
        .ok_or_else(|| format!("the big entity flagged: {found:?}"))?;
    assert_eq!(near.0, "Blobs");
    assert!(
        near.2
            .starts_with("an entity of 879 KiB in partition \"b\""),
        "{}",
        near.2
    );
    Ok(())
}

/// Rows written to one partition a statement at a time are flagged as
/// unbatched writes; the same rows in one statement are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisor_flags_unbatched_writes() -> TestResult {
    let engine = demo_engine(0).await;
    for name in ["onebyone", "together"] {
        engine
            .collect(&format!(
                "CREATE TABLE {name} (shop TEXT NOT NULL, item INT NOT NULL, qty INT, \
                 PRIMARY KEY (shop, item)) WITH (partition_key = '{{shop}}', row_key = '{{item:05}}')"
            ))
            .await?;
    }
    for i in 0..120 {
        engine
            .collect(&format!(
                "INSERT INTO onebyone (shop, item, qty) VALUES ('north', {i}, 1)"
            ))
            .await?;
    }
    let rows: Vec<String> = (0..120).map(|i| format!("('north', {i}, 1)")).collect();
    engine
        .collect(&format!(
            "INSERT INTO together (shop, item, qty) VALUES {}",
            rows.join(", ")
        ))
        .await?;
    let found = advice(&engine).await?;
    let kinds: Vec<(&str, &str)> = found.iter().map(|f| (f.0.as_str(), f.1.as_str())).collect();
    assert_eq!(kinds, [("onebyone", "unbatched_writes")], "{found:?}");
    assert!(
        found[0]
            .2
            .starts_with("partition \"north\" took 120 writes of 120 entities (1.0 a write"),
        "{}",
        found[0].2
    );
    Ok(())
}

/// A point read that a write of the same table follows as often is flagged
/// as read-then-write; the upsert that replaces the pair is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisor_flags_read_then_write() -> TestResult {
    let engine = demo_engine(1200).await;
    let key = |i: u64| {
        let r = tablesql::demo::registration(i * 5);
        format!(
            "event = '{}' AND distance = '{}' AND bib = {}",
            r.event, r.distance, r.bib
        )
    };
    for i in 0..25 {
        engine
            .collect(&format!(
                "SELECT finish FROM registrations WHERE {}",
                key(i)
            ))
            .await?;
        engine
            .collect(&format!(
                "UPDATE registrations SET finish = finish + 1 WHERE {}",
                key(i)
            ))
            .await?;
    }
    let found = advice(&engine).await?;
    let kinds: Vec<(&str, &str)> = found.iter().map(|f| (f.0.as_str(), f.1.as_str())).collect();
    assert_eq!(kinds, [("Registrations", "read_then_write")], "{found:?}");
    assert!(
        found[0].2.starts_with(
            "\"SELECT finish FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3\" \
             (25 calls) reads by key the rows \"UPDATE registrations SET finish = finish + $1"
        ),
        "{}",
        found[0].2
    );
    Ok(())
}

/// A write the store refuses for a conflict is counted against its
/// statement (`conflicts`), not as a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_are_counted_as_conflicts() -> TestResult {
    let engine = demo_engine(0).await;
    engine
        .collect(
            "CREATE TABLE stock (shop TEXT NOT NULL, item INT NOT NULL, qty INT, \
             PRIMARY KEY (shop, item)) WITH (partition_key = '{shop}', row_key = '{item:05}')",
        )
        .await?;
    engine
        .collect("INSERT INTO stock (shop, item, qty) VALUES ('north', 1, 5)")
        .await?;
    for qty in [6, 7] {
        let again = engine
            .collect(&format!(
                "INSERT INTO stock (shop, item, qty) VALUES ('north', 1, {qty})"
            ))
            .await;
        assert!(again.is_err(), "the key exists");
    }
    let batches = engine
        .collect(
            "SELECT calls, conflicts FROM tablesql_stat_statements \
             WHERE query LIKE 'INSERT INTO stock%'",
        )
        .await?;
    let b = batches.first().ok_or("a row")?;
    let n = |c: usize| b.column(c).as_primitive::<Int64Type>().value(0);
    assert_eq!((b.num_rows(), n(0), n(1)), (1, 1, 2));
    Ok(())
}

/// `EngineOptions::statistics` off: statements run as ever, the views stay
/// empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_can_be_turned_off() -> TestResult {
    use std::sync::Arc;
    use tablesql::storage::{EmbeddedStore, TableStore};
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    tablesql::demo::load(store.as_ref(), 60, |_, _| {}).await?;
    let options = tablesql::EngineOptions::default().with_statistics(false);
    let engine = tablesql::Engine::with_store(store, options)
        .await?
        .session();
    let r = tablesql::demo::registration(3);
    let point = format!(
        "SELECT name FROM registrations WHERE event = '{}' AND distance = '{}' AND bib = {}",
        r.event, r.distance, r.bib
    );
    assert_eq!(engine.collect(&point).await?[0].num_rows(), 1);
    let kept = engine
        .collect("SELECT count(*) FROM tablesql_stat_statements")
        .await?;
    assert_eq!(kept[0].column(0).as_primitive::<Int64Type>().value(0), 0);
    assert!(partitions(&engine).await?.is_empty());
    Ok(())
}
