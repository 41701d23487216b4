//! `tablesql serve` as an operator runs it: stopped by SIGTERM during a
//! long query and during a COPY (nothing acknowledged lost, no row without
//! its index row), its flags from the environment, `--store azure` from
//! `AZURE_STORAGE_CONNECTION_STRING`, and `/metrics` scraped after a
//! workload.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use futures::SinkExt;
use tokio_postgres::{Client, NoTls};

use super::{LONG, TestResult, code, copy_dir, fixture, http_get, sample, tablesql};

/// A server process of these tests: its listen address, its metrics
/// address when asked for, its log.
pub(super) struct Proc {
    child: Child,
    pub(super) addr: SocketAddr,
    pub(super) metrics: Option<String>,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub(super) fn start(
        cmd: &mut Command,
        dir: &Path,
        metrics: bool,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let log = dir.join("serve.log");
        let (child, addr, mut out) = super::spawn_serve(cmd, &log)?;
        let metrics = if metrics {
            let mut line = String::new();
            out.read_line(&mut line)?;
            let at = line
                .trim()
                .strip_prefix("metrics on ")
                .ok_or("no metrics line")?;
            Some(at.to_owned())
        } else {
            None
        };
        Ok(Self {
            child,
            addr,
            metrics,
            log,
        })
    }

    pub(super) async fn connect(
        &self,
    ) -> Result<
        (
            Client,
            tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
        ),
        tokio_postgres::Error,
    > {
        let conninfo = format!(
            "host={} port={} user=tablesql dbname=tablesql",
            self.addr.ip(),
            self.addr.port()
        );
        let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
        Ok((client, tokio::spawn(connection)))
    }

    pub(super) fn signal(&self, sig: &str) -> std::io::Result<()> {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()?;
        assert!(status.success(), "kill {sig}");
        Ok(())
    }

    /// Waits up to `bound` for the process to exit; its exit code.
    pub(super) fn exited_within(&mut self, bound: Duration) -> Result<i32, String> {
        let status = crate::wait::exit_of(&mut self.child, bound, "the server to exit")
            .map_err(|e| format!("{e}; log: {}", self.log()))?;
        status.code().ok_or_else(|| format!("{status}"))
    }

    /// Waits until the server drains (after SIGTERM): a connection made
    /// now is refused, told 57P03.
    pub(super) async fn until_draining(&self) -> TestResult {
        let mut deadline =
            crate::wait::Deadline::new(Duration::from_secs(30), "a connection told 57P03");
        loop {
            match self.connect().await {
                Err(e) if code(&e) == "57P03" => return Ok(()),
                Err(e) => deadline.again_async(e).await?,
                Ok(_) => deadline.again_async("let in").await?,
            }
        }
    }

