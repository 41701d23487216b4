//! The embedded store as a file: what survives closing and reopening, the format
//! marker, exclusive use by one process, the counts kept beside the entities,
//! and the migration of a format 1 store.

use tablesql::storage::embedded::FILE_NAME;
use tablesql::storage::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn fill(store: &EmbeddedStore, table: &TableName, n: usize) -> TestResult {
    let pk = PartitionKey::new("p")?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops = chunk
            .iter()
            .map(|i| {
                let e = Entity::new(pk.clone(), RowKey::new(format!("{i:05}")).expect("key"))
                    .with("i", EdmValue::Int64(*i as i64));
                WriteOp::Insert(e)
            })
            .collect();
        store.execute_batch(table, ops).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_token_resumes_in_a_new_store_handle() -> TestResult {
    let dir = tempfile::tempdir()?;
    let table = TableName::new("Paged")?;
    let token_text = {
        let store = EmbeddedStore::open(dir.path())?;
        store.create_table(&table).await?;
        fill(&store, &table, 2500).await?;
        let page = store.query(&table, &Query::all(), None).await?;
        assert_eq!(page.entities.len(), 1000);
        page.continuation.ok_or("no token")?.to_string()
    };
    // The first handle is closed; a new one (as a new process would) resumes.
    let store = EmbeddedStore::open(dir.path())?;
    let token: ContinuationToken = token_text.parse()?;
    let page = store.query(&table, &Query::all(), Some(&token)).await?;
    assert_eq!(
        page.entities.first().map(|e| e.row_key().as_str()),
        Some("01000")
    );
    assert_eq!(page.entities.len(), 1000);
    Ok(())
}

#[tokio::test]
async fn writes_survive_reopening_with_etags_and_timestamps() -> TestResult {
    let dir = tempfile::tempdir()?;
    let table = TableName::new("Kept")?;
    let (etag, written_at) = {
        let store = EmbeddedStore::open(dir.path())?;
        store.create_table(&table).await?;
        let e =
            Entity::new(PartitionKey::new("p")?, RowKey::new("r")?).with("v", EdmValue::Int32(1));
        let etag = store
            .execute(&table, WriteOp::Insert(e))
            .await?
            .etag
            .ok_or("no etag")?;
        let got = store
            .get(&table, &PartitionKey::new("p")?, &RowKey::new("r")?)
            .await?;
        (etag, got.ok_or("missing")?.timestamp)
    };
    let store = EmbeddedStore::open(dir.path())?;
    let got = store
        .get(&table, &PartitionKey::new("p")?, &RowKey::new("r")?)
        .await?
        .ok_or("missing")?;
    assert_eq!(
        (got.etag.clone(), got.timestamp),
        (etag.clone(), written_at)
    );
    // The write clock resumes after the last write: the next ETag is new.
    let e = Entity::new(PartitionKey::new("p")?, RowKey::new("r")?);
    let next = store
        .execute(&table, WriteOp::Update(e, IfMatch::ETag(etag.clone())))
        .await?;
    assert_ne!(next.etag, Some(etag));
    Ok(())
}

#[tokio::test]
async fn a_second_open_of_one_store_is_refused_clearly() -> TestResult {
    let dir = tempfile::tempdir()?;
    let _first = EmbeddedStore::open(dir.path())?;
    match EmbeddedStore::open(dir.path()) {
        Err(StorageError::InUse(path)) => assert!(path.ends_with(FILE_NAME)),
        other => panic!("expected InUse, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_store_of_another_format_version_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    drop(EmbeddedStore::open(dir.path())?);
    {
        let db = redb::Database::open(dir.path().join(FILE_NAME))?;
        let txn = db.begin_write()?;
        {
            let meta: redb::TableDefinition<&str, &[u8]> =
                redb::TableDefinition::new("tablesql_meta");
            txn.open_table(meta)?
                .insert("format_version", 99u32.to_le_bytes().as_slice())?;
        }
        txn.commit()?;
    }
    match EmbeddedStore::open(dir.path()) {
        Err(StorageError::FormatVersion {
            found: 99,
            expected: 2,
        }) => Ok(()),
        other => panic!("expected FormatVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn readers_run_while_a_writer_commits() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path())?;
    let table = TableName::new("Busy")?;
    store.create_table(&table).await?;
    fill(&store, &table, 1000).await?;
    let writer = {
        let (store, table) = (store.clone(), table.clone());
        tokio::spawn(async move {
            for i in 0..20 {
                let e = Entity::new(
                    PartitionKey::new("q").expect("key"),
                    RowKey::new(format!("{i}")).expect("key"),
                );
                store.execute(&table, WriteOp::Insert(e)).await?;
            }
            Ok::<_, StorageError>(())
        })
    };
    // Every read sees a whole snapshot: the 1,000 rows of "p" are always there.
    for _ in 0..20 {
        let n = store
            .query_all(&table, &Query::partition(PartitionKey::new("p")?))
            .await?
            .len();
        assert_eq!(n, 1000);
    }
    writer.await??;
    assert_eq!(store.count(&table).await?, 1020);
    Ok(())
}

/// Transactions that share a group commit keep their own outcomes: the ones
/// that conflict write nothing, the others are whole.
#[tokio::test]
async fn concurrent_transactions_sharing_commits_stay_all_or_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path())?;
    let table = TableName::new("Grouped")?;
    store.create_table(&table).await?;
    let taken = Entity::new(PartitionKey::new("p3")?, RowKey::new("r05")?);
    store.execute(&table, WriteOp::Insert(taken)).await?;
    let mut tasks = Vec::new();
    for b in 0..8 {
        let (store, table) = (store.clone(), table.clone());
        tasks.push(tokio::spawn(async move {
            let ops = (0..10)
                .map(|r| {
                    let pk = PartitionKey::new(format!("p{b}")).expect("key");
                    WriteOp::Insert(Entity::new(
                        pk,
                        RowKey::new(format!("r{r:02}")).expect("key"),
                    ))
                })
                .collect();
            store.execute_batch(&table, ops).await
        }));
    }
    for (b, task) in tasks.into_iter().enumerate() {
        let result = task.await?;
        let present = store
            .query_all(
                &table,
                &Query::partition(PartitionKey::new(format!("p{b}"))?),
            )
            .await?;
        if b == 3 {
            assert!(
                matches!(result, Err(StorageError::Batch { index: 5, .. })),
                "{result:?}"
            );
            assert_eq!(present.len(), 1, "the refused transaction wrote something");
        } else {
            assert_eq!(result?.len(), 10);
            assert_eq!(present.len(), 10);
        }
    }
    Ok(())
}

/// The format 1 fixture: a store made by the format 1 code (the demo's 120
/// registrations with some deleted and updated, the events, a plain table
/// with an index and every EDM type, a table keyed by supplementary and
/// private-use characters, the catalog), and a dump of every entity that
/// code read back from it (`format1.jsonl.gz`: keys, Timestamp ticks, ETag,
/// properties with their types).
pub fn format1_fixture(dir: &std::path::Path) -> TestResult {
    use std::io::Read;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&include_bytes!("../fixtures/format1.redb.gz")[..])
        .read_to_end(&mut bytes)?;
    std::fs::write(dir.join(FILE_NAME), bytes)?;
    Ok(())
}

fn format1_dump() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&include_bytes!("../fixtures/format1.jsonl.gz")[..])
        .read_to_string(&mut text)?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// Every entity of a store, one line each as the fixture's dump has it.
async fn dump(store: &EmbeddedStore) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    use tablesql::storage::value::to_ticks;
    let mut lines = Vec::new();
    for t in store.list_tables().await? {
        for e in store.query_all(&t, &Query::all()).await? {
            let props: serde_json::Map<String, serde_json::Value> = e
                .entity
                .properties
                .iter()
                .map(|(k, v)| {
                    let (ty, text) = match v {
                        EdmValue::String(s) => ("String", s.clone()),
                        EdmValue::Binary(b) => {
                            ("Binary", b.iter().map(|x| format!("{x:02x}")).collect())
                        }
                        EdmValue::Boolean(b) => ("Boolean", b.to_string()),
                        EdmValue::DateTime(d) => ("DateTime", to_ticks(d).to_string()),
                        EdmValue::Double(d) => ("Double", format!("{:016x}", d.to_bits())),
                        EdmValue::Guid(g) => ("Guid", g.to_string()),
                        EdmValue::Int32(i) => ("Int32", i.to_string()),
                        EdmValue::Int64(i) => ("Int64", i.to_string()),
                    };
                    (k.clone(), serde_json::json!([ty, text]))
                })
                .collect();
            lines.push(
                serde_json::json!({
                    "table": t.as_str(), "pk": e.partition_key().as_str(), "rk": e.row_key().as_str(),
                    "ticks": to_ticks(&e.timestamp).to_string(), "etag": e.etag.to_string(),
                    "properties": props,
                })
                .to_string(),
            );
        }
    }
    Ok(lines)
}

