//! Apache Spark reads mapped tables from `tablesql serve` in parallel: pyspark
//! 3.5 in local mode (`local[2]`) with pgJDBC, one JDBC predicate per
//! PartitionKey range, so that each Spark partition is one query the server
//! answers with a key range scan. The count and the sum Spark computes are
//! checked against tablesql's own, and the server's workload statistics show
//! the queries Spark sent, each with its WHERE and its access path.
//!
//! Then a Spark reads through two `serve` processes over one Azurite
//! account, pgJDBC spreading its connections over both (`loadBalanceHosts`),
//! as a cluster's executors would.
//!
//! The client is `tests/clients/spark_client.py`; pyspark comes from
//! `scripts/python-env` (`TABLESQL_TEST_PYTHON`), pgJDBC and the JDK from
//! `scripts/jdbc-client` (`TABLESQL_TEST_JDBC`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// Partitions of the table Spark reads by ranges, and its rows.
const BUCKETS: i32 = 64;
const ROWS: i32 = 4800;
/// Buckets per predicate: 8 predicates, 8 Spark partitions.
const PER_RANGE: i32 = 8;
/// Spark's JVM starts in about 10 s on 2 cores; a stuck client is killed.
const SPARK_BOUND: Duration = Duration::from_secs(240);

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set: run the tests with ./scripts/test"))
}

/// Runs the Spark client to its end or to `SPARK_BOUND`, holding the CPU
/// lock (Spark's JVM loads both cores while it starts); its output, parsed.
async fn spark(url: String, reads: Value) -> Result<Value, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let stdout = tokio::task::spawn_blocking(move || {
        let _cpu = crate::exclusive();
        run_spark(&url, &reads).map_err(|e| e.to_string())
    })
    .await??;
    eprintln!(
        "the Spark client ran in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let out: Value = serde_json::from_str(&stdout)?;
    assert_eq!(out["spark"], "3.5.9", "{out}");
    Ok(out)
}