    /// Its metrics' URL; the command was given `--metrics-listen`.
    pub(super) fn metrics(&self) -> Result<&str, String> {
        self.metrics
            .as_deref()
            .ok_or_else(|| "the server was started without --metrics-listen".to_owned())
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A copy of the 1,000-row demo store in a fresh directory.
pub(super) fn demo_store() -> Result<(tempfile::TempDir, PathBuf), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    copy_dir(fixture(1000)?, &store)?;
    Ok((dir, store))
}

pub(super) fn serve_cmd(store: &Path, args: &[&str]) -> Command {
    let mut cmd = tablesql();
    cmd.arg("--store")
        .arg(store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("TABLESQL_LOG_LEVEL");
    cmd
}

/// A server over a copy of the 1,000-row demo store with `args` and its
/// metrics on a free port; the directory (kept as long as the server), the
/// server and its metrics' URL.
fn with_metrics(
    args: &[&str],
) -> Result<(tempfile::TempDir, Proc, String), Box<dyn std::error::Error>> {
    let (dir, store) = demo_store()?;
    let mut cmd = serve_cmd(&store, &["--metrics-listen", "127.0.0.1:0"]);
    cmd.args(args);
    let server = Proc::start(&mut cmd, dir.path(), true)?;
    let url = server.metrics.clone().ok_or("no metrics address")?;
    Ok((dir, server, url))
}

/// `tablesql query` over the store, as CSV.
fn query(store: &Path, sql: &str) -> Result<String, String> {
    let out = tablesql()
        .arg("--store")
        .arg(store)
        .args(["query", "--format", "csv", sql])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The store's index rows match its base rows: no row without its index
/// row, no index row without its row.
fn index_whole(store: &Path) -> Result<(), String> {
    let check = query(
        store,
        "SELECT missing + orphaned + stale AS damaged FROM tablesql_check_index('registrations')",
    )?;
    let damaged: Vec<&str> = check.lines().skip(1).collect();
    if damaged.is_empty() || damaged.iter().any(|d| d.trim() != "0") {
        return Err(format!("index check: {check}"));
    }
    Ok(())
}

const RUN: &str = "2026 Shutdown Run";

fn count_run(store: &Path) -> Result<u64, String> {
    let out = query(
        store,
        &format!(
            "SELECT count(*) AS n FROM registrations WHERE event = '{RUN}' AND distance = 'Full'"
        ),
    )?;
    out.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("count: {out}"))
}

/// SIGTERM while a client is inside a transaction block, between its
/// statements: the block is not at rest, so it gets the bound and its
/// COMMIT lands; a second SIGTERM while a query runs ends the process at
/// once (exit 1), without waiting out the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_open_block_commit_and_a_second_signal_exits_at_once() -> TestResult {
    let (dir, store) = demo_store()?;
    let mut server = Proc::start(
        &mut serve_cmd(
            &store,
            &[
                "--shutdown-timeout",
                "60",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
        ),
        dir.path(),
        true,
    )?;
    let (block, _block_conn) = server.connect().await?;
    let (busy, _busy_conn) = server.connect().await?;
    block.batch_execute("BEGIN").await?;
    block
        .batch_execute(&format!(
            "INSERT INTO registrations (event, distance, bib, name, gender, age) \
             VALUES ('{RUN}', 'Full', 77, 'In a block', 'F', 33)"
        ))
        .await?;
    // The INSERT's answer may reach the client before its statement is
    // counted out: one running statement then is the long query's only
    // once none runs before it.
    super::until_running(server.metrics()?, 0).await?;
    let long = tokio::spawn(async move { busy.simple_query(LONG).await });
    super::until_running(server.metrics()?, 1).await?;
    server.signal("-TERM")?;
    server.until_draining().await?;
    // Still served: the block's COMMIT is acknowledged after the signal.
    block.batch_execute("COMMIT").await?;
    assert!(!long.is_finished(), "the long query ended early");
    let second = Instant::now();
    server.signal("-TERM")?;
    assert_eq!(server.exited_within(Duration::from_secs(30))?, 1);
    assert!(second.elapsed() < Duration::from_secs(30));
    assert!(server.log().contains("a second signal"), "{}", server.log());
    // What was acknowledged is there, whole.
    assert_eq!(count_run(&store)?, 1);
    index_whole(&store)?;
    Ok(())
}

/// SIGTERM during a long query: a connection at rest is ended at once
/// with 57P01, the query gets the bound (`--shutdown-timeout`) and is then
/// cancelled with 57P01, and the process exits 0 within the bound; the
/// store opens afterwards (its lock released, redb closed cleanly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_long_query() -> TestResult {
    let (dir, store) = demo_store()?;
    // RUST_LOG is the whole filter: this crate's debug events, no others.
    let mut cmd = serve_cmd(
        &store,
        &["--shutdown-timeout", "2", "--metrics-listen", "127.0.0.1:0"],
    );
    cmd.env("RUST_LOG", "tablesql=debug");
    let mut server = Proc::start(&mut cmd, dir.path(), true)?;
    let (busy, _busy_conn) = server.connect().await?;
    let (_idle, idle_conn) = server.connect().await?;
    let long = tokio::spawn(async move {
        let started = Instant::now();
        (busy.simple_query(LONG).await, started.elapsed())
    });
    // The query is running (it takes minutes).
    super::until_running(server.metrics()?, 1).await?;
    assert!(!long.is_finished(), "the long query ended early");
    let signalled = Instant::now();
    server.signal("-TERM")?;
    // The idle connection is ended at once, with 57P01.
    let idle_end = tokio::time::timeout(Duration::from_secs(30), idle_conn).await??;
    let e = idle_end
        .err()
        .ok_or("the idle connection ended without an error")?;
    assert_eq!(code(&e), "57P01", "{e}");
    // The running query is cancelled past the bound, with 57P01.
    let (result, _) = tokio::time::timeout(Duration::from_secs(60), long).await??;
    let e = result.err().ok_or("the long query completed")?;
    assert_eq!(code(&e), "57P01", "{e}");
    let message = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert_eq!(
        message,
        "terminating connection due to administrator command"
    );
    let cancelled_after = signalled.elapsed();
    assert!(
        cancelled_after >= Duration::from_millis(1900) && cancelled_after < Duration::from_secs(30),
        "cancelled after {cancelled_after:?}"
    );
    assert_eq!(
        server.exited_within(Duration::from_secs(60))?,
        0,
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(log.contains("server stopped"), "{log}");
    assert!(
        log.contains("connection opened connection=1 peer=127.0.0.1:"),
        "{log}"
    );
    assert!(log.contains("user=\"tablesql\""), "{log}");
    assert!(log.contains("shutdown timeout reached"), "{log}");
    assert!(!log.contains("datafusion"), "{log}");
    // The store is whole and free for another process.
    assert_eq!(count_run(&store)?, 0);
    index_whole(&store)?;
    Ok(())
}

/// COPY rows of the run, `rows` of them from `first`, sent in chunks of
/// 50 with `pause` between chunks. Each row is two entities (the row and
/// its `age` index row) in one entity group transaction.
async fn copy_run(
    client: &Client,
    first: u32,
    rows: u32,
    pause: Duration,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client
        .copy_in("COPY registrations (event, distance, bib, name, gender, age) FROM STDIN")
        .await?;
    futures::pin_mut!(sink);
    let mut bib = first;
    while bib < first + rows {
        let mut chunk = String::new();
        for b in bib..(bib + 50).min(first + rows) {
            chunk.push_str(&format!(
                "{RUN}\tFull\t{b}\tRunner {b}\tF\t{}\n",
                20 + b % 50
            ));
        }
        bib = (bib + 50).min(first + rows);
        sink.send(bytes::Bytes::from(chunk)).await?;
        tokio::time::sleep(pause).await;
    }
    sink.finish().await
}

/// SIGTERM during COPY FROM STDIN: a COPY that ends within the bound is
/// acknowledged and all there; one that would run past it is cut with
/// 57P01; either way the INSERTs acknowledged before are there, and every
/// row stored has its index row (no torn entity group transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_copy() -> TestResult {
    // A COPY that finishes within the bound.
    let (dir, store) = demo_store()?;
    let mut server = Proc::start(
        &mut serve_cmd(
            &store,
            &[
                "--shutdown-timeout",
                "20",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
        ),
        dir.path(),
        true,
    )?;
    let (client, _conn) = server.connect().await?;
    for bib in 1..=5 {
        client
            .simple_query(&format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('{RUN}', 'Full', {bib}, 'Early {bib}', 'M', 30)"
            ))
            .await?;
    }
    // The INSERTs counted out first (see above).
    super::until_running(server.metrics()?, 0).await?;
    let copy =
        tokio::spawn(async move { copy_run(&client, 100, 2000, Duration::from_millis(25)).await });
    super::until_running(server.metrics()?, 1).await?;
    assert!(!copy.is_finished(), "the COPY ended before the signal");
    server.signal("-TERM")?;
    let copied = tokio::time::timeout(Duration::from_secs(20), copy).await??;
    assert_eq!(copied?, 2000, "the COPY is acknowledged");
    assert_eq!(
        server.exited_within(Duration::from_secs(25))?,
        0,
        "{}",
        server.log()
    );
    assert_eq!(count_run(&store)?, 5 + 2000);
    index_whole(&store)?;
    drop(server);

    // A COPY that would run past the bound.
    let mut server = Proc::start(
        &mut serve_cmd(
            &store,
            &["--shutdown-timeout", "1", "--metrics-listen", "127.0.0.1:0"],
        ),
        dir.path(),
        true,
    )?;
    let (client, _conn) = server.connect().await?;
    for bib in 6..=8 {
        client
            .simple_query(&format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('{RUN}', 'Full', {bib}, 'Early {bib}', 'M', 30)"
            ))
            .await?;
    }
    // The INSERTs counted out first (see above).
    super::until_running(server.metrics()?, 0).await?;
    let copy =
        tokio::spawn(
            async move { copy_run(&client, 10_000, 20_000, Duration::from_millis(25)).await },
        );
    super::until_running(server.metrics()?, 1).await?;
    let signalled = Instant::now();
    server.signal("-TERM")?;
    let cut = tokio::time::timeout(Duration::from_secs(30), copy).await??;
    let e = cut.err().ok_or("the COPY of 20,000 slow rows completed")?;
    // The server's FATAL, or the connection it closed after it
    // (tokio-postgres's COPY sink says only that the connection closed;
    // psql reads the FATAL: `stopping::sigterm_during_copy_reaches_psql`).
    assert!(code(&e) == "57P01" || e.is_closed(), "{e}");
    assert_eq!(
        server.exited_within(Duration::from_secs(10))?,
        0,
        "{}",
        server.log()
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(30),
        "{:?}",
        signalled.elapsed()
    );
    let n = count_run(&store)?;
    // Everything acknowledged, and whatever of the cut COPY was stored.
    assert!((5 + 2000 + 3..5 + 2000 + 3 + 20_000).contains(&n), "{n}");
    let early = query(
        &store,
        &format!(
            "SELECT count(*) AS n FROM registrations WHERE event = '{RUN}' AND distance = 'Full' AND bib <= 8"
        ),
    )?;
    assert_eq!(early.lines().nth(1), Some("8"), "{early}");
    index_whole(&store)?;
    Ok(())
}