#[tokio::test]
async fn a_format_1_store_is_refused_with_the_command_that_migrates_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    format1_fixture(dir.path())?;
    let err = EmbeddedStore::open(dir.path()).expect_err("format 1 is refused");
    assert!(
        matches!(
            err,
            StorageError::FormatVersion {
                found: 1,
                expected: 2
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tablesql migrate"), "{err}");
    Ok(())
}

#[tokio::test]
async fn migrating_a_format_1_store_keeps_every_entity_its_timestamp_and_etag() -> TestResult {
    use tablesql::storage::embedded::migrate;
    let dir = tempfile::tempdir()?;
    format1_fixture(dir.path())?;
    let done = migrate::migrate(dir.path(), &migrate::Options::default(), &mut |_, _| {})?;
    assert!(done.finished && done.from == 1, "{done:?}");
    assert_eq!(done.entities, format1_dump()?.len() as u64);
    assert!(dir.path().join(migrate::KEPT).exists());
    assert!(!dir.path().join(migrate::MIGRATING).exists());
    let store = EmbeddedStore::open(dir.path())?;
    assert_eq!(dump(&store).await?, format1_dump()?);
    // The counts were written with the entities.
    let registrations = TableName::new("Registrations")?;
    assert_eq!(store.count(&registrations).await?, 216);
    // The write clock carried over: a new write's Timestamp is later than
    // every migrated one.
    let e = Entity::new(PartitionKey::new("new")?, RowKey::new("r")?);
    store.execute(&registrations, WriteOp::Insert(e)).await?;
    let written = store
        .get(
            &registrations,
            &PartitionKey::new("new")?,
            &RowKey::new("r")?,
        )
        .await?
        .ok_or("missing")?;
    let newest = dump(&store).await?.len();
    assert_eq!(newest, format1_dump()?.len() + 1);
    assert!(written.timestamp > chrono::DateTime::parse_from_rfc3339("2026-11-27T18:34:00Z")?);
    drop(store);
    // Run again: nothing to do.
    let again = migrate::migrate(dir.path(), &migrate::Options::default(), &mut |_, _| {})?;
    assert_eq!((again.from, again.finished, again.entities), (2, true, 0));
    Ok(())
}

/// A migration stopped part way (here every 97 entities, in chunks of 40)
/// continues where it stopped, and the store it ends with is the same.
#[tokio::test]
async fn an_interrupted_migration_resumes_where_it_stopped() -> TestResult {
    use tablesql::storage::embedded::migrate;
    let dir = tempfile::tempdir()?;
    format1_fixture(dir.path())?;
    let total = format1_dump()?.len() as u64;
    let mut copied = 0;
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs < 100, "the migration does not end");
        let options = migrate::Options {
            chunk: 40,
            stop_after: Some(97),
        };
        let done = migrate::migrate(dir.path(), &options, &mut |_, _| {})?;
        copied += done.entities;
        if done.finished {
            break;
        }
        // Stopped: the store is still format 1, and refused as such.
        assert!(matches!(
            EmbeddedStore::open(dir.path()),
            Err(StorageError::FormatVersion { found: 1, .. })
        ));
    }
    assert_eq!(copied, total, "each entity copied once");
    assert!(runs > 8);
    let store = EmbeddedStore::open(dir.path())?;
    assert_eq!(dump(&store).await?, format1_dump()?);
    Ok(())
}

