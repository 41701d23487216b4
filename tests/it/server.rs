//! `tablesql serve` as clients meet it: the real `psql` binary, tokio-postgres
//! and psycopg 3, against a server process on 127.0.0.1 (port 0).
//!
//! `scripts/test` installs psql (`scripts/psql-client`) and psycopg
//! (`scripts/python-env`) and names them in `TABLESQL_TEST_PSQL` and
//! `TABLESQL_TEST_PYTHON`.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tablesql::demo;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const POINT: &str =
    "SELECT name, age FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3";
/// A query that runs for about two minutes over 1,000 rows (a debug build):
/// a seven-way self-join on age, 31 billion rows counted, no row until the end.
const LONG: &str = "SELECT count(*) FROM registrations a JOIN registrations b ON a.age = b.age \
    JOIN registrations c ON b.age = c.age JOIN registrations d ON c.age = d.age \
    JOIN registrations e ON d.age = e.age JOIN registrations f ON e.age = f.age \
    JOIN registrations g ON f.age = g.age";

/// A `tablesql serve` process; killed when dropped.
pub(crate) struct Served {
    child: Child,
    pub(crate) addr: SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn conninfo(&self, user: &str) -> String {
        format!(
            "host={} port={} user={user} dbname=tablesql",
            self.addr.ip(),
            self.addr.port()
        )
    }

    pub(crate) async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        connect(&self.conninfo("tablesql")).await
    }

    pub(crate) fn psql(
        &self,
        conn_extra: &str,
        args: &[&str],
    ) -> std::io::Result<std::process::Output> {
        let conninfo = format!("{} {conn_extra}", self.conninfo("tablesql"));
        Command::new(psql())
            .args(["-X", "-v", "ON_ERROR_STOP=1", "-d", &conninfo])
            .args(args)
            .env_remove("PGPASSWORD")
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
    }

    /// The server's resident memory, in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

async fn connect(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

fn psql() -> String {
    std::env::var("TABLESQL_TEST_PSQL").unwrap_or_else(|_| "psql".into())
}

fn tablesql() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.env_remove("TABLESQL_STORE").env_remove("TABLESQL_USER");
    cmd
}