fn run_spark(url: &str, reads: &Value) -> Result<String, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env("TABLESQL_TEST_PYTHON")?)
        .arg(format!(
            "{}/tests/clients/spark_client.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args([&env("TABLESQL_TEST_JDBC")?, url, &reads.to_string()])
        // Spark binds its driver to this address rather than the host's name.
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        // Whatever Spark writes beside it (a warehouse directory) goes too.
        .current_dir(dir.path())
        .env_remove("SPARK_HOME")
        .env_remove("PYSPARK_SUBMIT_ARGS")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?)
        .spawn()?;
    let status = match crate::wait::exit_of(&mut child, SPARK_BOUND, "the Spark client to end") {
        Ok(status) => status,
        Err(e) => {
            // Slow or stuck? The JVM (the Python driver's child) prints its
            // threads' stacks on SIGQUIT, to the stdout it shares.
            let dumped = Command::new("pkill")
                .args(["-QUIT", "-P", &child.id().to_string(), "java"])
                .status()
                .is_ok_and(|s| s.success())
                && crate::wait::until(Duration::from_secs(10), "the JVM's thread dump", || {
                    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
                    Ok(text.contains("Full thread dump").then_some(()))
                })
                .is_ok();
            // The JVM exits when its stdin, the Python driver's pipe, closes.
            let _ = child.kill();
            let _ = child.wait();
            let stacks = match dumped {
                true => std::fs::read_to_string(&out).unwrap_or_default(),
                false => "(no thread dump)".to_owned(),
            };
            return Err(format!(
                "{e}: {}\n{stacks}",
                std::fs::read_to_string(&err).unwrap_or_default()
            )
            .into());
        }
    };
    let stdout = std::fs::read_to_string(&out)?;
    if !status.success() {
        return Err(format!(
            "the Spark client failed: {status}\n{stdout}\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        )
        .into());
    }
    Ok(stdout)
}

/// tablesql's own count and sum of `column` over `table` where `filter`.
async fn count_sum(
    client: &Client,
    table: &str,
    column: &str,
    filter: &str,
) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let row = client
        .query_one(
            &format!("SELECT count(*), CAST(sum({column}) AS BIGINT) FROM {table} WHERE {filter}"),
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// One read's result as the client printed it, checked against tablesql's
/// count and sum of the whole table and, when the predicates are given, the
/// rows of each one; the columns Spark found.
async fn check_read(
    client: &Client,
    read: &Value,
    table: &str,
    column: &str,
    predicates: Option<&[String]>,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let (count, sum) = count_sum(client, table, column, "true").await?;
    assert_eq!(read["count"], json!(count), "{table}: {read}");
    assert_eq!(read["sum"], json!(sum), "{table}: {read}");
    let per_partition: Vec<i64> = serde_json::from_value(read["per_partition"].clone())?;
    assert_eq!(per_partition.iter().sum::<i64>(), count, "{table}: {read}");
    if let Some(predicates) = predicates {
        assert_eq!(
            read["partitions"],
            json!(predicates.len()),
            "{table}: {read}"
        );
        let mut expected = Vec::new();
        for p in predicates {
            expected.push(count_sum(client, table, column, p).await?.0);
        }
        // Each Spark partition read its predicate's rows, and only those.
        assert_eq!(per_partition, expected, "{table}: {read}");
    }
    Ok(serde_json::from_value(read["columns"].clone())?)
}

/// `spark_buckets`: `rows` rows over `buckets` partitions, `000`, `001`, ...,
/// so that a range on the bucket is a PartitionKey range.
async fn create_buckets(
    client: &Client,
    buckets: i32,
    rows: i32,
) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "CREATE TABLE spark_buckets (bucket INT NOT NULL, seq INT NOT NULL, \
                 reading BIGINT NOT NULL, PRIMARY KEY (bucket, seq)) \
             WITH (storage_table = 'SparkBuckets', partition_key = '{{bucket:03}}', \
                 row_key = '{{seq:06}}'); \
             INSERT INTO spark_buckets SELECT CAST(value % {buckets} AS INT), \
                 CAST(value AS INT), value * 7 % 1000 FROM generate_series(1, {rows})"
        ))
        .await
}

/// One predicate per `per` buckets.
fn bucket_ranges(buckets: i32, per: i32) -> Vec<String> {
    (0..buckets)
        .step_by(per as usize)
        .map(|lo| format!("bucket >= {lo} AND bucket < {}", lo + per))
        .collect()
}