/// The counts kept beside the entities against a scan, after inserts,
/// upserts (new and existing), replaces, merges and deletes, including a
/// refused transaction and a deleted and remade table.
#[tokio::test]
async fn kept_counts_match_a_scan_per_partition_and_kind() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path())?;
    let table = TableName::new("Counted")?;
    store.create_table(&table).await?;
    let key = |p: &str, r: &str| -> Result<(PartitionKey, RowKey), InvalidInput> {
        Ok((PartitionKey::new(p)?, RowKey::new(r)?))
    };
    for p in ["a", "b", "c"] {
        let ops = (0..30)
            .map(|i| {
                let (pk, rk) = key(p, &format!("{}:{i:03}", ["BIB", "AGE", "x y"][i % 3]))?;
                Ok(WriteOp::Insert(
                    Entity::new(pk, rk).with("i", EdmValue::Int32(i as i32)),
                ))
            })
            .collect::<Result<Vec<_>, InvalidInput>>()?;
        store.execute_batch(&table, ops).await?;
    }
    let (pk, rk) = key("a", "BIB:000")?;
    let (pk2, rk2) = key("a", "BIB:999")?;
    store
        .execute_batch(
            &table,
            vec![
                WriteOp::InsertOrReplace(Entity::new(pk.clone(), rk.clone())),
                WriteOp::InsertOrMerge(Entity::new(pk2.clone(), rk2.clone())),
                WriteOp::Delete {
                    partition_key: pk.clone(),
                    row_key: RowKey::new("AGE:001")?,
                    if_match: IfMatch::Any,
                },
            ],
        )
        .await?;
    // Refused whole: its delete must not count.
    let refused = store
        .execute_batch(
            &table,
            vec![
                WriteOp::Delete {
                    partition_key: pk.clone(),
                    row_key: RowKey::new("BIB:003")?,
                    if_match: IfMatch::Any,
                },
                WriteOp::Insert(Entity::new(pk.clone(), RowKey::new("BIB:999")?)),
            ],
        )
        .await;
    assert!(refused.is_err());
    let scanned = |q: Query| {
        let store = store.clone();
        let table = table.clone();
        async move { Ok::<_, StorageError>(store.query_all(&table, &q).await?.len() as u64) }
    };
    let kind = |k: &str| KeyRange {
        start: std::ops::Bound::Included(RowKey::new(k).expect("key")),
        end: std::ops::Bound::Excluded(
            RowKey::new(format!("{};", k.trim_end_matches(':'))).expect("key"),
        ),
    };
    for p in [KeyRange::all(), KeyRange::exactly(PartitionKey::new("a")?)] {
        for rows in [KeyRange::all(), kind("BIB:"), kind("AGE:")] {
            let mut q = Query::all().rows(rows.clone());
            q.partitions = p.clone();
            assert_eq!(
                store.counted(&table, &p, &rows)?,
                Some(scanned(q).await?),
                "{p:?} {rows:?}"
            );
        }
    }
    assert_eq!(store.count(&table).await?, 90);
    // Not a kind: the store does not say.
    let part = KeyRange {
        start: std::ops::Bound::Included(RowKey::new("BIB:0")?),
        end: std::ops::Bound::Excluded(RowKey::new("BIB:1")?),
    };
    assert_eq!(store.counted(&table, &KeyRange::all(), &part)?, None);
    // A table deleted and made again counts from nothing.
    store.delete_table(&table).await?;
    store.create_table(&table).await?;
    assert_eq!(store.count(&table).await?, 0);
    // ... and survives reopening.
    store
        .execute(&table, WriteOp::Insert(Entity::new(pk, rk)))
        .await?;
    drop(store);
    let store = EmbeddedStore::open(dir.path())?;
    assert_eq!(store.count(&table).await?, 1);
    Ok(())
}