/// A store with the demo loaded, built once per test run and copied for each
/// server (the embedded store belongs to one process at a time).
pub fn fixture(rows: u64) -> Result<&'static Path, String> {
    static SMALL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static LARGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let cell = if rows == 100_000 { &LARGE } else { &SMALL };
    cell.get_or_init(|| {
        // One per row count, rebuilt by every run.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("server-fixture-{rows}"));
        let _ = std::fs::remove_dir_all(&dir);
        let out = tablesql()
            .arg("--store")
            .arg(&dir)
            .args(["demo", "--rows", &rows.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(dir)
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(Clone::clone)
}

pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Starts a server over a copy of the demo store with `rows` registrations.
pub(crate) fn serve(rows: u64, args: &[&str]) -> Result<Served, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    copy_dir(fixture(rows)?, &store)?;
    let stderr = dir.path().join("stderr.log");
    let mut child = tablesql()
        .arg("--store")
        .arg(&store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr)?)
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    let Some(addr) = line.trim().strip_prefix("listening on ") else {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        return Err(format!("the server did not start: {line:?} {log}").into());
    };
    let addr = addr.parse()?;
    Ok(Served {
        child,
        addr,
        stderr,
        _dir: dir,
    })
}

/// The SQLSTATE of a failed statement.
fn code(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_owned())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn psql_lists_and_describes_tables() -> TestResult {
    let server = serve(1000, &[])?;
    let dt = server.psql("", &["-c", "\\dt"])?;
    let shown = text(&dt);
    assert!(dt.status.success(), "{shown}");
    assert!(
        shown.contains("registrations") && shown.contains("events"),
        "{shown}"
    );

    let d = server.psql("", &["-c", "\\d registrations"])?;
    let shown = text(&d);
    assert!(d.status.success(), "{shown}");
    for (column, pg_type) in [
        ("event", "text"),
        ("bib", "integer"),
        ("finish", "bigint"),
        ("registered", "timestamp"),
    ] {
        assert!(
            shown
                .lines()
                .any(|l| l.trim_start().starts_with(column) && l.contains(pg_type)),
            "{column} {pg_type} in:\n{shown}"
        );
    }
    for meta in ["\\l", "\\dn"] {
        let out = server.psql("", &["-c", meta])?;
        assert!(out.status.success(), "{meta}: {}", text(&out));
    }
    assert!(text(&server.psql("", &["-c", "\\dn"])?).contains("public"));

    // EXPLAIN over the wire shows the access path.
    let explain = server.psql(
        "",
        &[
            "-c",
            "EXPLAIN SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 7",
        ],
    )?;
    assert!(
        text(&explain).contains("access=point"),
        "{}",
        text(&explain)
    );

    // psql's FETCH_COUNT reads through a cursor, FETCH_COUNT rows at a time.
    let fetched = server.psql(
        "",
        &[
            "-v",
            "FETCH_COUNT=100",
            "-A",
            "-t",
            "-c",
            "SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' ORDER BY bib",
        ],
    )?;
    let bibs: Vec<&str> = std::str::from_utf8(&fetched.stdout)?.lines().collect();
    assert!(fetched.status.success(), "{}", text(&fetched));
    assert_eq!(bibs.len(), 84, "{}", text(&fetched));
    assert_eq!(bibs.first(), Some(&"1"));
    Ok(())
}

#[test]
fn psql_command_tags_and_transactions() -> TestResult {
    let server = serve(1000, &[])?;
    let ddl = "CREATE TABLE runners (id INT NOT NULL, name TEXT, PRIMARY KEY (id)) WITH (partition_key = 'R', row_key = '{id:06}')";
    let out = server.psql("", &["-c", ddl, "-c", "DROP TABLE runners"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .collect::<Vec<_>>(),
        ["CREATE TABLE", "DROP TABLE"],
        "{shown}"
    );

    // A catalog change cannot be rolled back, so it is refused inside a
    // transaction, and nothing is written.
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            "BEGIN",
            "-c",
            &ddl.replace("runners", "walkers"),
            "-c",
            "ROLLBACK",
            "-c",
            "\\dt",
        ],
    )?;
    let shown = text(&out);
    assert!(
        shown.contains("cannot run inside a transaction block"),
        "{shown}"
    );
    assert!(shown.contains("ROLLBACK"), "{shown}");
    assert!(!shown.contains("walkers"), "{shown}");

    // The same as one query string (pgwire reports the transaction status
    // only after the whole string).
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            &format!("BEGIN; {}; COMMIT", ddl.replace("runners", "walkers")),
            "-c",
            "\\dt",
        ],
    )?;
    let shown = text(&out);
    assert!(
        shown.contains("cannot run inside a transaction block"),
        "{shown}"
    );
    assert!(!shown.contains("walkers"), "{shown}");

    // Writes answer with PostgreSQL's tags, not with a result set.
    let row = |bib: u32| format!("('Tags Test', '5K', {bib}, 'N{bib}', 'F', 30)");
    let out = server.psql(
        "",
        &[
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}, {}",
                row(1),
                row(2)
            ),
            "-c",
            "UPDATE registrations SET club = 'C' WHERE event = 'Tags Test' AND distance = '5K'",
            "-c",
            "DELETE FROM registrations WHERE event = 'Tags Test' AND distance = '5K' AND bib = 1",
            "-c",
            "SELECT bib, club FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout)?.lines().collect();
    assert_eq!(
        lines[..3],
        ["INSERT 0 2", "UPDATE 2", "DELETE 1"],
        "{shown}"
    );
    assert!(shown.contains("2 | C"), "{shown}");

    // A write in a transaction block is buffered: ROLLBACK discards it.
    let out = server.psql(
        "",
        &[
            "-c",
            "BEGIN",
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}",
                row(3)
            ),
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
            "-c",
            "ROLLBACK",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let counts: Vec<&str> = std::str::from_utf8(&out.stdout)?
        .lines()
        .map(str::trim)
        .filter(|l| l.parse::<u32>().is_ok())
        .collect();
    // The transaction saw its own row; after ROLLBACK only bib 2 remains.
    assert_eq!(counts, ["2", "1"], "{shown}");

    // A write that would take the transaction to a second partition fails
    // at that statement (0A000), the transaction is aborted, and nothing of
    // it is written.
    let other = |bib: u32| format!("('Tags Test', '10K', {bib}, 'N{bib}', 'F', 30)");
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "BEGIN",
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}",
                row(4)
            ),
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}",
                other(5)
            ),
            "-c",
            "COMMIT",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(shown.contains("0A000"), "{shown}");
    assert!(
        shown.contains("one table, one partition") && shown.contains("after partition"),
        "{shown}"
    );
    assert!(
        shown.contains("ROLLBACK"),
        "the COMMIT of a failed block: {shown}"
    );
    assert!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .any(|l| l.trim() == "1"),
        "nothing of the block was written: {shown}"
    );

    // EXPLAIN ANALYZE runs its statement, so of a write it is a write: in a
    // block it is buffered, and ROLLBACK discards it.
    let out = server.psql(
        "",
        &[
            "-c",
            "BEGIN; EXPLAIN ANALYZE DELETE FROM registrations WHERE event = 'Tags Test'; ROLLBACK",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("DmlExec: op=delete"), "{shown}");
    assert!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .any(|l| l.trim() == "1"),
        "the rolled-back DELETE removed nothing: {shown}"
    );

    // A SELECT before a write in one query string shows the rows as they
    // were when it ran, though its rows are sent after the write.
    // (Enough rows that the SELECT's scan has pages left to read when the
    // DELETE runs.)
    let out = server.psql(
        "",
        &[
            "-c",
            "INSERT INTO registrations (event, distance, bib, name, gender, age) SELECT 'Many', '1K', value, 'N', 'F', 30 FROM generate_series(1, 6000)",
            "-c",
            "SELECT bib FROM registrations WHERE event = 'Many'; DELETE FROM registrations WHERE event = 'Many'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let stdout = std::str::from_utf8(&out.stdout)?;
    assert!(stdout.contains("INSERT 0 6000"), "{shown}");
    assert!(
        stdout.contains("(6000 rows)"),
        "the SELECT saw every row: {shown}"
    );
    assert!(stdout.contains("DELETE 6000"), "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_point_query_with_inferred_parameters() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let statement = client.prepare(POINT).await?;
    assert_eq!(
        statement.params(),
        &[
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::INT4
        ]
    );
    for i in [0u64, 1, 17, 999] {
        let r = demo::registration(i);
        let rows = client
            .query(&statement, &[&r.event, &r.distance, &r.bib])
            .await?;
        assert_eq!(rows.len(), 1, "registration {i}");
        assert_eq!(rows[0].get::<_, &str>(0), r.name);
        assert_eq!(rows[0].get::<_, i32>(1), r.age);
    }
    let none = client
        .query(&statement, &[&"no such event", &"Full", &1i32])
        .await?;
    assert!(none.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlstates_name_the_problem() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nope", "42P01"),
        ("SELECT nope FROM registrations", "42703"),
        (
            "SELECT name FROM registrations WHERE event = 'x' AND distance = 'Full' AND bib = 'seven'",
            "22P02",
        ),
        ("TRUNCATE registrations", "0A000"),
        (
            "DELETE FROM registrations WHERE bib IN (SELECT bib FROM registrations WHERE age > 80)",
            "0A000",
        ),
        ("SHOW no_such_parameter", "42704"),
        ("FETCH 1 FROM no_such_cursor", "34000"),
        (
            "CREATE TABLE registrations (a INT NOT NULL, PRIMARY KEY (a)) WITH (partition_key = 'p', row_key = '{a}')",
            "42P07",
        ),
    ];
    for (sql, expected) in cases {
        let e = client.simple_query(sql).await.err().ok_or(sql)?;
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
        // The extended protocol reports the same.
        if !sql.starts_with("CREATE") {
            let e = client.query(sql, &[]).await.err().ok_or(sql)?;
            assert_eq!(code(&e), expected, "extended {sql}: {e:?}");
        }
    }

    // The writes' SQLSTATEs: a row that exists (23505), a value over the
    // store's 64 KiB (54000), an ETag that is no longer the row's (40001), a
    // key column left NULL (23502).
    let r = demo::registration(0);
    let at = format!(
        "event = '{}' AND distance = '{}' AND bib = {}",
        r.event, r.distance, r.bib
    );
    let insert = "INSERT INTO registrations (event, distance, bib, name, gender, age";
    let writes = [
        (
            format!(
                "{insert}) VALUES ('{}', '{}', {}, '{}', '{}', {})",
                r.event, r.distance, r.bib, r.name, r.gender, r.age
            ),
            "23505",
        ),
        (
            format!("{insert}, club) VALUES ('Limits', '5K', 1, 'A', 'F', 30, repeat('x', 40000))"),
            "54000",
        ),
        (
            format!(
                "UPDATE registrations SET club = 'x' WHERE {at} AND _etag = 'W/\"datetime''2001-01-01T00%3A00%3A00Z''\"'"
            ),
            "40001",
        ),
        (
            "INSERT INTO registrations (event, distance, name, gender, age) VALUES ('Limits', '5K', 'A', 'F', 30)".to_owned(),
            "23502",
        ),
    ];
    for (sql, expected) in &writes {
        let e = client.simple_query(sql).await.err().ok_or(sql.clone())?;
        assert_eq!(code(&e), *expected, "{sql}: {e:?}");
        let e = client
            .execute(sql.as_str(), &[])
            .await
            .err()
            .ok_or(sql.clone())?;
        assert_eq!(code(&e), *expected, "extended {sql}: {e:?}");
    }
    let limits = client
        .query_one(
            "SELECT count(*) FROM registrations WHERE event = 'Limits'",
            &[],
        )
        .await?;
    assert_eq!(limits.get::<_, i64>(0), 0, "a refused write wrote nothing");

    // A failed transaction refuses everything until it ends.
    client.simple_query("BEGIN").await?;
    assert!(
        client
            .simple_query("SELECT nope FROM registrations")
            .await
            .is_err()
    );
    let e = client.simple_query("SELECT 1").await.err().ok_or("25P02")?;
    assert_eq!(code(&e), "25P02");
    client.simple_query("ROLLBACK").await?;
    client.simple_query("SELECT 1").await?;
    Ok(())
}

/// Optimistic concurrency as Table Storage clients know it: a row read with
/// its `_etag`, changed by another client, is not overwritten by an UPDATE
/// that names the stale ETag (40001); with the fresh ETag it is. The UPDATE
/// is a prepared statement whose parameter types are inferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_conflict_between_two_clients() -> TestResult {
    let server = serve(1000, &[])?;
    let (a, b) = (server.connect().await?, server.connect().await?);
    let r = demo::registration(5);
    let key = "event = $1 AND distance = $2 AND bib = $3";
    let read = a
        .prepare(&format!(
            "SELECT finish, _etag FROM registrations WHERE {key}"
        ))
        .await?;
    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    let (finish, etag): (i64, String) = (row.get(0), row.get(1));

    let changed = b
        .execute(
            &format!("UPDATE registrations SET finish = finish + 1 WHERE {key}"),
            &[&r.event, &r.distance, &r.bib],
        )
        .await?;
    assert_eq!(changed, 1);

    let write = a
        .prepare(&format!(
            "UPDATE registrations SET finish = $4 WHERE {key} AND _etag = $5"
        ))
        .await?;
    assert_eq!(
        write.params(),
        &[
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::INT4,
            tokio_postgres::types::Type::INT8,
            tokio_postgres::types::Type::TEXT,
        ]
    );
    let e = a
        .execute(
            &write,
            &[&r.event, &r.distance, &r.bib, &(finish + 100), &etag],
        )
        .await
        .err()
        .ok_or("a stale ETag was accepted")?;
    assert_eq!(code(&e), "40001", "{e:?}");

    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    let (now, fresh): (i64, String) = (row.get(0), row.get(1));
    assert_eq!(now, finish + 1, "b's change stands");
    assert_ne!(fresh, etag);
    let n = a
        .execute(
            &write,
            &[&r.event, &r.distance, &r.bib, &(finish + 100), &fresh],
        )
        .await?;
    assert_eq!(n, 1);
    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    assert_eq!(row.get::<_, i64>(0), finish + 100);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_show_and_statement_timeout() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .simple_query("SET application_name = 'bi-tool'")
        .await?;
    let shown = client.query_one("SHOW application_name", &[]).await?;
    assert_eq!(shown.get::<_, &str>(0), "bi-tool");

    client.simple_query("SET statement_timeout = 300").await?;
    let started = Instant::now();
    let e = match client.simple_query(LONG).await {
        Ok(rows) => {
            return Err(format!(
                "no timeout (simple): {rows:?} after {:?}",
                started.elapsed()
            )
            .into());
        }
        Err(e) => e,
    };
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(e.to_string().contains("timeout") || format!("{e:?}").contains("timeout"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // Prepared statements are bound by it too.
    let started = Instant::now();
    let e = match client.query(LONG, &[]).await {
        Ok(rows) => {
            return Err(format!(
                "no timeout (extended): {:?} after {:?}",
                rows.first().map(|r| r.get::<_, i64>(0)),
                started.elapsed()
            )
            .into());
        }
        Err(e) => e,
    };
    assert_eq!(code(&e), "57014");
    // Startup parameters set them too.
    let other = connect(&format!(
        "{} application_name=metabase options='-c statement_timeout=300'",
        server.conninfo("tablesql")
    ))
    .await?;
    let shown = other.query_one("SHOW application_name", &[]).await?;
    assert_eq!(shown.get::<_, &str>(0), "metabase");
    let e = other
        .simple_query(LONG)
        .await
        .err()
        .ok_or("no startup timeout")?;
    assert_eq!(code(&e), "57014", "{e:?}");
    // The connection goes on.
    client.simple_query("SET statement_timeout = 0").await?;
    let row = client.query_one("SELECT count(*) FROM events", &[]).await?;
    assert_eq!(row.get::<_, i64>(0), 12);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_long_query() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(NoTls).await
    });
    let started = Instant::now();
    let e = client
        .simple_query(LONG)
        .await
        .err()
        .ok_or("not cancelled")?;
    canceller.await??;
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // A cancel is for the statement running when it arrives, not the next.
    let row = client.query_one("SELECT count(*) FROM events", &[]).await?;
    assert_eq!(row.get::<_, i64>(0), 12);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_declare_fetch_close() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client.simple_query("BEGIN").await?;
    client
        .simple_query("DECLARE c CURSOR FOR SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' ORDER BY bib")
        .await?;
    let bibs = |messages: Vec<SimpleQueryMessage>| -> Vec<String> {
        messages
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        bibs(client.simple_query("FETCH 5 FROM c").await?),
        ["1", "2", "3", "4", "5"]
    );
    assert_eq!(bibs(client.simple_query("FETCH NEXT FROM c").await?), ["6"]);
    let rest = bibs(client.simple_query("FETCH ALL FROM c").await?);
    assert_eq!(rest.len(), 84 - 6);
    assert!(bibs(client.simple_query("FETCH 5 FROM c").await?).is_empty());
    client.simple_query("CLOSE c").await?;
    let e = client
        .simple_query("FETCH 1 FROM c")
        .await
        .err()
        .ok_or("closed")?;
    assert_eq!(code(&e), "34000");
    client.simple_query("ROLLBACK").await?;

    // A cancel sent while the connection is idle, or while it ran another
    // statement, is not the cursor's: its next FETCH goes on. (The cursor's
    // stream has batches still to compute: a join of 12,000 rows.)
    client.simple_query("BEGIN").await?;
    client
        .simple_query("DECLARE d CURSOR FOR SELECT r.bib FROM registrations r CROSS JOIN events e")
        .await?;
    assert_eq!(bibs(client.simple_query("FETCH 5 FROM d").await?).len(), 5);
    for _ in 0..3 {
        client.cancel_token().cancel_query(NoTls).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.simple_query("SELECT 1").await?;
    }
    let rest = bibs(client.simple_query("FETCH ALL FROM d").await?);
    assert_eq!(rest.len(), 12_000 - 5);
    client.simple_query("COMMIT").await?;

    // The same for a protocol portal read with a row limit (a driver's fetch
    // size): each Execute that resumes it is a statement of its own.
    let mut client = client;
    let token = client.cancel_token();
    let tx = client.transaction().await?;
    let statement = tx
        .prepare("SELECT r.bib FROM registrations r CROSS JOIN events e")
        .await?;
    let portal = tx.bind(&statement, &[]).await?;
    assert_eq!(tx.query_portal(&portal, 5).await?.len(), 5);
    for _ in 0..3 {
        token.cancel_query(NoTls).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        tx.simple_query("SET application_name = 'between'").await?;
    }
    assert_eq!(tx.query_portal(&portal, 0).await?.len(), 12_000 - 5);
    tx.commit().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_size_streams_100k_rows_in_flat_memory() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(100_000, &[])?;
    let mut client = server.connect().await?;
    let tx = client.transaction().await?;
    let statement = tx
        .prepare("SELECT event, distance, bib, name, gender, age, finish, registered, club FROM registrations")
        .await?;
    let portal = tx.bind(&statement, &[]).await?;
    let mut rows = 0usize;
    // The scan reads partitions side by side, each a few pages ahead of the
    // client: memory grows with that width, then must stay flat.
    let mut rss_start = 0;
    loop {
        let page = tx.query_portal(&portal, 1000).await?;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 1000);
        rows += page.len();
        if rows == 10_000 {
            rss_start = server.rss_kib();
        }
    }
    let rss_paged = server.rss_kib();
    tx.commit().await?;
    assert_eq!(rows, 100_000);

    // One Execute without a row limit, read as a stream by the client.
    let stream = client
        .query_raw(&statement, std::iter::empty::<i32>())
        .await?;
    futures::pin_mut!(stream);
    let mut streamed = 0usize;
    while let Some(row) = futures::StreamExt::next(&mut stream).await {
        row?;
        streamed += 1;
    }
    let rss_streamed = server.rss_kib();
    assert_eq!(streamed, 100_000);
    eprintln!(
        "server RSS KiB: start {rss_start}, after pages {rss_paged}, after stream {rss_streamed}"
    );
    // The 100,000 rows encoded are about 20 MiB; a server that held them
    // would grow by that much at least.
    for (what, rss) in [
        ("pages of 1,000", rss_paged),
        ("an unlimited Execute", rss_streamed),
    ] {
        let grown = rss.saturating_sub(rss_start);
        assert!(grown < 12 * 1024, "server RSS grew {grown} KiB over {what}");
    }
    Ok(())
}