/// `/metrics` after a workload over the wire: the connections, statements
/// by kind and errors by SQLSTATE it ran, exactly; the storage requests it
/// caused; and many distinct tables and statements add no label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_workload() -> TestResult {
    // No statistics flushed meanwhile: its requests would count too.
    let (_dir, server, url) = with_metrics(&["--stats-flush-interval", "0"])?;
    let (status, before) = http_get(&url)?;
    assert!(status.contains("200"), "{status}");
    assert_eq!(
        sample(&before, "tablesql_connections_total"),
        0.0,
        "{before}"
    );
    for c in 0..3u32 {
        let (client, conn) = server.connect().await?;
        for i in 0..4u32 {
            client
                .simple_query(&format!(
                    "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = {}",
                    c * 10 + i
                ))
                .await?;
        }
        // The extended protocol too.
        client
            .query(
                "SELECT count(*) FROM registrations WHERE event = $1 AND distance = 'Full'",
                &[&"x"],
            )
            .await?;
        client
            .simple_query(&format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('{RUN}', 'Full', {c}, 'M {c}', 'F', 40)"
            ))
            .await?;
        for _ in 0..2 {
            let e = client
                .simple_query("SELECT * FROM no_such_table")
                .await
                .err()
                .ok_or("no error")?;
            assert_eq!(code(&e), "42P01");
        }
        let e = client
            .simple_query("SELEKT 1")
            .await
            .err()
            .ok_or("no error")?;
        assert_eq!(code(&e), "42601");
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), conn).await???;
    }
    // The server sees each close a moment after the client.
    let mut deadline = crate::wait::Deadline::new(Duration::from_secs(30), "no connection active");
    let scrape = loop {
        let scrape = http_get(&url)?.1;
        let active = sample(&scrape, "tablesql_connections_active");
        if active == 0.0 {
            break scrape;
        }
        deadline.again_async(format!("{active} active")).await?;
    };
    let expect = [
        ("tablesql_connections_total", 3.0),
        ("tablesql_connections_active", 0.0),
        ("tablesql_statements_total{kind=\"select\"}", 15.0),
        ("tablesql_statements_total{kind=\"insert\"}", 3.0),
        ("tablesql_errors_total{sqlstate=\"42P01\"}", 6.0),
        ("tablesql_errors_total{sqlstate=\"42601\"}", 3.0),
        ("tablesql_statement_duration_seconds_count", 3.0 * 9.0),
    ];
    for (series, n) in expect {
        assert_eq!(sample(&scrape, series), n, "{series} in:\n{scrape}");
    }
    // 12 reads of one partition each (a page at least), and each INSERT
    // one entity group transaction: its row and its `age` index row.
    let read = sample(
        &scrape,
        "tablesql_storage_requests_total{operation=\"get\"}",
    ) + sample(
        &scrape,
        "tablesql_storage_requests_total{operation=\"query_page\"}",
    );
    assert!(read >= 12.0, "{scrape}");
    assert_eq!(
        sample(
            &scrape,
            "tablesql_storage_requests_total{operation=\"batch\"}"
        ),
        3.0,
        "{scrape}"
    );
    // The same as the bill's kinds (`storage::bill`).
    assert_eq!(
        sample(
            &scrape,
            "tablesql_storage_transactions_total{kind=\"batches\"}"
        ),
        3.0,
        "{scrape}"
    );
    assert!(
        scrape.contains("tablesql_storage_retries_total 0"),
        "{scrape}"
    );
    assert!(scrape.contains("tablesql_storage_busy_total 0"), "{scrape}");
    assert!(
        scrape.contains("tablesql_storage_retry_wait_seconds_total 0"),
        "{scrape}"
    );

    // Many tables and statements: the same series, the same labels.
    let series = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').map(|(name, _)| name.to_owned()))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (client, _conn) = server.connect().await?;
    for i in 0..40 {
        let _ = client
            .simple_query(&format!("SELECT * FROM missing_{i}"))
            .await;
        let _ = client
            .simple_query(&format!("CREATE TABLE t_{i} (k INT PRIMARY KEY, v TEXT)"))
            .await?;
        let _ = client
            .simple_query(&format!("SELECT v, {i} AS n{i} FROM t_{i}"))
            .await?;
    }
    let after = http_get(&url)?.1;
    let added: Vec<_> = series(&after)
        .difference(&series(&scrape))
        .cloned()
        .collect();
    assert_eq!(
        added,
        vec!["tablesql_statements_total{kind=\"ddl\"}".to_owned()],
        "{after}"
    );
    assert_eq!(
        sample(&after, "tablesql_errors_total{sqlstate=\"42P01\"}"),
        46.0,
        "{after}"
    );
    for line in after.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.contains("missing_") && !line.contains("t_1"),
            "{line}"
        );
    }
    let (status, _) = http_get(&url.replace("/metrics", "/other"))?;
    assert!(status.contains("404"), "{status}");
    Ok(())
}