/// A table deleted and made again numbers its property names afresh: its
/// values are read with its own names, never the old table's, also where
/// the two number as many names.
#[tokio::test]
async fn a_table_made_again_reads_with_its_own_property_names() -> TestResult {
    let store = EmbeddedStore::in_memory()?;
    let table = TableName::new("Again")?;
    let (pk, rk) = (PartitionKey::new("p")?, RowKey::new("r")?);
    for name in ["first", "second"] {
        store.create_table(&table).await?;
        let e = Entity::new(pk.clone(), rk.clone()).with(name, EdmValue::Int32(1));
        store.execute(&table, WriteOp::Insert(e)).await?;
        let got = store.get(&table, &pk, &rk).await?.ok_or("missing")?;
        assert_eq!(
            got.entity.properties.keys().collect::<Vec<_>>(),
            [name],
            "{name}"
        );
        store.delete_table(&table).await?;
    }
    Ok(())
}

/// Past the most property names a table numbers, the transaction that
/// brings a new one is refused alone, with a limit error; one of the same
/// commit that uses known names is written.
#[tokio::test]
async fn property_names_past_the_limit_refuse_only_their_transaction() -> TestResult {
    let store = EmbeddedStore::in_memory()?;
    let table = TableName::new("Names")?;
    store.create_table(&table).await?;
    let pk = PartitionKey::new("p")?;
    let mut n = 0usize;
    let mut row = 0;
    while n < 65_535 {
        let mut e = Entity::new(pk.clone(), RowKey::new(format!("{row:04}"))?);
        for _ in 0..252.min(65_535 - n) {
            e = e.with(format!("p{n}"), EdmValue::Boolean(true));
            n += 1;
        }
        store.execute(&table, WriteOp::Insert(e)).await?;
        row += 1;
    }
    let known = Entity::new(pk.clone(), RowKey::new("known")?).with("p7", EdmValue::Int32(7));
    let new = Entity::new(pk.clone(), RowKey::new("new")?).with("fresh", EdmValue::Int32(1));
    let (a, b) = tokio::join!(
        store.execute(&table, WriteOp::Insert(new)),
        store.execute(&table, WriteOp::Insert(known)),
    );
    assert!(
        matches!(
            a,
            Err(StorageError::Invalid(InvalidInput::TooManyPropertyNames {
                limit: 65_535
            }))
        ),
        "{a:?}"
    );
    b?;
    assert!(
        store
            .get(&table, &pk, &RowKey::new("new")?)
            .await?
            .is_none()
    );
    assert_eq!(store.count(&table).await?, row + 1);
    Ok(())
}