#[test]
fn psycopg_named_cursor_over_100k_rows() -> TestResult {
    let _cpu = crate::exclusive();
    let Ok(python) = std::env::var("TABLESQL_TEST_PYTHON") else {
        return Err("TABLESQL_TEST_PYTHON is not set (scripts/python-env makes it)".into());
    };
    let server = serve(100_000, &[])?;
    let script = r#"
import sys, psycopg
assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
with psycopg.connect(sys.argv[1]) as conn:
    with conn.cursor(name="regs") as cur:
        cur.itersize = 1000
        # A parameter, bound to the DECLARE that psycopg sends.
        cur.execute("SELECT bib, name, age FROM registrations WHERE age >= %s", (18,))
        names = [d.name for d in cur.description]
        n = 0
        for bib, name, age in cur:
            assert isinstance(bib, int) and isinstance(name, str)
            n += 1
    print(n, ",".join(names))
"#;
    let out = Command::new(python)
        .args(["-c", script, &server.conninfo("tablesql")])
        .output()?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        std::str::from_utf8(&out.stdout)?.trim(),
        "100000 bib,name,age",
        "{shown}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_passwords_and_trust_policy() -> TestResult {
    let dir = tempfile::tempdir()?;
    let users = dir.path().join("users");
    std::fs::write(&users, "# name:password\nalice:correct horse\n")?;
    let users = users.to_string_lossy().into_owned();
    let server = serve(1000, &["--users-file", &users])?;

    let ok = connect(&format!(
        "{} password='correct horse'",
        server.conninfo("alice")
    ))
    .await?;
    assert_eq!(
        ok.query_one("SELECT 1::INT", &[]).await?.get::<_, i32>(0),
        1
    );
    for (user, password) in [
        ("alice", "wrong-password-xyz"),
        ("mallory", "correct horse"),
    ] {
        let e = connect(&format!("{} password='{password}'", server.conninfo(user)))
            .await
            .err()
            .ok_or("logged in with a bad password")?;
        assert_eq!(code(&e), "28P01", "{user}: {e:?}");
    }
    let e = connect(&server.conninfo("alice"))
        .await
        .err()
        .ok_or("no password")?;
    assert!(format!("{e:?}").contains("password"), "{e:?}");
    let log = server.log();
    assert!(
        !log.contains("correct horse") && !log.contains("wrong-password-xyz"),
        "{log}"
    );

    // trust on an address other machines reach is refused at start.
    let out = tablesql()
        .arg("--store")
        .arg(dir.path().join("s"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("only allowed on a loopback address"),
        "{}",
        text(&out)
    );
    Ok(())
}

#[test]
fn tls_on_and_off() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()?;
    assert!(made.success());
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());

    let tls = serve(1000, &["--tls-cert", &cert, "--tls-key", &key])?;
    let on = tls.psql("sslmode=require", &["-c", "\\conninfo"])?;
    let shown = text(&on);
    assert!(
        shown.contains("SSL connection (protocol: TLSv1.3"),
        "{shown}"
    );
    let plain = tls.psql("sslmode=disable", &["-c", "SELECT 1"])?;
    assert!(!plain.status.success());
    assert!(
        text(&plain).contains("accepts TLS connections only"),
        "{}",
        text(&plain)
    );

    let off = serve(1000, &[])?;
    let out = off.psql("sslmode=disable", &["-A", "-t", "-c", "SELECT 1"])?;
    assert!(out.status.success(), "{}", text(&out));
    let out = off.psql("sslmode=require", &["-c", "SELECT 1"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("does not support SSL"),
        "{}",
        text(&out)
    );

    // A key that does not load stops the server: no plaintext fallback.
    let bad = serve(1000, &["--tls-cert", &cert, "--tls-key", &cert]);
    let e = bad.err().ok_or("started with a bad key")?;
    assert!(e.to_string().contains("TLS"), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_64_clients_1000_prepared_points_each() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(1000, &[])?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..64u64 {
        let conninfo = server.conninfo("tablesql");
        tasks.push(tokio::spawn(async move {
            let client = connect(&conninfo).await?;
            let statement = client.prepare(POINT).await?;
            for q in 0..1000u64 {
                let r = demo::registration((c * 1000 + q * 7) % 1000);
                let row = client
                    .query_one(&statement, &[&r.event, &r.distance, &r.bib])
                    .await?;
                if row.get::<_, &str>(0) != r.name {
                    return Err::<usize, Box<dyn std::error::Error + Send + Sync>>(
                        format!("wrong row for {c}/{q}").into(),
                    );
                }
            }
            Ok(1000)
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += tokio::time::timeout(Duration::from_secs(600), t)
            .await??
            .map_err(|e| e.to_string())?;
    }
    assert_eq!(done, 64_000);
    eprintln!("64 x 1000 prepared points in {:?}", started.elapsed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_query_frees_its_work() -> TestResult {
    let server = serve(1000, &[])?;
    for _ in 0..8 {
        let (client, connection) =
            tokio_postgres::connect(&server.conninfo("tablesql"), NoTls).await?;
        let socket = tokio::spawn(connection);
        let running = tokio::spawn(async move { client.simple_query(LONG).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Dropping the connection closes the socket mid-query.
        socket.abort();
        running.abort();
    }
    // The abandoned cross joins do not go on eating the server's CPU: a
    // scan still answers promptly. (Eight live ones would each hold a core.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_before = cpu_ticks(server.child.id());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy = cpu_ticks(server.child.id()).saturating_sub(cpu_before);
    assert!(
        busy < 50,
        "the server used {busy} ticks of CPU in 1 s while idle"
    );
    let client = server.connect().await?;
    let row = client
        .query_one("SELECT count(*) FROM registrations", &[])
        .await?;
    assert_eq!(row.get::<_, i64>(0), 1000);
    Ok(())
}

/// utime + stime of a process, in clock ticks (100 per second).
fn cpu_ticks(pid: u32) -> u64 {
    let mut stat = String::new();
    let _ = std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| f.read_to_string(&mut stat));
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    field(11) + field(12)
}

/// The metadata queries BI tools send when they connect and browse (taken
/// from DBeaver's, Metabase's and Grafana's PostgreSQL drivers): each must
/// run, and the table listings must find the demo tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bi_tool_metadata_queries() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let startup = [
        // DBeaver (pgjdbc) at connect
        "SET extra_float_digits = 3",
        "SET application_name = 'DBeaver 25.1.5 - Main <tablesql>'",
        "SELECT current_schema(), session_user",
        "SHOW search_path",
        "SELECT version()",
        "SELECT n.oid, n.*, d.description FROM pg_catalog.pg_namespace n LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid = n.oid AND d.objsubid = 0 AND d.classoid = 'pg_namespace'::regclass ORDER BY nspname",
        "SELECT db.oid, db.* FROM pg_catalog.pg_database db WHERE datname = 'datafusion'",
        "SELECT * FROM pg_catalog.pg_settings WHERE name = 'standard_conforming_strings'",
        // Metabase
        "SHOW TRANSACTION ISOLATION LEVEL",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "show timezone",
        // Grafana
        "SELECT current_setting('server_version_num')::int",
    ];
    for sql in startup {
        client
            .simple_query(sql)
            .await
            .map_err(|e| format!("{sql}: {e:?}"))?;
    }
    let listings = [
        // DBeaver's table list of a schema
        "SELECT c.oid, c.relname, c.relkind FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind NOT IN ('i', 'I', 'c') ORDER BY c.relname",
        // Metabase's table list
        r#"SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'v' THEN 'VIEW' ELSE NULL END AS "type", "d"."description" AS "description" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = 0) WHERE ("n"."nspname" !~ '^pg_') AND ("n"."nspname" <> 'information_schema') AND c.relkind IN ('r', 'p', 'v', 'f', 'm') AND ("n"."nspname" IN ('public')) ORDER BY "type" ASC, "schema" ASC, "name" ASC"#,
        // Grafana's table list
        "SELECT quote_ident(table_name) AS \"table\" FROM information_schema.tables WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') ORDER BY 1",
    ];
    for sql in listings {
        let rows = client
            .simple_query(sql)
            .await
            .map_err(|e| format!("{sql}: {e:?}"))?;
        let found = rows.iter().any(|m| match m {
            SimpleQueryMessage::Row(r) => (0..r.len()).any(|i| r.get(i) == Some("registrations")),
            _ => false,
        });
        assert!(found, "registrations not listed by {sql}");
    }
    // Column metadata (DBeaver, Grafana).
    let columns = client
        .query(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'registrations' ORDER BY ordinal_position",
            &[],
        )
        .await?;
    let names: Vec<&str> = columns.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        names,
        [
            "event",
            "distance",
            "bib",
            "name",
            "gender",
            "age",
            "finish",
            "registered",
            "club",
            // The storage columns every mapped table carries.
            "PartitionKey",
            "RowKey",
            "Timestamp",
            "_etag"
        ]
    );
    Ok(())
}

/// Point and range queries take the direct path (no physical planner); the
/// same queries with a filter the scan cannot answer (`random() >= 0`) go
/// through DataFusion. Both must answer alike, over both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_path_answers_as_datafusion_does() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let queries = [
        "SELECT name, age FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 7",
        "SELECT * FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib IN (3, 9, 400)",
        "SELECT club, bib FROM registrations WHERE event = '2013 Chicago Marathon' AND distance = 'Half' AND bib BETWEEN 10 AND 20",
        "SELECT bib FROM registrations WHERE event = '2014 Berlin Marathon' AND distance = '10K' AND bib > 80",
        "SELECT \"RowKey\", name FROM registrations WHERE event = '2011 New York City Marathon' AND distance = 'Full' AND bib = 1",
        "SELECT name FROM registrations WHERE event = 'nowhere' AND distance = 'Full' AND bib = 1",
    ];
    let rows = |messages: Vec<SimpleQueryMessage>| -> Vec<Vec<Option<String>>> {
        let mut rows: Vec<Vec<Option<String>>> = messages
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect();
        rows.sort();
        rows
    };
    for sql in queries {
        let direct = rows(client.simple_query(sql).await?);
        let planned = rows(
            client
                .simple_query(&format!("{sql} AND random() >= 0.0"))
                .await?,
        );
        assert_eq!(direct, planned, "{sql}");
        let explain = client.simple_query(&format!("EXPLAIN {sql}")).await?;
        let plan = format!("{:?}", rows(explain));
        assert!(
            !plan.contains("FilterExec"),
            "{sql} is not all pushed: {plan}"
        );
    }
    // Prepared, with parameters: the same rows as the literal query.
    let statement = client
        .prepare("SELECT bib, name FROM registrations WHERE event = $1 AND distance = $2 AND bib >= $3 AND bib < $4")
        .await?;
    let bound = client
        .query(
            &statement,
            &[&"2012 Boston Marathon", &"Full", &5i32, &9i32],
        )
        .await?;
    let literal = rows(
        client
            .simple_query("SELECT bib, name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib >= 5 AND bib < 9 AND random() >= 0.0")
            .await?,
    );
    let bound: Vec<Vec<Option<String>>> = bound
        .iter()
        .map(|r| {
            vec![
                Some(r.get::<_, i32>(0).to_string()),
                Some(r.get::<_, String>(1)),
            ]
        })
        .collect();
    assert_eq!(bound.len(), 4);
    assert_eq!(bound, literal);
    Ok(())
}

/// The statements of issue 13: over the wire a correlated subquery in a
/// SELECT list came back NULL (a compatibility rewrite meant for catalog
/// queries). Simple and extended protocol, tokio-postgres and the real psql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlated_subqueries_answer_over_the_wire() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .batch_execute(
            "CREATE TABLE t1 (k INT NOT NULL, a INT, b INT) WITH (storage_table = 'WireT1', partition_key = 'P', row_key = '{k:03}'); \
             INSERT INTO t1 (k, a, b) VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, NULL, NULL)",
        )
        .await?;
    let by_b = "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1 ORDER BY k";
    let by_a = "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.a = t1.a) FROM t1 ORDER BY k";
    let counts = |rows: Vec<tokio_postgres::Row>| -> Vec<i64> {
        rows.iter().map(|r| r.get::<_, i64>(1)).collect()
    };
    assert_eq!(counts(client.query(by_b, &[]).await?), [0, 1, 2, 0]);
    assert_eq!(counts(client.query(by_a, &[]).await?), [2, 2, 1, 0]);
    let simple = client.simple_query(by_b).await?;
    let texts: Vec<Option<String>> = simple
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(1).map(str::to_owned)),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [Some("0"), Some("1"), Some("2"), Some("0")].map(|v| v.map(String::from))
    );
    // Two in one list: both named, both counted.
    let both = client
        .query(
            "SELECT (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) AS lt, (SELECT count(*) FROM t1 AS x WHERE x.b > t1.b) AS gt FROM t1 ORDER BY k",
            &[],
        )
        .await?;
    let pairs: Vec<(i64, i64)> = both.iter().map(|r| (r.get("lt"), r.get("gt"))).collect();
    assert_eq!(pairs, [(0, 2), (1, 1), (2, 0), (0, 0)]);
    // A parameter inside a subquery evaluated per row is bound like any
    // other (the extended protocol plans before it binds).
    let bounded = client
        .query(
            "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b AND x.a = $1) FROM t1 ORDER BY k",
            &[&1i32],
        )
        .await?;
    assert_eq!(counts(bounded), [0, 1, 2, 0]);
    let out = server.psql("", &["-A", "-t", "-c", by_a])?;
    assert_eq!(text(&out), "10|2\n20|2\n30|1\n|0\n", "{}", text(&out));
    Ok(())
}

