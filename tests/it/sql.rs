//! SQL over mapped tables through the engine: EXPLAIN ANALYZE counters, the
//! catalog persisted in the store, raw tables, LIMIT stopping the scan, and
//! bad input (unknown names, keys that fit no template, type mismatches).

use std::sync::Arc;

use tablesql::datafusion::arrow::array::{Array, AsArray};
use tablesql::datafusion::arrow::datatypes::Int64Type;
use tablesql::datafusion::arrow::record_batch::RecordBatch;
use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session, demo};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// An engine over an in-memory embedded store holding `rows` demo registrations.
pub async fn demo_engine(rows: u64) -> Session {
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory().expect("store"));
    demo::load(store.as_ref(), rows, |_, _| {})
        .await
        .expect("demo load");
    Engine::with_store(store, EngineOptions::default())
        .await
        .expect("engine")
        .session()
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The value of `name=` in an EXPLAIN ANALYZE line of the scan.
fn metric(plan: &str, name: &str) -> Option<u64> {
    let line = plan.lines().find(|l| l.contains("PartitionScanExec"))?;
    let needle = format!("{name}=");
    // A whole name: `requests=` must not match `listing_requests=`.
    let at = line
        .match_indices(&needle)
        .map(|(i, _)| i)
        .find(|&i| !line[..i].ends_with(|c: char| c == '_' || c.is_ascii_alphanumeric()))?
        + needle.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

async fn analyze(engine: &Session, sql: &str) -> Result<String, Box<dyn std::error::Error>> {
    Ok(text(
        &engine.collect(&format!("EXPLAIN ANALYZE {sql}")).await?,
    ))
}

fn single_i64(batches: &[RecordBatch]) -> i64 {
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_counts_what_the_scan_did() -> TestResult {
    let engine = demo_engine(1200).await;
    let point = "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 7";
    let plan = analyze(&engine, point).await?;
    assert!(plan.contains("access=point"), "{plan}");
    assert_eq!(metric(&plan, "entities_scanned"), Some(1), "{plan}");
    assert_eq!(metric(&plan, "entities_returned"), Some(1), "{plan}");
    assert_eq!(metric(&plan, "requests"), Some(1), "{plan}");
    assert_eq!(metric(&plan, "partitions"), Some(1), "{plan}");

    // A range inside one partition reads only the range.
    let range = "SELECT bib FROM registrations WHERE event = '2013 Chicago Marathon' AND distance = 'Full' AND bib BETWEEN 10 AND 29";
    let plan = analyze(&engine, range).await?;
    assert!(plan.contains("access=row_range"), "{plan}");
    assert_eq!(metric(&plan, "entities_scanned"), Some(20), "{plan}");

    // A full scan reads every base row and no index row.
    let plan = analyze(&engine, "SELECT count(name) FROM registrations").await?;
    assert!(plan.contains("access=full_scan"), "{plan}");
    assert_eq!(metric(&plan, "entities_scanned"), Some(1200), "{plan}");
    assert_eq!(metric(&plan, "partitions"), Some(12), "{plan}");
    // It fans out: the embedded store's kept counts name the 12 partitions
    // when it is planned (no listing request, no ANALYZE), then each
    // partition is a request of its own, run side by side.
    assert!(
        plan.contains("fanout=partitions(12) estimate=[partitions=12 entities=2400 counted]"),
        "{plan}"
    );
    assert_eq!(metric(&plan, "listing_requests"), Some(0), "{plan}");
    assert_eq!(metric(&plan, "requests"), Some(12), "{plan}");
    assert!(
        metric(&plan, "peak_in_flight").is_some_and(|p| (1..=8).contains(&p)),
        "{plan}"
    );

    // Points across partitions run as one request each.
    let plan = analyze(
        &engine,
        "SELECT bib FROM registrations WHERE event IN ('2011 New York City Marathon', '2014 Berlin Marathon') AND distance = 'Full' AND bib IN (1, 2, 3)",
    )
    .await?;
    assert!(plan.contains("access=points(6)"), "{plan}");
    assert_eq!(metric(&plan, "requests"), Some(6), "{plan}");
    assert_eq!(metric(&plan, "entities_returned"), Some(6), "{plan}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_stops_the_scan_early() -> TestResult {
    let engine = demo_engine(6000).await;
    let plan = analyze(&engine, "SELECT bib FROM registrations LIMIT 5").await?;
    let scanned = metric(&plan, "entities_scanned").ok_or("no metric")?;
    // Pages are cut to the limit; requests running ahead may each read one page.
    assert!(scanned <= 5 * 8, "{plan}");
    assert_eq!(metric(&plan, "entities_returned"), Some(5), "{plan}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_lives_in_the_store() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE readings (device TEXT NOT NULL, at BIGINT NOT NULL, celsius DOUBLE) \
             WITH (storage_table = 'Readings', partition_key = '{device}', row_key = '{at:~12}')",
        )
        .await?;
    let t = TableName::new("Readings")?;
    for (at, c) in [(100, 20.5), (200, 21.0), (300, 19.5)] {
        let e = Entity::new(
            PartitionKey::new("d1")?,
            RowKey::new(format!("{:012}", 999_999_999_999i64 - at))?,
        )
        .with("celsius", EdmValue::Double(c));
        store.execute(&t, WriteOp::Insert(e)).await?;
    }
    // A second engine over the same store sees the definition.
    let other = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let rows = text(
        &other
            .collect("SELECT at, celsius FROM readings WHERE device = 'd1' AND at >= 200")
            .await?,
    );
    // The inverted field reads newest first.
    assert_eq!(
        rows.lines()
            .filter(|l| l.starts_with("| 3") || l.starts_with("| 2"))
            .collect::<Vec<_>>(),
        ["| 300 | 19.5    |", "| 200 | 21.0    |"],
        "{rows}"
    );
    let plan = text(
        &other
            .collect("EXPLAIN SELECT at FROM readings WHERE device = 'd1' ORDER BY at DESC")
            .await?,
    );
    assert!(
        !plan.contains("SortExec"),
        "an inverted key needs no sort: {plan}"
    );
    other.collect("DROP TABLE readings").await?;
    // The storage table stays, readable raw: no `at` column any more.
    let err = other
        .collect("SELECT at FROM readings")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("No field named at"), "{err}");
    let raw = text(
        &other
            .collect("SELECT \"PartitionKey\", celsius FROM raw.readings")
            .await?,
    );
    assert_eq!(raw.matches("d1").count(), 3, "{raw}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tables_infer_their_columns() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let t = TableName::new("Mixed")?;
    store.create_table(&t).await?;
    let rows = [
        ("a", EdmValue::Int32(1), EdmValue::String("x".into())),
        ("b", EdmValue::Int64(5_000_000_000), EdmValue::Boolean(true)),
    ];
    for (rk, n, v) in rows {
        let e = Entity::new(PartitionKey::new("p")?, RowKey::new(rk)?)
            .with("n", n)
            .with("v", v);
        store.execute(&t, WriteOp::Insert(e)).await?;
    }
    let engine = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    let got = text(&engine.collect("SELECT \"RowKey\", n, v, arrow_typeof(n) AS tn, arrow_typeof(v) AS tv FROM mixed ORDER BY \"RowKey\"").await?);
    assert!(
        got.contains("| a      | 1          | x    | Int64 | Utf8 |"),
        "{got}"
    );
    assert!(
        got.contains("| b      | 5000000000 | true | Int64 | Utf8 |"),
        "{got}"
    );
    let plan = text(
        &engine
            .collect(
                "EXPLAIN SELECT n FROM mixed WHERE \"PartitionKey\" = 'p' AND \"RowKey\" = 'b'",
            )
            .await?,
    );
    assert!(plan.contains("access=point"), "{plan}");
    Ok(())
}

/// A raw table drops nothing: its columns are found from a sample of each
/// RowKey kind, not the first page alone (five kinds with properties of
/// their own, the rarest first met after 10,350 entities, and a second
/// partition's property), and a property no column names, as one written
/// after the engine opened, is read in `_properties`, a JSON object that
/// `json_extract_path_text` reads and filters on, until `ANALYZE` samples
/// the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tables_read_every_property_of_every_kind() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let t = TableName::new("Things")?;
    store.create_table(&t).await?;
    let guid: uuid::Uuid = "6f1c2f3e-7a8b-4c9d-8e0f-112233445566".parse()?;
    let kinds = [
        (
            "A:",
            6000,
            vec![
                ("a_name", EdmValue::String("x".into())),
                ("a_n", EdmValue::Int32(1)),
            ],
        ),
        ("B:", 4000, vec![("b_flag", EdmValue::Boolean(true))]),
        (
            "C:",
            300,
            vec![("c_at", EdmValue::DateTime(chrono::Utc::now()))],
        ),
        ("D:", 50, vec![("d_amount", EdmValue::Double(2.5))]),
        (
            "E:",
            3,
            vec![
                ("e_guid", EdmValue::Guid(guid)),
                ("e_bytes", EdmValue::Binary(vec![1, 2])),
            ],
        ),
    ];
    type Made<T> = Result<T, Box<dyn std::error::Error>>;
    let entity = |pk: &str, rk: String, props: &[(&str, EdmValue)]| -> Made<Entity> {
        let mut e = Entity::new(PartitionKey::new(pk)?, RowKey::new(rk)?);
        for (name, v) in props {
            e = e.with(*name, v.clone());
        }
        Ok(e)
    };
    for (kind, n, props) in &kinds {
        let all: Vec<WriteOp> = (0..*n)
            .map(|i| entity("p", format!("{kind}{i:05}"), props).map(WriteOp::Insert))
            .collect::<Made<_>>()?;
        for batch in all.chunks(100) {
            store.execute_batch(&t, batch.to_vec()).await?;
        }
    }
    let q_only = [("q_only", EdmValue::Int64(7))];
    store
        .execute(&t, WriteOp::Insert(entity("q", "A:00000".into(), &q_only)?))
        .await?;
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let columns = text(
        &engine
            .collect(
                "SELECT column_name FROM information_schema.columns \
                 WHERE table_schema = 'raw' AND table_name = 'things' ORDER BY column_name",
            )
            .await?,
    );
    for c in [
        "a_name",
        "a_n",
        "b_flag",
        "c_at",
        "d_amount",
        "e_guid",
        "e_bytes",
        "q_only",
        "_properties",
    ] {
        assert!(columns.contains(&format!("| {c} ")), "{c} in {columns}");
    }
    let rare = text(
        &engine
            .collect(
                "SELECT count(e_guid), count(e_bytes), min(e_guid) FROM raw.things \
                 WHERE \"RowKey\" LIKE 'E:%'",
            )
            .await?,
    );
    assert!(
        rare.contains("| 3 ") && rare.contains(&guid.to_string()),
        "{rare}"
    );
    // Written after the engine sampled the table: in `_properties`.
    let late = [
        ("late", EdmValue::String("here".into())),
        ("a_n", EdmValue::Int32(9)),
    ];
    store
        .execute(&t, WriteOp::Insert(entity("q", "Z:00001".into(), &late)?))
        .await?;
    let found = text(
        &engine
            .collect(
                "SELECT \"RowKey\", a_n, _properties, json_extract_path_text(_properties, 'late') AS late \
                 FROM raw.things WHERE json_extract_path_text(_properties, 'late') = 'here'",
            )
            .await?,
    );
    assert!(
        found.contains(r#"| Z:00001 | 9   | {"late":"here"} | here |"#),
        "{found}"
    );
    let plain = text(
        &engine
            .collect("SELECT _properties FROM raw.things WHERE \"RowKey\" = 'B:00001'")
            .await?,
    );
    assert!(plain.contains("| {}          |"), "{plain}");
    // ANALYZE samples the table again: the late property is a column now.
    engine.collect("ANALYZE raw.things").await?;
    let column = text(
        &engine
            .collect("SELECT \"RowKey\", late, _properties FROM raw.things WHERE late = 'here'")
            .await?,
    );
    assert!(
        column.contains("| Z:00001 | here | {}          |"),
        "{column}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() -> TestResult {
    let engine = demo_engine(120).await;
    let err = |sql: &'static str| {
        let engine = engine.clone();
        async move {
            engine
                .collect(sql)
                .await
                .map(|_| ())
                .unwrap_err()
                .to_string()
        }
    };
    let e = err("SELECT * FROM nosuchtable").await;
    assert!(e.contains("nosuchtable") && e.contains("not found"), "{e}");
    let e = err("SELECT shoe_size FROM registrations").await;
    assert!(e.contains("shoe_size"), "{e}");
    let e = err("SELECT * FROM registrations WHERE bib = 'seven'").await;
    assert!(
        e.contains("seven") || e.to_lowercase().contains("cast"),
        "{e}"
    );
    let e = err("CREATE TABLE tee2 (a TEXT) WITH (partition_key = '{a}', row_key = '{b}')").await;
    assert!(e.contains("undeclared column b"), "{e}");

    // A stored key the template did not write: an error naming the entity.
    let store = engine.store().clone();
    let t = TableName::new(demo::TABLE)?;
    let stray = Entity::new(
        PartitionKey::new("2012 Boston Marathon__Full")?,
        RowKey::new("BIB:12x45__Ann__F__30")?,
    );
    store.execute(&t, WriteOp::Insert(stray)).await?;
    let e = err("SELECT count(name) FROM registrations WHERE event = '2012 Boston Marathon'").await;
    assert!(
        e.contains("BIB:12x45__Ann__F__30") && e.contains("does not match its template"),
        "{e}"
    );
    store
        .execute(
            &t,
            WriteOp::Delete {
                partition_key: PartitionKey::new("2012 Boston Marathon__Full")?,
                row_key: RowKey::new("BIB:12x45__Ann__F__30")?,
                if_match: IfMatch::Any,
            },
        )
        .await?;

    // A property of the wrong type: an error naming column and entity.
    let pk = PartitionKey::new("2014 Berlin Marathon__10K")?;
    let rk = RowKey::new("BIB:00001__Zed__M__40")?;
    let e = Entity::new(pk, rk).with("finish", EdmValue::String("fast".into()));
    store.execute(&t, WriteOp::Insert(e)).await?;
    let e = err("SELECT max(finish) FROM registrations").await;
    assert!(
        e.contains("column finish is BIGINT") && e.contains("BIB:00001__Zed__M__40"),
        "{e}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_excludes_index_rows() -> TestResult {
    let engine = demo_engine(1234).await;
    assert_eq!(
        single_i64(&engine.collect("SELECT count(*) FROM registrations").await?),
        1234
    );
    assert_eq!(
        single_i64(
            &engine
                .collect("SELECT count(*) FROM raw.registrations")
                .await?
        ),
        2468
    );
    let nulls = engine
        .collect("SELECT club FROM registrations WHERE club IS NULL")
        .await?;
    assert!(nulls.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
    assert!(
        nulls
            .iter()
            .all(|b| b.column(0).null_count() == b.num_rows())
    );
    Ok(())
}

/// A store that counts the requests in flight at once (and holds each a
/// moment, so that concurrent ones overlap).
#[derive(Debug)]
struct InFlight {
    inner: EmbeddedStore,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl InFlight {
    async fn counted<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(n, SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let out = f.await;
        self.now.fetch_sub(1, SeqCst);
        out
    }
}

#[async_trait::async_trait]
impl layer::StoreLayer for InFlight {
    const DERIVED: layer::Derived = layer::Derived::Here;

    fn below(&self) -> &dyn TableStore {
        &self.inner
    }

    async fn get(
        &self,
        t: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> tablesql::storage::Result<Option<StoredEntity>> {
        self.counted(self.inner.get(t, pk, rk)).await
    }
    async fn query(
        &self,
        t: &TableName,
        q: &Query,
        c: Option<&ContinuationToken>,
    ) -> tablesql::storage::Result<Page> {
        self.counted(self.inner.query(t, q, c)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_run_concurrently_within_the_bound() -> TestResult {
    let store = Arc::new(InFlight {
        inner: EmbeddedStore::in_memory()?,
        now: Default::default(),
        most: Default::default(),
    });
    demo::load(store.as_ref(), 1200, |_, _| {}).await?;
    store.most.store(0, std::sync::atomic::Ordering::SeqCst);
    let options = EngineOptions::default().with_scan(
        tablesql::ScanOptions::default()
            .with_max_in_flight(4)
            .with_pages_ahead(1),
    );
    let engine = Engine::with_store(store.clone(), options).await?.session();
    store.most.store(0, std::sync::atomic::Ordering::SeqCst);
    let bibs: Vec<String> = (1..=40).map(|b| b.to_string()).collect();
    let sql = format!(
        "SELECT bib FROM registrations WHERE event = '2013 Chicago Marathon' AND distance = 'Full' AND bib IN ({}) ORDER BY bib",
        bibs.join(", ")
    );
    let rows = engine.collect(&sql).await?;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 40);
    let most = store.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!((2..=4).contains(&most), "{most} requests in flight at once");
    Ok(())
}

/// The same SQL over the Azure Table backend (Azurite): the engine works over
/// the trait, and the access paths and answers are the embedded store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_over_azurite_matches_the_embedded_store() -> TestResult {
    let azure: Arc<dyn TableStore> = Arc::new(AzureStore::new(crate::azurite::fresh_account()?)?);
    demo::load(azure.as_ref(), 600, |_, _| {}).await?;
    let on_azure = Engine::with_store(azure, EngineOptions::default())
        .await?
        .session();
    let embedded = demo_engine(600).await;
    for sql in [
        "SELECT name, age FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 7",
        "SELECT bib FROM registrations WHERE event = '2013 Chicago Marathon' AND distance = 'Full' AND bib IN (3, 9, 27) ORDER BY bib",
        "SELECT count(*), sum(finish) FROM registrations WHERE event = '2011 New York City Marathon' AND bib BETWEEN 10 AND 40",
        "SELECT distance, count(*), count(club) FROM registrations WHERE club = 'Harriers' GROUP BY distance ORDER BY distance",
        "SELECT e.city, count(*) FROM registrations r JOIN events e ON r.event = e.event AND r.distance = e.distance GROUP BY e.city ORDER BY e.city",
    ] {
        let (a, b) = (
            text(&on_azure.collect(sql).await?),
            text(&embedded.collect(sql).await?),
        );
        assert_eq!(a, b, "{sql}");
        let plan = analyze(&on_azure, sql).await?;
        assert!(plan.contains("access="), "{plan}");
    }
    let plan = analyze(
        &on_azure,
        "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 7",
    )
    .await?;
    assert!(plan.contains("access=point"), "{plan}");
    assert_eq!(metric(&plan, "requests"), Some(1), "{plan}");
    assert_eq!(metric(&plan, "entities_returned"), Some(1), "{plan}");
    Ok(())
}

/// `ANALYZE` records per-partition statistics in the store: a new engine
/// over the store plans its fan-out from them (no listing, big partitions in
/// chunks at their guideposts), EXPLAIN says so with the estimate, and the
/// rows are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analyze_plans_fan_outs_from_statistics() -> TestResult {
    let engine = demo_engine(3000).await;
    engine.collect("SET tablesql.scan_policy = 'allow'").await?;
    let count = "SELECT count(name) FROM registrations";
    // Before, the store's kept counts plan it: a request per partition.
    let before = analyze(&engine, count).await?;
    assert!(
        before.contains("fanout=partitions(12) estimate=[partitions=12 entities=6000 counted]"),
        "{before}"
    );
    assert_eq!(metric(&before, "listing_requests"), Some(0), "{before}");

    engine.collect("SET tablesql.guidepost_every = 100").await?;
    engine.collect("ANALYZE registrations").await?;
    let notices = engine.take_notices();
    assert!(
        notices.iter().any(|n| n
            .text
            .starts_with("analyzed registrations: 12 partitions, 6000 entities")),
        "{notices:?}"
    );

    // Another engine over the same store: the statistics are the store's.
    let again = Engine::with_store(engine.store().clone(), EngineOptions::default())
        .await?
        .session();
    again.collect("SET tablesql.scan_policy = 'allow'").await?;
    let after = analyze(&again, count).await?;
    assert!(after.contains("fanout=chunks("), "{after}");
    assert!(
        after.contains("estimate=[partitions=12 entities="),
        "{after}"
    );
    assert_eq!(metric(&after, "listing_requests"), Some(0), "{after}");
    assert!(
        metric(&after, "requests").is_some_and(|n| n > 12 * 2),
        "{after}"
    );
    assert_eq!(single_i64(&again.collect(count).await?), 3000);
    // A row range in every partition chunks too, and a partition range only
    // reads the analyzed partitions in it.
    let bib = analyze(&again, "SELECT name FROM registrations WHERE bib = 77").await?;
    assert!(bib.contains("fanout=partitions(12)"), "{bib}");
    let rows = again
        .collect("SELECT count(*) FROM registrations WHERE event LIKE '2013%'")
        .await?;
    let want = engine
        .collect("SELECT count(*) FROM registrations WHERE event LIKE '2013%'")
        .await?;
    assert_eq!(single_i64(&rows), single_i64(&want));
    // Unknown tables are named.
    let e = again.collect("ANALYZE nosuch").await.unwrap_err();
    assert!(e.to_string().contains("nosuch"), "{e}");
    Ok(())
}

/// Statistics never stand in the way: long RowKeys keep their guideposts
/// within one property's 64 KiB, statistics that do not read (another
/// version's) are planned without, and the catalog's own table cannot be
/// mapped.
#[tokio::test]
async fn statistics_that_cannot_be_kept_or_read() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE wide (p TEXT NOT NULL, r TEXT NOT NULL) \
             WITH (partition_key = '{p}', row_key = '{r}')",
        )
        .await?;
    let long = "x".repeat(150);
    let values: Vec<String> = (0..500).map(|i| format!("('a', '{long}{i:05}')")).collect();
    engine
        .collect(&format!(
            "INSERT INTO wide (p, r) VALUES {}",
            values.join(", ")
        ))
        .await?;
    let stats = engine.analyze("wide", 1).await?;
    let bytes: usize = stats.partitions[0]
        .guideposts
        .iter()
        .map(|g| 2 * g.as_str().len() + 2)
        .sum();
    assert!(
        bytes <= 60 * 1024 && !stats.partitions[0].guideposts.is_empty(),
        "{bytes}"
    );

    // A summary of a format this engine does not know.
    let catalog = TableName::new("TablesqlCatalog")?;
    let alien = Entity::new(PartitionKey::new("stats")?, RowKey::new("wide")?)
        .with("format_version", EdmValue::Int32(99));
    store
        .execute(&catalog, WriteOp::InsertOrReplace(alien))
        .await?;
    let again = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    again.collect("SET tablesql.scan_policy = 'allow'").await?;
    let plan = text(&again.collect("EXPLAIN SELECT * FROM wide").await?);
    assert!(plan.contains("fanout=partitions(listed)"), "{plan}");

    let e = engine
        .collect(
            "CREATE TABLE sneaky (p TEXT NOT NULL, r TEXT NOT NULL) WITH (storage_table = \
             'tablesqlcatalog', partition_key = '{p}', row_key = '{r}')",
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("tablesql's own catalog"), "{e}");
    Ok(())
}

/// The rows of a run of a prepared statement, as text.
async fn run_prepared(
    p: &tablesql::PreparedStatement,
    params: Vec<tablesql::datafusion::scalar::ScalarValue>,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(text(&p.query(params).await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_answer_as_their_sql() -> TestResult {
    use tablesql::datafusion::scalar::ScalarValue;
    let engine = demo_engine(500).await;
    let point = engine
        .prepare(
            "SELECT name, age, finish, bib FROM registrations \
             WHERE event = $1 AND distance = $2 AND bib = $3",
        )
        .await?;
    assert!(point.is_point_read());
    let range = engine
        .prepare(
            "SELECT bib, name FROM registrations WHERE event = $1 AND distance = $2 \
             AND bib BETWEEN $3 AND $4 ORDER BY bib",
        )
        .await?;
    assert!(!range.is_point_read());
    let mut found = 0;
    for i in (0..520).step_by(37) {
        let r = demo::registration(i);
        let values = |n: usize| {
            let mut v = vec![
                ScalarValue::from(r.event),
                ScalarValue::from(r.distance),
                ScalarValue::Int32(Some(r.bib)),
                ScalarValue::Int32(Some(r.bib + 4)),
            ];
            v.truncate(n);
            v
        };
        for (prepared, n, sql) in [
            (
                &point,
                3,
                format!(
                    "SELECT name, age, finish, bib FROM registrations WHERE event = '{}' \
                     AND distance = '{}' AND bib = {}",
                    r.event, r.distance, r.bib
                ),
            ),
            (
                &range,
                4,
                format!(
                    "SELECT bib, name FROM registrations WHERE event = '{}' AND distance = '{}' \
                     AND bib BETWEEN {} AND {} ORDER BY bib",
                    r.event,
                    r.distance,
                    r.bib,
                    r.bib + 4
                ),
            ),
        ] {
            let want = text(&engine.collect(&sql).await?);
            assert_eq!(run_prepared(prepared, values(n)).await?, want, "{sql}");
            found += usize::from(want.lines().count() > 4);
        }
    }
    assert!(
        found >= 20,
        "most keys exist (rows past 500 do not): {found}"
    );
    // A NULL key matches nothing; an integer of another width that fits
    // the column is taken as the key.
    let none = point
        .query(vec![
            ScalarValue::from("2012 Boston Marathon"),
            ScalarValue::from("Full"),
            ScalarValue::Int32(None),
        ])
        .await?;
    assert_eq!(none.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    let r = demo::registration(3);
    let as_text = run_prepared(
        &point,
        vec![
            ScalarValue::from(r.event),
            ScalarValue::from(r.distance),
            ScalarValue::Int64(Some(i64::from(r.bib))),
        ],
    )
    .await?;
    assert!(as_text.contains(r.name), "{as_text}");
    // Not a query or a write: refused with the reason.
    let e = engine.prepare("BEGIN").await.unwrap_err().to_string();
    assert!(e.contains("only queries and writes"), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_upserts_type_the_placeholders_of_their_do_update() -> TestResult {
    use tablesql::datafusion::arrow::datatypes::DataType;
    use tablesql::datafusion::scalar::ScalarValue;
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    let engine = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE notes (k TEXT NOT NULL, id INT NOT NULL, v TEXT) WITH \
             (storage_table = 'Notes', partition_key = '{k}', row_key = '{id:04}')",
        )
        .await?;
    // `$4` is only in DO UPDATE, which DataFusion's INSERT plan does not see.
    let upsert = engine
        .prepare(
            "INSERT INTO notes (k, id, v) VALUES ($1, $2, $3) \
             ON CONFLICT (k, id) DO UPDATE SET v = $4",
        )
        .await?;
    assert_eq!(
        upsert.parameter_types(),
        [
            Some(DataType::Utf8),
            Some(DataType::Int32),
            Some(DataType::Utf8),
            Some(DataType::Utf8)
        ]
    );
    for (v, again) in [("first", "unused"), ("unused", "second")] {
        upsert
            .query(vec![
                ScalarValue::from("a"),
                ScalarValue::Int32(Some(1)),
                ScalarValue::from(v),
                ScalarValue::from(again),
            ])
            .await?;
    }
    let rows = text(&engine.collect("SELECT v FROM notes").await?);
    assert!(rows.contains("second") && !rows.contains("first"), "{rows}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_point_reads_follow_the_catalog_and_the_transaction() -> TestResult {
    use tablesql::datafusion::scalar::ScalarValue;
    let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE kv (k TEXT NOT NULL, v TEXT) \
             WITH (storage_table = 'KvTable', partition_key = 'p', row_key = 'one:{k}')",
        )
        .await?;
    engine
        .collect("INSERT INTO kv (k, v) VALUES ('a', 'first')")
        .await?;
    let get = engine.prepare("SELECT v FROM kv WHERE k = $1").await?;
    assert!(get.is_point_read());
    let key = || vec![ScalarValue::from("a")];
    assert!(run_prepared(&get, key()).await?.contains("first"));
    // The same table mapped anew, its rows under other keys: the statement
    // is planned again and reads through the new mapping.
    engine.collect("DROP TABLE kv").await?;
    engine
        .collect(
            "CREATE TABLE kv (k TEXT NOT NULL, v TEXT) \
             WITH (storage_table = 'KvTable', partition_key = 'p', row_key = 'two:{k}')",
        )
        .await?;
    engine
        .collect("INSERT INTO kv (k, v) VALUES ('a', 'second')")
        .await?;
    let got = run_prepared(&get, key()).await?;
    assert!(got.contains("second") && !got.contains("first"), "{got}");
    // Inside a transaction block, the block's own writes are read.
    engine.collect("BEGIN").await?;
    engine
        .collect("UPDATE kv SET v = 'buffered' WHERE k = 'a'")
        .await?;
    assert!(run_prepared(&get, key()).await?.contains("buffered"));
    engine.collect("ROLLBACK").await?;
    assert!(run_prepared(&get, key()).await?.contains("second"));
    // A failed statement fails the block: nothing runs but its end.
    engine.collect("BEGIN").await?;
    assert!(
        engine
            .collect("INSERT INTO kv (k, v) VALUES ('a', 'again')")
            .await
            .is_err()
    );
    let e = get.query(key()).await.unwrap_err().to_string();
    assert!(e.contains("current transaction is aborted"), "{e}");
    engine.collect("ROLLBACK").await?;
    assert!(run_prepared(&get, key()).await?.contains("second"));
    Ok(())
}

/// Catalog DDL is recognised by its statement, not its first word: a
/// leading comment (as tools and migration files write them) changes
/// nothing, through `Session::collect` and through a prepared statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_ddl_after_a_leading_comment() -> TestResult {
    let engine = demo_engine(0).await;
    engine
        .collect(
            "-- the readings of one sensor\n/* a block comment */ CREATE TABLE readings \
             (sensor TEXT NOT NULL, at INT NOT NULL, v INT NOT NULL, PRIMARY KEY (sensor, at)) \
             WITH (partition_key = '{sensor}', row_key = 'AT:{at:08}')",
        )
        .await?;
    engine
        .collect("/* x */ INSERT INTO readings (sensor, at, v) VALUES ('s1', 1, 5), ('s1', 2, 15)")
        .await?;
    let n = engine
        .collect("-- a count\nSELECT count(*) FROM readings WHERE sensor = 's1'")
        .await?;
    assert_eq!(single_i64(&n), 2);
    engine
        .collect("-- the index\nCREATE INDEX by_v ON readings (v)")
        .await?;
    assert!(engine.collect("/* gone */ DROP INDEX by_v").await.is_ok());
    assert!(engine.table_def("readings").await.is_ok());
    engine.collect("-- gone\nDROP TABLE readings").await?;
    // The mapping is gone (its entities stay, readable as a raw table).
    assert!(engine.table_def("readings").await.is_err());
    Ok(())
}

/// `now()` is each statement's start, as PostgreSQL's is outside a
/// transaction block, not the moment the session first planned; and the
/// names planning makes up start afresh in each statement.
#[tokio::test]
async fn now_is_each_statements_start_not_the_sessions() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let session = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    let first = text(&session.collect("SELECT now()").await?);
    let second = text(&session.collect("SELECT now()").await?);
    assert_ne!(first, second, "now() stood still across statements");
    Ok(())
}

/// DataFusion's own failures are told by their variant, with PostgreSQL's
/// codes: a division by zero (22012), an integer overflow (22003), a value
/// a cast cannot read (22P02); and a subquery DataFusion cannot run where
/// it stands, valid SQL that PostgreSQL runs, is not implemented (0A000),
/// not a syntax error.
#[tokio::test]
async fn datafusions_own_failures_have_postgres_codes() -> TestResult {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let session = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    session
        .collect(
            "CREATE TABLE nums (k INT NOT NULL, i INT, t TEXT) \
             WITH (storage_table = 'Nums', partition_key = 'P', row_key = '{k:03}')",
        )
        .await?;
    session
        .collect("INSERT INTO nums (k, i, t) VALUES (1, 2147483647, 'x'), (2, 0, '12')")
        .await?;
    let cases = [
        ("SELECT 1/0", "22012"),
        ("SELECT k / i FROM nums", "22012"),
        ("SELECT k % i FROM nums", "22012"),
        ("SELECT 2147483647 + 1", "22003"),
        ("SELECT i + i FROM nums", "22003"),
        ("SELECT t::int FROM nums", "22P02"),
        ("SELECT k FROM nums WHERE k = 'seven'", "22P02"),
        ("SELECT CAST('abc' AS INT)", "22P02"),
        (
            "SELECT k FROM nums ORDER BY (SELECT max(m.i) FROM nums m WHERE m.k = nums.k)",
            "0A000",
        ),
        (
            "SELECT sum(k) OVER (ORDER BY (SELECT max(m.i) FROM nums m WHERE m.k = nums.k)) FROM nums",
            "0A000",
        ),
    ];
    for (sql, code) in cases {
        let e = session
            .collect(sql)
            .await
            .err()
            .ok_or_else(|| format!("{sql} ran"))?;
        assert_eq!(e.sqlstate(), code, "{sql}: {e}");
    }
    Ok(())
}