/// The text of a query's answer, and the sum of `name=` over the scans of
/// its EXPLAIN ANALYZE.
async fn answer_and_metric(
    engine: &tablesql::Session,
    sql: &str,
    name: &str,
) -> Result<(String, u64), Box<dyn std::error::Error>> {
    use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
    let answer = pretty_format_batches(&engine.collect(sql).await?)?.to_string();
    let plan = pretty_format_batches(&engine.collect(&format!("EXPLAIN ANALYZE {sql}")).await?)?
        .to_string();
    let needle = format!(" {name}=");
    let mut total = 0;
    for line in plan.lines().filter(|l| l.contains("PartitionScanExec")) {
        let at = line
            .find(&needle)
            .ok_or_else(|| format!("no {name}: {line}"))?;
        let digits: String = line[at + needle.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        total += digits.parse::<u64>()?;
    }
    Ok((answer, total))
}

/// A scan asked again is answered from the store's derived cache, and a
/// write anywhere in a partition (an update, an insert, a delete, a new
/// partition, the table dropped and made again) sends that partition's
/// next scan back to the store, with the answer a scan of the store gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_asked_again_is_served_from_the_derived_cache_until_a_write() -> TestResult {
    let store: std::sync::Arc<dyn TableStore> = std::sync::Arc::new(EmbeddedStore::in_memory()?);
    let uncached: std::sync::Arc<dyn TableStore> =
        std::sync::Arc::new(EmbeddedStore::in_memory()?.with_derived_cache(0));
    let mut engines = Vec::new();
    for s in [&store, &uncached] {
        tablesql::demo::load(s.as_ref(), 1200, |_, _| {}).await?;
        engines.push(
            tablesql::Engine::with_store(s.clone(), tablesql::EngineOptions::default())
                .await?
                .session(),
        );
    }
    let (cached, plain) = (&engines[0], &engines[1]);
    let sql = "SELECT event, distance, count(*), sum(age), max(name) FROM registrations \
               GROUP BY event, distance ORDER BY event, distance";
    let both = |statement: &'static str| async move {
        for engine in [cached, plain] {
            engine.collect(statement).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    cached.collect("SET tablesql.scan_policy = allow").await?;
    plain.collect("SET tablesql.scan_policy = allow").await?;
    let (first, _) = answer_and_metric(cached, sql, "requests_cached").await?;
    // The EXPLAIN ANALYZE after the first read: all 12 partitions kept.
    let (again, hits) = answer_and_metric(cached, sql, "requests_cached").await?;
    assert_eq!(first, again);
    assert_eq!(hits, 12, "every partition's request from the cache");

    let writes = [
        "UPDATE registrations SET age = age + 1 WHERE event = '2012 Boston Marathon' \
         AND distance = 'Full' AND bib = 3",
        "INSERT INTO registrations (event, distance, bib, name, gender, age) \
         VALUES ('2013 Boston Marathon', 'Half', 9999, 'Zed', 'M', 40)",
        "DELETE FROM registrations WHERE event = '2012 London Marathon' AND distance = '10K' \
         AND bib = 7",
        "INSERT INTO registrations (event, distance, bib, name, gender, age) \
         VALUES ('2030 Nowhere Marathon', 'Full', 1, 'Ann', 'F', 30)",
    ];
    for write in writes {
        both(write).await?;
        let (answer, hits) = answer_and_metric(cached, sql, "requests_cached").await?;
        let (expected, none) = answer_and_metric(plain, sql, "requests_cached").await?;
        assert_eq!(answer, expected, "after {write}");
        assert_eq!(none, 0, "a store without the cache keeps nothing");
        assert!(
            hits >= 10,
            "the partitions not written stay kept: {hits} after {write}"
        );
    }

    // The table dropped and made again, with other rows.
    let table = TableName::new(tablesql::demo::TABLE)?;
    for s in [&store, &uncached] {
        s.delete_table(&table).await?;
        s.create_table(&table).await?;
        tablesql::demo::load(s.as_ref(), 24, |_, _| {}).await?;
    }
    let (answer, _) = answer_and_metric(cached, sql, "requests_cached").await?;
    let (expected, _) = answer_and_metric(plain, sql, "requests_cached").await?;
    assert_eq!(answer, expected, "the table made again");
    assert!(answer.contains("| 2 "), "{answer}");
    Ok(())
}

/// The text of a plan's scan line.
async fn scan_line(
    engine: &tablesql::Session,
    sql: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
    let plan =
        pretty_format_batches(&engine.collect(&format!("EXPLAIN {sql}")).await?)?.to_string();
    let line = plan
        .lines()
        .find(|l| l.contains("PartitionScanExec"))
        .ok_or_else(|| format!("no scan in {plan}"))?;
    Ok(line.to_owned())
}

/// A table never analyzed is planned from the counts the store keeps: the
/// fan-out names its partitions (no listing), EXPLAIN shows the estimate
/// as counted, the scan policy's partition threshold applies, and a write
/// (here a new partition) is in the next plan. The store hands back the
/// same counts until a write lands in the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_never_analyzed_is_planned_from_its_kept_counts() -> TestResult {
    let store = std::sync::Arc::new(EmbeddedStore::in_memory()?);
    tablesql::demo::load(store.as_ref(), 1200, |_, _| {}).await?;
    let table = TableName::new(tablesql::demo::TABLE)?;
    let first = store.partition_counts(&table)?.ok_or("no counts")?;
    let again = store.partition_counts(&table)?.ok_or("no counts")?;
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    assert_eq!(first.len(), 12);
    assert!(
        first
            .iter()
            .all(|p| p.kinds == [("AGE:".to_owned(), 100), ("BIB:".to_owned(), 100)]),
        "{first:?}"
    );

    let shared: std::sync::Arc<dyn TableStore> = store.clone();
    let engine = tablesql::Engine::with_store(shared, tablesql::EngineOptions::default())
        .await?
        .session();
    engine.collect("SET tablesql.scan_policy = allow").await?;
    let count = "SELECT count(name) FROM registrations";
    let scan = scan_line(&engine, count).await?;
    assert!(
        scan.contains("cost=[requests=12 rows=1200] fanout=partitions(12) estimate=[partitions=12 entities=2400 counted]"),
        "{scan}"
    );
    // One partition's base rows: its kind's count, exactly.
    let one = scan_line(
        &engine,
        "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full'",
    )
    .await?;
    assert!(one.contains("cost=[requests=1 rows=100]"), "{one}");

    engine
        .collect(
            "INSERT INTO registrations (event, distance, bib, name, gender, age) \
             VALUES ('2030 Test Run', '1K', 1, 'Ann', 'F', 30)",
        )
        .await?;
    let after = store.partition_counts(&table)?.ok_or("no counts")?;
    assert!(!std::sync::Arc::ptr_eq(&first, &after));
    let scan = scan_line(&engine, count).await?;
    assert!(
        scan.contains("fanout=partitions(13) estimate=[partitions=13 entities=2402 counted]"),
        "{scan}"
    );

    // The threshold counts the partitions a range reads (the three of 2013).
    engine.collect("SET tablesql.scan_policy = deny").await?;
    engine
        .collect("SET tablesql.partition_threshold = 2")
        .await?;
    let refused = engine
        .collect("SELECT count(name) FROM registrations WHERE event LIKE '2013%'")
        .await
        .map(|_| ())
        .expect_err("refused");
    assert!(
        refused.to_string().contains("reads 3 partitions"),
        "{refused}"
    );
    Ok(())
}

