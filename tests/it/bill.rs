//! What statements cost on Azure, where every request is a billed
//! transaction: read off the local Table service's counters (requests,
//! entities scanned and returned), for statements run by the engine over
//! the real Azure client.

use std::sync::Arc;
use std::time::Duration;

use tablesql::datafusion::arrow::array::{Array, Int64Array, TimestampMicrosecondArray};
use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
use tablesql::storage::TableStore;
use tablesql::tableservice::Profile;
use tablesql::{Engine, EngineOptions, ScanPolicy, Session};

use crate::local_service::Local;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A session over a local service that runs scans of every partition
/// without a notice. Its catalog check (a read a second, and a reload
/// after the session's own DDL moved the catalog, which samples the
/// tables) would fall among the requests a test counts.
async fn session(local: &Local) -> TestResult<Session> {
    let store: Arc<dyn TableStore> = Arc::new(local.store()?);
    let options = EngineOptions::default()
        .with_scan_policy(ScanPolicy::Allow)
        .with_catalog_check(Duration::from_secs(3600));
    Ok(Engine::with_store(store, options).await?.session())
}

/// The one integer a query answers.
async fn int(session: &Session, sql: &str) -> TestResult<i64> {
    let batches = session.collect(sql).await?;
    let column = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .map(|b| b.column(0).clone())
        .ok_or_else(|| format!("no row from {sql}"))?;
    let ints = column
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| format!("not a BIGINT from {sql}"))?;
    Ok(ints.value(0))
}

/// Inserts into `table` the row `row(n)` (a VALUES tuple) for each `n` of
/// `ns`, `per` rows a statement.
async fn insert(
    session: &Session,
    table: &str,
    ns: std::ops::Range<u32>,
    per: usize,
    row: impl Fn(u32) -> String,
) -> TestResult {
    for chunk in ns.collect::<Vec<u32>>().chunks(per) {
        let values: Vec<String> = chunk.iter().map(|n| row(*n)).collect();
        session
            .collect(&format!("INSERT INTO {table} VALUES {}", values.join(", ")))
            .await?;
    }
    Ok(())
}