/// Connections refused past `--max-connections` count apart from the
/// admitted ones: `tablesql_connections_refused_total` by reason (`full`:
/// told 53300; `flood`: past as many refusals again, closed unread), and
/// neither in `tablesql_connections_total` nor in the open connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_count_apart_from_the_admitted() -> TestResult {
    let (_dir, server, url) =
        with_metrics(&["--max-connections", "1", "--stats-flush-interval", "0"])?;
    let (client, _conn) = server.connect().await?;
    let refused = server
        .connect()
        .await
        .err()
        .ok_or("a second connection got in")?;
    assert_eq!(code(&refused), "53300", "{refused:?}");
    let full = "tablesql_connections_refused_total{reason=\"full\"}";
    let flood = "tablesql_connections_refused_total{reason=\"flood\"}";
    // The refusals counted, once they add up to `total` (each is counted
    // a moment after its connection is accepted).
    let counted = |total: f64| {
        let url = url.clone();
        async move {
            let mut deadline =
                crate::wait::Deadline::new(Duration::from_secs(30), format!("{total} refusals"));
            loop {
                let scrape = http_get(&url)?.1;
                let (f, g) = (sample(&scrape, full), sample(&scrape, flood));
                if f + g == total {
                    return Ok::<_, Box<dyn std::error::Error>>((f, g, scrape));
                }
                deadline.again_async(format!("{f} full, {g} flood")).await?;
            }
        }
    };
    let (_, _, scrape) = counted(1.0).await?;
    assert_eq!(sample(&scrape, full), 1.0, "{scrape}");
    // The 53300's place is given back a moment after its client read it.
    // Until then a silent connection is closed unread (a flood); the first
    // one that is not takes the place, and waits 5 s for a startup message.
    let mut silent = None;
    let mut refusals = 1.0;
    for _ in 0..20 {
        let socket = tokio::net::TcpStream::connect(server.addr).await?;
        refusals += 1.0;
        let (f, _, scrape) = counted(refusals).await?;
        if f == 2.0 {
            silent = Some(socket);
            break;
        }
        assert_eq!(f, 1.0, "{scrape}");
    }
    let _silent = silent.ok_or("no silent connection was kept past the cap")?;
    // While it waits, the next is a flood.
    let _one_more = tokio::net::TcpStream::connect(server.addr).await?;
    let (_, _, scrape) = counted(refusals + 1.0).await?;
    let floods = refusals + 1.0 - 2.0;
    let expect = [
        (full, 2.0),
        (flood, floods),
        ("tablesql_connections_total", 1.0),
        ("tablesql_connections_active", 1.0),
    ];
    for (series, n) in expect {
        assert_eq!(sample(&scrape, series), n, "{series} in:\n{scrape}");
    }
    let one: i32 = client.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    Ok(())
}