/// Past `MAX_COUNTED_PARTITIONS` the store gives no counted statistics
/// (the read each plan after a write would make is bounded), and a scan
/// lists the partitions as before; at the cap it gives them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_past_the_counted_partitions_is_listed() -> TestResult {
    use tablesql::storage::embedded::MAX_COUNTED_PARTITIONS;
    let store = std::sync::Arc::new(EmbeddedStore::in_memory()?);
    let table = TableName::new("Wide")?;
    store.create_table(&table).await?;
    let one = |i: usize| -> Result<WriteOp, Box<dyn std::error::Error>> {
        let pk = PartitionKey::new(format!("p{i:05}"))?;
        Ok(WriteOp::Insert(Entity::new(pk, RowKey::new("r")?)))
    };
    for i in 0..MAX_COUNTED_PARTITIONS {
        store.execute_batch(&table, vec![one(i)?]).await?;
    }
    let at_cap = store
        .partition_counts(&table)?
        .ok_or("no counts at the cap")?;
    assert_eq!(at_cap.len(), MAX_COUNTED_PARTITIONS);
    store
        .execute_batch(&table, vec![one(MAX_COUNTED_PARTITIONS)?])
        .await?;
    assert!(store.partition_counts(&table)?.is_none());
    let shared: std::sync::Arc<dyn TableStore> = store.clone();
    let engine = tablesql::Engine::with_store(shared, tablesql::EngineOptions::default())
        .await?
        .session();
    engine.collect("SET tablesql.scan_policy = allow").await?;
    let scan = scan_line(
        &engine,
        "SELECT count(*) FROM raw.wide WHERE \"RowKey\" = 'r'",
    )
    .await?;
    assert!(scan.contains("fanout=partitions(listed)"), "{scan}");
    Ok(())
}