/// Spark's statements a server received (Spark quotes the columns it
/// selects; the test's own statements do not): query, calls, rows, access path.
async fn spark_statements(
    client: &Client,
) -> Result<Vec<(String, i64, i64, String)>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT query, calls, \"rows\", access_path FROM tablesql_stat_statements \
             WHERE query LIKE 'SELECT \"%' ORDER BY query",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_reads_a_mapped_table_one_jdbc_query_per_partition_range() -> TestResult {
    // A statement reading every partition is refused: Spark's reads must
    // each be a key range. The test's own whole-table answers are allowed.
    let server = serve(1000, &["--scan-policy", "deny"])?;
    let client = server.connect().await?;
    client
        .batch_execute("SET tablesql.scan_policy = allow")
        .await?;
    create_buckets(&client, BUCKETS, ROWS).await?;
    let ranges = bucket_ranges(BUCKETS, PER_RANGE);
    // The demo's key columns: one event is a PartitionKey prefix, its distances.
    let events: Vec<String> = demo::EVENTS
        .iter()
        .map(|e| format!("event = '{e}'"))
        .collect();
    // A typed text field (`{sensor:s}`) keeps text order: a range on it is a
    // PartitionKey range, as a free-text field's is not.
    client
        .batch_execute(
            "CREATE TABLE spark_sensors (sensor TEXT NOT NULL, at INT NOT NULL, \
                 v BIGINT NOT NULL, PRIMARY KEY (sensor, at)) \
             WITH (storage_table = 'SparkSensors', partition_key = '{sensor:s}', \
                 row_key = '{at:08}'); \
             INSERT INTO spark_sensors SELECT chr(CAST(97 + value % 26 AS INT)) || '-sensor', \
                 CAST(value AS INT), value % 97 FROM generate_series(1, 2600)",
        )
        .await?;
    let letters: Vec<String> = [
        "sensor < 'h'",
        "sensor >= 'h' AND sensor < 'p'",
        "sensor >= 'p'",
    ]
    .map(String::from)
    .to_vec();
    let reads = json!([
        {"table": "spark_buckets", "column": "reading", "predicates": ranges},
        {"table": "spark_sensors", "column": "v", "predicates": letters},
        {"table": "registrations", "column": "age", "predicates": events},
        {"table": "spark_buckets", "column": "reading", "stride": ["bucket", 0, BUCKETS, 8]},
    ]);

    let url = format!(
        "jdbc:postgresql://127.0.0.1:{}/tablesql",
        server.addr.port()
    );
    let out = spark(url, reads)
        .await
        .map_err(|e| format!("{e}\n{}", server.vitals()))?;

    let columns = check_read(
        &client,
        &out["reads"][0],
        "spark_buckets",
        "reading",
        Some(&ranges),
    )
    .await?;
    assert_eq!(columns, ["bucket", "seq", "reading"], "{out}");
    assert_eq!(out["reads"][0]["count"], json!(ROWS), "{out}");
    let columns = check_read(
        &client,
        &out["reads"][1],
        "spark_sensors",
        "v",
        Some(&letters),
    )
    .await?;
    assert_eq!(columns, ["sensor", "at", "v"], "{out}");
    assert_eq!(out["reads"][1]["count"], json!(2600), "{out}");
    let columns = check_read(
        &client,
        &out["reads"][2],
        "registrations",
        "age",
        Some(&events),
    )
    .await?;
    assert_eq!(
        columns,
        [
            "event",
            "distance",
            "bib",
            "name",
            "gender",
            "age",
            "finish",
            "registered",
            "club"
        ],
        "{out}"
    );
    // Spark's own split of the bucket column: 8 ranges, the first with NULLs
    // and the last open.
    check_read(&client, &out["reads"][3], "spark_buckets", "reading", None).await?;
    assert_eq!(out["reads"][3]["partitions"], json!(8), "{out}");

    // What the server received: Spark's statements (it quotes the columns it
    // selects), each predicate's query run once per Spark job, each read by
    // its key range, never the whole table.
    let spark_statements = spark_statements(&client).await?;
    let find = |q: &str| spark_statements.iter().find(|s| s.0 == q);
    let all = "SELECT \"bucket\", \"seq\", \"reading\" FROM spark_buckets \
               WHERE bucket >= $1 AND bucket < $2";
    assert_eq!(
        find(all),
        Some(&(all.to_owned(), 8, ROWS.into(), "partition_range".to_owned())),
        "{spark_statements:#?}"
    );
    let by_event = "SELECT \"event\", \"distance\", \"bib\", \"name\", \"gender\", \"age\", \
                    \"finish\", \"registered\", \"club\" FROM registrations WHERE event = $1";
    assert_eq!(
        find(by_event),
        Some(&(by_event.to_owned(), 4, 1000, "partition_range".to_owned())),
        "{spark_statements:#?}"
    );
    let stride = "SELECT \"bucket\", \"seq\", \"reading\" FROM spark_buckets \
                  WHERE \"bucket\" < $1 OR \"bucket\" IS NULL";
    assert!(find(stride).is_some(), "{spark_statements:#?}");
    let letter = "SELECT \"sensor\", \"at\", \"v\" FROM spark_sensors \
                  WHERE sensor >= $1 AND sensor < $2";
    assert_eq!(
        find(letter),
        Some(&(letter.to_owned(), 1, 800, "partition_range".to_owned())),
        "{spark_statements:#?}"
    );
    assert!(spark_statements.len() >= 8, "{spark_statements:#?}");
    for (query, _, _, access) in &spark_statements {
        assert_eq!(access, "partition_range", "{query}: {spark_statements:#?}");
    }
    // And the schema probe each read starts with, which reads nothing.
    let probes: Vec<String> = client
        .query(
            "SELECT query FROM tablesql_stat_statements WHERE query LIKE 'SELECT * FROM %' \
             ORDER BY query",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        probes,
        [
            "SELECT * FROM registrations WHERE $1 = $2",
            "SELECT * FROM spark_buckets WHERE $1 = $2",
            "SELECT * FROM spark_sensors WHERE $1 = $2"
        ],
        "{}",
        server.log()
    );
    Ok(())
}