/// A connection follows its client's thread to the other CPU's runtime
/// (`server/cores.rs`): moved between round trips, never inside a
/// transaction block, with its prepared statement and settings intact, and
/// counted in `tablesql_connections_moved_total`.
#[test]
fn a_connection_moves_with_its_client_between_cpus_and_keeps_its_session() -> TestResult {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("one CPU: a connection has nowhere to move");
        return Ok(());
    }
    let (_dir, server, url) = with_metrics(&[])?;
    let moved = move || -> Result<f64, Box<dyn std::error::Error>> {
        Ok(sample(
            &http_get(&url)?.1,
            "tablesql_connections_moved_total",
        ))
    };
    let conninfo = format!(
        "host={} port={} user=tablesql dbname=tablesql",
        server.addr.ip(),
        server.addr.port()
    );
    let pin = |cpu: usize| {
        let mut on = rustix::thread::CpuSet::new();
        on.set(cpu);
        rustix::thread::sched_setaffinity(None, &on)
    };
    // The client's own thread, pinned where the test says.
    let client = std::thread::spawn(move || -> Result<Vec<f64>, String> {
        let run = async {
            pin(0)?;
            let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
            tokio::spawn(connection);
            let point = client.prepare(super::POINT).await?;
            client
                .batch_execute("SET application_name = 'follows'")
                .await?;
            let rounds = |from: u64| {
                let (client, point) = (&client, &point);
                async move {
                    for i in from..from + 200 {
                        let r = tablesql::demo::registration(i % 1000);
                        let row = client
                            .query_one(point, &[&r.event, &r.distance, &r.bib])
                            .await?;
                        if row.get::<_, &str>(0) != r.name {
                            return Err(format!("wrong row for {i}").into());
                        }
                    }
                    Ok::<_, Box<dyn std::error::Error>>(())
                }
            };
            let mut counts = Vec::new();
            rounds(0).await?;
            counts.push(moved()?);
            pin(1)?;
            client.batch_execute("BEGIN").await?;
            rounds(200).await?;
            counts.push(moved()?);
            client.batch_execute("COMMIT").await?;
            rounds(400).await?;
            counts.push(moved()?);
            pin(0)?;
            rounds(600).await?;
            counts.push(moved()?);
            let name = client.query_one("SHOW application_name", &[]).await?;
            if name.get::<_, &str>(0) != "follows" {
                return Err("the setting was lost".into());
            }
            Ok::<_, Box<dyn std::error::Error>>(counts)
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(run)
            .map_err(|e| e.to_string())
    });
    let counts = client.join().map_err(|_| "the client thread panicked")??;
    // Placed where its packets came in, it stays while they do; inside the
    // block it stays too; after COMMIT it moves to CPU 1's runtime, and back.
    assert_eq!(counts[0], 0.0, "{counts:?}\n{}", server.log());
    assert_eq!(counts[1], counts[0], "{counts:?}");
    assert!(counts[2] > counts[1], "{counts:?}\n{}", server.log());
    assert!(counts[3] > counts[2], "{counts:?}\n{}", server.log());
    Ok(())
}

