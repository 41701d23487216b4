//! The workload statistics kept in the store (`exec::stats::persist`), as
//! processes meet them: `tablesql serve` stopped with SIGINT and started
//! again finds its statistics and the advisor's findings; two servers over
//! one Azurite account are seen merged by a third process; and
//! `tablesql advise` finds an append-only key from the data's Timestamps
//! alone, in a process that recorded no workload.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use tablesql::storage::{EdmValue, Entity, PartitionKey, RowKey, TableName, TableStore, WriteOp};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Short, so that tests see what a server stored within a second.
const FLUSH: &str = "0.2";

fn tablesql(store: &std::ffi::OsStr) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.env_remove("TABLESQL_STORE")
        .env_remove("TABLESQL_USER")
        .env("TABLESQL_STATS_FLUSH_INTERVAL", FLUSH)
        .arg("--store")
        .arg(store);
    cmd
}

/// A `tablesql serve` process; killed if still running when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(store: &std::ffi::OsStr, logs: &Path, name: &str) -> Result<Server, String> {
        let log = logs.join(format!("{name}.log"));
        let mut cmd = tablesql(store);
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        let (child, addr, _) =
            crate::server::spawn_serve(&mut cmd, &log).map_err(|e| format!("{name}: {e}"))?;
        Ok(Server { child, addr, log })
    }

    async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        let conninfo = format!(
            "host={} port={} user=tablesql dbname=tablesql",
            self.addr.ip(),
            self.addr.port()
        );
        let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// SIGINT (what Ctrl-C sends), then waits (at most 30 s) for a clean exit.
    fn interrupt(mut self) -> Result<(), String> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        if !sent.success() {
            return Err(format!("kill -INT {pid} failed"));
        }
        let status = crate::wait::exit_of(
            &mut self.child,
            Duration::from_secs(60),
            "serve to stop after SIGINT",
        )?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if status.success() {
            Ok(())
        } else {
            Err(format!("serve exited with {status}: {log}"))
        }
    }
}

/// The rows of a simple query, each as its columns' text.
async fn rows(client: &Client, sql: &str) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    Ok(client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// A table keyed by time, as a collector writes it: one INSERT a reading,
/// each at a later PartitionKey than all before.
async fn append_readings(client: &Client, table: &str, storage: &str) -> TestResult {
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (at TEXT NOT NULL, seq INT NOT NULL, v DOUBLE, \
             PRIMARY KEY (at, seq)) WITH (storage_table = '{storage}', \
             partition_key = '{{at}}', row_key = '{{seq:08}}')"
        ))
        .await?;
    for i in 0..60 {
        client
            .batch_execute(&format!(
                "INSERT INTO {table} (at, seq, v) VALUES ('2026-11-23T10:{i:02}:00', {i}, {i}.5)"
            ))
            .await?;
    }
    Ok(())
}

/// `n` point reads of `table`'s readings, over the simple protocol (one
/// normalized statement: the literals become `$n`).
async fn point_reads(client: &Client, table: &str, n: i32) -> TestResult {
    for i in 0..n {
        let got = rows(
            client,
            &format!(
                "SELECT v FROM {table} WHERE at = '2026-11-23T10:{:02}:00' AND seq = {}",
                i % 60,
                i % 60
            ),
        )
        .await?;
        assert_eq!(got.len(), 1, "reading {i}");
    }
    Ok(())
}

/// `(calls, access_path)` of the statements that start with `start`.
async fn calls(
    client: &Client,
    start: &str,
) -> Result<Vec<(i64, String)>, Box<dyn std::error::Error>> {
    let found = rows(
        client,
        &format!(
            "SELECT calls, access_path FROM tablesql_stat_statements \
             WHERE query LIKE '{start}%' ORDER BY query"
        ),
    )
    .await?;
    Ok(found
        .into_iter()
        .map(|r| Ok((r[0].parse()?, r[1].clone())))
        .collect::<Result<_, std::num::ParseIntError>>()?)
}