/// DROP TABLE as PostgreSQL answers it: IF EXISTS of a missing table is a
/// notice, a missing table 42P01, a storage table without a mapping 0A000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_answers_as_postgresql() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client.batch_execute("DROP TABLE IF EXISTS nosuch").await?;
    let e = client
        .batch_execute("DROP TABLE nosuch")
        .await
        .err()
        .ok_or("DROP TABLE of a missing table succeeded")?;
    assert_eq!(code(&e), "42P01", "{e}");
    let e = client
        .batch_execute("DROP TABLE raw.registrations")
        .await
        .err()
        .ok_or("DROP TABLE of a storage table succeeded")?;
    assert_eq!(code(&e), "0A000", "{e}");
    let out = server.psql("", &["-c", "DROP TABLE IF EXISTS nosuch"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("NOTICE:  table \"nosuch\" does not exist, skipping"),
        "{}",
        text(&out)
    );
    Ok(())
}

#[test]
fn scan_policy_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    // warn, the default: the rows, and a notice on psql's stderr.
    let out = server.psql("", &["-c", "SELECT count(*) FROM registrations"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        std::str::from_utf8(&out.stdout)?.contains("1000"),
        "{shown}"
    );
    let stderr = std::str::from_utf8(&out.stderr)?;
    assert!(
        stderr.contains("NOTICE:  the statement reads every partition of table registrations: a condition on event, distance reads one partition, and on bib as well one row (tablesql.scan_policy = warn)"),
        "{shown}"
    );
    // A query that fixes its partition has nothing to say.
    let out = server.psql(
        "",
        &["-c", "SELECT count(*) FROM registrations WHERE event = '2014 Berlin Marathon' AND distance = 'Full'"],
    )?;
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out)
    );

    // deny: refused with 54000, naming the key columns; a point still runs.
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SET tablesql.scan_policy = deny",
            "-c",
            "SHOW tablesql.scan_policy",
            "-c",
            "SELECT name FROM registrations WHERE bib = 7",
            "-c",
            "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 7",
        ],
    )?;
    let shown = text(&out);
    assert!(shown.contains("deny"), "{shown}");
    assert!(
        shown.contains("ERROR:  54000: the statement reads every partition of table registrations: a condition on event, distance reads one partition, and on bib as well one row; tablesql.scan_policy = deny refuses it"),
        "{shown}"
    );
    assert!(shown.contains("(1 row)"), "{shown}");
    // A bad value is refused.
    let out = server.psql("", &["-c", "SET tablesql.scan_policy = never"])?;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("allow, warn or deny"), "{}", text(&out));
    Ok(())
}