/// Every serve flag has an environment form: the listen address, the
/// metrics address and the slow statement threshold from the environment;
/// with `TABLESQL_LOG_MIN_DURATION_STATEMENT=0` every statement is logged
/// with its literals as `$n`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_flags_from_the_environment() -> TestResult {
    let (dir, store) = demo_store()?;
    let mut cmd = tablesql();
    cmd.arg("--store")
        .arg(&store)
        .arg("serve")
        .env_remove("RUST_LOG")
        .env_remove("TABLESQL_LOG_LEVEL")
        .env("TABLESQL_LISTEN", "127.0.0.1:0")
        .env("TABLESQL_METRICS_LISTEN", "127.0.0.1:0")
        .env("TABLESQL_LOG_MIN_DURATION_STATEMENT", "0");
    let mut server = Proc::start(&mut cmd, dir.path(), true)?;
    let (client, _conn) = server.connect().await?;
    client
        .simple_query("SELECT name FROM registrations WHERE event = 'secret event' AND distance = 'Full' AND bib = 7")
        .await?;
    let metrics = http_get(&server.metrics.clone().ok_or("no metrics")?)?.1;
    assert_eq!(
        sample(&metrics, "tablesql_connections_total"),
        1.0,
        "{metrics}"
    );
    drop(client);
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(30), "a slow statement logged");
    let log = loop {
        let log = server.log();
        if log.contains("slow statement") {
            break log;
        }
        deadline.again_async("no such line").await?;
    };
    let line = log
        .lines()
        .find(|l| l.contains("slow statement"))
        .ok_or_else(|| format!("no slow statement in {log}"))?;
    assert!(line.contains("duration_ms="), "{line}");
    assert!(line.contains("event = $1"), "{line}");
    assert!(!line.contains("secret event"), "{line}");
    assert!(log.contains("INFO tablesql::serve: listening"), "{log}");
    // The default level keeps DataFusion's debug records out.
    assert!(!log.contains("DEBUG"), "{log}");
    // SIGINT (Ctrl-C) stops it as SIGTERM does.
    server.signal("-INT")?;
    assert_eq!(
        server.exited_within(Duration::from_secs(10))?,
        0,
        "{}",
        server.log()
    );
    assert!(
        server.log().contains("SIGINT: stopping"),
        "{}",
        server.log()
    );
    // The `log` records of DataFusion reach the log too, on request.
    let out = tablesql()
        .arg("--store")
        .arg(&store)
        .args(["--log-level", "debug", "query", "SELECT 1"])
        .env_remove("RUST_LOG")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("DEBUG datafusion"), "{err}");
    // And by default `tablesql query` says nothing on stderr.
    let out = tablesql()
        .arg("--store")
        .arg(&store)
        .args(["query", "SELECT 1"])
        .env_remove("RUST_LOG")
        .env_remove("TABLESQL_LOG_LEVEL")
        .output()?;
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A malformed value names its variable.
    let out = tablesql()
        .arg("--store")
        .arg(&store)
        .arg("serve")
        .env("TABLESQL_LISTEN", "not an address")
        .output()?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--listen"), "{err}");
    Ok(())
}