/// A full page looks for the next entity in range no further than the
/// next row: a narrow RowKey range over many partitions with `top` 1 stops
/// at the row after its entity, where it used to seek on through every
/// partition with none in range.
#[tokio::test]
async fn a_full_page_stops_at_the_next_row_not_the_next_entity_in_range() -> TestResult {
    let store = EmbeddedStore::in_memory()?;
    let table = TableName::new("Narrow")?;
    store.create_table(&table).await?;
    for p in 0..50 {
        let pk = PartitionKey::new(format!("p{p:02}"))?;
        let ops = (0..10)
            .map(|r| {
                Ok(WriteOp::Insert(Entity::new(
                    pk.clone(),
                    RowKey::new(format!("{r}"))?,
                )))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        store.execute_batch(&table, ops).await?;
    }
    let q = Query::all()
        .rows(KeyRange::exactly(RowKey::new("5")?))
        .top(1);
    let page = store.query(&table, &q, None).await?;
    assert_eq!(page.entities.len(), 1);
    let token = page.continuation.ok_or("49 partitions are still to come")?;
    assert_eq!(
        (
            token.next_partition_key.as_str(),
            token.next_row_key.as_str()
        ),
        ("p00", "6")
    );
    assert_eq!(page.scanned, 1);
    let all = store.query_all(&table, &q).await?;
    assert_eq!(all.len(), 50);
    assert!(all.iter().all(|e| e.row_key().as_str() == "5"));
    Ok(())
}