/// A Spark's connections spread over two `serve` processes over one Azure
/// account (Azurite): the table created through one, read through both, with
/// one URL naming both (pgJDBC's `loadBalanceHosts`). Each of Spark's queries
/// opens a connection of its own, so with 8 ranges read twice both servers
/// take some (all on one: a chance of 2 in 2^16).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_reads_through_several_servers_over_one_azure_account() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let store = crate::azurite::store_argument(&account);
    // Statistics kept in each process's memory, not stored and merged, so
    // that each server's view counts the queries it answered itself.
    let own = ["--stats-flush-interval", "0"];
    let servers = [
        serve_store(tempfile::tempdir()?, store.as_ref(), &own)?,
        serve_store(tempfile::tempdir()?, store.as_ref(), &own)?,
    ];
    let one = servers[0].connect().await?;
    let other = servers[1].connect().await?;
    let (buckets, rows) = (32, 1600);
    create_buckets(&one, buckets, rows).await?;
    // The other server plans with the new table at its next catalog check.
    let mut deadline = crate::wait::Deadline::new(
        Duration::from_secs(60),
        "the other server to see spark_buckets",
    );
    let expected = loop {
        match count_sum(&other, "spark_buckets", "reading", "true").await {
            Ok(answer) => break answer,
            Err(e) => deadline.again_async(e).await?,
        }
    };
    assert_eq!(
        expected,
        count_sum(&one, "spark_buckets", "reading", "true").await?
    );

    let ranges = bucket_ranges(buckets, 4);
    let url = format!(
        "jdbc:postgresql://127.0.0.1:{},127.0.0.1:{}/tablesql?loadBalanceHosts=true",
        servers[0].addr.port(),
        servers[1].addr.port()
    );
    let reads = json!([{"table": "spark_buckets", "column": "reading", "predicates": ranges}]);
    let out = match spark(url, reads).await {
        Ok(out) => out,
        Err(e) => {
            // The servers as the client left them, then whether the table
            // was there for them at the end.
            let vitals = [servers[0].vitals(), servers[1].vitals()];
            let after = [
                count_sum(&one, "spark_buckets", "reading", "true").await,
                count_sum(&other, "spark_buckets", "reading", "true").await,
            ];
            return Err(format!(
                "{e}\nspark_buckets afterwards: {after:?}\n{}",
                vitals.join("\n")
            )
            .into());
        }
    };
    let read = &out["reads"][0];
    check_read(&one, read, "spark_buckets", "reading", Some(&ranges)).await?;
    assert_eq!(read["count"], json!(rows), "{out}");

    // Each server answered some of the range queries, each by its key range.
    let mut calls = 0;
    for (server, client) in servers.iter().zip([&one, &other]) {
        let statements = spark_statements(client).await?;
        let ranged: Vec<_> = statements
            .iter()
            .filter(|s| s.0.contains("FROM spark_buckets WHERE bucket >= $1"))
            .collect();
        assert!(!ranged.is_empty(), "{statements:#?}\n{}", server.log());
        for (query, n, _, access) in ranged {
            assert_eq!(access, "partition_range", "{query}: {statements:#?}");
            calls += n;
        }
    }
    // Two Spark jobs (rows per partition, then count and sum), 8 queries
    // each, between the two servers.
    assert_eq!(
        calls,
        2 * ranges.len() as i64,
        "the range queries both servers ran"
    );
    Ok(())
}