/// `serve` over an embedded store, stopped with SIGINT and started again,
/// three times: the statements' and partitions' statistics and the
/// advisor's append-only finding are there after each restart, counted
/// once (the second server took the first's over, and stored both as its
/// own); a reset forgets the stored ones too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_statistics_survive_a_restart_of_serve() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store)?;
    let store = store.as_os_str();

    let first = Server::start(store, dir.path(), "first")?;
    let client = first.connect().await?;
    append_readings(&client, "restart_readings", "RestartReadings").await?;
    point_reads(&client, "restart_readings", 25).await?;
    drop(client);
    first.interrupt()?;

    let second = Server::start(store, dir.path(), "second")?;
    let client = second.connect().await?;
    let inserts = calls(&client, "INSERT INTO restart_readings").await?;
    assert_eq!(inserts, [(60, "none".to_owned())], "{inserts:?}");
    let points = calls(&client, "SELECT v FROM restart_readings").await?;
    assert_eq!(points, [(25, "point".to_owned())]);
    let partitions = rows(
        &client,
        "SELECT count(*), sum(entities_written), sum(entities_read) FROM tablesql_stat_partitions \
         WHERE table_name = 'RestartReadings'",
    )
    .await?;
    assert_eq!(partitions, [["60", "60", "25"]]);
    let advice = rows(
        &client,
        "SELECT finding, evidence FROM tablesql_advise('RestartReadings')",
    )
    .await?;
    assert!(
        advice.iter().any(|f| f[0] == "append_only"
            && f[1].starts_with("59 of 59 entities written went to the last PartitionKey")),
        "{advice:?}"
    );
    // More runs here add to the stored ones.
    point_reads(&client, "restart_readings", 5).await?;
    let points = calls(&client, "SELECT v FROM restart_readings").await?;
    assert_eq!(points, [(30, "point".to_owned())]);
    drop(client);
    second.interrupt()?;

    let third = Server::start(store, dir.path(), "third")?;
    let client = third.connect().await?;
    // Counted once: the first server's counts went into the second's.
    let points = calls(&client, "SELECT v FROM restart_readings").await?;
    assert_eq!(points, [(30, "point".to_owned())]);
    let inserts = calls(&client, "INSERT INTO restart_readings").await?;
    assert_eq!(inserts, [(60, "none".to_owned())], "{inserts:?}");
    drop(client);
    third.interrupt()?;

    // The advisor on the command line, in a process that ran none of it.
    let out = tablesql(store)
        .args(["advise", "restart_readings", "--format", "json"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let append = findings
        .iter()
        .find(|f| f["finding"] == "append_only")
        .ok_or_else(|| format!("no append_only in {findings:?}"))?;
    assert_eq!(append["table_name"], "RestartReadings");
    assert!(
        append["evidence"]
            .as_str()
            .is_some_and(|e| e.starts_with("59 of 59 entities written")),
        "{append}"
    );

    // A reset forgets the stored statistics too.
    let fourth = Server::start(store, dir.path(), "fourth")?;
    let client = fourth.connect().await?;
    rows(&client, "SELECT tablesql_stat_reset()").await?;
    drop(client);
    fourth.interrupt()?;
    let fifth = Server::start(store, dir.path(), "fifth")?;
    let client = fifth.connect().await?;
    assert_eq!(calls(&client, "SELECT v FROM restart_readings").await?, []);
    let partitions = rows(
        &client,
        "SELECT count(*) FROM tablesql_stat_partitions WHERE table_name = 'RestartReadings'",
    )
    .await?;
    assert_eq!(partitions, [["0"]]);
    drop(client);
    fifth.interrupt()?;
    Ok(())
}

/// Polls `tablesql query` (a process of its own) for `sql`'s CSV answer
/// until it is `want`, at most 30 s.
fn query_until(store: &std::ffi::OsStr, sql: &str, want: &str) -> Result<(), String> {
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(60), format!("{sql} to answer {want:?}"));
    loop {
        let out = tablesql(store)
            .args(["query", sql, "--format", "csv"])
            .output()
            .map_err(|e| e.to_string())?;
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let answer = said.lines().skip(1).collect::<Vec<_>>().join("\n");
        if out.status.success() && answer == want {
            return Ok(());
        }
        deadline.again(format!("{said:?} {}", String::from_utf8_lossy(&out.stderr)))?;
    }
}

