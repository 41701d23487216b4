//! `tablesql serve` as clients meet it: the real `psql` binary, tokio-postgres
//! and psycopg 3, against a server process on 127.0.0.1 (port 0).
//!
//! `scripts/test` installs psql (`scripts/psql-client`) and psycopg
//! (`scripts/python-env`) and names them in `TABLESQL_TEST_PSQL` and
//! `TABLESQL_TEST_PYTHON`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tablesql::demo;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

mod databases;
mod live_catalog;
mod load;
mod locking;
mod operations;
mod protocol;
mod psql;
mod security;
mod spark;
mod stopping;
mod transactions;

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
    /// Its `/metrics` URL.
    pub(crate) metrics: String,
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
    pub(crate) fn conninfo(&self, user: &str) -> String {
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

    /// The server's resident memory, in KiB; an error when `/proc` does not
    /// say, so that a test of memory never passes on a reading of 0.
    pub(crate) fn rss_kib(&self) -> Result<u64, String> {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .filter(|&kib| kib > 0)
            .ok_or_else(|| format!("{path} gives no VmRSS"))
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// What a failing test shows of a server it waited for in vain: its
    /// counters now (statements running, connections, store requests,
    /// retries and timeouts) and the end of its log, so that "stuck in a
    /// statement", "waiting on the store" and "never asked" can be told
    /// apart.
    pub(crate) fn vitals(&self) -> String {
        let metrics = match http_get(&self.metrics) {
            Ok((_, body)) => body
                .lines()
                .filter(|l| l.starts_with("tablesql_") && !l.contains("_bucket{"))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("(no metrics: {e})"),
        };
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        format!(
            "server {}:\n{metrics}\nthe end of its log:\n{tail}",
            self.addr
        )
    }

    /// See [`cancel_served`].
    pub(crate) async fn cancel(&self, token: &tokio_postgres::CancelToken) -> TestResult {
        cancel_served(&self.metrics, token).await
    }

    /// See [`until_running`].
    pub(crate) async fn until_running(&self, n: usize) -> TestResult {
        until_running(&self.metrics, n).await
    }

    /// The statements running now (`tablesql_statements_running`).
    pub(crate) fn running(&self) -> Result<f64, Box<dyn std::error::Error>> {
        self.metric("tablesql_statements_running")
    }

    /// A series of the server's metrics, now.
    pub(crate) fn metric(&self, series: &str) -> Result<f64, Box<dyn std::error::Error>> {
        Ok(sample(&http_get(&self.metrics)?.1, series))
    }
}

/// Sends a cancel request with `token` to the server whose metrics are at
/// `metrics`, and waits until the server has served it
/// (`tablesql_cancel_requests_total`): the client's own call returns once
/// the request is sent, not once it has landed.
pub(crate) async fn cancel_served(
    metrics: &str,
    token: &tokio_postgres::CancelToken,
) -> TestResult {
    let series = "tablesql_cancel_requests_total";
    let before = sample(&http_get(metrics)?.1, series);
    token.cancel_query(NoTls).await?;
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(60), "the cancel request served");
    loop {
        let now = sample(&http_get(metrics)?.1, series);
        if now > before {
            return Ok(());
        }
        deadline.again_async(format!("{series} {now}")).await?;
    }
}

/// Waits until `n` statements run on the server whose metrics are at
/// `metrics` (`tablesql_statements_running`): statements clients sent
/// have reached it, and run.
pub(crate) async fn until_running(metrics: &str, n: usize) -> TestResult {
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(60), format!("{n} statements running"));
    loop {
        let running = sample(&http_get(metrics)?.1, "tablesql_statements_running");
        if running == n as f64 {
            return Ok(());
        }
        deadline.again_async(format!("{running} running")).await?;
    }
}

pub(crate) async fn connect(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

pub(crate) fn psql() -> String {
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
    // One cell per size: a third size would take the small one's fixture.
    let cell = match rows {
        1000 => &SMALL,
        100_000 => &LARGE,
        _ => return Err(format!("fixtures have 1000 or 100000 rows, not {rows}")),
    };
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

/// Spawns `cmd`, a `tablesql ... serve` command, its stderr into `log`,
/// and reads the bound address from its first line (`listening on ADDR`);
/// a server that does not start is killed, its log in the error. Its
/// stdout stays open for the lines after the first.
pub(crate) fn spawn_serve(
    cmd: &mut Command,
    log: &Path,
) -> Result<(Child, SocketAddr, BufReader<std::process::ChildStdout>), String> {
    let file = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(file)
        .spawn()
        .map_err(|e| e.to_string())?;
    let Some(out) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("serve has no stdout".into());
    };
    let mut out = BufReader::new(out);
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    match line.trim().strip_prefix("listening on ").map(str::parse) {
        Some(Ok(addr)) => Ok((child, addr, out)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            let said = std::fs::read_to_string(log).unwrap_or_default();
            Err(format!("the server did not start: {line:?} {said}"))
        }
    }
}

/// Starts a server over a copy of the demo store with `rows` registrations.
pub(crate) fn serve(rows: u64, args: &[&str]) -> Result<Served, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    copy_dir(fixture(rows)?, &store)?;
    serve_store(dir, store.as_os_str(), args)
}

/// Starts a server over the store `--store` names (an Azure account, say);
/// `dir` holds its log and goes when it does.
pub(crate) fn serve_store(
    dir: tempfile::TempDir,
    store: &std::ffi::OsStr,
    args: &[&str],
) -> Result<Served, Box<dyn std::error::Error>> {
    let stderr = dir.path().join("stderr.log");
    let mut cmd = tablesql();
    cmd.arg("--store")
        .arg(store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(args);
    let (child, addr, mut out) = spawn_serve(&mut cmd, &stderr)?;
    let mut line = String::new();
    out.read_line(&mut line)?;
    let metrics = line
        .trim()
        .strip_prefix("metrics on ")
        .ok_or_else(|| format!("no metrics line: {line:?}"))?
        .to_owned();
    Ok(Served {
        child,
        addr,
        metrics,
        stderr,
        _dir: dir,
    })
}

/// An HTTP GET of `url` (`http://host:port/path`) with a raw socket: the
/// status line and the body.
pub(crate) fn http_get(url: &str) -> Result<(String, String), Box<dyn std::error::Error>> {
    let rest = url.strip_prefix("http://").ok_or("not http")?;
    let (host, path) = rest.split_once('/').ok_or("no path")?;
    let mut tcp = std::net::TcpStream::connect(host)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        tcp,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no body")?;
    Ok((
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    ))
}

/// A sample's value in a scrape (`name{labels} value`), 0 when absent.
pub(crate) fn sample(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
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