/// psql's options for pages of 7 rows, unaligned, with full scans allowed.
const PAGED_7: [&str; 5] = [
    "-At",
    "-c",
    "SET tablesql.scan_policy = allow",
    "-c",
    "SET tablesql.page_size = 7",
];

/// Token paging in psql: `SET tablesql.page_size`, a query, the next
/// page's token from `SHOW tablesql.next_page_token`, resumed in another
/// connection; every row comes once. Bad tokens get their SQLSTATEs.
#[test]
fn token_paging_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let query = "SELECT event, distance, bib, age FROM registrations WHERE age BETWEEN 40 AND 44";
    // One connection: pages of 7, resumed from `token`, then SHOW of the next token.
    let paged = |options: &[&str], token: &str, sql: &str, show: bool| {
        let resume = format!("SET tablesql.page_token = '{token}'");
        let mut args = options.to_vec();
        args.extend([
            "-c",
            "SET tablesql.scan_policy = allow",
            "-c",
            "SET tablesql.page_size = 7",
            "-c",
            &resume,
            "-c",
            sql,
        ]);
        if show {
            args.extend(["-c", "SHOW tablesql.next_page_token"]);
        }
        server.psql("", &args)
    };
    let lines = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let whole = server.psql(
        "",
        &["-At", "-c", "SET tablesql.scan_policy = allow", "-c", query],
    )?;
    assert!(whole.status.success(), "{}", text(&whole));
    let mut want = lines(&whole);
    want.retain(|l| l != "SET");
    assert!(want.len() > 20, "{}", text(&whole));

    let mut got: Vec<String> = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    // Each page in a new connection: the token alone carries the position.
    loop {
        let out = paged(&["-At"], &token, query, true)?;
        assert!(out.status.success(), "{}", text(&out));
        let mut rows = lines(&out);
        rows.retain(|l| l != "SET");
        let next = rows.pop().unwrap_or_default();
        assert!(rows.len() <= 7, "{}", text(&out));
        got.extend(rows);
        pages += 1;
        if next.contains('|') || next.is_empty() {
            // The last page: SHOW printed an empty token, and psql an empty line.
            if next.contains('|') {
                got.push(next);
            }
            break;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("SET tablesql.page_token = '{next}'")),
            "{stderr}"
        );
        token = next;
        assert!(pages <= want.len(), "more pages than rows");
    }
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert!(pages >= 3, "{pages} pages");

    // A cursor is never paged: FETCH takes its rows in its own steps.
    let declare = format!("DECLARE c CURSOR FOR {query}");
    let fetch = format!("BEGIN; {declare}; FETCH 20 FROM c; COMMIT");
    let out = server.psql("", &[&PAGED_7[..], &["-c", &fetch]].concat())?;
    let fetched: Vec<String> = lines(&out)
        .into_iter()
        .filter(|l| l.contains('|'))
        .collect();
    assert_eq!(fetched.len(), 20, "{}", text(&out));

    // Bad tokens, each with its SQLSTATE.
    let first = paged(&["-At"], "", query, true)?;
    let token = lines(&first).pop().unwrap_or_default();
    let mut tampered = token.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered)?;
    let truncated = &token[..token.len() - 4];
    // Another server over a copy of the data, but a store of its own.
    let other = serve(1000, &[])?;
    let show = ["-c", query, "-c", "SHOW tablesql.next_page_token"];
    let out = other.psql("", &[&PAGED_7[..], &show].concat())?;
    let foreign = lines(&out).pop().unwrap_or_default();
    assert!(!foreign.is_empty() && foreign != token, "{}", text(&out));
    for (bad, sql, expected) in [
        (
            foreign.as_str(),
            query,
            "ERROR:  22023: page token was issued by another store",
        ),
        (
            tampered.as_str(),
            query,
            "ERROR:  22023: page token has been altered",
        ),
        (truncated, query, "ERROR:  22P02: invalid page token"),
        (
            token.as_str(),
            "SELECT bib FROM registrations WHERE age > 80",
            "ERROR:  22023: page token belongs to another statement",
        ),
    ] {
        let out = paged(&["-v", "VERBOSITY=verbose"], bad, sql, false)?;
        assert!(!out.status.success(), "{}", text(&out));
        assert!(text(&out).contains(expected), "{}", text(&out));
    }
    Ok(())
}