/// `Timestamp > t`, what "what changed since" asks, goes to the service in
/// `$filter` on Azure Storage: every entity of the partitions is still
/// scanned there (and EXPLAIN says so), but only the changed ones are
/// returned. Each comparison answers as DataFusion's own over the
/// microsecond column, at the bound itself too; on Cosmos DB, which
/// matches nothing for a Timestamp condition, it stays on the client and
/// answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_since_sends_its_timestamp_condition_to_the_service() -> TestResult {
    for profile in [Profile::Storage, Profile::Cosmos] {
        let local = Local::start(profile, &[])?;
        let session = session(&local).await?;
        session
            .collect(
                "CREATE TABLE readings (site TEXT NOT NULL, n INT NOT NULL, v INT, \
                 PRIMARY KEY (site, n)) WITH (storage_table = 'Readings', \
                 partition_key = '{site}', row_key = '{n:05}')",
            )
            .await?;
        for site in ["a", "b", "c"] {
            insert(&session, "readings", 0..100, 100, |n| {
                format!("('{site}', {n}, 0)")
            })
            .await?;
        }
        let batches = session
            .collect(r#"SELECT max("Timestamp") FROM readings"#)
            .await?;
        let since = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or("a timestamp")?
            .value(0);
        // The changes are stamped later than `since` by the same clock.
        for _ in 0..1000 {
            if chrono::Utc::now().timestamp_micros() > since {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        session
            .collect("UPDATE readings SET v = 1 WHERE site = 'b' AND n < 10")
            .await?;
        session
            .collect("INSERT INTO readings VALUES ('c', 100, 1), ('c', 101, 1)")
            .await?;
        let at = chrono::DateTime::from_timestamp_micros(since)
            .ok_or("a time")?
            .format("%Y-%m-%dT%H:%M:%S%.6fZ");
        let changed = format!(r#"SELECT site, n FROM readings WHERE "Timestamp" > '{at}'"#);
        let rows = |sql: String| {
            let session = &session;
            async move {
                let batches = session.collect(&sql).await?;
                TestResult::Ok(batches.iter().map(|b| b.num_rows()).sum::<usize>())
            }
        };

        // One partition: one request, which scans it whole and returns
        // its two changes.
        let before = local.service().counters().table("Readings");
        let found = rows(format!("{changed} AND site = 'c'")).await?;
        let after = local.service().counters().table("Readings");
        assert_eq!(found, 2, "{profile:?}");
        let counted = (
            after.requests - before.requests,
            after.scanned - before.scanned,
            after.returned - before.returned,
        );
        match profile {
            Profile::Storage => assert_eq!(counted, (1, 102, 2), "only the changes are sent"),
            Profile::Cosmos => {
                assert_eq!(counted, (1, 102, 102), "Cosmos DB evaluates no Timestamp")
            }
        }
        // Every partition: the changes, and on Azure Storage little more
        // than them (what listing the partitions returns, one each).
        let before = local.service().counters().table("Readings");
        assert_eq!(rows(changed.clone()).await?, 12, "{profile:?}");
        let after = local.service().counters().table("Readings");
        let returned = after.returned - before.returned;
        if profile == Profile::Storage {
            assert!((12..=12 + 3).contains(&returned), "{returned} returned");
        }

        let plan = pretty_format_batches(&session.collect(&format!("EXPLAIN {changed}")).await?)?
            .to_string();
        assert!(
            plan.contains("filter=[Timestamp ge datetime'")
                && plan.contains("note=[Timestamp is not indexed: every entity of the partitions read is scanned]"),
            "{plan}"
        );

        // Every comparison, at the bound: as DataFusion answers it over the
        // column (a cast is not pushed down).
        let conditions = [">", ">=", "<", "<=", "=", "<>"]
            .map(|op| {
                (
                    format!(r#""Timestamp" {op} '{at}'"#),
                    format!(r#"CAST("Timestamp" AS BIGINT) {op} {since}"#),
                )
            })
            .into_iter()
            .chain([(
                format!(r#""Timestamp" BETWEEN '{at}' AND '2200-01-01'"#),
                format!(r#"CAST("Timestamp" AS BIGINT) >= {since}"#),
            )]);
        for (pushed, kept) in conditions {
            let count = |c: &str| format!("SELECT count(*) FROM readings WHERE {c}");
            let (got, want) = (
                int(&session, &count(&pushed)).await?,
                int(&session, &count(&kept)).await?,
            );
            assert_eq!(got, want, "{profile:?}: {pushed}");
        }
    }
    Ok(())
}

/// Requests the service counted for `table` while `f` ran.
async fn requests_of<T>(
    local: &Local,
    table: &str,
    f: impl std::future::Future<Output = TestResult<T>>,
) -> TestResult<(u64, T)> {
    let before = local.service().counters().table(table).requests;
    let out = f.await?;
    Ok((
        local.service().counters().table(table).requests - before,
        out,
    ))
}

/// A lookup join of 100 keys in one partition: the keys go twelve to a
/// request as a `$filter` of RowKeys (9 requests), but where they are
/// dense, as the one span they cover, filtered to the keys: one request.
/// Dense by the key domain before `ANALYZE` (`{cid:05}` from 07000 to
/// 07099 holds at most 100 entities), by the guideposts after it (100 of
/// 20,000 in one chunk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_join_of_a_hundred_keys_in_one_partition_costs_a_few_requests() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let session = session(&local).await?;
    session
        .collect(
            "CREATE TABLE customers (region TEXT NOT NULL, cid INT NOT NULL, name TEXT NOT NULL, \
             PRIMARY KEY (region, cid)) WITH (storage_table = 'Customers', \
             partition_key = '{region}', row_key = '{cid:05}')",
        )
        .await?;
    session
        .collect(
            "CREATE TABLE orders (region TEXT NOT NULL, id INT NOT NULL, customer INT NOT NULL, \
             PRIMARY KEY (region, id)) WITH (storage_table = 'Orders', \
             partition_key = '{region}', row_key = '{id:05}')",
        )
        .await?;
    insert(&session, "customers", 0..20_000, 1000, |c| {
        format!("('eu', {c}, 'c{c}')")
    })
    .await?;
    let values: Vec<String> = (0..100)
        .map(|i| format!("('eu', {i}, {})", 7000 + (i * 37) % 100))
        .collect();
    session
        .collect(&format!("INSERT INTO orders VALUES {}", values.join(", ")))
        .await?;
    // A page of 100 orders, joined by key to their customers.
    let join = "SELECT o.id, c.name FROM \
                (SELECT * FROM orders WHERE region = 'eu' ORDER BY id LIMIT 100) o \
                JOIN customers c ON c.region = o.region AND c.cid = o.customer ORDER BY o.id";
    let answer = |session: &Session| {
        let session = session.clone();
        async move {
            let batches = session.collect(join).await?;
            TestResult::Ok(pretty_format_batches(&batches)?.to_string())
        }
    };
    let (unanalyzed, first) = requests_of(&local, "Customers", answer(&session)).await?;
    let plan = pretty_format_batches(&session.collect(&format!("EXPLAIN ANALYZE {join}")).await?)?
        .to_string();
    assert_eq!(unanalyzed, 1, "{plan}");
    session.collect("ANALYZE customers").await?;
    let (analyzed, second) = requests_of(&local, "Customers", answer(&session)).await?;
    let plan = pretty_format_batches(&session.collect(&format!("EXPLAIN ANALYZE {join}")).await?)?
        .to_string();
    assert_eq!(first, second);
    assert!(first.contains("| 99 | c7063 |"), "{first}");
    assert_eq!(analyzed, 1, "{plan}");
    // A serializable block reads keys one by one, recording each: no span
    // (it would refuse a range read of the partition).
    let keys: Vec<String> = (7000..7050).map(|c| c.to_string()).collect();
    let sql = format!(
        "SELECT count(*) FROM customers WHERE region = 'eu' AND cid IN ({})",
        keys.join(", ")
    );
    session
        .collect("BEGIN ISOLATION LEVEL SERIALIZABLE")
        .await?;
    assert_eq!(int(&session, &sql).await?, 50);
    session.collect("COMMIT").await?;
    Ok(())
}

/// A keyset page, `WHERE (p, k) > (..) ORDER BY p, k LIMIT 20`, over a
/// PartitionKey whose text order is its fields' (here a typed integer),
/// reads about one page for an integer, timestamp, UUID or text key field: its
/// bound and its LIMIT go to the store as key ranges in key order (the
/// rest of the bound's partition, then the partitions after it), not as
/// a bound on partitions listed and read whole. The page ends 9 rows into
/// the next partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyset_page_of_twenty_rows_costs_at_most_two_requests() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let session = session(&local).await?;
    // A key field: its name, SQL type, template format, and literal of n.
    type Kind = (&'static str, &'static str, &'static str, fn(u32) -> String);
    let kinds: [Kind; 4] = [
        ("int", "INT", "i10", |n| n.to_string()),
        ("ts", "TIMESTAMP", "t", |n| {
            format!("TIMESTAMP '2026-01-01T00:00:00Z' + INTERVAL '{n} seconds'")
        }),
        ("uuid", "UUID", "u", |n| {
            format!("'00000000-0000-4000-8000-{n:012}'")
        }),
        ("text", "TEXT", "s", |n| format!("'t{n:05}'")),
    ];
    for (name, sql_type, format, value) in kinds {
        let table = format!("Keyset{name}");
        session
            .collect(&format!(
                "CREATE TABLE keyset_{name} (p INT NOT NULL, k {sql_type} NOT NULL, v INT, \
                 PRIMARY KEY (p, k)) WITH (storage_table = '{table}', \
                 partition_key = '{{p:i10}}', row_key = '{{k:{format}}}')"
            ))
            .await?;
        for p in [1, 2, 3] {
            let sql_table = format!("keyset_{name}");
            insert(&session, &sql_table, 0..1500, 500, |n| {
                format!("({p}, {}, {n})", value(n))
            })
            .await?;
        }
        let page = format!(
            "SELECT v FROM keyset_{name} WHERE (p, k) > (1, {}) ORDER BY p, k LIMIT 20",
            value(1490)
        );
        let (requests, rows) = requests_of(&local, &table, async {
            let batches = session.collect(&page).await?;
            let v: Vec<String> = pretty_format_batches(&batches)?
                .to_string()
                .lines()
                .filter_map(|l| l.trim_matches('|').trim().parse::<u32>().ok())
                .map(|n| n.to_string())
                .collect();
            TestResult::Ok(v)
        })
        .await?;
        let plan =
            pretty_format_batches(&session.collect(&format!("EXPLAIN ANALYZE {page}")).await?)?
                .to_string();
        let want: Vec<String> = (1491..1500).chain(0..11).map(|n| n.to_string()).collect();
        assert_eq!(rows, want, "{name}: {plan}");
        // Ascending typed text claims its key order too: the scan puts
        // rows whose UTF-16 order is not SQL's in place as they stream
        // (`exec::read::order`).
        assert!(requests <= 2, "{name}: {requests} requests: {plan}");
        assert!(!plan.contains("SortExec"), "{name}: {plan}");
        // The bound answered as key ranges, then a condition that narrows
        // the scan to the bound's partition pushed in another pass: the
        // bound still holds.
        let narrowed = format!(
            "SELECT v FROM (SELECT * FROM keyset_{name} WHERE (p, k) > (1, {})) s \
             WHERE p = 1 ORDER BY k LIMIT 5",
            value(1490)
        );
        let got = pretty_format_batches(&session.collect(&narrowed).await?)?.to_string();
        let v: Vec<&str> = got
            .lines()
            .map(|l| l.trim_matches('|').trim())
            .filter(|l| l.parse::<u32>().is_ok())
            .collect();
        assert_eq!(v, ["1491", "1492", "1493", "1494", "1495"], "{name}");
    }
    Ok(())
}

/// The two reads every bill starts from: a point read is one request; a
/// scan of one partition of N entities is a request per page of 1,000,
/// and with the service's empty pages (its 5-second budget spent on
/// nothing) one more for each, which the scan counts as it pays them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_read_costs_one_request_and_a_partition_a_request_a_page() -> TestResult {
    for (knobs, empty) in [(&[][..], false), (&["empty_pages=0.3"][..], true)] {
        let local = Local::start(Profile::Storage, knobs)?;
        let session = session(&local).await?;
        session
            .collect(
                "CREATE TABLE samples (p TEXT NOT NULL, n INT NOT NULL, v INT, \
                 PRIMARY KEY (p, n)) WITH (storage_table = 'Samples', \
                 partition_key = '{p}', row_key = '{n:05}')",
            )
            .await?;
        insert(&session, "samples", 0..2500, 500, |n| {
            format!("('a', {n}, {n})")
        })
        .await?;
        let (point, v) = requests_of(
            &local,
            "Samples",
            int(
                &session,
                "SELECT CAST(v AS BIGINT) FROM samples WHERE p = 'a' AND n = 7",
            ),
        )
        .await?;
        assert_eq!((point, v), (1, 7));
        let sum = "SELECT sum(v) FROM samples WHERE p = 'a'";
        let (scan, total) = requests_of(&local, "Samples", int(&session, sum)).await?;
        assert_eq!(total, 2499 * 2500 / 2);
        if empty {
            // The scan's own count of what it paid, empty pages included,
            // is the service's.
            let (paid, plan) = requests_of(&local, "Samples", async {
                let batches = session.collect(&format!("EXPLAIN ANALYZE {sum}")).await?;
                TestResult::Ok(pretty_format_batches(&batches)?.to_string())
            })
            .await?;
            let counted = plan
                .split(" requests=")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .ok_or("requests=")?
                .parse::<u64>()?;
            assert_eq!(counted, paid, "{plan}");
            assert!(paid >= 3 && scan >= 3, "{plan}");
        } else {
            assert_eq!(scan, 3, "2,500 entities: three pages");
        }
    }
    Ok(())
}

/// The `bill` row of an EXPLAIN (or EXPLAIN ANALYZE) of `sql`.
async fn bill_of(session: &Session, explain: &str) -> TestResult<String> {
    use tablesql::datafusion::arrow::array::AsArray;
    for batch in session.collect(explain).await? {
        let (kinds, plans) = (
            batch.column(0).as_string::<i32>(),
            batch.column(1).as_string::<i32>(),
        );
        for i in 0..batch.num_rows() {
            if kinds.value(i) == "bill" {
                return Ok(plans.value(i).to_owned());
            }
        }
    }
    Err(format!("no bill row in {explain}").into())
}

/// The bill of a statement: EXPLAIN estimates its billable transactions by
/// kind before it runs, EXPLAIN ANALYZE counts them as it runs, for each
/// read and write and for the statement, and the workload statistics
/// keep them per statement; each is what the service itself counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bill_is_estimated_counted_and_kept_as_the_service_counts_it() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let session = session(&local).await?;
    session
        .collect(
            "CREATE TABLE samples (p TEXT NOT NULL, n INT NOT NULL, v INT, \
             PRIMARY KEY (p, n)) WITH (storage_table = 'Samples', \
             partition_key = '{p}', row_key = '{n:05}')",
        )
        .await?;
    // A write of 250 rows in three partitions: a batch per 100 rows of a
    // partition.
    let values: Vec<String> = (0..250)
        .map(|i| format!("('{}', {i}, {i})", ["a", "b", "c"][i / 100]))
        .collect();
    let write = format!("INSERT INTO samples VALUES {}", values.join(", "));
    let (paid, plan) = requests_of(&local, "Samples", async {
        let batches = session.collect(&format!("EXPLAIN ANALYZE {write}")).await?;
        TestResult::Ok(pretty_format_batches(&batches)?.to_string())
    })
    .await?;
    assert_eq!(paid, 3, "{plan}");
    assert!(plan.contains("transactions=3 (batches=3)"), "{plan}");
    let (loaded, ()) = requests_of(
        &local,
        "Samples",
        insert(&session, "samples", 1000..3500, 500, |n| {
            format!("('d', {n}, {n})")
        }),
    )
    .await?;
    assert_eq!(loaded, 25, "2,500 rows of one partition: 25 batches");

    // A point read: one, known before the run.
    let point = "SELECT v FROM samples WHERE p = 'd' AND n = 1007";
    let estimated = bill_of(&session, &format!("EXPLAIN {point}")).await?;
    assert_eq!(
        estimated,
        "estimated=1 (point_reads=1)\n  Samples point: 1 (point_reads=1)"
    );
    // A partition of 2,500: three pages, estimated only as the least it
    // costs until ANALYZE counts it.
    let sum = "SELECT sum(v) FROM samples WHERE p = 'd'";
    let estimated = bill_of(&session, &format!("EXPLAIN {sum}")).await?;
    assert!(
        estimated.starts_with("estimated>=1 (query_pages=1)"),
        "{estimated}"
    );
    let (paid, counted) = requests_of(
        &local,
        "Samples",
        bill_of(&session, &format!("EXPLAIN ANALYZE {sum}")),
    )
    .await?;
    assert_eq!(paid, 3);
    assert_eq!(
        counted,
        "transactions=3 (query_pages=3)\n  Samples row_range: 3 (query_pages=3)"
    );
    session.collect("ANALYZE samples").await?;
    let estimated = bill_of(&session, &format!("EXPLAIN {sum}")).await?;
    assert!(
        estimated.starts_with("estimated=3 (query_pages=3)"),
        "{estimated}"
    );
    // Thirty keys of a partition: as points, three runs of twelve; as the
    // span they cover, one page. The cheaper is read.
    let keys: Vec<String> = (1000..1030).map(|n| n.to_string()).collect();
    let some = format!(
        "SELECT count(v) FROM samples WHERE p = 'd' AND n IN ({})",
        keys.join(", ")
    );
    let estimated = bill_of(&session, &format!("EXPLAIN {some}")).await?;
    assert!(
        estimated.starts_with("estimated=1 (query_pages=1)"),
        "{estimated}"
    );
    let (paid, counted) = requests_of(
        &local,
        "Samples",
        bill_of(&session, &format!("EXPLAIN ANALYZE {some}")),
    )
    .await?;
    assert_eq!(
        (paid, counted.lines().next()),
        (1, Some("transactions=1 (query_pages=1)"))
    );

    // The workload statistics keep each statement's bill.
    let (paid, total) = requests_of(&local, "Samples", int(&session, sum)).await?;
    assert_eq!((paid, total), (3, (1000..3500).sum::<i64>()));
    let kept = |query: &str| {
        format!(
            "SELECT transactions, query_pages, point_reads, batches FROM tablesql_stat_statements \
             WHERE query = '{query}'"
        )
    };
    let batches = session
        .collect(&kept("SELECT sum(v) FROM samples WHERE p = $1"))
        .await?;
    let shown = pretty_format_batches(&batches)?.to_string();
    assert!(
        shown.contains("| 3            | 3           | 0           | 0       |"),
        "{shown}"
    );
    let loads = "SELECT CAST(sum(batches) AS BIGINT) FROM tablesql_stat_statements \
                 WHERE query LIKE 'INSERT INTO samples VALUES%'";
    assert_eq!(int(&session, loads).await?, 25);
    // And each storage table's: its 28 batches and the reads above.
    let table = pretty_format_batches(
        &session
            .collect(
                "SELECT batches, writes FROM tablesql_stat_tables WHERE table_name = 'Samples'",
            )
            .await?,
    )?
    .to_string();
    assert!(table.contains("| 28      | 0      |"), "{table}");
    Ok(())
}