/// `--store azure` takes the connection string from
/// `AZURE_STORAGE_CONNECTION_STRING` (the Azure SDKs' variable), and says
/// so when it is unset, never printing a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_azure_from_the_environment() -> TestResult {
    let unset = tablesql()
        .args(["--store", "azure", "tables"])
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .output()?;
    assert!(!unset.status.success());
    let err = String::from_utf8_lossy(&unset.stderr);
    assert!(err.contains("AZURE_STORAGE_CONNECTION_STRING"), "{err}");
    let account = crate::azurite::fresh_account()?;
    let conn = crate::azurite::store_argument(&account)
        .strip_prefix("azure:")
        .ok_or("not an azure: argument")?
        .to_owned();
    let table = "OpsEnv";
    let run = |sql: &str| {
        tablesql()
            .args(["--store", "azure", "query", "--format", "csv", sql])
            .env("AZURE_STORAGE_CONNECTION_STRING", &conn)
            .output()
    };
    let out = run(&format!(
        "CREATE TABLE {table} (k TEXT PRIMARY KEY, v INT) WITH (storage_table = '{table}', partition_key = '{{k}}', row_key = 'r')"
    ))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&format!("INSERT INTO {table} VALUES ('a', 41)"))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&format!("SELECT v + 1 AS v FROM {table}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("42"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `azure:` with nothing after it is the same.
    let out = tablesql()
        .args(["--store", "azure:", "tables"])
        .env("AZURE_STORAGE_CONNECTION_STRING", &conn)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(table));
    // `serve` too, its store's HTTP requests in its metrics.
    let dir = tempfile::tempdir()?;
    let mut cmd = tablesql();
    cmd.args(["--store", "azure", "serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .env("AZURE_STORAGE_CONNECTION_STRING", &conn)
        .env_remove("RUST_LOG")
        .env_remove("TABLESQL_LOG_LEVEL");
    let mut server = Proc::start(&mut cmd, dir.path(), true)?;
    let (client, _conn) = server.connect().await?;
    let rows = client
        .simple_query(&format!("SELECT v FROM {table} WHERE k = 'a'"))
        .await?;
    assert!(
        rows.iter().any(
            |m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("41"))
        ),
        "{rows:?}"
    );
    let scrape = http_get(&server.metrics.clone().ok_or("no metrics")?)?.1;
    assert!(
        sample(&scrape, "tablesql_storage_http_requests_total") >= 1.0,
        "{scrape}"
    );
    drop(client);
    server.signal("-TERM")?;
    assert_eq!(
        server.exited_within(Duration::from_secs(10))?,
        0,
        "{}",
        server.log()
    );
    assert!(
        !server
            .log()
            .contains(tablesql::storage::azure::config::DEV_ACCOUNT_KEY),
        "{}",
        server.log()
    );
    // A key that does not sign is refused without being printed.
    let key = tablesql::storage::azure::config::DEV_ACCOUNT_KEY;
    let bad = conn.replace(key, "AAAA");
    let out = tablesql()
        .args(["--store", "azure", "tables"])
        .env("AZURE_STORAGE_CONNECTION_STRING", &bad)
        .output()?;
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(!all.contains(key) && !all.contains("AccountKey"), "{all}");
    Ok(())
}

/// Under `nohup` (SIGHUP ignored, as a service manager may also start it)
/// the terminal's close does not stop the server: SIGHUP stays ignored,
/// and the SIGTERM after it is the one signal the server hears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_nohup_sighup_leaves_the_server_serving() -> TestResult {
    let (dir, store) = demo_store()?;
    let mut cmd = Command::new("nohup");
    cmd.arg(env!("CARGO_BIN_EXE_tablesql"))
        .arg("--store")
        .arg(&store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("TABLESQL_STORE")
        .env_remove("TABLESQL_USER")
        .env_remove("RUST_LOG")
        .env_remove("TABLESQL_LOG_LEVEL");
    let mut server = Proc::start(&mut cmd, dir.path(), false)?;
    server.signal("-HUP")?;
    // Listened to, it would drain the server: this connection would be
    // told 57P03.
    let (client, _connection) = server.connect().await?;
    client.simple_query("SELECT 1").await?;
    server.signal("-TERM")?;
    assert_eq!(server.exited_within(Duration::from_secs(60))?, 0);
    let log = server.log();
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(!log.contains("SIGHUP"), "{log}");
    Ok(())
}