/// `ANALYZE` over the wire: its tag, its notice, and the plans after it.
#[test]
fn analyze_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-c",
            "SET tablesql.guidepost_every = 50",
            "-c",
            "ANALYZE registrations",
            "-c",
            "SET tablesql.scan_policy = allow",
            "-c",
            "EXPLAIN SELECT count(*) FROM registrations",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("ANALYZE"), "{shown}");
    assert!(
        shown.contains("NOTICE:  analyzed registrations: 12 partitions, 2000 entities"),
        "{shown}"
    );
    assert!(shown.contains("fanout=chunks("), "{shown}");
    assert!(
        shown.contains("estimate=[partitions=12 entities="),
        "{shown}"
    );
    let out = server.psql("", &["-v", "VERBOSITY=verbose", "-c", "ANALYZE nosuch"])?;
    assert!(
        text(&out).contains("ERROR:  42P01: table nosuch is not in the catalog"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Index DDL and upkeep from psql: `CREATE INDEX` answers with its tag and
/// the counts as a notice, the planner reads the new index at once,
/// `tablesql_check_index` reports it whole, and `DROP INDEX ... CASCADE`
/// takes its rows along.
#[test]
fn index_ddl_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE INDEX by_name ON registrations (name)",
            "-c",
            "EXPLAIN SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND name = 'Pedro'",
            "-c",
            "SELECT index, missing, orphaned, stale FROM tablesql_check_index('registrations') ORDER BY index",
            "-c",
            "DROP INDEX by_name CASCADE",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("CREATE INDEX"), "{shown}");
    assert!(
        shown.contains("NOTICE:  index by_name on registrations: 1000 base rows in 12 partitions, 1000 index rows written"),
        "{shown}"
    );
    assert!(shown.contains("access=index_point(by_name)"), "{shown}");
    assert!(
        shown.contains(" age     |       0 |        0 |     0"),
        "{shown}"
    );
    assert!(
        shown.contains(" by_name |       0 |        0 |     0"),
        "{shown}"
    );
    assert!(
        shown.contains("NOTICE:  deleted 1000 rows of index by_name on registrations"),
        "{shown}"
    );
    assert!(shown.contains("DROP INDEX"), "{shown}");
    let out = server.psql("", &["-v", "VERBOSITY=verbose", "-c", "DROP INDEX by_name"])?;
    assert!(
        text(&out).contains("index \"by_name\" does not exist"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// One PostgreSQL version everywhere a client reads it: the startup
/// parameter (psql's `SERVER_VERSION_NAME`), `SHOW server_version`,
/// `server_version_num` and `version()`, which reads as PostgreSQL's for
/// drivers that parse it (SQLAlchemy's dialect matches `PostgreSQL (\d+)\.(\d+)`).
#[test]
fn one_postgresql_version_everywhere() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-At",
            "-c",
            "SELECT version()",
            "-c",
            "SHOW server_version",
            "-c",
            "SHOW server_version_num",
            "-c",
            r"\echo :SERVER_VERSION_NAME :SERVER_VERSION_NUM",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    let v = tablesql::planner::identity::PG_VERSION;
    let num = tablesql::planner::identity::PG_VERSION_NUM;
    assert!(
        lines[0].starts_with(&format!("PostgreSQL {v} (tablesql ")),
        "{shown}"
    );
    assert_eq!(lines[1..], [v, num, &format!("{v} {num}")], "{shown}");
    Ok(())
}

/// Savepoints inside a transaction block, over both protocols: names on a
/// stack (marks in the write buffer: see savepoints_mark_the_write_buffer), checked as PostgreSQL
/// checks them; `ROLLBACK TO` makes a failed transaction usable again.
#[tokio::test]
async fn savepoints_in_a_transaction_block() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            "SAVEPOINT outside",
            "-c",
            "BEGIN; SAVEPOINT a; SELECT 1 AS one; SAVEPOINT b; RELEASE SAVEPOINT b; RELEASE a; COMMIT",
            // One statement a message: an error skips the rest of its message.
            "-c",
            "BEGIN",
            "-c",
            "SAVEPOINT a",
            "-c",
            "ROLLBACK TO SAVEPOINT a",
            "-c",
            "SELECT 2 AS two",
            "-c",
            "RELEASE nosuch",
            // Failed: refused until ROLLBACK TO clears the error.
            "-c",
            "SELECT 3 AS refused",
            "-c",
            "ROLLBACK TO nosuch",
            "-c",
            "SELECT 3 AS refused_still",
            "-c",
            "ROLLBACK TO SAVEPOINT a",
            "-c",
            "SELECT 4 AS four",
            "-c",
            "ROLLBACK",
        ],
    )?;
    let shown = text(&out);
    assert!(
        shown.contains("SAVEPOINT can only be used in transaction blocks"),
        "{shown}"
    );
    assert!(shown.contains("two") && shown.contains("COMMIT"), "{shown}");
    assert!(
        shown.contains("savepoint \"nosuch\" does not exist"),
        "{shown}"
    );
    assert_eq!(
        shown
            .matches("current transaction is aborted, commands ignored")
            .count(),
        2,
        "{shown}"
    );
    assert!(!shown.contains("refused"), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("four") && stdout.trim_end().ends_with("ROLLBACK"),
        "{shown}"
    );
    // The extended protocol (tokio-postgres prepares every statement).
    let mut client = server.connect().await?;
    let mut tx = client.transaction().await?;
    tx.execute("SAVEPOINT s1", &[]).await?;
    let n: i64 = tx.query_one("SELECT count(*) FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full'", &[]).await?.get(0);
    assert!(n > 0);
    // tokio-postgres' own nested transaction is a savepoint.
    let inner = tx.savepoint("inner").await?;
    inner.rollback().await?;
    // A failed statement, cleared by ROLLBACK TO.
    let e = tx
        .query("SELECT * FROM nosuch", &[])
        .await
        .err()
        .ok_or("no error")?;
    assert_eq!(code(&e), "42P01");
    let e = tx
        .query("SELECT 1", &[])
        .await
        .err()
        .ok_or("ran in a failed transaction")?;
    assert_eq!(code(&e), "25P02");
    tx.execute("ROLLBACK TO SAVEPOINT s1", &[]).await?;
    let one: i32 = tx.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    tx.execute("RELEASE SAVEPOINT s1", &[]).await?;
    let e = tx
        .execute("ROLLBACK TO SAVEPOINT s1", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "3B001");
    Ok(())
}