/// Two servers over one Azurite account, each with a workload: each sees
/// the other's merged with its own once stored, and a third process, the
/// command line, sees both: calls summed, partitions' counts summed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_over_one_account_see_their_workloads_merged() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let store = crate::azurite::store_argument(&account);
    let store = std::ffi::OsStr::new(&store);
    let dir = tempfile::tempdir()?;
    let north = Server::start(store, dir.path(), "north")?;
    let south = Server::start(store, dir.path(), "south")?;
    let n = north.connect().await?;
    let s = south.connect().await?;
    append_readings(&n, "merged_readings", "MergedReadings").await?;
    // South learns of the new table from the stored catalog.
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(60), "south to see the table");
    let known =
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'merged_readings'";
    loop {
        let seen = rows(&s, known).await?;
        if seen == [["1"]] {
            break;
        }
        deadline.again_async(format!("{seen:?}")).await?;
    }
    point_reads(&n, "merged_readings", 7).await?;
    point_reads(&s, "merged_readings", 5).await?;

    // Each server, once the other stored its counts (every 0.2 s here).
    for client in [&n, &s] {
        let mut deadline =
            crate::wait::Deadline::new(Duration::from_secs(60), "12 point reads merged");
        loop {
            let points = calls(client, "SELECT v FROM merged_readings").await?;
            if points == [(12, "point".to_owned())] {
                break;
            }
            deadline.again_async(format!("{points:?}")).await?;
        }
    }
    // North stopped with SIGINT, south still running: a third process sees both.
    drop(n);
    north.interrupt()?;
    query_until(
        store,
        "SELECT calls FROM tablesql_stat_statements WHERE query LIKE 'SELECT v FROM merged_readings%'",
        "12",
    )?;
    query_until(
        store,
        "SELECT count(*), sum(entities_read), sum(entities_written) FROM tablesql_stat_partitions \
         WHERE table_name = 'MergedReadings'",
        "60,12,60",
    )?;
    // The advisor in a process of its own sees the append-only inserts north ran.
    let out = tablesql(store)
        .args(["advise", "merged_readings", "--format", "json"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    assert!(
        findings.iter().any(|f| f["finding"] == "append_only"),
        "{findings:?}"
    );
    drop(s);
    south.interrupt()?;
    Ok(())
}

/// Writes `keys` as partitions of `table`, five entities each, in the
/// order given, a little apart in time so that their Timestamps differ:
/// as an application writes them, not through tablesql.
async fn write_partitions(store: &dyn TableStore, table: &str, keys: &[String]) -> TestResult {
    let table = TableName::new(table)?;
    store.create_table(&table).await?;
    for key in keys {
        let ops = (0..5)
            .map(|i| {
                Ok(WriteOp::Insert(
                    Entity::new(
                        PartitionKey::new(key.as_str())?,
                        RowKey::new(format!("{i:04}"))?,
                    )
                    .with("v", EdmValue::Int32(i)),
                ))
            })
            .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
        store.execute_batch(&table, ops).await?;
        // The advisor wants the writes spread over 2 s at least.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// A table whose PartitionKey is a date, written day after day, and one
/// whose keys were written in no order.
async fn timed_tables(store: &dyn TableStore) -> TestResult {
    let days: Vec<String> = (1..=12).map(|d| format!("2026-11-{d:02}")).collect();
    write_partitions(store, "Ticks", &days).await?;
    // Twelve keys written in the order 0, 5, 10, 3, ...: no order in time.
    let scattered: Vec<String> = (0..12).map(|i| format!("k{:02}", (i * 5) % 12)).collect();
    write_partitions(store, "Scattered", &scattered).await?;
    Ok(())
}

/// `tablesql advise` of both tables: the findings as JSON.
fn advise_tables(
    store: &std::ffi::OsStr,
) -> Result<Vec<serde_json::Value>, Box<dyn std::error::Error>> {
    let mut all = Vec::new();
    for table in ["Ticks", "Scattered"] {
        let out = tablesql(store)
            .args(["advise", table, "--format", "json"])
            .output()?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let found: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        all.extend(found);
    }
    Ok(all)
}

fn check_advice(found: &[serde_json::Value]) -> TestResult {
    let kinds: Vec<(&str, &str)> = found
        .iter()
        .map(|f| {
            (
                f["table_name"].as_str().unwrap_or_default(),
                f["finding"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(kinds, [("Ticks", "append_only")], "{found:?}");
    let evidence = found[0]["evidence"].as_str().unwrap_or_default();
    // The span is 11 pauses of 250 ms and the writes between them: 2.75 s
    // and more on a loaded machine, so its figure is read, not matched.
    let prefix = "the newest write (Timestamp) of each of its 12 partitions rises with the \
                  PartitionKey (rank correlation 1.00 over ";
    let span: Option<f64> = evidence
        .strip_prefix(prefix)
        .and_then(|rest| rest.split_once(" s"))
        .and_then(|(seconds, _)| seconds.parse().ok());
    assert!(
        span.is_some_and(|s| s >= 2.0) && evidence.contains("the last, \"2026-11-12\" at 20"),
        "{evidence}"
    );
    Ok(())
}

/// The embedded store: written by the storage API, then `tablesql advise`
/// in a fresh process flags the date-keyed table from ANALYZE's
/// Timestamps, not the scattered one; there is no workload to go by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advise_finds_an_append_only_key_from_the_data_embedded() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let store = tablesql::storage::EmbeddedStore::open(dir.path())?;
        timed_tables(&store).await?;
    }
    let found = advise_tables(dir.path().as_os_str())?;
    check_advice(&found)?;
    // The statistics ANALYZE stored keep the Timestamps: another process
    // advises from them as it reads them back, without an ANALYZE.
    let out = tablesql(dir.path().as_os_str())
        .args([
            "query",
            "SELECT table_name, finding FROM tablesql_advise() ORDER BY table_name",
            "--format",
            "csv",
        ])
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said, "table_name,finding\nTicks,append_only\n", "{out:?}");
    Ok(())
}

/// The same on Azurite, whose Timestamps are the service's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advise_finds_an_append_only_key_from_the_data_azurite() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let store = tablesql::storage::AzureStore::new(account.clone())?;
    timed_tables(&store).await?;
    let argument = crate::azurite::store_argument(&account);
    let found = advise_tables(std::ffi::OsStr::new(&argument))?;
    check_advice(&found)
}

/// `tablesql query` stores its statements' statistics when it ends: the
/// advisor in the next process sees the append-only inserts it ran, and
/// `tablesql_stat_statements` in a third counts them.
#[test]
fn query_processes_store_their_workload() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().as_os_str();
    let mut script = String::from(
        "CREATE TABLE cli_readings (at TEXT NOT NULL, seq INT NOT NULL, PRIMARY KEY (at, seq)) \
         WITH (storage_table = 'CliReadings', partition_key = '{at}', row_key = '{seq:08}');\n",
    );
    for i in 0..60 {
        script.push_str(&format!(
            "INSERT INTO cli_readings (at, seq) VALUES ('2026-11-23T11:{i:02}', {i});\n"
        ));
    }
    let out = tablesql(store)
        .env("TABLESQL_STATS_FLUSH_INTERVAL", "3600")
        .args(["query", &script])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tablesql(store)
        .args(["advise", "cli_readings", "--format", "csv"])
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("CliReadings,append_only,\"59 of 59 entities written"),
        "{said}"
    );
    let out = tablesql(store)
        .args([
            "query",
            "SELECT calls FROM tablesql_stat_statements WHERE query LIKE 'INSERT INTO cli_readings%'",
            "--format",
            "csv",
        ])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "calls\n60\n",
        "{out:?}"
    );
    Ok(())
}