/// `INSERT ... ON CONFLICT` prepared with parameters, in its `DO UPDATE`
/// too: tokio-postgres binds by the types the server describes.
#[tokio::test]
async fn prepared_upserts_bind_every_parameter() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .batch_execute(
            "CREATE TABLE kv (k TEXT NOT NULL, id INT NOT NULL, v TEXT, n BIGINT, PRIMARY KEY (k, id)) \
             WITH (storage_table = 'Keyvalues', partition_key = '{k}', row_key = '{id:05}')",
        )
        .await?;
    let upsert = "INSERT INTO kv (k, id, v, n) VALUES ($1, $2, $3, $4) \
                  ON CONFLICT (k, id) DO UPDATE SET v = EXCLUDED.v, n = kv.n + $5";
    for (v, n) in [("first", 1i64), ("second", 2)] {
        let written = client
            .execute(upsert, &[&"a", &7i32, &v, &n, &10i64])
            .await?;
        assert_eq!(written, 1);
    }
    let row = client
        .query_one("SELECT v, n FROM kv WHERE k = 'a' AND id = 7", &[])
        .await?;
    assert_eq!(row.get::<_, String>(0), "second");
    // Inserted with n = 1, then updated to 1 + 10.
    assert_eq!(row.get::<_, i64>(1), 11);
    let skipped = client
        .execute(
            "INSERT INTO kv (k, id, v, n) VALUES ($1, $2, 'x', 0) ON CONFLICT DO NOTHING",
            &[&"a", &7i32],
        )
        .await?;
    assert_eq!(skipped, 0);
    Ok(())
}

/// Savepoints are marks in a transaction's write buffer (extended
/// protocol): `ROLLBACK TO` drops the writes after the mark, COMMIT applies
/// the rest at once, and a transaction that grows past the 100 entities of
/// one entity group transaction fails at that statement with nothing written.
#[tokio::test]
async fn savepoints_mark_the_write_buffer() -> TestResult {
    let server = serve(1000, &[])?;
    let mut client = server.connect().await?;
    let insert = "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('Marks', '5K', $1, 'M', 'F', 30)";
    let count = "SELECT count(*) FROM registrations WHERE event = 'Marks' AND distance = '5K'";
    let tx = client.transaction().await?;
    tx.execute(insert, &[&1i32]).await?;
    tx.execute("SAVEPOINT a", &[]).await?;
    tx.execute(insert, &[&2i32]).await?;
    let inside: i64 = tx.query_one(count, &[]).await?.get(0);
    assert_eq!(inside, 2);
    tx.execute("ROLLBACK TO SAVEPOINT a", &[]).await?;
    tx.execute(insert, &[&3i32]).await?;
    tx.commit().await?;
    let bibs: Vec<i32> = client
        .query(
            "SELECT bib FROM registrations WHERE event = 'Marks' AND distance = '5K' ORDER BY bib",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(bibs, [1, 3]);
    // Each registration is two entities (its index row): 51 rows are 102.
    let tx = client.transaction().await?;
    let mut failed = None;
    for bib in 100..151i32 {
        if let Err(e) = tx.execute(insert, &[&bib]).await {
            failed = Some((bib, e));
            break;
        }
    }
    let (bib, e) = failed.ok_or("101 entities fitted one transaction")?;
    assert_eq!(bib, 150, "the 51st row is the one past 100 entities");
    let db = e.as_db_error().ok_or("a server error")?;
    assert_eq!(db.code().code(), "54000", "{db:?}");
    assert!(
        db.message().contains("more than the 100"),
        "{}",
        db.message()
    );
    drop(tx);
    let after: i64 = client.query_one(count, &[]).await?.get(0);
    assert_eq!(after, 2, "nothing of the failed transaction was written");
    Ok(())
}

/// COMMIT writes If-Match the versions the transaction read: a row another
/// client changed meanwhile fails it (40001), nothing of it is written, and
/// the block has ended, as after a failed COMMIT in PostgreSQL.
#[tokio::test]
async fn a_commit_that_meets_a_concurrent_change_fails_and_ends_the_block() -> TestResult {
    let server = serve(1000, &[])?;
    let mut a = server.connect().await?;
    let b = server.connect().await?;
    let key = "event = 'Race' AND distance = '5K' AND bib = 1";
    b.execute("INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('Race', '5K', 1, 'R', 'F', 30)", &[]).await?;
    let tx = a.transaction().await?;
    tx.execute(
        &format!("UPDATE registrations SET club = 'A' WHERE {key}"),
        &[],
    )
    .await?;
    b.execute(
        &format!("UPDATE registrations SET club = 'B' WHERE {key}"),
        &[],
    )
    .await?;
    let e = tx
        .commit()
        .await
        .err()
        .ok_or("the COMMIT overwrote B's change")?;
    assert_eq!(e.code().map(|c| c.code()), Some("40001"), "{e:?}");
    // Idle again: the next statement runs without a ROLLBACK first.
    let club: String = a
        .query_one(&format!("SELECT club FROM registrations WHERE {key}"), &[])
        .await?
        .get(0);
    assert_eq!(club, "B");
    Ok(())
}
